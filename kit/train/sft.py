"""Cold-start SFT on the local CPU engine (rStar2-Agent §4.1, tiny profile).

Entry points (notebook 02 calls them)::

    model, tok = build_tokenizer_and_model(cfg, run_dir)   # tokenizer + random tiny Qwen3 -> run_dir/init
    summary = run_sft(cfg, run_dir, progress=print)         # train, checkpoints, metrics, held-out eval

Data (:mod:`kit.data.sft`): task demonstrations of the tiny family (tool, tool-error-then-fixed
and direct-guess demos; their calls run once in the real sandbox and are cached in
``run_dir/sft_data.json``) plus the function-calling sets, mixed so that a share
``cfg.sft.task_demo_fraction`` of each batch are task demos. Loss: token-mean cross-entropy
over assistant tokens only (mask from :func:`kit.data.sft.encode_conversation`).

Optimizer (measured for the 0.45M model on 2 CPU cores while the tiny profile was tuned):
AdamW betas (0.9, 0.98), no weight decay, linear warmup over ``warmup_ratio * steps``, cosine to
``min_lr_ratio``, gradient clip 1.0. Batches are split into micro-batches by length (rows sorted
by length, at most :data:`MICRO_TOKENS` padded tokens each) and the gradients summed, so long
function-calling rows do not pad the short task rows.

Exact resume: the rows of step ``s`` are drawn from ``step_seed(seed, "sft", s)``, so a run
resumed from ``checkpoints/step_<k>`` repeats steps ``k+1..`` exactly.
"""

from __future__ import annotations

import dataclasses
import json
import math
import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from kit import jsonio
from kit.config import KitConfig, save
from kit.data import sft as sft_data
from kit.data import tasks
from kit.models import build_tiny_model, load_policy, save_policy, train_tokenizer
from kit.rollout.protocol import truncate_tokens
from kit.train import common, tracking
from kit.train.batching import micro_batches, pad_rows
from kit.train.rollouts import evaluate_policy

MICRO_TOKENS = 2048  # padded tokens per micro-batch (rows x longest row); smaller pads less (measured:
# 0.71 s/step at 12288, 0.60 s at 1536 for 64 tiny-profile rows on 2 cores)
SFT_DATA_FILE = "sft_data.json"


# --------------------------------------------------------------------------- data


def prepare_sft_data(cfg: KitConfig, run_dir: str | Path) -> dict[str, Any]:
    """Task demos with their sandbox feedback, cached in ``run_dir/sft_data.json``.

    One demo per train problem; kinds from :func:`kit.data.tasks.demo_kinds` with
    ``cfg.data.demo_direct_fraction`` and ``cfg.data.demo_error_fraction``, openings with
    ``cfg.data.demo_preamble_max`` reasoning sentences at most. Every tool call runs
    once in the sandbox (``cfg.sandbox``); the feedback is rendered untruncated here and cut by
    tokens when encoding (the tokenizer does not exist yet).

    Returns:
        ``{"key", "demos": [{"problem", "kind", "turns": [[text, code, input]], "final", "feedback": [...]}],
        "statuses": {status: count}}``.
    Raises:
        RuntimeError: a clean demo call did not print the problem's answer (the sandbox or the
            task generator is broken; the message names the problem).
    """
    path = Path(run_dir) / SFT_DATA_FILE
    key = {"seed": cfg.seed, "data": {k: v for k, v in cfg.to_dict()["data"].items() if k.startswith(("task_", "demo_"))}}
    if path.exists():
        cached = json.loads(path.read_text())
        if cached.get("key") == key:
            return cached
    split = tasks.task_split(cfg)
    kinds = tasks.demo_kinds(len(split.train), cfg.data.demo_error_fraction, cfg.data.demo_direct_fraction,
                             common.step_seed(cfg.seed, "demo-kinds"))
    rng = random.Random(common.step_seed(cfg.seed, "demos"))
    demos = [tasks.make_demo(p, k, rng, cfg.data.demo_preamble_max) for p, k in zip(split.train, kinds, strict=True)]
    results = sft_data.run_demo_calls(demos, cfg.sandbox)
    feedback = sft_data.render_feedback(results, timeout_s=cfg.sandbox.timeout_s)
    statuses: dict[str, int] = {}
    rows = []
    for d, res, fb in zip(demos, results, feedback, strict=True):
        for r in res:
            statuses[r.status] = statuses.get(r.status, 0) + 1
        if res and (res[-1].status != "ok" or res[-1].stdout.strip() != d.problem.answer):
            raise RuntimeError(f"SFT demo {d.problem.id}: reference code gave {res[-1].status} "
                               f"{res[-1].stdout[:80]!r}{res[-1].stderr[-200:]!r}, expected {d.problem.answer}")
        rows.append({"problem": d.problem.to_dict(), "kind": d.kind,
                     "turns": [[t, c.code, c.input] for t, c in d.turns], "final": d.final, "feedback": fb})
    data = {"key": key, "demos": rows, "statuses": statuses}
    jsonio.write_json(path, data)
    return data


