"""Backends: the HF micro-batching engine against a full forward pass, the OpenAI client against a
local stub server, the scripted backend's budget."""

from __future__ import annotations

import asyncio
import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest
import torch

from kit import prompts
from kit.config import load
from kit.models import build_tiny_model, stop_token_ids
from kit.rollout.backends import (
    HFBackend,
    OpenAIBackend,
    ScriptedBackend,
    _top_p_filter,
    sample_tokens,
    sampling_uniforms,
)


@pytest.fixture(scope="module")
def model(tok):
    return build_tiny_model(load("tiny", write=False).model, tok, seed=0).eval()


def _requests(tok):
    texts = ["What is 2+2?", "Compute 17 * 23 please", "x"]
    reqs = []
    for i, t in enumerate(texts):
        ids = tok.encode(prompts.render_prompt(t), add_special_tokens=False)
        reqs.append(dict(prompt_ids=ids, max_new_tokens=[12, 7, 20][i], temperature=[1.0, 0.7, 0.0][i],
                         top_p=[1.0, 0.9, 1.0][i], stop_ids=stop_token_ids(tok)))
    return reqs


async def _gen_all(backend, reqs):
    return await asyncio.gather(*(backend.generate(**r) for r in reqs))


async def test_hf_logprobs_equal_a_full_forward_pass(model, tok):
    reqs = _requests(tok)
    be = HFBackend(model, tok, batch_size=8, seed=1)
    outs = await _gen_all(be, reqs)
    assert be.stats["batches"] == 1 and be.stats["rows"] == 3  # the three requests shared one batch
    for r, g in zip(reqs, outs, strict=True):
        assert 0 < len(g.token_ids) <= r["max_new_tokens"]
        assert g.finish_reason == ("stop" if g.token_ids[-1] in r["stop_ids"] else "length")
        if g.finish_reason == "length":
            assert len(g.token_ids) == r["max_new_tokens"]
        full = torch.tensor([r["prompt_ids"] + g.token_ids])
        with torch.no_grad():
            logits = model(full).logits[0, len(r["prompt_ids"]) - 1:-1].float()
        t = r["temperature"] or 1.0
        want = torch.log_softmax(logits / t, -1).gather(-1, torch.tensor(g.token_ids)[:, None])[:, 0]
        assert torch.allclose(torch.tensor(g.logprobs), want, atol=1e-4), (g.logprobs, want.tolist())
        if r["temperature"] == 0:
            assert g.token_ids == logits.argmax(-1).tolist()


async def test_hf_sampling_does_not_depend_on_batch_composition(model, tok):
    reqs = _requests(tok)
    together = await _gen_all(HFBackend(model, tok, batch_size=8, seed=3), reqs)
    alone = await _gen_all(HFBackend(model, tok, batch_size=1, seed=3), reqs)
    assert [g.token_ids for g in together] == [g.token_ids for g in alone]
    other_seed = await _gen_all(HFBackend(model, tok, batch_size=8, seed=4), reqs)
    assert [g.token_ids for g in other_seed][:2] != [g.token_ids for g in together][:2]


async def test_hf_repeated_prompt_gets_fresh_samples_and_context_limit(model, tok):
    r = _requests(tok)[0]
    be = HFBackend(model, tok, batch_size=8, seed=0)
    a, b = await asyncio.gather(be.generate(**r), be.generate(**r))
    assert a.token_ids != b.token_ids
    small = HFBackend(model, tok, max_context=len(r["prompt_ids"]) + 3)
    g = await small.generate(**r)
    assert len(g.token_ids) <= 3
    with pytest.raises(ValueError, match="fills the context"):
        await HFBackend(model, tok, max_context=len(r["prompt_ids"])).generate(**r)


def test_top_p_filter_keeps_the_nucleus():
    p = torch.tensor([[0.5, 0.3, 0.15, 0.05], [0.25, 0.25, 0.25, 0.25]])
    out = _top_p_filter(p, torch.tensor([0.7, 1.0]))
    assert (out > 0).tolist() == [[True, True, False, False], [True] * 4]
    assert torch.equal(out[out > 0], p[out > 0])
    assert _top_p_filter(p, torch.tensor([0.1, 0.01]))[:, 0].gt(0).all()  # the top token always survives


def test_inverse_cdf_sampling_follows_the_distribution_and_the_nucleus():
    probs = torch.tensor([0.5, 0.0, 0.3, 0.2])
    n = 20000
    u = torch.tensor(sampling_uniforms(7, n), dtype=torch.float64)
    logits = probs.clamp(min=1e-30).log().expand(n, 4)
    tok, logp = sample_tokens(logits, torch.ones(n), torch.ones(n), u)
    freq = torch.bincount(tok, minlength=4).double() / n
    assert freq[1] == 0  # a zero-probability token is never drawn
    assert torch.allclose(freq, probs.double(), atol=0.015), freq
    assert torch.allclose(logp[0].exp(), probs, atol=1e-6)
    # nucleus 0.6: only tokens 0 and 2 (0.5 + 0.3 reaches it); temperature 0: argmax
    tok, _ = sample_tokens(logits, torch.ones(n), torch.full((n,), 0.6), u)
    assert set(tok.tolist()) == {0, 2}
    tok, _ = sample_tokens(logits[:3], torch.zeros(3), torch.ones(3), u[:3])
    assert tok.tolist() == [0, 0, 0]
    # a stream is a function of its seed only; the edges of [0, 1) stay in range
    assert sampling_uniforms(7, 5) == sampling_uniforms(7, 5) != sampling_uniforms(8, 5)
    edge, _ = sample_tokens(logits[:2], torch.ones(2), torch.ones(2), torch.tensor([0.0, 1.0 - 1e-16], dtype=torch.float64))
    assert edge.tolist() == [0, 3]


