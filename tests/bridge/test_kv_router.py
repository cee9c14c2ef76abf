"""kit.bridge.kv_router: the kit balancer as VERL 0.9.1's router, against fake servers.

VERL's own ``get_router_handle`` builds the router from the YAML the kit writes (Ray's actor
wrapper replaced by a direct call), and VERL's own ``LLMServerClient.generate`` routes through it
to fake server handles with scripted KV reports. If a VERL upgrade moves the extension point
(``router_config_path`` -> ``router_class`` -> ``cls(servers, yaml)``) or the protocol's methods,
these tests fail loudly.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import SimpleNamespace

import pytest

pytest.importorskip("verl")

from verl.workers.rollout import router as verl_router  # noqa: E402
from verl.workers.rollout.llm_server import LLMServerClient  # noqa: E402
from verl.workers.rollout.replica import TokenOutput  # noqa: E402

from kit import prompts  # noqa: E402
from kit.bridge import launch  # noqa: E402
from kit.bridge.agent_loop import VerlServerBackend  # noqa: E402
from kit.bridge.kv_router import (  # noqa: E402
    KvCacheRouter,
    is_dead_engine_error,
    parse_sglang_load,
    parse_sglang_metrics,
    router_of,
)
from kit.bridge.overrides import RecipePaths, to_hydra_overrides  # noqa: E402
from kit.config import load  # noqa: E402
from kit.models import train_tokenizer  # noqa: E402

CAP = 65_536


class RayActorError(Exception):
    """Named as Ray's: the router matches dead-actor errors by name."""


class Method:
    """``handle.method.remote(...)`` as Ray gives it: runs now, returns an awaitable."""

    def __init__(self, fn):
        self.fn = fn

    def remote(self, *args, **kwargs):
        out = self.fn(*args, **kwargs)
        if inspect.isawaitable(out):
            return asyncio.ensure_future(out)
        fut = asyncio.get_event_loop().create_future()
        fut.set_result(out)
        return fut


class Handle:
    """A fake actor handle exposing ``obj``'s public methods as :class:`Method`."""

    def __init__(self, obj):
        for name in dir(obj):
            if not name.startswith("_") and callable(getattr(obj, name)):
                setattr(self, name, Method(getattr(obj, name)))


class FakeServer:
    """A ``kit_cpu``-like server: scripted ``kv_load`` answers, records ``generate`` calls."""

    def __init__(self, name, used=0):
        self.name, self.used, self.calls = name, used, []
        self.mode = "ok"  # ok | garbage | dead | hang

    async def kv_load(self):
        if self.mode == "dead":
            raise RayActorError(f"{self.name} died")
        if self.mode == "hang":
            await asyncio.sleep(60)
        if self.mode == "garbage":
            return {"used_tokens": float("nan"), "capacity_tokens": CAP}
        return {"used_tokens": self.used, "capacity_tokens": CAP}

    async def generate(self, prompt_ids, sampling_params, request_id, image_data=None, video_data=None, **kw):
        self.calls.append(len(prompt_ids))
        return TokenOutput(token_ids=[1, 2], log_probs=[-0.1, -0.2], stop_reason="completed",
                           extra_fields={"global_steps": 0})


def build(tmp_path, monkeypatch, servers, **yaml_extra):
    """The router VERL builds from the kit's router YAML (Ray's wrapper replaced by a call)."""
    cfg = load("paper-14b", run_dir=str(tmp_path))
    paths = RecipePaths.default(str(tmp_path))
    path = launch.write_router_config(cfg, paths)
    if yaml_extra:
        path.write_text(json.dumps({**json.loads(path.read_text()), **yaml_extra}))
    monkeypatch.setattr(verl_router.ray, "remote", lambda cls: SimpleNamespace(remote=lambda *a: cls(*a)))
    r = verl_router.get_router_handle({s.name: Handle(s) for s in servers}, router_config_path=str(path))
    assert isinstance(r, KvCacheRouter)
    return r