def _demo(row: dict[str, Any]) -> tasks.Demo:
    p = tasks.TaskProblem(**row["problem"])
    return tasks.Demo(p, row["kind"], tuple((t, tasks.DemoCall(c, i)) for t, c, i in row["turns"]), row["final"])


def demo_conversations(data: dict[str, Any], tokenizer=None, max_feedback_tokens: int = 0) -> list[sft_data.Conversation]:
    """Conversations of the cached demos; feedback truncated by tokens when ``tokenizer`` is given."""
    out = []
    for row in data["demos"]:
        fb = row["feedback"]
        if tokenizer is not None:
            fb = [truncate_tokens(t, tokenizer, max_feedback_tokens)[0] for t in fb]
        out.append(sft_data.demo_conversation(_demo(row), fb))
    return out


def build_tokenizer_and_model(cfg: KitConfig, run_dir: str | Path):
    """Train the tiny tokenizer and build the randomly initialised policy; save to ``run_dir/init``.

    For ``cfg.model.name_or_path != "tiny"`` the named checkpoint is loaded instead (no
    download unless it is cached). The tokenizer corpus is the rendered SFT data (task demos
    with untruncated feedback and the function-calling chats).

    Returns:
        ``(model, tokenizer)``; the model in train mode, float32, on the CPU.
    """
    run_dir = Path(run_dir)
    init = run_dir / "init"
    if (init / "config.json").exists():
        model, tok = load_policy(init)
        return model.train(), tok
    if cfg.model.name_or_path != "tiny":
        model, tok = load_policy(cfg.model.name_or_path, dtype=cfg.model.dtype)
        return model.train(), tok
    data = prepare_sft_data(cfg, run_dir)
    fc = sft_data.load_function_calling(cfg.sft.function_calling_sets, cfg.data.data_dir)
    corpus = sft_data.tokenizer_corpus(demo_conversations(data) + fc, cfg.seed)
    tok = train_tokenizer(corpus, cfg.model.tokenizer_vocab_size)
    model = build_tiny_model(cfg.model, tok, seed=cfg.seed)
    save_policy(model, tok, init)
    return model.train(), tok


