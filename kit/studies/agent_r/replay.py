"""Continuing a trajectory from a tree node with the kit's unchanged agent loop.

:func:`kit.rollout.run_trajectory` always starts from the prompt. To expand a node (a prefix of
``d`` turns) the search runs the same loop with two thin wrappers: :class:`ReplayBackend` hands
back the prefix's ``d`` recorded turns without touching the model, then samples live;
:class:`ReplayExecutor` answers the prefix's tool calls from the results the sandbox gave when
the prefix was first sampled, and sends live calls to the sandbox (recording their results for
later replays). The ids, masks, counters and feedback of the new trajectory are therefore built
by the loop itself, exactly as for a trajectory sampled from the root.

:class:`SharedPrefixEngine` is the continuous-batching engine with one change: a kept prefix KV
is not removed when a request reuses it, so every sibling expanded from a node prefills only the
node's last feedback block, not its whole context (the engine's own prefix reuse pops the entry,
which suits one trajectory's next turn but not a tree's siblings).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

from kit.rollout.backends import Generation
from kit.rollout.engine import ContinuousBatchingEngine
from kit.rollout.loop import Trajectory, mask_spans


def turn_generations(tr: Trajectory) -> list[Generation]:
    """The model turns of ``tr`` as the backend returned them (ids with the stop id, log-probs).

    Each turn is one run of mask-1 tokens (every turn but the last is followed by a feedback block).

    Raises:
        ValueError: the mask runs do not match ``tr.turns`` (a turn with no sampled token).
    """
    runs = [(s, e) for m, s, e in mask_spans(tr.response_mask) if m == 1]
    if len(runs) != tr.turns:
        raise ValueError(f"trajectory has {tr.turns} turns but {len(runs)} runs of model tokens")
    out = []
    for i, (s, e) in enumerate(runs):
        lps = tr.logprobs[s:e] if tr.logprobs is not None else None
        cut = i == len(runs) - 1 and tr.finish_reason == "length"  # only a last turn can end on the budget
        out.append(Generation(list(tr.response_ids[s:e]), list(lps) if lps is not None else None,
                              "length" if cut else "stop"))
    return out


def turn_bounds(tr: Trajectory) -> list[tuple[int, int, int]]:
    """Per turn ``(start, end_model, end_feedback)`` response-token offsets (end exclusive;
    ``end_feedback == end_model`` for the last turn, whose calls, if any, were not answered)."""
    spans = mask_spans(tr.response_mask)
    out = []
    for i, (m, s, e) in enumerate(spans):
        if m != 1:
            continue
        fb_end = spans[i + 1][2] if i + 1 < len(spans) and spans[i + 1][0] == 0 else e
        out.append((s, e, fb_end))
    return out


def failed_turns(tr: Trajectory) -> list[bool]:
    """Per turn: one of its answered tool calls failed by the model's fault (not infra, not skipped)."""
    bad = [False] * tr.turns
    for c in tr.calls:
        if c.error_kind not in (None, "infra") and c.turn < tr.turns:
            bad[c.turn] = True
    return bad


class ReplayBackend:
    """Return ``prefix`` turns first, then sample from ``inner`` (the ``Backend`` contract)."""

    def __init__(self, inner: Any, prefix: Sequence[Generation]):
        self.inner = inner
        self.prefix = list(prefix)
        self.replayed = 0
        self.live_turns = 0

    @property
    def live(self) -> bool:
        """True once the prefix is used up (the next call samples)."""
        return self.replayed >= len(self.prefix)

    async def generate(self, prompt_ids, max_new_tokens, temperature, top_p, stop_ids) -> Generation:
        if not self.live:
            g = self.prefix[self.replayed]
            self.replayed += 1
            if len(g.token_ids) > max_new_tokens:
                raise ValueError(f"replayed turn of {len(g.token_ids)} tokens exceeds the budget {max_new_tokens}")
            return g
        self.live_turns += 1
        return await self.inner.generate(prompt_ids, max_new_tokens, temperature, top_p, stop_ids)


class ReplayExecutor:
    """Tool calls of the replayed prefix from ``memo``; live calls to ``inner`` (recorded in ``memo``).

    Args:
        inner: the sandbox (``async run_batch(calls)``).
        memo: ``{(code, input): result}`` shared by every simulation of a search.
        backend: the simulation's :class:`ReplayBackend`: until it samples its first live turn,
            the calls are those of replayed turns.
        counts: a dict to add ``live_calls`` and ``replayed_calls`` to.
    """

    def __init__(self, inner: Any, memo: dict, backend: ReplayBackend, counts: dict[str, int]):
        self.inner, self.memo, self.backend, self.counts = inner, memo, backend, counts

    async def run_batch(self, calls: list[Any]) -> list[Any]:
        keys = [(c.code, c.input) for c in calls]
        if self.backend.live_turns == 0 and all(k in self.memo for k in keys):  # calls of a replayed turn
            self.counts["replayed_calls"] = self.counts.get("replayed_calls", 0) + len(calls)
            return [self.memo[k] for k in keys]
        results = list(await self.inner.run_batch(calls))
        self.counts["live_calls"] = self.counts.get("live_calls", 0) + len(calls)
        for k, r in zip(keys, results, strict=False):
            if getattr(r, "status", None) != "infra_error":
                self.memo.setdefault(k, r)
        return results


class SharedPrefixEngine(ContinuousBatchingEngine):
    """:class:`kit.rollout.engine.ContinuousBatchingEngine` whose kept prefixes survive reuse.

    Args:
        prefix_entries: the most prefix KVs kept (LRU); a tree's siblings all reuse their node's.
        *args, **kwargs: as the engine (``slots``, ``seed``, ...).
    """

    def __init__(self, *args: Any, prefix_entries: int = 2048, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.prefix_entries = prefix_entries
        self._prefixes = OrderedDict()

    def _keep(self, ids: list[int], kv: list) -> None:
        self._prefixes[tuple(ids)] = kv
        self._prefixes.move_to_end(tuple(ids))
        while len(self._prefixes) > self.prefix_entries:
            self._prefixes.popitem(last=False)

    def _lookup(self, prompt_ids: list[int]) -> list | None:
        """The longest kept KV whose ids start ``prompt_ids``, left in place (the cached rows copy
        it into their own buffers, :meth:`kit.rollout.batch_rows.RunningRows.add`)."""
        best = None
        for key in self._prefixes:
            if len(key) <= len(prompt_ids) and (best is None or len(key) > len(best)) \
                    and tuple(prompt_ids[:len(key)]) == key:
                best = key
        if best is None:
            return None
        self._prefixes.move_to_end(best)
        return self._prefixes[best]
