"""The search on the real continuous-batching engine (untrained tiny model): reproducible under a
fixed seed, and siblings reuse their shared prefix's KV (kit/studies/agent_r/search.py, replay.py)."""

import pytest
import torch
from ar_doubles import Task, fake_grade, sandbox

from kit.config import RolloutConfig, load
from kit.models import build_tiny_model, stop_token_ids
from kit.rollout import run_coroutine
from kit.rollout.engine import ContinuousBatchingEngine
from kit.studies.agent_r.replay import SharedPrefixEngine
from kit.studies.agent_r.search import SearchParams, search

RCFG = RolloutConfig(max_prompt_tokens=512, max_response_tokens=32, max_turns=2)
TASKS = [Task("a", "What is 6 * 7?", "42"), Task("b", "What is 3 * 9?", "27")]


@pytest.fixture(scope="module")
def model(tok):
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield build_tiny_model(load("tiny", write=False).model, tok, seed=0).eval()
    torch.set_num_threads(threads)


def _run(model, tok, seed):
    engine = SharedPrefixEngine(model, tok, slots=8, seed=seed)
    p = SearchParams(simulations=4, width=2, max_response_tokens=32, max_turns=2)
    trees, cost = run_coroutine(search(engine, tok, TASKS, sandbox(), p, RCFG, graded=fake_grade))
    return [[t.response_ids for t in tree.trajectories] for tree in trees], cost


def test_search_is_reproducible_under_a_fixed_seed(model, tok):
    a, cost = _run(model, tok, 3)
    b, _ = _run(model, tok, 3)
    c, _ = _run(model, tok, 4)
    assert a == b
    assert a != c
    assert cost["rollouts"] == 8 and cost["tokens"] > 0


def test_siblings_reuse_the_kept_prefix(model, tok):
    prompt = tok.encode("What is 6 * 7?", add_special_tokens=False)
    stop = stop_token_ids(tok)

    async def go(engine):
        g = await engine.generate(prompt, 4, 1.0, 1.0, stop)
        ctx = prompt + g.token_ids + prompt  # a node's context: its turn and some feedback
        for _ in range(2):  # two siblings expanded from the same node
            await engine.generate(ctx, 2, 1.0, 1.0, stop)
        engine._worker.cancel()
        return engine.stats

    shared = run_coroutine(go(SharedPrefixEngine(model, tok, slots=4, seed=0)))
    plain = run_coroutine(go(ContinuousBatchingEngine(model, tok, slots=4, seed=0)))
    assert shared["prefix_hits"] == 2 and plain["prefix_hits"] == 1  # the engine's own reuse pops the entry
    assert shared["reused_tokens"] > plain["reused_tokens"]