def encode_rows(cfg: KitConfig, tokenizer, data: dict[str, Any]) -> tuple[list, list, dict[str, int]]:
    """Token rows for SFT: ``(task_rows, fc_rows, counts)``, each row ``(ids, mask)``.

    Rows are cut to ``cfg.sft.max_seq_tokens``; rows left without an assistant token are dropped
    (counted in ``counts["fc_dropped"]`` / ``counts["task_dropped"]``).
    """
    limit = cfg.sft.max_seq_tokens
    counts = {"task_dropped": 0, "fc_dropped": 0, "fc_truncated": 0}
    task_rows = []
    for c in demo_conversations(data, tokenizer, cfg.rollout.tool_response_max_tokens):
        ids, mask = sft_data.encode_conversation(tokenizer, c.messages, limit)
        if sum(mask) == 0:
            counts["task_dropped"] += 1
            continue
        task_rows.append((ids, mask))
    fc_rows = []
    for c in sft_data.load_function_calling(cfg.sft.function_calling_sets, cfg.data.data_dir):
        ids, mask = sft_data.encode_conversation(tokenizer, c.messages)
        if len(ids) > limit:
            counts["fc_truncated"] += 1
            ids, mask = ids[:limit], mask[:limit]
        if sum(mask) == 0:
            counts["fc_dropped"] += 1
            continue
        fc_rows.append((ids, mask))
    counts.update(task_rows=len(task_rows), fc_rows=len(fc_rows))
    return task_rows, fc_rows, counts


def batch_rows(task_rows: list, fc_rows: list, batch_size: int, task_fraction: float, rng: random.Random) -> list:
    """One SFT batch: ``round(batch_size * task_fraction)`` task rows, the rest function-calling
    rows (all task rows when there are none), drawn with replacement from ``rng``."""
    n_task = batch_size if not fc_rows else round(batch_size * task_fraction)
    if not task_rows:
        n_task = 0
    out = [task_rows[rng.randrange(len(task_rows))] for _ in range(n_task)]
    out += [fc_rows[rng.randrange(len(fc_rows))] for _ in range(batch_size - n_task)]
    return out


def sft_loss_sum(model, rows: list, pad_id: int) -> tuple[torch.Tensor, int]:
    """Summed next-token cross-entropy over the assistant tokens of ``rows``.

    Args:
        rows: ``(ids, mask)`` pairs, right-padded here to the longest (B, T).
    Returns:
        ``(loss_sum, n_tokens)``: the scalar sum of -log p over mask-1 target tokens (grad flows)
        and how many there were.
    """
    ids, att, lmask = pad_rows(rows, pad_id)
    m = lmask[:, 1:] > 0
    hidden = model.model(input_ids=ids, attention_mask=att).last_hidden_state[:, :-1]  # (B, T-1, H)
    logits = model.lm_head(hidden[m]).float()  # (N, V): only the positions that carry loss
    logp = torch.log_softmax(logits, dim=-1).gather(-1, ids[:, 1:][m][:, None]).squeeze(-1)
    return -logp.sum(), int(m.sum())


def sft_step(model, optimizer, rows: list, pad_id: int) -> tuple[float, int, float]:
    """One SFT optimizer step on ``rows``: gradients of the token-mean loss summed over length-sorted
    micro-batches (:data:`MICRO_TOKENS` padded tokens each), clipped to norm 1.0, then ``optimizer.step()``.
    The learning rate is the caller's (set on ``optimizer.param_groups`` before).

    Args:
        rows: the batch's ``(ids, mask)`` pairs (:func:`batch_rows`).
    Returns:
        ``(loss_sum, n_tokens, grad_norm)``: summed -log p over the mask-1 target tokens (nats), their count,
        the gradient norm before clipping.
    """
    n_tok = sum(sum(m[1:]) for _, m in rows)
    optimizer.zero_grad(set_to_none=True)
    total = 0.0
    for group in micro_batches([len(ids) for ids, _ in rows], MICRO_TOKENS):
        loss_sum, _ = sft_loss_sum(model, [rows[i] for i in group], pad_id)
        (loss_sum / n_tok).backward()
        total += float(loss_sum.detach())
    gn = float(torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0))
    optimizer.step()
    return total, n_tok, gn


# --------------------------------------------------------------------------- training


