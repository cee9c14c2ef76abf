"""The repeatability test's second smoke chain (issue #41), run under load as a subprocess.

Lives here rather than in ``tests/conftest.py`` so that the VERL chain's test module can start it beside
that chain (``from loaded_chain import LoadedChain``; ``tests/`` is on ``sys.path``, see the root conftest).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

#: the session's smoke chain profile: smoke with a fourth RL stage (tests/profiles/four_stages.toml)
SMOKE_PROFILE = "four_stages"
#: what the loaded chain runs beside when nothing else loads the machine
BUSY = "two busy loops"


class LoadedChain:
    """The second smoke chain of :func:`smoke_chain_loaded` (issue #41) as a subprocess: the same command as
    :func:`smoke_chain` (no report PDF, which is not compared) into another folder. It is started where the
    session has other heavy work for it to run beside (the VERL chain, ``tests/bridge/test_verl_cpu_chain.py``,
    :meth:`start`: that chain is its load, and the session does not pay for busy loops), or when the
    repeatability test asks for it; whatever is left of it then runs beside two busy loops that keep both cores
    loaded (:meth:`finish`). Never beside the first smoke chain, which is the quiet run."""

    job: LoadedChain | None = None  # the session's one, once started

    def __init__(self, root: Path, beside: str):
        self.root, self.beside, self.t0 = root, beside, time.perf_counter()
        self.log = root / "chain.log"
        with open(self.log, "w") as log:
            self.proc = subprocess.Popen([sys.executable, "-m", "kit", "reproduce", "--profile", SMOKE_PROFILE, "--run",
                                          "t", "--reports-root", str(root), "--cell-timeout", "900", "--no-report"],
                                         stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        self.ended: float | None = None  # perf_counter when the process exited (a watcher thread records it)
        threading.Thread(target=self._watch, daemon=True).start()

    def _watch(self) -> None:
        self.proc.wait()
        self.ended = time.perf_counter()

    @classmethod
    def start(cls, tmp_path_factory, beside: str) -> LoadedChain:
        """The session's loaded chain, started now unless it already was."""
        if cls.job is None:
            cls.job = cls(tmp_path_factory.mktemp("reports_loaded"), beside)
        return cls.job

    def finish(self) -> int:
        """Wait for the chain, with two busy loops beside whatever is left of it; its exit code."""
        if self.proc.poll() is None:
            ran = f"{time.perf_counter() - self.t0:.0f} s beside {self.beside}; the rest " if self.beside != BUSY else ""
            print(f"loaded smoke chain: {ran}beside {BUSY}")
            loops = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
            try:
                self.proc.wait()
            finally:
                for p in loops:
                    p.kill()
                    p.wait()
        self.proc.wait()
        end = self.ended if self.ended is not None else time.perf_counter()
        print(f"loaded smoke chain: {end - self.t0:.0f} s, exit {self.proc.returncode}; log {self.log}")
        return self.proc.returncode

    def stop(self) -> None:
        """Kill the chain's process group if it still runs (the session ends, perhaps after a failure)."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


def loaded_chain_wanted(items) -> bool:
    """Whether the session's selected tests read :func:`smoke_chain_loaded`."""
    return any("smoke_chain_loaded" in getattr(item, "fixturenames", ()) for item in items)


