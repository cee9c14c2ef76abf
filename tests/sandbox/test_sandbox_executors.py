"""The pool picks its executor by ``sandbox.backend`` from a registry, so kit.sandbox never imports
kit.bridge (Ray registers itself there); an unregistered backend is named before anything starts."""

import asyncio
import dataclasses

import pytest

from kit.config import SandboxConfig
from kit.sandbox import SandboxPool, ToolCall
from kit.sandbox import pool as pool_module


class EchoExecutor:
    """Answers every call with its code as the value; records how it was built."""

    built: list = []

    def __init__(self, cfg, preload=()):
        EchoExecutor.built.append((cfg.backend, tuple(preload)))

    async def start(self):
        return None

    async def run(self, req):
        return {"status": "ok", "stdout": "", "stderr": "", "value": req["code"], "exit_code": 0,
                "wall_s": 0.0, "cpu_s": 0.0, "truncated": False}

    async def close(self):
        return None

    def stats(self):
        return {"backend": "echo"}


def test_a_registered_backend_is_built_from_the_config(monkeypatch):
    monkeypatch.setitem(pool_module.EXECUTORS, "echo", EchoExecutor)
    cfg = dataclasses.replace(SandboxConfig(num_workers=1, send_workers=1), backend="echo")

    async def go():
        async with SandboxPool(cfg, preload=("math",)) as pool:
            return (await pool.run(ToolCall("6 * 7"))).value

    assert asyncio.run(go()) == "6 * 7" and EchoExecutor.built[-1] == ("echo", ("math",))


def test_an_unregistered_backend_is_named(monkeypatch):
    monkeypatch.delitem(pool_module.EXECUTORS, "ray", raising=False)
    cfg = SandboxConfig(backend="ray")

    async def go():
        async with SandboxPool(cfg):
            pass

    with pytest.raises(ValueError, match=r"sandbox.backend='ray' has no executor registered.*kit.bridge.ray_sandbox"):
        asyncio.run(go())
