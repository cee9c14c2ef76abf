"""The loopback OpenAI-compatible policy server (kit.rollout.serve) against the kit's own client."""

from __future__ import annotations

import asyncio
import json
import socket
import time
import urllib.error
import urllib.request
from urllib.parse import urlparse

import psutil
import pytest
from doubles import port_refused

from kit import cli, prompts
from kit.models import load_policy, save_policy
from kit.rollout.backends import OpenAIBackend
from kit.rollout.engine import ContinuousBatchingEngine
from kit.rollout.serve import MAX_BODY_BYTES, BadRequest, parse_completion_request, serve_policy


@pytest.fixture(scope="module")
def policy_dir(product_model, product_tok, tmp_path_factory):
    return save_policy(product_model, product_tok, tmp_path_factory.mktemp("served") / "policy").resolve()


@pytest.fixture(scope="module")
def server(policy_dir):
    with serve_policy(policy_dir, slots=8, seed=3, threads=1) as url:
        yield url


def _prompts(tok, k):
    return [tok.encode(prompts.render_prompt(f"What is {a} * {a + 7}?"), add_special_tokens=False)
            for a in range(120, 120 + k)]


def _stop(tok):
    return [tok.convert_tokens_to_ids(prompts.IM_END), tok.eos_token_id]


def _post(url, body):
    req = urllib.request.Request(url + "/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"}, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_openai_backend_gets_the_engines_ids_and_logprobs_from_concurrent_requests(server, policy_dir, product_tok):
    tok, ps, stop = product_tok, _prompts(product_tok, 5), _stop(product_tok)
    client = OpenAIBackend(server, str(policy_dir), tok)

    async def served():
        return await asyncio.gather(*(client.generate(p, 24, 1.0, 1.0, stop) for p in ps))

    got = asyncio.run(served())
    model, _ = load_policy(policy_dir)
    engine = ContinuousBatchingEngine(model, tok, slots=8, seed=3)

    async def local():
        return await asyncio.gather(*(engine.generate(p, 24, 1.0, 1.0, stop) for p in ps))

    want = asyncio.run(local())
    assert len({tuple(g.token_ids) for g in got}) == len(ps)  # really sampled, not one canned answer
    for g, w in zip(got, want, strict=True):
        assert g.token_ids == w.token_ids
        assert g.finish_reason == w.finish_reason
        assert g.logprobs == pytest.approx(w.logprobs, abs=1e-4)
        assert all(lp < 0 for lp in g.logprobs)
    with urllib.request.urlopen(server[:-3] + "/health", timeout=10) as resp:
        stats = json.loads(resp.read())["engine"]
    assert stats["row_steps"] > stats["steps"]  # concurrent requests shared decode steps


def test_greedy_stops_on_a_stop_id_and_reports_it(server, policy_dir, product_tok):
    p = _prompts(product_tok, 1)[0]
    code, first = _post(server, {"model": str(policy_dir), "prompt": p, "max_tokens": 6, "temperature": 0,
                                 "logprobs": 1, "return_token_ids": True})
    assert code == 200
    ids = first["choices"][0]["token_ids"]
    assert len(ids) == 6 and first["choices"][0]["finish_reason"] == "length"
    code, cut = _post(server, {"model": str(policy_dir), "prompt": p, "max_tokens": 6, "temperature": 0,
                               "stop_token_ids": [ids[2]], "return_token_ids": True})
    choice = cut["choices"][0]
    stop_at = ids.index(ids[2]) + 1
    assert choice["token_ids"] == ids[:stop_at] and choice["finish_reason"] == "stop"
    assert choice["stop_reason"] == ids[2] and choice["logprobs"] is None
    assert cut["usage"] == {"prompt_tokens": len(p), "completion_tokens": stop_at, "total_tokens": len(p) + stop_at}


def test_models_lists_the_served_policy(server, policy_dir):
    with urllib.request.urlopen(server + "/models", timeout=10) as resp:
        assert [m["id"] for m in json.loads(resp.read())["data"]] == [str(policy_dir)]


@pytest.mark.parametrize("change, field", [
    ({"prompt": "What is 2 * 9?"}, "prompt"),
    ({"prompt": [[1, 2], [3]]}, "prompt"),
    ({"prompt": []}, "prompt"),
    ({"prompt": [1, 2, 10**6]}, "prompt"),
    ({"prompt": [1, -1]}, "prompt"),
    ({"max_tokens": -1}, "max_tokens"),
    ({"max_tokens": "8"}, "max_tokens"),
    ({"model": "Qwen/Qwen3-14B"}, "model"),
    ({"top_p": 0}, "top_p"),
    ({"temperature": -0.5}, "temperature"),
    ({"temperature": float("nan")}, "temperature"),  # JSON's NaN: sampled the last id with null log-probs
    ({"temperature": float("inf")}, "temperature"),
    ({"top_p": float("inf")}, "top_p"),
    ({"n": 4}, "n"),
    ({"stop": ["</code>"]}, "stop"),
])
def test_bad_requests_get_400_naming_the_field(server, policy_dir, change, field):
    code, reply = _post(server, {"model": str(policy_dir), "prompt": [1, 2, 3], "max_tokens": 2, **change})
    assert code == 400
    assert reply["detail"].startswith(field + ":")