def run_sft(cfg: KitConfig, run_dir: str | Path, progress: Callable[[dict], None] | None = None,
            evaluate: bool = True) -> dict[str, Any]:
    """Cold-start SFT of the policy in ``run_dir`` (resumes from its last checkpoint; a finished
    run with the same number of steps returns its ``summary.json`` without training).

    Args:
        cfg: the resolved config (``cfg.sft``, ``cfg.data``, ``cfg.model``, ``cfg.seed``).
        run_dir: the run directory; writes ``config.json``, ``metrics.jsonl`` (rows with
            ``stage="sft", step, global_step, loss, lr, tokens, grad_norm, time_s``),
            ``checkpoints/step_<n>/``, ``policy/`` and ``summary.json``.
        progress: called with each metrics row (and the final summary) for live curves.
        evaluate: run the held-out evaluation at the end (greedy, tool available).
    Returns:
        Summary dict: ``steps, final_loss, seconds, rows`` (counts from :func:`encode_rows`),
        ``policy_dir``, and with ``evaluate``: ``heldout_accuracy`` (greedy, tool available:
        the "tool-assisted accuracy"), ``heldout_tool_rate``, ``heldout_sampled_reward`` (T=1).
    Raises:
        ValueError: ``cfg.sft.steps`` is 0 (set the number of steps for the local engine).
        ImportError: a tracker of ``logging.backends`` is not installed (names the package).
    """
    if cfg.sft.steps <= 0:
        raise ValueError("sft.steps must be > 0 for the local engine (epochs are for the paper-scale path)")
    run_dir = Path(run_dir)
    done = common.finished_summary(run_dir, {"steps": cfg.sft.steps})
    if done is not None:  # a finished run is not trained again (delete summary.json to redo it)
        return done
    run_dir.mkdir(parents=True, exist_ok=True)
    save(cfg, run_dir)
    tracker = tracking.open_tracker(cfg, run_dir, "sft")  # [logging] backends; before the demos run
    threads = common.set_threads(cfg.model.torch_threads)  # adaptive when torch_threads < 0
    t_start = time.perf_counter()
    model, tok = build_tokenizer_and_model(cfg, run_dir)
    data = prepare_sft_data(cfg, run_dir)
    task_rows, fc_rows, counts = encode_rows(cfg, tok, data)
    sc = cfg.sft
    opt = common.make_optimizer(model, sc.lr)
    writer = common.MetricsWriter(run_dir)
    start = 0
    ckpt = common.latest_checkpoint(run_dir)
    if ckpt is not None:
        model, _ = load_policy(ckpt)
        model.train()
        opt = common.make_optimizer(model, sc.lr)
        state = common.load_trainer_state(ckpt)
        opt.load_state_dict(state["optimizer"])
        start = int(state["step"])
    # rows past the checkpoint (or all of them, without one) are from an interrupted run: redone
    writer.truncate(lambda r: not (r.get("stage") == "sft" and r.get("step", 0) > start))
    warmup = round(sc.warmup_ratio * sc.steps)
    loss_val = float("nan")
    for step in range(start, sc.steps):
        if threads is not None:
            threads.update()
        t0 = time.perf_counter()
        rng = random.Random(common.step_seed(cfg.seed, "sft", step))
        common.seed_everything(common.step_seed(cfg.seed, "sft-torch", step))
        rows = batch_rows(task_rows, fc_rows, sc.batch_size, sc.task_demo_fraction, rng)
        lr = common.lr_at(step, sc.lr, warmup, sc.steps, sc.schedule, sc.min_lr_ratio)
        for g in opt.param_groups:
            g["lr"] = lr
        total, n_tok, gn = sft_step(model, opt, rows, tok.pad_token_id)
        loss_val = total / max(n_tok, 1)
        row = {"stage": "sft", "step": step + 1, "global_step": step + 1, "loss": loss_val, "lr": lr,
               "tokens": n_tok, "grad_norm": gn, "time_s": time.perf_counter() - t0, "seed": cfg.seed,
               "threads": torch.get_num_threads()}
        writer.write(row)
        tracker.log_sft(row)
        if progress is not None:
            progress(row)
        done = step + 1
        if sc.checkpoint_every and done % sc.checkpoint_every == 0 and done < sc.steps:
            common.save_checkpoint(run_dir, done, model, tok, opt, {"stage": "sft"})
    tracker.finish()
    policy_dir = save_policy(model, tok, run_dir / "policy")
    summary: dict[str, Any] = {"steps": sc.steps, "final_loss": loss_val, "rows": counts,
                               "demo_statuses": data["statuses"], "policy_dir": str(policy_dir),
                               "train_seconds": time.perf_counter() - t_start}
    if evaluate:
        model.eval()
        split = tasks.task_split(cfg)
        summary.update(evaluate_policy(cfg, model, tok, list(split.heldout), seed=cfg.seed))
    summary["seconds"] = time.perf_counter() - t_start
    summary = jsonio.jsonable(summary)  # returned as written: an undefined value is None, as in the file
    jsonio.write_json(run_dir / "summary.json", summary)
    if progress is not None:
        progress({"stage": "sft", "summary": summary})
    return summary