def client(router):
    cfg = SimpleNamespace(actor_rollout_ref=SimpleNamespace(rollout=SimpleNamespace(name="kit_cpu")))
    return LLMServerClient(cfg, load_balancer_handle=Handle(router))


def test_verl_builds_the_kit_router_from_the_yaml_the_kit_writes(tmp_path, monkeypatch):
    r = build(tmp_path, monkeypatch, [FakeServer("a"), FakeServer("b")])
    assert r.get_all_servers() == ["a", "b"]
    assert r.max_new_tokens == load("paper-14b").stages["stage1"].max_response_tokens
    assert r.status_path == str(tmp_path / "verl" / "router_status.json")
    # every method of VERL's router protocol is there
    wanted = {n for n in vars(verl_router.RequestLoadBalancer) if not n.startswith("_")}
    assert wanted <= {n for n in dir(KvCacheRouter) if not n.startswith("_")}


def test_the_switch_selects_the_router_or_leaves_verls(tmp_path):
    cfg = load("paper-14b", run_dir=str(tmp_path))
    key = "actor_rollout_ref.rollout.router_config_path="
    assert f"{key}{tmp_path}/verl/router.yaml" in to_hydra_overrides(cfg, "stage1")
    verl_cfg = load("paper-14b", run_dir=str(tmp_path), overrides={"rollout.balancer": "verl"})
    assert not any(o.startswith(key) for o in to_hydra_overrides(verl_cfg, "stage1"))
    assert launch.write_router_config(verl_cfg, RecipePaths.default(str(tmp_path))) is None


def test_verl_client_routes_by_free_kv_and_keeps_a_trajectory_home(tmp_path, monkeypatch):
    a, b = FakeServer("a", used=60_000), FakeServer("b", used=1_000)
    r = build(tmp_path, monkeypatch, [a, b])

    async def go():
        await r.poll_once()
        c = client(r)
        for rid in ("t1", "t2", "t3"):
            await c.generate(rid, prompt_ids=list(range(100)), sampling_params={"max_new_tokens": 500})
        # second turns, after the other server freed up: they stay home (their prefix is there)
        a.used = 0
        await r.poll_once()
        await c.generate("t1", prompt_ids=list(range(700)), sampling_params={"max_new_tokens": 500})
        await asyncio.sleep(0)  # release_server is fire-and-forget
        await r.poll_once()  # writes the status file

    asyncio.run(go())
    assert a.calls == [] and b.calls == [100, 100, 100, 700]
    st = r.get_status()
    assert st["counters"]["sticky"] == 1 and st["counters"]["moves"] == 0
    assert st["total_inflight"] == 0  # VERL's client released every request
    assert json.loads((tmp_path / "verl" / "router_status.json").read_text())["engines"]["b"]["served"] == 4


def test_a_dead_server_is_routed_around_and_garbage_is_counted(tmp_path, monkeypatch):
    a, b, c = FakeServer("a"), FakeServer("b", used=30_000), FakeServer("c", used=30_000)
    r = build(tmp_path, monkeypatch, [a, b, c], report_timeout_s=0.2, max_missed_reports=1)

    async def go():
        await r.poll_once()
        cl = client(r)
        await cl.generate("t", prompt_ids=[1] * 10, sampling_params={})
        a.mode, b.mode, c.mode = "dead", "garbage", "hang"
        await r.poll_once()
        await cl.generate("t", prompt_ids=[1] * 20, sampling_params={})  # its home died: elsewhere
        await cl.generate("u", prompt_ids=[1] * 20, sampling_params={})

    asyncio.run(go())
    counters = r.get_status()["counters"]
    assert a.calls == [10]
    assert b.calls == [20, 20]  # c stopped answering (marked down); b answers garbage but lives
    assert counters["engines_down"] == 2 and counters["bad_reports"] == 1 and counters["missed_reports"] == 1
    assert counters["moves"] == 0  # the dead home was dropped, so "t" starts afresh