def test_json_nested_too_deep_to_decode_is_a_400_and_the_server_keeps_serving(server, policy_dir):
    req = urllib.request.Request(server + "/completions", data=b"[" * 100_000 + b"]" * 100_000,
                                 headers={"Content-Type": "application/json"}, method="POST")
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(req, timeout=60)
    assert err.value.code == 400 and json.loads(err.value.read())["detail"].startswith("body: not JSON")
    assert _post(server, {"model": str(policy_dir), "prompt": [1, 2, 3], "max_tokens": 1})[0] == 200


def test_the_command_line_names_a_bad_policy_folder_port_or_slots_before_serving(tmp_path, policy_dir, capsys):
    (tmp_path / "notes.txt").write_text("not a model")
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    try:
        for argv, says in [(["--policy", str(tmp_path)], f"--policy {tmp_path}: not a policy folder (no config.json"),
                           (["--policy", str(policy_dir), "--port", "70000"], "--port 70000: expected 0"),
                           (["--policy", str(policy_dir), "--slots", "0"], "--slots 0: expected >= 1"),
                           (["--policy", str(policy_dir), "--max-body-bytes", "0"], "--max-body-bytes 0: expected >= 1"),
                           (["--policy", str(policy_dir), "--port", str(taken.getsockname()[1])],
                            "cannot listen there (Address already in use)")]:
            assert cli.main(["serve", *argv]) == 2
            err = capsys.readouterr().err
            assert err.startswith("kit serve: --") and says in err
    finally:
        taken.close()


def _engine_stats(url):
    with urllib.request.urlopen(url[:-3] + "/health", timeout=30) as resp:
        return json.loads(resp.read())["engine"]


@pytest.mark.slow  # over ~3 s: make test, not the inner loop (make test-fast)
def test_clients_that_disconnect_do_not_keep_the_engine_decoding_for_nobody(policy_dir, product_tok):
    body = json.dumps({"model": str(policy_dir), "prompt": _prompts(product_tok, 1)[0], "max_tokens": 10**9,
                       "ignore_eos": True}).encode()
    room = 1024 - len(_prompts(product_tok, 1)[0])  # the tiny model's context minus the prompt
    with serve_policy(policy_dir, slots=1, threads=1) as url:
        port = urlparse(url).port
        for _ in range(5):  # each would decode `room` tokens for nobody: 5 rows in turn on one slot
            with socket.create_connection(("127.0.0.1", port)) as s:
                s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                          b"Content-Length: %d\r\n\r\n" % len(body) + body)
        before, quiet = _engine_stats(url), 0
        while quiet < 10:  # until the engine has not stepped for 0.5 s
            time.sleep(0.05)
            now = _engine_stats(url)
            quiet, before = (quiet + 1 if now["steps"] == before["steps"] else 0), now
        assert now["tokens"] < 2 * room, now
        assert _post(url, {"model": str(policy_dir), "prompt": [1, 2, 3], "max_tokens": 2})[0] == 200


def test_a_prompt_filling_the_context_is_a_400_and_the_server_keeps_serving(server, policy_dir, product_tok):
    code, reply = _post(server, {"model": str(policy_dir), "prompt": [5] * 100_000, "max_tokens": 2})
    assert code == 400 and "context" in reply["detail"]
    code, _ = _post(server, {"model": str(policy_dir), "prompt": _prompts(product_tok, 1)[0], "max_tokens": 2})
    assert code == 200


def _context(url):
    with urllib.request.urlopen(url + "/models", timeout=10) as resp:
        return json.loads(resp.read())["data"][0]["max_model_len"]


def test_a_prompt_the_context_cannot_hold_is_a_400_naming_prompt_and_the_limit(server, policy_dir):
    ctx = _context(server)
    code, reply = _post(server, {"model": str(policy_dir), "prompt": [5] * ctx, "max_tokens": 2})
    assert code == 400 and reply["detail"].startswith(f"prompt: {ctx} tokens")
    assert f"context of {ctx} tokens (at most {ctx - 1} prompt tokens" in reply["detail"]
    code, fits = _post(server, {"model": str(policy_dir), "prompt": [5] * (ctx - 1), "max_tokens": 2,
                                "return_token_ids": True})
    assert code == 200 and len(fits["choices"][0]["token_ids"]) == 1  # the one token the context leaves


def test_parse_checks_the_prompt_against_the_context():
    body = {"model": "m", "prompt": [1, 2, 3]}
    assert parse_completion_request(body, model_name="m", vocab_size=10, eos_id=None, max_context=4)["prompt_ids"] \
        == [1, 2, 3]
    with pytest.raises(BadRequest, match=r"^prompt: 3 tokens do not fit .* context of 3 tokens \(at most 2 prompt"):
        parse_completion_request(body, model_name="m", vocab_size=10, eos_id=None, max_context=3)