def clean_config(cfg: KitConfig, run_dir: str | Path, *, preamble_max: int | None = None, steps: int = 0) -> KitConfig:
    """A *clean* cold start's config: ``cfg`` with ``data.demo_error_fraction = 0`` (no tool demo fails and is
    then fixed, so recovery after a failed call is not taught), ``data.demo_preamble_max = preamble_max`` when
    given and ``sft.steps = steps`` when not 0, run in ``run_dir``; every other key, the seed included, is
    ``cfg``'s. ReTool's emergence arm (issue #45, :mod:`kit.studies.retool.emergence`) and Agent-R's
    ``agent_r.cold_start = "clean"`` (issue #46) train from it."""
    data = dataclasses.replace(cfg.data, demo_error_fraction=0.0, demo_preamble_max=(
        cfg.data.demo_preamble_max if preamble_max is None else preamble_max))
    return dataclasses.replace(cfg, data=data, sft=dataclasses.replace(cfg.sft, steps=steps or cfg.sft.steps),
                               run_dir=str(run_dir))


def refuse_other_config(folder: str | Path, cfg: KitConfig, ignore: tuple[str, ...] = ()) -> None:
    """Refuse to reuse what ``folder`` holds when its ``config.json`` differs from ``cfg`` in a section other
    than ``run_dir``, ``logging`` and ``ignore`` (nothing to check when there is no ``config.json``).

    Raises:
        ValueError: names the folder and the differing sections, and says to delete the folder.
    """
    stored = Path(folder) / "config.json"
    if not stored.exists():
        return
    before, now = json.loads(stored.read_text()), json.loads(json.dumps(cfg.to_dict()))
    skip = {"run_dir", "logging", *ignore}
    differ = sorted(k for k in now if k not in skip and before.get(k) != now.get(k))
    if differ:
        raise ValueError(f"{folder} was trained with another config (differs in: {', '.join(differ)}); "
                         "delete that folder to train it again with this one")


def mix_fraction(eta: float) -> float:
    """Share of a batch drawn from the general data so that its weight relative to the main rows is ``eta``:
    ``eta / (1 + eta)`` (0.2 -> 1/6; Agent-R's mix, issue #34)."""
    return eta / (1.0 + eta)


def main_per_batch(batch_size: int, mix: float) -> int:
    """Main rows in a batch of ``batch_size`` whose share ``mix`` is general data (as :func:`batch_rows` draws)."""
    return round(batch_size * (1.0 - mix))


def pass_steps(n_rows: int, passes: float, batch_size: int, mix_fraction: float, cap: int) -> int:
    """Optimizer steps for ``passes`` passes over ``n_rows`` main rows when a share ``mix_fraction`` of each
    ``batch_size`` batch is general data (:func:`fit_rows`): ``ceil(passes * n_rows / main rows a batch)``, at
    least 1 and at most ``cap``; ``cap`` when ``passes`` is 0; 0 without rows (Agent-R's iterations, issue #46)."""
    if n_rows == 0:
        return 0
    if passes == 0:
        return cap
    per_batch = max(1, main_per_batch(batch_size, mix_fraction))
    return max(1, min(cap, math.ceil(passes * n_rows / per_batch)))


