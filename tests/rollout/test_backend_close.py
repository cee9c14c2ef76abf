"""A closed HF backend leaves no pending task (issue #20: notebook 08 made a backend per benchmark;
each dropped one printed "Task was destroyed but it is pending!" into the cell)."""

from __future__ import annotations

import gc
import logging

from kit import prompts
from kit.config import load
from kit.models import build_tiny_model, stop_token_ids
from kit.rollout.backends import HFBackend


async def test_aclose_stops_the_batching_task(tok, caplog):
    model = build_tiny_model(load("smoke", write=False).model, tok, seed=0).eval()
    ids = tok.encode(prompts.render_prompt("What is 2+2?"), add_special_tokens=False)
    req = dict(prompt_ids=ids, max_new_tokens=4, temperature=1.0, top_p=1.0, stop_ids=stop_token_ids(tok))
    with caplog.at_level(logging.ERROR, logger="asyncio"):
        for _ in range(2):  # as evaluate_checkpoint does: one backend per benchmark, in one loop
            be = HFBackend(model, tok, batch_size=4, seed=0)
            first = await be.generate(**req)
            task = be._worker
            await be.aclose()
            assert task.done() and be._worker is None
            await be.aclose()  # idempotent
            assert (await be.generate(**req)).token_ids != [] and first.token_ids != []  # usable again
            await be.aclose()
            del be, task
            gc.collect()
    assert "Task was destroyed but it is pending" not in caplog.text
