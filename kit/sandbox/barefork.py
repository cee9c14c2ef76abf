"""The machine's limit for a warm-fork executor: a bare fork server with nothing around it (issue #18).

A bare parent imports the same modules as a sandbox worker (by default those of the default config,
:data:`kit.sandbox.worker.PREIMPORTS`)
and, per call, forks a child that runs the cell with the same IPython-style runner and returns
its output through one pipe. No bubblewrap, no rlimits, no uid switch, no process-group kill,
no sweep, no output cap, no timeout: only fork, run, pipe, reap. The benchmark and the
self-test time it beside the kit in the same minute, so a slow or busy machine moves both.

Never use it for model code: it isolates nothing.

    async with BareForkPool(2) as bare:
        out, seconds = await bare.run("print(1 + 1)")      # ("2\\n", 0.004)

Runs as ``python -I`` with :func:`main` and JSON options (``preload``, ``huge``); speaks the same
length-prefixed JSON frames as a worker on its stdin/stdout.
"""

from __future__ import annotations

import asyncio
import gc
import importlib
import json
import os
import sys
import time
from types import TracebackType

from kit.sandbox import runner
from kit.sandbox.hugepages import collapse_heap
from kit.sandbox.isolation import python_argv, worker_env
from kit.sandbox.wire import HEADER, MAX_FRAME, read_frame, write_frame
from kit.sandbox.worker import SCIENCE_PREIMPORTS, STDLIB_PREIMPORTS

START_TIMEOUT_S = 120.0


def _serve(proto_in: int, proto_out: int) -> None:
    while True:
        req = read_frame(proto_in)
        if req is None:
            return
        stdin_fd = os.memfd_create("stdin", 0)
        os.write(stdin_fd, (req.get("input") or "").encode())
        os.lseek(stdin_fd, 0, os.SEEK_SET)
        out_r, out_w = os.pipe()
        pid = os.fork()
        if pid == 0:
            code = 70
            try:
                os.dup2(stdin_fd, 0)
                os.dup2(out_w, 1)
                os.dup2(out_w, 2)
                sys.stdin = open(0, encoding="utf-8", errors="replace", closefd=False)  # noqa: SIM115
                sys.stdout = sys.stderr = open(1, "w", encoding="utf-8", closefd=False)  # noqa: SIM115
                rec = runner.execute(req["code"])
                if rec["value"] is not None:
                    print(rec["value"])
                if rec["error"]:
                    print(rec["error"], end="")
                sys.stdout.flush()
                code = rec["exit"]
            finally:
                os._exit(code)
        os.close(out_w)
        os.close(stdin_fd)
        chunks = []
        while chunk := os.read(out_r, 1 << 16):
            chunks.append(chunk)
        os.close(out_r)
        _, status = os.waitpid(pid, 0)
        write_frame(proto_out, {"out": b"".join(chunks).decode("utf-8", "replace"),
                                "exit": os.waitstatus_to_exitcode(status)})


def main() -> None:
    for name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[name] = "1"
    proto_in, proto_out = os.dup(0), os.dup(1)
    opts = json.loads(sys.argv[1] if len(sys.argv) > 1 else "{}")
    for mod in (*STDLIB_PREIMPORTS, *opts.get("preload", SCIENCE_PREIMPORTS)):
        importlib.import_module(mod)
    gc.collect()
    gc.freeze()  # the worker does the same: keep both parents equally copy-on-write friendly
    if opts.get("huge"):
        collapse_heap()
    write_frame(proto_out, {"ready": True})
    _serve(proto_in, proto_out)


class BareForkPool:
    """``n`` bare warm fork parents; ``await run(code, input)`` uses an idle one.

    Args:
        n: parents (one per core matches the sandbox pool's default).
        preload: modules to import beyond the standard library's
            (:data:`kit.sandbox.worker.STDLIB_PREIMPORTS`); the default is what a worker imports
            under the default config. Pass the pool's ``cfg.preimport`` (plus its extras) to
            compare like with like.
        huge: put the parents' heaps on huge pages as the workers do
            (:mod:`kit.sandbox.hugepages`); off by default: the plain limit.
    Raises:
        RuntimeError: a parent did not start within :data:`START_TIMEOUT_S` seconds.
    """

    def __init__(self, n: int, preload: tuple[str, ...] = SCIENCE_PREIMPORTS, huge: bool = False):
        self.n, self.preload, self.huge = max(1, n), tuple(preload), huge
        self._procs: list[asyncio.subprocess.Process] = []
        self._idle: asyncio.Queue[asyncio.subprocess.Process] = asyncio.Queue()

    async def __aenter__(self) -> BareForkPool:
        try:
            for _ in range(self.n):
                p = await asyncio.create_subprocess_exec(
                    *python_argv("kit.sandbox.barefork", json.dumps({"preload": list(self.preload), "huge": self.huge})),
                    stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, env=worker_env(),
                    limit=MAX_FRAME + 8, start_new_session=True)  # placed like a worker (own session)
                self._procs.append(p)
            for p in self._procs:
                ready = await asyncio.wait_for(_read(p), START_TIMEOUT_S)
                if not ready.get("ready"):
                    raise RuntimeError(f"bare fork parent sent {ready!r}")
                self._idle.put_nowait(p)
        except BaseException:
            await self.close()
            raise
        return self

    async def __aexit__(self, et: type | None, ev: BaseException | None, tb: TracebackType | None) -> None:
        await self.close()

    async def run(self, code: str, input: str = "") -> tuple[str, float]:
        """Run ``code``; returns (stdout and stderr together, seconds from send to answer)."""
        p = await self._idle.get()
        try:
            t0 = time.monotonic()
            body = json.dumps({"code": code, "input": input}).encode()
            assert p.stdin is not None
            p.stdin.write(HEADER.pack(len(body)) + body)
            await p.stdin.drain()
            out = await _read(p)
            return out["out"], time.monotonic() - t0
        finally:
            self._idle.put_nowait(p)

    async def close(self) -> None:
        for p in self._procs:
            if p.returncode is None:
                p.kill()
                await p.wait()
        self._procs.clear()


async def _read(p: asyncio.subprocess.Process) -> dict:
    assert p.stdout is not None
    (n,) = HEADER.unpack(await p.stdout.readexactly(HEADER.size))
    return json.loads(await p.stdout.readexactly(n))


if __name__ == "__main__":
    main()
