"""Everything that turns a run's files into what a reader sees: figures, tables, summary pages, PDFs.

- :mod:`kit.report.figures`: Figures 4, 8 and 9 and the shared plotting helpers (``collect_metrics``,
  ``save_figure``, ``copy_figure``, each study's figures into ``figures/``);
- :mod:`kit.report.tables`: Tables 3-6, this run beside the published values;
- :mod:`kit.report.summary`: the one-page summary (claims, verdicts, the run's stamp) and each study's page;
- :mod:`kit.report.builder`: ``report.pdf`` (the executed notebooks merged, nbconvert's LaTeX route or
  the figures-and-tables fallback), with :mod:`kit.report.latex_pdf` preparing the merged notebook.

This package's ``__init__`` imports nothing: ``from kit.report import figures`` stays light (the
builder pulls in the claims, and with them torch).
"""
