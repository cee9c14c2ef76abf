"""Rollout records (:mod:`kit.records.schema`) from what each runtime's step holds.

Two front ends, one assembly: :func:`records_from_trajectories` (the local trainer: a list of
``kit.rollout.Trajectory``) and :func:`records_from_verl` (the VERL replay buffer: dicts of
padded arrays and the agent loop's ``extra_fields``, as ``kit.bridge.roc_hook`` reads them). Both
compute RoC's penalties from the same counters with :func:`kit.algo.counters` / ``p_err`` /
``p_format`` / ``p_total`` (rStar2-Agent §2.2.3) and, when the caller passes no advantages, the
GRPO advantage of the kept rows with :func:`kit.algo.group_advantage` (VERL's formula; §2.2.1).
Shapes: ``N`` sampled trajectories of the step (``P * n``), ``K`` kept, ``T`` response tokens.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from typing import Any

import numpy as np

from kit.algo import RocParams, RocSelection, counters, group_advantage, p_err, p_format, p_total
from kit.records.schema import SCHEMA_VERSION
from kit.rollout.protocol import ERROR_KINDS


def _kept_mask(kept: RocSelection | Sequence[int] | np.ndarray | None, n: int) -> np.ndarray:
    if kept is None:
        return np.ones(n, dtype=bool)
    idx = np.asarray(kept.kept if isinstance(kept, RocSelection) else kept, dtype=np.int64)
    if idx.size and (idx.min() < 0 or idx.max() >= n):
        raise ValueError(f"kept rows {idx.min()}..{idx.max()} outside the step's {n} trajectories")
    out = np.zeros(n, dtype=bool)
    out[idx] = True
    return out


def _advantages(adv: Any, kept: np.ndarray, rewards: np.ndarray, gids: list, eps: float) -> np.ndarray:
    """(N,) advantages, NaN on dropped rows; ``adv`` is (N,), (K,) over the kept rows, or None."""
    out = np.full(rewards.size, np.nan, dtype=np.float64)
    rows = np.flatnonzero(kept)
    if adv is None:
        if rows.size:
            out[rows] = group_advantage(rewards[rows], [gids[i] for i in rows], eps).numpy()
        return out
    a = np.asarray(adv.detach().cpu().numpy() if hasattr(adv, "detach") else adv, dtype=np.float64).reshape(-1)
    if a.size == rewards.size:
        out[rows] = a[rows]
    elif a.size == rows.size:
        out[rows] = a
    else:
        raise ValueError(f"advantages: {a.size} values for {rewards.size} trajectories of which {rows.size} kept "
                         f"(give (N,) or (K,))")
    return out


def assemble(rows: Sequence[Mapping[str, Any]], *, rewards: Any, group_ids: Sequence[Hashable], runtime: str,
             stage: str, step: int, algorithm: str, arm: str | None = None, seed: int | None = None,
             global_step: int | None = None, kept: Any = None, advantages: Any = None,
             roc: RocParams | None = None, adv_eps: float = 1e-6, prompt_ids_of_group: Mapping | None = None
             ) -> list[dict[str, Any]]:
    """The N records of one step from per-trajectory ``rows`` (the two front ends' common part).

    Args:
        rows: (N,) mappings with ``prompt_ids, response_ids, response_mask, logprobs, entropy,
            tool_calls, tool_errors`` (kind -> count), ``infra_errors, answer_tags, answered`` (None: not
            known), ``turns, truncated,
            finish_reason, verdict, call_turn, call_status, call_error_kind, call_shown``.
        rewards: (N,) outcome rewards.
        group_ids: (N,) group labels; the groups' order of first appearance is ``prompt_index``.
        kept: a :class:`kit.algo.RocSelection`, (K,) kept row indices, or None (all kept: GRPO).
        advantages: (N,) or (K,) advantages used, or None (computed: GRPO over the kept rows).
        roc: RoC switches for ``p_total`` (default: both terms, the report's).
        prompt_ids_of_group: group label -> problem id (``prompt_id``); absent labels give null.
    Returns:
        N dicts with every column of :data:`kit.records.schema.SCHEMA`.
    Raises:
        ValueError: lengths differ, kept rows out of range, advantages of a third length.
        KeyError: a row lacks a RoC counter (names the row).
    """
    r = np.asarray(rewards, dtype=np.float64).reshape(-1)
    gids = list(group_ids)
    if not (len(rows) == r.size == len(gids)):
        raise ValueError(f"records: {len(rows)} trajectories, {r.size} rewards, {len(gids)} group ids")
    cnt = counters(rows)
    pe = p_err(cnt["tool_calls"], cnt["tool_failures"], cnt["infra_errors"])
    pf = p_format(cnt["answer_tags"], cnt["turns"], cnt["answered"])  # as RoC read it (an unextractable answer: 1)
    params = roc or RocParams()
    pt = p_total(pe, pf, params.use_error_ratio, params.use_answer_format)
    km = _kept_mask(kept, r.size)
    adv = _advantages(advantages, km, r, gids, adv_eps)
    order: dict[Hashable, list[int]] = {}
    for i, g in enumerate(gids):
        order.setdefault(g, []).append(i)
    pos = {g: k for k, g in enumerate(order)}
    ids_of = prompt_ids_of_group or {}
    out = []
    for i, row in enumerate(rows):
        g = gids[i]
        members = order[g]
        gr = r[members]
        errs = row.get("tool_errors") or {}
        out.append({
            "schema_version": SCHEMA_VERSION, "runtime": runtime, "stage": stage, "arm": arm or algorithm,
            "algorithm": algorithm, "seed": seed, "step": int(step),
            "global_step": int(global_step if global_step is not None else step),
            "prompt_index": pos[g], "prompt_id": None if ids_of.get(g) is None else str(ids_of[g]),
            "group_id": str(g), "traj_index": members.index(i), "group_n": len(members),
            "prompt_ids": list(map(int, row["prompt_ids"])), "response_ids": list(map(int, row["response_ids"])),
            "response_mask": list(map(int, row["response_mask"])),
            "logprobs": None if row.get("logprobs") is None else list(map(float, row["logprobs"])),
            "entropy": None if row.get("entropy") is None else list(map(float, row["entropy"])),
            "reward": float(r[i]), "correct": bool(r[i] > 0), "verdict": row.get("verdict"),
            "tool_calls": int(cnt["tool_calls"][i]),
            "tool_errors": {k: int(errs.get(k, 0) or 0) for k in ERROR_KINDS},
            "infra_errors": int(cnt["infra_errors"][i]),
            "call_turn": row.get("call_turn"), "call_status": row.get("call_status"),
            "call_error_kind": row.get("call_error_kind"), "call_shown": row.get("call_shown"),
            "answer_tags": int(cnt["answer_tags"][i]), "turns": int(cnt["turns"][i]),
            "p_err": float(pe[i]), "p_format": float(pf[i]), "p_total": float(pt[i]),
            "kept": bool(km[i]), "advantage": float(adv[i]),
            "group_reward_std": float(gr.std()), "group_zero_spread": bool(np.all(gr == gr[0])),
            "truncated": bool(row.get("truncated", False)), "finish_reason": str(row.get("finish_reason") or ""),
        })
    return out


def trajectory_row(tr: Any, verdict: str | None = None, entropy: Sequence[float] | None = None) -> dict[str, Any]:
    """The per-trajectory mapping :func:`assemble` reads, from a ``kit.rollout.Trajectory``
    (``entropy``: (T,) per-token entropies; default the trajectory's own ``entropy``, the rollout's)."""
    calls = list(getattr(tr, "calls", []) or [])
    ent = entropy if entropy is not None else (getattr(tr, "entropy", None) or None)
    return {"prompt_ids": tr.prompt_ids, "response_ids": tr.response_ids, "response_mask": tr.response_mask,
            "logprobs": tr.logprobs, "entropy": ent, "tool_calls": tr.tool_calls, "tool_errors": tr.tool_errors,
            "infra_errors": tr.infra_errors, "answer_tags": tr.answer_tags, "answered": getattr(tr, "answered", None),
            "turns": tr.turns,
            "truncated": tr.truncated, "finish_reason": tr.finish_reason, "verdict": verdict,
            "call_turn": [c.turn for c in calls], "call_status": [c.status for c in calls],
            "call_error_kind": [c.error_kind for c in calls], "call_shown": [bool(c.shown) for c in calls]}


def records_from_trajectories(trajectories: Sequence[Any], rewards: Any, group_ids: Sequence[Hashable], *,
                              stage: str, step: int, algorithm: str, problem_ids: Sequence[Any] | None = None,
                              verdicts: Sequence[str] | None = None, entropies: Sequence[Any] | None = None,
                              **kw: Any) -> list[dict[str, Any]]:
    """Records of one local step: ``trajectories`` (N,) as ``kit.train.rollouts.Batch.flat()`` lists them.

    Args:
        problem_ids: (N,) the problem id of each row (one per group is enough to repeat), or None.
        verdicts: (N,) verifier reasons, or None.
        entropies: (N,) per-token entropies of each row (T floats), or None: each trajectory's own
            ``entropy`` (the rollout backend's, :attr:`kit.rollout.backends.Generation.entropy`;
            null when the backend gave none).
        kw: :func:`assemble`'s keywords (``kept``, ``advantages``, ``arm``, ``seed``, ``global_step``, ``roc``).
    """
    n = len(trajectories)
    rows = [trajectory_row(t, None if verdicts is None else verdicts[i], None if entropies is None else entropies[i])
            for i, t in enumerate(trajectories)]
    ids = {} if problem_ids is None else {g: problem_ids[i] for i, g in enumerate(group_ids) if i < n}
    return assemble(rows, rewards=rewards, group_ids=group_ids, runtime="local", stage=stage, step=step,
                    algorithm=algorithm, prompt_ids_of_group=ids, **kw)


# ------------------------------------------------------------------ VERL rows


def _np(x: Any) -> np.ndarray:
    return np.asarray(x.detach().cpu().numpy() if hasattr(x, "detach") else x)


def _extra_rows(batch: Mapping[str, Any], n: int) -> list[dict[str, Any]]:
    """Per-row ``extra_fields`` dicts: a list column ``extra_fields``, or per-key columns (VERL v0)."""
    if "extra_fields" in batch:
        rows = [dict(e) for e in batch["extra_fields"]]
    else:
        keys = [k for k in batch if k in ("tool_calls", "infra_errors", "answer_tags", "answered", "turns", "truncated",
                                          "finish_reason") or k.startswith("tool_error_")]
        cols = {k: _np(batch[k]).tolist() for k in keys}
        rows = [{k: cols[k][i] for k in keys} for i in range(n)]
    if len(rows) != n:
        raise ValueError(f"records_from_verl: {len(rows)} extra_fields rows for {n} trajectories")
    return rows


def _token_rows(batch: Mapping[str, Any]) -> tuple[list, list, list, list | None, np.ndarray]:
    """Per row: prompt ids, response ids, response mask, log-probs (or None), and the (N,) rewards,
    from padded 2-D arrays with ``attention_mask`` (v0) or per-row 1-D sequences (v1)."""
    for key in ("responses", "response_mask", "prompts"):
        if key not in batch:
            raise KeyError(f"records_from_verl: the batch has no {key!r} (have {sorted(batch)})")
    lps_in = batch.get("rollout_log_probs")
    score_key = next((k for k in ("scores", "token_level_scores", "rm_scores") if k in batch), None)
    if score_key is None:
        raise KeyError("records_from_verl: the batch has neither 'scores', 'rm_scores' nor 'token_level_scores'")
    if "attention_mask" in batch:  # v0 DataProto: left-padded prompts, right-padded responses
        resp, rmask, att, prom = (_np(batch[k]) for k in ("responses", "response_mask", "attention_mask", "prompts"))
        tp = prom.shape[1]
        lens = att[:, tp:].sum(-1).astype(int)
        prompts = [prom[i][att[i, :tp].astype(bool)] for i in range(len(resp))]
        responses = [resp[i, :t] for i, t in enumerate(lens)]
        masks = [rmask[i, :t] for i, t in enumerate(lens)]
        lps = None if lps_in is None else [_np(lps_in)[i, :t] for i, t in enumerate(lens)]
    else:  # v1 TransferQueue: one unpadded tensor per session
        prompts, responses, masks = ([_np(x) for x in batch[k]] for k in ("prompts", "responses", "response_mask"))
        lps = None if lps_in is None else [_np(x) for x in lps_in]
    scores = batch[score_key]
    if score_key == "scores":
        r = _np(scores).astype(np.float64).reshape(-1)
    else:
        r = np.asarray([float(_np(v).astype(np.float64).sum()) for v in scores])
    return prompts, responses, masks, lps, r


def records_from_verl(batch: Mapping[str, Any], *, stage: str, step: int, algorithm: str, kept: Any = None,
                      advantages: Any = None, **kw: Any) -> list[dict[str, Any]]:
    """Records of one VERL step from the sampled batch as the replay buffer / RoC hook sees it.

    Args:
        batch: N rows, in either of VERL's two layouts. Always ``uid`` (N,) group labels and the
            agent loop's counters: ``extra_fields`` (N dicts, ``kit.bridge.agent_loop.trajectory_to_output``)
            or per-key columns (VERL v0 spreads them: ``tool_calls``, ``tool_error_<kind>``, ...);
            optional ``index`` (N,) problem ids. v1 (TransferQueue, ``RocReplayBuffer``): per row
            1-D ``prompts`` (Tp_i,), ``responses`` / ``response_mask`` / ``rm_scores`` /
            ``rollout_log_probs`` (T_i,). v0 (``DataProto``): ``prompts`` (N, Tp) left-padded,
            ``responses`` / ``response_mask`` / ``rm_scores`` or ``token_level_scores`` /
            ``rollout_log_probs`` (N, Tr) right-padded, ``attention_mask`` (N, Tp + Tr) giving the
            lengths. ``scores`` (N,) may replace the token-level rewards.
        kept: kept row indices (``kit.bridge.roc_hook.select_trajectories``'s first value), or None.
        advantages: (N,) / (K,) advantages, or None (the kit's GRPO advantage over the kept rows).
        kw: :func:`assemble`'s other keywords (``arm``, ``seed``, ``global_step``, ``roc``).
    Returns:
        N records; per-call lists are null (VERL's rows carry counts per kind only), ``verdict`` null,
        ``entropy`` null: VERL 0.9.1's rollout servers return token ids and log-probs only
        (``TokenOutput``), no entropy, and none is made up here.
    Raises:
        KeyError: a required array is missing (named).
    """
    if "uid" not in batch:
        raise KeyError(f"records_from_verl: the batch has no 'uid' (have {sorted(batch)})")
    prompts, responses, masks, lps, scores = _token_rows(batch)
    n = len(responses)
    extras = _extra_rows(batch, n)
    rows = []
    for i in range(n):
        e, mask = extras[i], masks[i].astype(int)
        rows.append({
            "prompt_ids": prompts[i].tolist(), "response_ids": responses[i].tolist(), "response_mask": mask.tolist(),
            "logprobs": None if lps is None else np.where(mask > 0, lps[i], 0.0).tolist(), "entropy": None,
            "tool_calls": e["tool_calls"], "infra_errors": e.get("infra_errors", 0),
            "tool_errors": {k: int(e.get(f"tool_error_{k}", 0) or 0) for k in ERROR_KINDS},
            "answer_tags": e["answer_tags"], "answered": e.get("answered"), "turns": e["turns"], "truncated": bool(e.get("truncated", False)),
            "finish_reason": e.get("finish_reason"), "verdict": None,
            "call_turn": None, "call_status": None, "call_error_kind": None, "call_shown": None})
    uids = [str(u) for u in list(batch["uid"])]
    ids = {} if "index" not in batch else {u: v for u, v in zip(uids, _np(batch["index"]).tolist(), strict=True)}
    return assemble(rows, rewards=scores, group_ids=uids, runtime="verl", stage=stage, step=step, algorithm=algorithm,
                    kept=kept, advantages=advantages, prompt_ids_of_group=ids, **kw)
