"""What one call can do to the next on the same worker (review of issue #18's fast path).

The calls' working directory belongs to the call's uid, inside a sticky /tmp: a call could
remove it, rename it, take its permissions away or put a symlink in its place. The child
forked ahead of demand then failed to enter it and every later call on that worker came back
``error`` with no output, or ran in a directory it could not write, or in ``/dev``.
"""

import os
import shutil
import tempfile

import pytest

from kit.sandbox import SyncSandboxPool, ToolCall, isolation
from kit.sandbox.cleanup import Cleaner

needs_bwrap = pytest.mark.skipif(isolation.bwrap_path() is None, reason="bubblewrap is not installed")

TAMPER = {
    "rmdir": "import os\nd = os.getcwd()\nos.chdir('/')\nos.rmdir(d)\nprint('x')",
    "rename": "import os\nos.rename(os.getcwd(), '/tmp/moved')\nprint('x')",
    "chmod_000": "import os\nos.chmod('.', 0)\nprint('x')",
    "chmod_777": "import os\nos.chmod('.', 0o777)\nprint('x')",
    "symlink_to_dev": "import os\nd = os.getcwd()\nos.chdir('/')\nos.rmdir(d)\nos.symlink('/dev', d)\nprint('x')",
}
LOOK = ("import os, stat\nopen('f', 'w').write('hi')\nst = os.lstat(os.getcwd())\n"
        "print(sorted(os.listdir('.')), stat.S_ISDIR(st.st_mode), oct(st.st_mode & 0o777), "
        "os.path.exists('/dev/null'), os.path.exists('/tmp/moved'))")


@needs_bwrap
def test_a_call_that_tampers_with_its_workdir_does_not_break_the_next(make_cfg):
    with SyncSandboxPool(make_cfg(num_workers=1)) as pool:
        for name, code in TAMPER.items():
            r = pool.run(ToolCall(code))
            assert r.status == "ok" and r.stdout == "x\n", (name, r)
            for _ in range(2):
                after = pool.run(ToolCall(LOOK))
                assert after.status == "ok", (name, after.stderr[-500:])
                assert after.stdout == "['f'] True 0o700 True False\n", (name, after.stdout)
        assert pool.stats().get("worker_deaths", 0) == 0


def test_without_a_call_uid_the_private_tmp_is_still_emptied(tmp_path):
    """Not root (bwrap with a user namespace): calls run as the worker's uid, so files are not
    told apart by owner; the worker's private /tmp and /dev/shm kept whatever a call wrote
    there for the next call to read. What existed when the worker started stays."""
    tmp, shm = tmp_path / "tmp", tmp_path / "shm"
    tmp.mkdir()
    shm.mkdir()
    (tmp / "from_start").write_text("worker")
    work = tmp / "kit-call-2"
    cleaner = Cleaner(None, True, str(work), shared=(str(tmp), str(shm)))
    (work / "in_workdir").write_text("x")
    (tmp / "leak").write_text("secret")
    (tmp / "leakdir").mkdir()
    (tmp / "leakdir" / "f").write_text("secret")
    (shm / "leak2").write_text("secret")
    os.symlink("/", tmp / "link")
    cleaner.clean_workdir()
    assert sorted(os.listdir(tmp)) == ["from_start", "kit-call-2"]
    assert os.listdir(shm) == [] and os.listdir(work) == []


def _as_unprivileged(fn) -> None:
    """Run ``fn()`` as an ordinary user (uid 65534 in a forked child when we are root: root
    with CAP_DAC_OVERRIDE removes anything and would hide the bug)."""
    if os.geteuid() != 0:
        fn()
        return
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.setgroups([])
            os.setgid(65534)
            os.setuid(65534)
            fn()
            code = 0
        finally:
            os._exit(code)
    assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0


def test_read_only_directories_left_by_a_call_are_removed():
    """Without CAP_DAC_OVERRIDE (a worker that is not root) a directory the call made
    read-only could not be emptied, so its files stayed for the next call."""
    top = tempfile.mkdtemp()
    os.chown(top, 65534, 65534) if os.geteuid() == 0 else None

    def scenario():
        work = os.path.join(top, "kit-call-2")
        cleaner = Cleaner(None, True, work, shared=(top,))
        os.makedirs(os.path.join(work, "d", "e"))
        open(os.path.join(work, "d", "e", "f"), "w").write("secret")
        os.mkdir(os.path.join(top, "t"))
        open(os.path.join(top, "t", "g"), "w").write("secret")
        for d in (os.path.join(work, "d", "e"), os.path.join(work, "d"), os.path.join(top, "t")):
            os.chmod(d, 0o500)
        cleaner.clean_workdir()
        assert os.listdir(work) == [] and sorted(os.listdir(top)) == ["kit-call-2"]

    try:
        _as_unprivileged(scenario)
    finally:
        for root, dirs, _ in os.walk(top):
            for d in dirs:
                os.chmod(os.path.join(root, d), 0o700)
        shutil.rmtree(top)


def test_the_cleaner_never_empties_a_symlinks_target(tmp_path):
    """With isolation='none' and the per-call uid (root host), the workdir sits in the host's
    /tmp: a call could put a symlink to any directory in its place, and the root cleaner listed
    the symlink and deleted what the target held (on the host). It now removes the link and
    makes the directory again."""
    if os.geteuid() != 0:
        pytest.skip("the per-call uid needs root")
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "precious").write_text("keep")
    work = tmp_path / "kit-call-7"
    cleaner = Cleaner(65534, False, str(work), shared=(str(tmp_path),))
    work.rmdir()
    os.symlink(victim, work)
    os.lchown(work, 65534, 65534)
    cleaner.clean_workdir()
    assert (victim / "precious").read_text() == "keep"
    assert work.is_dir() and not work.is_symlink() and os.listdir(work) == []
    st = os.lstat(work)
    assert (st.st_uid, st.st_mode & 0o777) == (65534, 0o700)
