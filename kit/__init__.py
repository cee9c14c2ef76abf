"""rStar2-Agent reproducibility kit: agentic RL for math with a Python tool (GRPO-RoC).

Modules are named by concept (see DEVELOPERS.md): ``config``, ``sandbox``, ``reward``,
``rollout``, ``algo``, ``data``, ``train``, ``eval``, ``analysis``, ``report``, ``pipeline``, ``studies``;
``bridge`` is the one package that talks to VERL, Ray and SGLang.

Importing ``kit`` bounds how long idle OpenMP threads spin (``GOMP_SPINCOUNT``, the value
``kit.pipeline.KERNEL_ENV`` gives the notebook kernels), unless the user chose ``GOMP_SPINCOUNT``
or ``OMP_WAIT_POLICY``: libgomp reads it once, when torch loads it, so a trainer called directly
(JupyterLab, a script, a benchmark) must have it set before its first ``import torch``; ``kit``
is imported first everywhere the kit's own code runs. Unbounded spinning took a 2-core SFT step
from 0.38 s to 2.24 s beside two busy processes (1.21 s bounded; measured in kit.pipeline).

Importing ``kit`` also turns on oneMKL's conditional numerical reproducibility in strict mode
(``MKL_CBWR=AUTO,STRICT``: the same bits at any thread count, issue #41), unless the user set
``MKL_CBWR`` (an empty value leaves oneMKL's default). oneMKL reads the variable when torch loads
it; where torch was imported before ``kit``, the mode is set through oneMKL's ``mkl_cbwr_set``,
which works until the first oneMKL call and otherwise leaves a warning. Its cost on the tiny
model's SFT step and policy update is within noise (``benchmarks/determinism_cost.py``).
"""

import ctypes as _ctypes
import os as _os
import sys as _sys
import warnings as _warnings

__version__ = "0.1.0"

#: libgomp spin count before an idle OpenMP thread sleeps (see the module docstring)
OPENMP_SPINCOUNT = "10000"
if "OMP_WAIT_POLICY" not in _os.environ:
    _os.environ.setdefault("GOMP_SPINCOUNT", OPENMP_SPINCOUNT)

#: oneMKL's conditional numerical reproducibility mode (see the module docstring)
MKL_CBWR = "AUTO,STRICT"
_MKL_CBWR_AUTO_STRICT = 0x2 | 0x10000  # mkl_cbwr.h: MKL_CBWR_AUTO | MKL_CBWR_STRICT


def _mkl_function(name: str):
    """oneMKL's ``name`` in the loaded torch (``ctypes``, ``int -> int``), None without torch or oneMKL."""
    torch = _sys.modules.get("torch")
    try:
        fn = getattr(_ctypes.CDLL(_os.path.join(_os.path.dirname(torch.__file__), "lib", "libtorch_cpu.so")), name)
    except (OSError, AttributeError, TypeError):
        return None
    fn.argtypes, fn.restype = [_ctypes.c_int], _ctypes.c_int
    return fn


def _pin_mkl_cbwr() -> None:
    """Set ``MKL_CBWR`` for this process and its children; in a process that loaded torch before
    ``kit``, set the mode through oneMKL (a torch without oneMKL: nothing to do)."""
    if "MKL_CBWR" in _os.environ:
        return
    _os.environ["MKL_CBWR"] = MKL_CBWR
    if "torch" not in _sys.modules:
        return
    set_mode = _mkl_function("mkl_serv_cbwr_set")
    if set_mode is not None and set_mode(_MKL_CBWR_AUTO_STRICT) != 0:
        _warnings.warn("kit: torch ran oneMKL before kit was imported, so MKL_CBWR=AUTO,STRICT could not be set in "
                      "this process; its float bits depend on the thread count (import kit before torch)", stacklevel=2)


_pin_mkl_cbwr()