def test_sglang_metrics_and_load_parsing():
    text = ("# HELP sglang:num_used_tokens x\n# TYPE sglang:num_used_tokens gauge\n"
            'sglang:num_used_tokens{model_name="m",dp_rank="0"} 1200.0\n'
            'sglang:num_used_tokens{model_name="m",dp_rank="1"} 800.0\n'
            'sglang:max_total_num_tokens{model_name="m",dp_rank="0"} 50000.0\n'
            'sglang:max_total_num_tokens{model_name="m",dp_rank="1"} 50000.0\n'
            'sglang:num_running_reqs{model_name="m"} 3.0\n')
    assert parse_sglang_metrics(text) == (2000.0, 100000.0)
    assert parse_sglang_metrics("sglang:num_running_reqs 1\n") is None
    assert parse_sglang_metrics("sglang:num_used_tokens NaN\nsglang:max_total_num_tokens 5\n") is None
    assert parse_sglang_load([{"num_tokens": 10}, {"num_tokens": 5}]) == (15.0, None)
    assert parse_sglang_load({"num_tokens": 7, "max_total_num_tokens": 70}) == (7.0, 70.0)
    assert parse_sglang_load({"oops": 1}) is None and parse_sglang_load("x") is None


def test_sglang_servers_are_read_over_http_on_loopback(tmp_path, monkeypatch):
    class Metrics(BaseHTTPRequestHandler):
        used = 40_000

        def do_GET(self):  # noqa: N802 - http.server's name
            if self.path != "/metrics":
                self.send_error(404)
                return
            body = (f"sglang:num_used_tokens {Metrics.used}\nsglang:max_total_num_tokens 50000\n").encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *a):
            pass

    srv = ThreadingHTTPServer(("127.0.0.1", 0), Metrics)
    th = threading.Thread(target=srv.serve_forever, daemon=True)
    th.start()
    try:
        live = SimpleNamespace(name=f"127.0.0.1:{srv.server_address[1]}", generate=None)
        gone = SimpleNamespace(name="127.0.0.1:9", generate=None)  # discard port: refused
        r = build(tmp_path, monkeypatch, [live, gone], report_timeout_s=1.0, max_missed_reports=1)
        asyncio.run(r.poll_once())
        st = r.get_status()
        assert st["engines"][live.name]["reported_tokens"] == 40_000
        assert st["engines"][live.name]["capacity_tokens"] == 50_000
        assert not st["engines"][gone.name]["alive"] and st["counters"]["missed_reports"] == 1
    finally:
        srv.shutdown()
        srv.server_close()
        th.join(5)


async def test_kit_cpu_server_reports_its_kv(tmp_path):
    from kit.bridge.verl_cpu.rollout import KitCpuServer
    from kit.models import build_tiny_model, save_policy

    corpus = [prompts.render_prompt(f"What is {a} + {a}?") + f"<answer>\\boxed{{{2 * a}}}</answer>" for a in range(50)]
    tok = train_tokenizer(corpus, 300)
    pol = save_policy(build_tiny_model(load("smoke", write=False).model, tok, seed=0), tok, tmp_path / "policy")
    server = KitCpuServer(str(pol), slots=4, response_length=16, threads=1)
    idle = await server.kv_load()
    assert idle["used_tokens"] == 0 and idle["capacity_tokens"] == 4 * server.engine.max_context
    prompt = server.tokenizer.encode(prompts.render_prompt("What is 3 + 3?"), add_special_tokens=False)
    tasks = [asyncio.ensure_future(server.generate(prompt, {"max_new_tokens": 16}, request_id=str(i))) for i in range(3)]
    await asyncio.sleep(0)  # the requests are queued or running now
    busy = await server.kv_load()
    assert busy["used_tokens"] >= 3 * len(prompt)
    await asyncio.gather(*tasks)
    assert (await server.kv_load())["used_tokens"] == 0


