"""Cost of GRPO-RoC's pure functions at the paper's batch size, and what RoC does to a synthetic batch.

1. ``roc_step`` (scores, selection, metrics) on P = 512 prompts x 2G = 32 rollouts
   (N = 16,384 rows), both modes: milliseconds per call, i.e. the trainer-side cost of one RL
   step's down-sampling (the VERL hook adds TransferQueue reads around it).
2. ``group_advantage`` + ``policy_loss`` (forward and backward) on B = P*G kept rows x T tokens:
   milliseconds on this CPU, against VERL 0.9.1 ``compute_grpo_outcome_advantage`` (a Python
   loop over rows) and ``compute_policy_loss_vanilla`` on the same inputs.
3. Effect on a synthetic batch whose correct rollouts have random tool-error counts: tool-error
   ratio among correct rollouts and mean p_format before/after selection, per mode. These are
   properties of the synthetic distribution below, not paper figures (report Figure 5 shows the
   same quantity on real rollouts).

Usage: ``.venv/bin/python benchmarks/roc_bench.py [--prompts 512] [--group 16] [--tokens 1024]``
Last line: ``name=roc_bench``.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch

from kit.algo import RocParams, group_advantage, policy_loss, roc_step


def synthetic(P: int, n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    acc = rng.beta(1.2, 1.5, P)  # per-prompt solve rate
    rewards = (rng.random((P, n)) < acc[:, None]).astype(float).reshape(-1)
    calls = rng.poisson(2.0, P * n)
    fails = rng.binomial(calls, 0.3)
    infra = np.zeros_like(calls)
    tags = rng.choice([0, 1, 1, 1, 2, 3], P * n)
    turns = calls + 1
    gids = np.repeat(np.arange(P), n)
    return rewards, gids, {"tool_calls": calls, "tool_failures": fails, "infra_errors": infra,
                           "answer_tags": tags, "turns": turns}


def best_ms(fn, repeat: int = 5) -> float:
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best * 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--prompts", type=int, default=512)
    ap.add_argument("--group", type=int, default=16)
    ap.add_argument("--tokens", type=int, default=1024)
    a = ap.parse_args()
    torch.set_num_threads(1)
    P, G = a.prompts, a.group
    rewards, gids, counts = synthetic(P, 2 * G)
    print(f"# 1. roc_step on P={P} x 2G={2 * G} = {rewards.size} rows")
    for mode in ("sample", "rank"):
        params = RocParams(group_size=G, mode=mode)
        ms = best_ms(lambda params=params: roc_step(rewards, gids, counts, params, seed=0))
        print(f"roc_step mode={mode}: {ms:.1f} ms")

    print(f"# 2. advantage + loss on B={P * G} x T={a.tokens} (fwd+bwd, 1 thread)")
    B, T = P * G, a.tokens
    gen = torch.Generator().manual_seed(0)
    r = torch.randint(0, 2, (B,), generator=gen).float()
    idx = np.repeat(np.arange(P), G)
    old = -torch.rand(B, T, generator=gen)
    new = (old + 0.1 * torch.randn(B, T, generator=gen)).requires_grad_(True)
    mask = (torch.rand(B, T, generator=gen) > 0.2).float()
    print(f"group_advantage (kit, vectorised): {best_ms(lambda: group_advantage(r, idx)):.1f} ms")

    def kit_loss():
        loss, _ = policy_loss(new, old, group_advantage(r, idx), mask)
        loss.backward()

    print(f"policy_loss fwd+bwd (kit): {best_ms(kit_loss, 3):.1f} ms")
    from verl.trainer.ppo import core_algos
    from verl.workers.config import ActorConfig

    token_r = torch.zeros(B, T)
    token_r[:, -1] = r
    uids = np.array([str(i) for i in idx], dtype=object)
    ms = best_ms(lambda: core_algos.compute_grpo_outcome_advantage(token_r, mask, uids), 2)
    print(f"compute_grpo_outcome_advantage (VERL 0.9.1): {ms:.1f} ms")
    cfg = ActorConfig(strategy="fsdp", rollout_n=G, ppo_micro_batch_size_per_gpu=1, clip_ratio_low=0.2,
                      clip_ratio_high=0.28)
    adv = group_advantage(r, idx).unsqueeze(-1).expand(B, T)

    def verl_loss():
        loss, _ = core_algos.compute_policy_loss_vanilla(old, new, adv, mask, config=cfg)
        loss.backward()

    print(f"compute_policy_loss_vanilla fwd+bwd (VERL 0.9.1): {best_ms(verl_loss, 3):.1f} ms")

    print("# 3. selection effect on the synthetic batch (30% of calls fail at random)")
    for mode in ("sample", "rank"):
        _, m = roc_step(rewards, gids, counts, RocParams(group_size=G, mode=mode), seed=0)
        print(f"mode={mode}: tool_error_ratio_correct {m['tool_error_ratio_correct_before']:.3f} -> "
              f"{m['tool_error_ratio_correct_after']:.3f}; p_format {m['p_format_mean_before']:.3f} -> "
              f"{m['p_format_mean']:.3f}; kept {int(m['kept'])} of {int(m['sampled'])} "
              f"({int(m['groups_dropped_equal_reward'])} equal-reward groups dropped)")
    print("name=roc_bench")


if __name__ == "__main__":
    main()