def warmup_length(steps: int, ratio: float, at_least: int = 0) -> int:
    """Warm-up steps of a ``steps``-step fine-tune: ``max(round(ratio * steps), at_least)``. It may exceed
    ``steps``: the run then ends inside its warm-up, below the peak learning rate (issue #46)."""
    return max(round(ratio * steps), at_least)


def fit_rows(model, tokenizer, rows: list, mix_rows: list, *, steps: int, batch_size: int, mix_fraction: float,
             lr: float, seed: int, tag: str = "fit", warmup_ratio: float = 0.0, schedule: str = "constant",
             min_lr_ratio: float = 0.1, warmup_steps: int = 0,
             progress: Callable[[dict], None] | None = None) -> list[dict[str, Any]]:
    """Fine-tune ``model`` in place on ``(ids, mask)`` rows with the cold-start trainer's step
    (:func:`batch_rows`, :func:`sft_loss_sum`, micro-batches, AdamW, clip 1.0): loss only where the
    mask is 1, so a caller's mask decides what is imitated (Agent-R's revision rows: nothing
    before the revision signal; issue #34).

    Args:
        rows: the main rows (revision and good trajectories), ``(ids, mask)`` each.
        mix_rows: general rows mixed into every batch (the cold-start data), a share ``mix_fraction``
            of each batch (``round(batch_size * (1 - mix_fraction))`` main rows).
        steps, batch_size, lr: the optimisation; a fresh optimizer (Agent-R trains each iteration anew).
        warmup_ratio, warmup_steps: a linear warm-up over ``max(round(warmup_ratio * steps), warmup_steps)``
            steps (:func:`warmup_length`), then ``schedule`` down to ``min_lr_ratio * lr``.
        seed: rows of step ``s`` are drawn from ``step_seed(seed, tag, s)``.
    Returns:
        One metrics row per step: ``step, loss, lr, tokens, grad_norm, time_s``.
    Raises:
        ValueError: no rows at all, or ``steps < 1``.
    """
    if steps < 1 or not (rows or mix_rows):
        raise ValueError(f"fit_rows: need steps >= 1 and some rows, got {steps} steps, {len(rows)}+{len(mix_rows)} rows")
    model.train()
    opt = common.make_optimizer(model, lr)
    warmup = warmup_length(steps, warmup_ratio, warmup_steps)
    out = []
    for step in range(steps):
        t0 = time.perf_counter()
        rng = random.Random(common.step_seed(seed, tag, step))
        common.seed_everything(common.step_seed(seed, tag + "-torch", step))
        batch = batch_rows(rows, mix_rows, batch_size, 1.0 - mix_fraction, rng) if rows else \
            batch_rows(mix_rows, [], batch_size, 1.0, rng)
        cur = common.lr_at(step, lr, warmup, steps, schedule, min_lr_ratio)
        for g in opt.param_groups:
            g["lr"] = cur
        n_tok = sum(sum(m[1:]) for _, m in batch)
        opt.zero_grad(set_to_none=True)
        total = 0.0
        for group in micro_batches([len(ids) for ids, _ in batch], MICRO_TOKENS):
            loss_sum, _ = sft_loss_sum(model, [batch[i] for i in group], tokenizer.pad_token_id)
            (loss_sum / max(n_tok, 1)).backward()
            total += float(loss_sum.detach())
        gn = float(torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0))
        opt.step()
        row = {"step": step + 1, "loss": total / max(n_tok, 1), "lr": cur, "tokens": n_tok, "grad_norm": gn,
               "time_s": time.perf_counter() - t0}
        out.append(row)
        if progress is not None:
            progress(row)
    model.eval()
    return out
