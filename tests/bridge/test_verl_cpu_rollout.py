"""The CPU rollout backend (kit.bridge.verl_cpu.rollout) driven directly, without Ray."""

from __future__ import annotations

import asyncio

import pytest
import torch

pytest.importorskip("verl")

from kit import prompts  # noqa: E402
from kit.bridge.verl_cpu.rollout import KitCpuRolloutAdapter, KitCpuServer  # noqa: E402
from kit.config import load  # noqa: E402
from kit.models import build_tiny_model, save_policy, train_tokenizer  # noqa: E402


@pytest.fixture(scope="module")
def policy_dir(tmp_path_factory):
    cfg = load("smoke", write=False)
    corpus = [prompts.render_prompt(f"What is {a} + {a}?") + f"<answer>\\boxed{{{2 * a}}}</answer>" for a in range(50)]
    tok = train_tokenizer(corpus, 300)
    return save_policy(build_tiny_model(cfg.model, tok, seed=0), tok, tmp_path_factory.mktemp("pol") / "policy")


async def test_serves_concurrent_requests_batched_with_logprobs_and_version(policy_dir):
    server = KitCpuServer(str(policy_dir), slots=8, response_length=12, threads=1)
    prompt = server.tokenizer.encode(prompts.render_prompt("What is 3 + 3?"), add_special_tokens=False)
    outs = await asyncio.gather(*(server.generate(prompt, {"temperature": 1.0, "top_p": 1.0, "max_new_tokens": 12},
                                                  request_id=str(i)) for i in range(8)))
    for o in outs:
        assert 0 < len(o.token_ids) <= 12 and len(o.log_probs) == len(o.token_ids)
        assert all(lp <= 0.0 for lp in o.log_probs)
        assert o.extra_fields["global_steps"] == 0
    assert len({tuple(o.token_ids) for o in outs}) > 1  # sampled, each with its own seed
    stats = await server.stats()
    # batched: fewer decode forwards than sampled tokens (one row at a time would need one per token)
    assert stats["engine"]["steps"] < stats["tokens"]


async def test_weight_update_changes_the_policy_and_its_version(policy_dir):
    server = KitCpuServer(str(policy_dir), slots=4, response_length=8, threads=1)
    prompt = server.tokenizer.encode(prompts.render_prompt("What is 1 + 1?"), add_special_tokens=False)
    greedy = {"temperature": 0.0, "top_p": 1.0, "max_new_tokens": 8}
    before = await server.generate(prompt, greedy, request_id="a")
    digest = await server.state_dict_digest()
    new = {k: v + 0.05 * torch.randn_like(v) for k, v in server.model.state_dict().items()}
    res = await server.load_weights(new, global_steps=3)
    assert res["loaded"] == len(new)
    assert await server.state_dict_digest() != digest
    after = await server.generate(prompt, greedy, request_id="b")
    assert after.extra_fields["global_steps"] == 3
    assert after.log_probs != before.log_probs
    with pytest.raises(KeyError, match="do not match"):
        await server.load_weights({"model.not_a_weight": torch.zeros(1)})


class _Handle:
    def __init__(self):
        self.calls = []

        class _M:
            async def remote(_, state, steps):
                self.calls.append((state, steps))

        self.load_weights = _M()


class _Sharded:
    """Stands in for an FSDP2 DTensor: ``full_tensor()`` gathers the whole parameter."""

    def __init__(self, t):
        self.t, self.gathered = t, False

    def full_tensor(self):
        self.gathered = True
        return self.t


async def test_adapter_materialises_and_sends_from_the_first_rank(monkeypatch, policy_dir):
    from omegaconf import OmegaConf

    monkeypatch.setenv("RANK", "0")
    cfg = OmegaConf.create({"name": "kit_cpu", "tensor_model_parallel_size": 1, "data_parallel_size": 1,
                            "pipeline_model_parallel_size": 1})
    adapter = KitCpuRolloutAdapter.__new__(KitCpuRolloutAdapter)
    adapter.config, adapter.replica_rank, adapter.is_sender = cfg, 0, True
    handle = _Handle()
    adapter._server = handle
    shards = [("w", _Sharded(torch.ones(2))), ("b", torch.zeros(1))]
    await adapter.update_weights(iter(shards), global_steps=5)
    (state, steps), = handle.calls
    assert steps == 5 and shards[0][1].gathered and torch.equal(state["w"], torch.ones(2))
    with pytest.raises(NotImplementedError, match="delta_flush"):
        await adapter.update_weights(iter([]), wire_format="delta_flush")
