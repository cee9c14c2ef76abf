"""Browse rollout records (:mod:`kit.records`) in JupyterLab, or as one static HTML file (issue #32).

``render`` (pure HTML of a group's table and one trajectory's tokens), ``query`` (groups,
filters, the run's tokenizer), ``widgets`` (:func:`explore`: the ipywidgets explorer), ``export``
(:func:`export_html`: chosen groups as a self-contained page)::

    from kit.explore import explore, export_html
    explore(run_dir)                                   # in a notebook cell
    export_html(run_dir, groups=[("stage1", "grpo_roc", 1, 0)])   # run_dir / "explorer.html"
"""

from kit.explore.export import export_html, pick_groups
from kit.explore.render import (
           COLORS,
           GroupView,
           group_html,
           group_table_html,
           tokens_html,
           trajectory_view_html,
)
from kit.explore.widgets import Explorer, explore

__all__ = ["COLORS", "Explorer", "GroupView", "explore", "export_html", "group_html", "group_table_html", "pick_groups",
           "tokens_html", "trajectory_view_html"]
