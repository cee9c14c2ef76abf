"""The bwrap command line: a checkout or venv under /tmp (as in CI clones) must stay visible."""

from kit.config import load
from kit.sandbox import isolation


def test_roots_under_tmp_are_bound_after_the_private_tmp(monkeypatch):
    if isolation.bwrap_path() is None:
        import pytest

        pytest.skip("bubblewrap not installed")
    monkeypatch.setattr(isolation, "_python_roots", lambda: ["/tmp/ci-clone/project"])
    argv = isolation.worker_argv(load("smoke", write=False).sandbox, {})
    tmpfs = next(i for i in range(len(argv) - 1) if argv[i] == "--tmpfs" and argv[i + 1] == "/tmp")
    bind = [i for i in range(len(argv) - 2) if argv[i] == "--ro-bind" and argv[i + 1] == "/tmp/ci-clone/project"]
    assert bind and bind[0] > tmpfs  # mounted on top of the tmpfs, not hidden by it
    assert "/tmp" not in [argv[i + 1] for i in range(len(argv) - 1) if argv[i] == "--dir"]  # /tmp keeps mode 1777
    # issue #30: a private, size-capped, world-writable /dev/shm after the minimal /dev
    shm = next(i for i in range(len(argv) - 1) if argv[i] == "--tmpfs" and argv[i + 1] == "/dev/shm")
    assert argv[shm - 4: shm] == ["--size", str(isolation.SHM_BYTES), "--perms", "1777"] and shm > argv.index("--dev")