async def test_scripted_backend_cuts_at_budget_and_stop(tok):
    be = ScriptedBackend(tok, ["hello world", "a<|im_end|>b"])
    g = await be.generate([1], 2, 1.0, 1.0, stop_token_ids(tok))
    assert g.finish_reason == "length" and len(g.token_ids) == 2
    g = await be.generate([1], 50, 1.0, 1.0, stop_token_ids(tok))
    assert tok.decode(g.token_ids) == "a<|im_end|>" and g.finish_reason == "stop"
    with pytest.raises(RuntimeError, match="ran out"):
        await be.generate([1], 5, 1.0, 1.0, [])


class _Stub(BaseHTTPRequestHandler):
    replies: list = []
    seen: list = []

    def do_POST(self):  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        _Stub.seen.append((self.path, body))
        reply = _Stub.replies.pop(0)
        code = reply.pop("_status", 200)
        data = json.dumps(reply).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *a):
        pass


@pytest.fixture()
def stub():
    srv = HTTPServer(("127.0.0.1", 0), _Stub)
    th = threading.Thread(target=srv.serve_forever, daemon=True)
    th.start()
    _Stub.seen.clear()
    yield f"http://127.0.0.1:{srv.server_address[1]}/v1"
    srv.shutdown()
    srv.server_close()


async def test_openai_backend_token_ids_and_fallbacks(stub, tok):
    end = tok.convert_tokens_to_ids(prompts.IM_END)
    ids = tok.encode("ok done", add_special_tokens=False)
    _Stub.replies[:] = [
        {"choices": [{"text": "ok done", "token_ids": ids + [end], "finish_reason": "stop",
                      "logprobs": {"token_logprobs": [-0.1] * (len(ids) + 1), "tokens": ["x"] * (len(ids) + 1)}}]},
        {"choices": [{"text": "ok done", "finish_reason": "length",
                      "logprobs": {"token_logprobs": [-0.2] * len(ids), "tokens": [f"token_id:{i}" for i in ids]}}]},
        {"choices": [{"text": "ok done", "finish_reason": "stop"}]},
        {"_status": 500, "error": "boom"},
    ]
    be = OpenAIBackend(stub, "rstar2-agent-14b", tok)
    stops = stop_token_ids(tok)
    a = await be.generate([5, 6, 7], 64, 0.6, 0.95, stops)
    assert a.token_ids == ids + [end] and a.logprobs == [-0.1] * (len(ids) + 1) and a.finish_reason == "stop"
    path, body = _Stub.seen[0]
    assert path == "/v1/completions" and body["prompt"] == [5, 6, 7] and body["max_tokens"] == 64
    assert body["stop_token_ids"] == stops and body["skip_special_tokens"] is False and body["temperature"] == 0.6
    b = await be.generate([5], len(ids), 1.0, 1.0, stops)
    assert b.token_ids == ids and b.logprobs == [-0.2] * len(ids) and b.finish_reason == "length"
    assert body["return_token_ids"] is True
    be = OpenAIBackend(stub, "m", tok, token_id_flags=False, extra_body={"top_k": 20})
    c = await be.generate([5], 64, 1.0, 1.0, stops)  # text only: re-tokenized, stop id restored, no logprobs
    assert "return_token_ids" not in _Stub.seen[2][1] and _Stub.seen[2][1]["top_k"] == 20
    assert c.token_ids == ids + [end] and c.logprobs is None and c.finish_reason == "stop"
    with pytest.raises(RuntimeError, match="HTTP 500"):
        await be.generate([5], 4, 1.0, 1.0, stops)


def test_openai_text_fallback_restores_the_stop_id_the_server_names(tok):
    """A server that strips the stop token and returns no ids: the id in vLLM's ``stop_reason``
    (here <|endoftext|>, which ends the trajectory as "eos") is restored, not <|im_end|>."""
    be = OpenAIBackend("http://127.0.0.1:9/v1", "m", tok)
    stops = stop_token_ids(tok)
    eot = tok.convert_tokens_to_ids(prompts.ENDOFTEXT)
    g = be._parse({"text": "done", "finish_reason": "stop", "stop_reason": eot}, 64, stops)
    assert g.token_ids[-1] == eot and g.finish_reason == "stop"
    g = be._parse({"text": "done", "finish_reason": "stop"}, 64, stops)
    assert g.token_ids[-1] == stops[0]
