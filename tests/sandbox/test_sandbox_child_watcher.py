"""Only asyncio's child watcher reaps a sandbox worker (issue #20).

Stopping a worker used to call ``Process.kill()`` after ``killpg``: ``Popen.send_signal`` polls the
process first (``waitpid(WNOHANG)``), and on a loaded machine that poll reaped the leader the
signal had just killed before the watcher's thread ran; the watcher then logged ``Unknown child
process pid N, will report returncode 255`` into the notebook cell that was running.
"""

import logging
import subprocess

from kit.sandbox import SandboxPool, ToolCall


async def test_stopping_workers_leaves_reaping_to_the_child_watcher(make_cfg, monkeypatch, caplog):
    polled: list[int] = []
    real_poll = subprocess.Popen._internal_poll

    def spy(self, *args, **kwargs):
        polled.append(self.pid)
        return real_poll(self, *args, **kwargs)

    monkeypatch.setattr(subprocess.Popen, "_internal_poll", spy)
    with caplog.at_level(logging.WARNING, logger="asyncio"):
        async with SandboxPool(make_cfg(num_workers=2)) as pool:
            pids = {w.proc.pid for w in pool._executor.workers.values()}
            r = await pool.run(ToolCall("print(6 * 7)"))
            assert r.stdout == "42\n"
            polled.clear()  # from here on: the pool's shutdown
    assert len(pids) == 2
    assert not pids & set(polled), f"a sandbox worker was polled outside the child watcher: {set(polled) & pids}"
    assert "Unknown child process" not in caplog.text