class ActorDiedError(RayActorError):
    """Named and derived as Ray's (``ray.exceptions.ActorDiedError``)."""


class RayTaskError(Exception):
    """Named as Ray's base of a server's re-raised error."""


class RayTaskError_ConnectionError(RayTaskError, ConnectionError):  # noqa: N801 - Ray's naming of a wrapped error
    """How Ray re-raises a server's ``ConnectionError``: a subclass of the cause's class."""


def test_dead_engine_errors_are_told_from_other_failures():
    for exc in (RayActorError("x"), ActorDiedError("x"), ConnectionRefusedError(), ConnectionResetError(),
                RayTaskError_ConnectionError("x"), type("ServerDisconnectedError", (Exception,), {})()):
        assert is_dead_engine_error(exc), exc
    for exc in (ValueError("bad prompt"), TimeoutError(), RuntimeError("OOM"), KeyError("k")):
        assert not is_dead_engine_error(exc), exc


def test_router_of_finds_the_kit_router_behind_verls_client_only(tmp_path, monkeypatch):
    r = build(tmp_path, monkeypatch, [FakeServer("a")])
    assert router_of(client(r)) is not None  # VERL's LLMServerClient still keeps it as _load_balancer
    verl_default = Handle(verl_router.GlobalRequestLoadBalancer({"a": None}))
    assert router_of(LLMServerClient(SimpleNamespace(), load_balancer_handle=verl_default)) is None


@pytest.mark.parametrize("error", [ActorDiedError, ConnectionRefusedError], ids=["ray_actor_died", "sglang_http"])
def test_a_turn_on_a_dying_engine_is_resent_once_elsewhere(tmp_path, monkeypatch, error):
    """Issue #19, bad input: the engine holding trajectory ``t`` dies during its turn; the kit's
    backend re-sends the turn once, to ``b``; the router counts it and releases it exactly once."""
    a, b = FakeServer("a"), FakeServer("b", used=60_000)
    r = build(tmp_path, monkeypatch, [a, b], report_interval_s=60)

    async def dies(prompt_ids, sampling_params, request_id, **kw):
        a.calls.append(len(prompt_ids))
        raise error("a died mid-request")

    async def go():
        await r.poll_once()
        be = VerlServerBackend(client(r), "t", {})
        first = await be.generate([1] * 10, 8, 1.0, 1.0, [0])  # on a (most free KV)
        a.generate = dies
        Handle.__init__(r._servers["a"], a)
        second = await be.generate([1] * 20, 8, 1.0, 1.0, [0])
        await asyncio.sleep(0)
        return be, first, second

    be, first, second = asyncio.run(go())
    assert a.calls == [10, 20] and b.calls == [20]  # the failed turn ran once more, on b only
    assert first.token_ids == second.token_ids == [1, 2] and be.resent == 1
    st = r.get_status()
    c = st["counters"]
    assert (c["dead_engine_errors"], c["resent"], c["engines_down"]) == (1, 1, 1)
    assert not st["engines"]["a"]["alive"] and st["engines"]["b"]["served"] == 1
    assert c["stale_releases"] == 0 and st["total_inflight"] == 0  # released once, by VERL's client
    written = json.loads((tmp_path / "verl" / "router_status.json").read_text())["counters"]
    assert (written["dead_engine_errors"], written["resent"]) == (1, 1)


def test_a_second_death_is_raised_and_counted_not_resent(tmp_path, monkeypatch):
    a, b = FakeServer("a"), FakeServer("b")

    async def dead(*_, **__):
        raise ActorDiedError("gone")

    a.generate = b.generate = dead
    r = build(tmp_path, monkeypatch, [a, b], report_interval_s=60)
    with pytest.raises(ActorDiedError):
        asyncio.run(VerlServerBackend(client(r), "t", {}).generate([1, 2, 3], 8, 1.0, 1.0, [0]))
    c = r.get_status()["counters"]
    assert (c["dead_engine_errors"], c["resent"], c["engines_down"]) == (2, 1, 2)
    assert r.get_total_inflight() == 0


