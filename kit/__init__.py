"""rStar2-Agent reproducibility kit: agentic RL for math with a Python tool (GRPO-RoC).

Modules are named by concept (see DEVELOPERS.md): ``config``, ``sandbox``, ``reward``,
``rollout``, ``algo``, ``data``, ``train``, ``eval``, ``analysis``, ``figures``, ``pipeline``;
``bridge`` is the one package that talks to VERL, Ray and SGLang.

Importing ``kit`` bounds how long idle OpenMP threads spin (``GOMP_SPINCOUNT``, the value
``kit.pipeline.KERNEL_ENV`` gives the notebook kernels), unless the user chose ``GOMP_SPINCOUNT``
or ``OMP_WAIT_POLICY``: libgomp reads it once, when torch loads it, so a trainer called directly
(JupyterLab, a script, a benchmark) must have it set before its first ``import torch``; ``kit``
is imported first everywhere the kit's own code runs. Unbounded spinning took a 2-core SFT step
from 0.38 s to 2.24 s beside two busy processes (1.21 s bounded; measured in kit.pipeline).
"""

import os as _os

__version__ = "0.1.0"

#: libgomp spin count before an idle OpenMP thread sleeps (see the module docstring)
OPENMP_SPINCOUNT = "10000"
if "OMP_WAIT_POLICY" not in _os.environ:
    _os.environ.setdefault("GOMP_SPINCOUNT", OPENMP_SPINCOUNT)