def _raw(port, data):
    """Send ``data`` (a whole HTTP/1.1 request, or only its head) and return ``(status, JSON body)``."""
    with socket.create_connection(("127.0.0.1", port), timeout=60) as s:
        s.sendall(data)
        got = b""
        while b"\r\n\r\n" not in got:
            chunk = s.recv(65536)
            assert chunk, got
            got += chunk
        head, rest = got.split(b"\r\n\r\n", 1)
        length = int(next(ln.split(b":", 1)[1] for ln in head.split(b"\r\n") if ln.lower().startswith(b"content-length")))
        while len(rest) < length:
            chunk = s.recv(65536)
            assert chunk, rest
            rest += chunk
    return int(head.split(b" ", 2)[1]), json.loads(rest[:length])


def _head(n_bytes=None, chunked=False):
    size = b"Transfer-Encoding: chunked\r\n" if chunked else b"Content-Length: %d\r\n" % n_bytes
    return b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" + size + b"\r\n"


def test_a_body_declared_over_the_default_limit_is_a_413_before_it_is_sent(server):
    code, reply = _raw(urlparse(server).port, _head(MAX_BODY_BYTES + 1))  # the head only: nothing else comes
    assert code == 413 and reply["detail"].startswith(f"body: {MAX_BODY_BYTES + 1} bytes")
    assert f"limit of {MAX_BODY_BYTES} bytes" in reply["detail"]


@pytest.mark.slow  # over ~3 s: make test, not the inner loop (make test-fast)
def test_bodies_over_the_limit_are_413_sent_whole_or_chunked_and_the_server_keeps_serving(policy_dir):
    limit = 2048
    ok = {"model": str(policy_dir), "prompt": [1, 2, 3], "max_tokens": 1}
    big = json.dumps({**ok, "stop_token_ids": [7] * 1000}).encode()  # valid JSON and valid fields, only too long
    assert len(big) > limit
    with serve_policy(policy_dir, threads=1, max_body_bytes=limit) as url:
        port = urlparse(url).port
        code, reply = _post(url, json.loads(big))
        assert code == 413 and reply["detail"] == f"body: {len(big)} bytes is over this server's limit of " \
            f"{limit} bytes (--max-body-bytes)"
        code, reply = _raw(port, _head(chunked=True) + b"%x\r\n" % len(big) + big + b"\r\n0\r\n\r\n")
        assert code == 413 and f"limit of {limit} bytes" in reply["detail"]
        code, reply = _raw(port, _head(len(json.dumps(ok))) + json.dumps(ok).encode())
        assert code == 200 and reply["usage"]["prompt_tokens"] == 3
        small = json.dumps({**ok, "stop_token_ids": [7] * 10}).encode()
        code, _ = _raw(port, _head(chunked=True) + b"%x\r\n" % len(small) + small + b"\r\n0\r\n\r\n")
        assert code == 200


def test_parse_adds_eos_to_the_stop_ids_unless_ignore_eos():
    body = {"model": "m", "prompt": [1, 2], "stop_token_ids": [7]}
    assert parse_completion_request(body, model_name="m", vocab_size=10, eos_id=9)["stop_ids"] == [7, 9]
    ignore = parse_completion_request({**body, "ignore_eos": True}, model_name="m", vocab_size=10, eos_id=9)
    assert ignore["stop_ids"] == [7]
    with pytest.raises(BadRequest, match="^body:"):
        parse_completion_request([1, 2], model_name="m", vocab_size=10, eos_id=None)


@pytest.mark.slow  # over ~3 s: make test, not the inner loop (make test-fast)
def test_the_server_is_stopped_and_its_port_closed_even_when_the_body_raises(policy_dir):
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    with pytest.raises(RuntimeError, match="body failed"), serve_policy(policy_dir, threads=1) as url:
        port = urlparse(url).port
        assert urlparse(url).hostname == "127.0.0.1" and port > 0
        conns = [c for c in psutil.net_connections("tcp") if c.laddr and c.laddr.port == port
                 and c.status == psutil.CONN_LISTEN]
        assert conns and all(c.laddr.ip == "127.0.0.1" for c in conns)  # loopback only
        assert not port_refused(port)
        raise RuntimeError("body failed")
    assert port_refused(port)
    assert {p.pid for p in psutil.Process().children(recursive=True)} <= before


def test_serve_policy_refuses_other_interfaces_and_missing_folders(tmp_path, policy_dir):
    with pytest.raises(ValueError, match="loopback"), serve_policy(policy_dir, host="0.0.0.0"):
        pass
    with pytest.raises(FileNotFoundError, match="policy folder"), serve_policy(tmp_path / "nope"):
        pass


@pytest.mark.slow  # over ~3 s: make test, not the inner loop (make test-fast)
def test_a_server_that_cannot_load_its_policy_is_reported_with_its_output(tmp_path):
    (tmp_path / "policy").mkdir()
    with pytest.raises(RuntimeError, match="exited with code"), serve_policy(tmp_path / "policy", threads=1):
        pass
