"""sandbox.backend = "ray" works wherever kit.bridge is loaded (a VERL agent-loop or tool worker
loads only its own kit.bridge module): before issue #14, kit.sandbox.pool imported the Ray
executor itself; now kit.bridge registers it, and must do so without anyone importing
kit.bridge.ray_sandbox by hand."""

import subprocess
import sys

import pytest


def _in_fresh_process(code):
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)


@pytest.mark.slow  # over ~3 s: make test, not the inner loop (make test-fast)
def test_importing_any_bridge_module_registers_the_ray_backend_without_importing_ray():
    code = ("import sys\n"
            "import kit.bridge.stages\n"
            "from kit.sandbox.pool import EXECUTORS\n"
            "assert 'ray' in EXECUTORS, sorted(EXECUTORS)\n"
            "assert 'ray' not in sys.modules and 'kit.bridge.ray_sandbox' not in sys.modules\n"
            "from kit.bridge.ray_sandbox import RayExecutor\n"
            "from kit.config import SandboxConfig\n"
            "ex = EXECUTORS['ray'](SandboxConfig(backend='ray', num_workers=2), preload=('math',))\n"
            "assert isinstance(ex, RayExecutor) and ex.preload == ('math',) and ex.cfg.num_workers == 2\n")
    r = _in_fresh_process(code)
    assert r.returncode == 0, r.stderr[-2000:]