class SlowServer(FakeServer):
    """Answers ``kv_load`` only once ``gate`` is set (a KV query still in flight)."""

    def __init__(self, name, used=0):
        super().__init__(name, used)
        self.gate = asyncio.Event()

    async def kv_load(self):
        await self.gate.wait()
        return await super().kv_load()


def test_a_request_routed_while_a_kv_query_is_in_flight_stays_counted(tmp_path, monkeypatch):
    # the answer describes the engine as of the query, not as of its arrival: a request routed
    # in between is not in it and must stay counted at its charge (it used to be dropped)
    a, b = SlowServer("a", used=100), SlowServer("b", used=100)
    r = build(tmp_path, monkeypatch, [a, b])
    monkeypatch.setattr(r, "_ensure_poller", lambda: None)  # polls driven by the test only

    async def go():
        poll = asyncio.create_task(r.poll_once())
        await asyncio.sleep(0.05)  # both queries are out
        sid, _ = await r.acquire_server("t", prompt_ids=[1] * 10, sampling_params={"max_new_tokens": 90})
        a.gate.set()
        b.gate.set()
        await poll
        return sid

    sid = asyncio.run(go())
    assert r.policy.load(sid) == 100 + 10 + 90
    assert r.policy.load("b" if sid == "a" else "a") == 100


@pytest.mark.parametrize(("key", "value"), [("capacity_tokens", "lots"), ("capacity_tokens", 0),
                                            ("report_interval_s", 0), ("report_timeout_s", float("nan")),
                                            ("max_missed_reports", 0), ("max_new_tokens", -1),
                                            ("expected_new_tokens", "x"), ("report_max_age_s", True)])
def test_a_bad_router_yaml_value_is_one_error_naming_the_key(tmp_path, monkeypatch, key, value):
    # these used to pass through as a bare int()/float() error, a busy poll loop (interval 0) or
    # the default capacity (0)
    with pytest.raises(ValueError, match=f"router config {key}:"):
        build(tmp_path, monkeypatch, [FakeServer("a")], **{key: value})


def test_an_unwritable_status_file_does_not_stop_marking_a_dead_engine(tmp_path, monkeypatch):
    # a failing status write used to raise out of engine_failed, so the agent loop never re-sent
    blocker = tmp_path / "not_a_folder"
    blocker.write_text("")
    a, b = FakeServer("a"), FakeServer("b")
    r = build(tmp_path, monkeypatch, [a, b], status_path=str(blocker / "router_status.json"))
    monkeypatch.setattr(r, "_ensure_poller", lambda: None)
    sid, _ = asyncio.run(r.acquire_server("t", prompt_ids=[1] * 5, sampling_params={"max_new_tokens": 5}))
    assert r.engine_failed("t", "RayActorError: gone") == sid
    assert not r.get_status()["engines"][sid]["alive"] and r.get_status()["counters"]["resent"] == 1


@pytest.mark.parametrize("params", [{"max_new_tokens": "lots"}, {"max_tokens": [5]}])
def test_a_non_integer_turn_budget_is_one_error_naming_the_request_and_key(tmp_path, monkeypatch, params):
    # used to raise a bare int() error out of acquire_server
    r = build(tmp_path, monkeypatch, [FakeServer("a")])
    monkeypatch.setattr(r, "_ensure_poller", lambda: None)
    key = next(iter(params))
    with pytest.raises(ValueError, match=f"request t7: sampling_params.{key} must be an integer"):
        asyncio.run(r.acquire_server("t7", prompt_ids=[1] * 5, sampling_params=params))
    assert r.get_status()["total_inflight"] == 0  # nothing was routed
