"""What stacking the RoC ablation's K arms buys at the tiny profile's shapes (issue #35 part 1).

Usage::

    .venv/bin/python benchmarks/stacked_arms.py [--arms 10] [--rows 8,36,64,36/18] [--cache 200]
        [--update-rows 48] [--update-tokens 300] [--threads 1] [--rounds 5] [--policy <run>/sft/policy]

Times, in one run and interleaved round by round (CPU seconds of this process, the median over
the rounds), the two model computations an ablation arm repeats, for K arms apart (what the
ablation's worker processes run today) and stacked (:class:`kit.models.stacked.StackedQwen3`:
every linear one ``bmm`` over the arm axis, every norm one broadcast, attention one SDPA):

* the rollout's decode forward (one token per row after a ``--cache``-column KV cache): K calls of
  :class:`kit.models.decode.Qwen3DecodeStep` against one :meth:`StackedQwen3.decode`; a case
  ``a/b`` gives half the arms ``a`` rows and half ``b``, which the stacked forward pads to ``a``
  (``bmm`` needs equal row counts, as a lockstep engine over the arms would);
* the update's forward + backward (``--update-rows`` rows of ``--update-tokens`` tokens per arm,
  loss on the second half): K calls of :func:`kit.train.update.token_logprobs` on transformers'
  forward (the one-arm path) and K single-arm lean forwards (``StackedQwen3`` with K = 1, which
  separates the lean forward's gain from stacking's) against one stacked forward + backward; and
  K AdamW steps against one over the stacked weights;

with the largest difference of the stacked results from the separate ones (logits, log-probs,
gradients). With ``--policy`` it also times one arm's worker process as
:func:`kit.train.ablation._run_arms` starts it (1 and 3 steps, twice each): CPU per step, the
fixed CPU of a process per arm, and how much of that is imports and start-up alone.

Ratios are separate / stacked (above 1: stacking saves); the ratios line is
``decode_ratio=<36 rows> update_ratio=<x> update_lean_ratio=<y> adamw_ratio=<z>``, then with
``--policy`` ``arm_step_cpu_s=<s> arm_fixed_cpu_s=<f> arm_startup_cpu_s=<i>``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402
from transformers import Qwen3ForCausalLM  # noqa: E402

from kit.config import load, save  # noqa: E402
from kit.models.decode import Qwen3DecodeStep  # noqa: E402
from kit.models.stacked import StackedQwen3  # noqa: E402
from kit.models.tiny import tiny_qwen3_config  # noqa: E402
from kit.plan import ablation_arms  # noqa: E402
from kit.rollout.kv_cache import BufferLayer, use_gqa_attention  # noqa: E402
from kit.train.update import token_logprobs  # noqa: E402

VOCAB = 1030  # the tiny tokenizer's length (1024 + added tokens)


def models(K: int) -> list[Qwen3ForCausalLM]:
    """K randomly initialised tiny policies (different weights, the tiny profile's shapes)."""
    cfg = load("tiny")
    out = []
    for k in range(K):
        torch.manual_seed(k)
        m = Qwen3ForCausalLM(tiny_qwen3_config(cfg.model, VOCAB, 0, [1, 2])).eval()
        use_gqa_attention(m)
        out.append(m)
    return out


def cpu(fn, n: int = 1) -> float:
    """CPU seconds of ``n`` calls of ``fn`` (this process, all threads)."""
    c0 = time.process_time()
    for _ in range(n):
        fn()
    return (time.process_time() - c0) / n


class DecodeCase:
    """One decode step of every arm after an ``L``-column cache. ``rows[a]`` rows in arm ``a``: the
    separate forwards run each arm's own rows, the stacked one pads every arm to the most (a
    lockstep engine over arms would, since ``bmm`` needs equal row counts)."""

    def __init__(self, ms, rows: list[int], L: int):
        K, c, B = len(ms), ms[0].config, max(rows)
        g = torch.Generator().manual_seed(0)
        kvh, D = c.num_key_value_heads, c.head_dim
        self.steps = [Qwen3DecodeStep(m) for m in ms]
        self.stacked = StackedQwen3(ms)
        self.ids = torch.randint(0, VOCAB, (K, B, 1), generator=g)
        self.pos = torch.full((K, B, 1), L)
        self.mask = torch.ones((K, B, L + 1), dtype=torch.long)
        self.mask[:, ::3, : L // 4] = 0  # some left padding, as the engine's rows have
        kv = [(torch.randn(K * B, kvh, L, D, generator=g), torch.randn(K * B, kvh, L, D, generator=g))
              for _ in range(c.num_hidden_layers)]
        self.sep_layers = [[BufferLayer.around(k[a * B:a * B + rows[a]], v[a * B:a * B + rows[a]]) for k, v in kv]
                           for a in range(K)]
        self.st_layers = [BufferLayer.around(k, v) for k, v in kv]
        self.L, self.K, self.rows = L, K, rows

    def _reset(self, layers):
        for layer in layers:  # drop the column the last call appended
            layer.length = self.L
            layer.keys, layer.values = layer.kbuf[:, :, :self.L], layer.vbuf[:, :, :self.L]

    def separate(self) -> list[torch.Tensor]:
        out = []
        with torch.inference_mode():
            for a, step in enumerate(self.steps):
                self._reset(self.sep_layers[a])
                b = self.rows[a]
                out.append(step(self.ids[a, :b], self.pos[a, :b], self.mask[a, :b], self.sep_layers[a]))
        return out

    def together(self) -> torch.Tensor:
        with torch.inference_mode():
            self._reset(self.st_layers)
            return self.stacked.decode(self.ids, self.pos, self.mask, self.st_layers)

    def difference(self) -> tuple[float, bool]:
        """Largest |stacked - separate| logit over the arms' real rows, and whether all are bitwise equal."""
        sep, st = self.separate(), self.together()
        d = [(st[a, :len(x)] - x).abs().max() for a, x in enumerate(sep)]
        return float(max(d)), all(torch.equal(st[a, :len(x)], x) for a, x in enumerate(sep))


class UpdateCase:
    """The update's forward + backward of every arm: right-padded rows, loss on the second half."""

    def __init__(self, ms, B: int, T: int):
        K = len(ms)
        g = torch.Generator().manual_seed(1)
        self.ms = ms
        self.ids = torch.randint(0, VOCAB, (K, B, T), generator=g)
        lens = torch.randint(T // 2, T + 1, (K, B), generator=g)
        self.att = (torch.arange(T)[None, None] < lens[..., None]).long()
        self.msk = ((torch.arange(T)[None, None] >= T // 2) & self.att.bool()).float()
        self.n = self.msk.reshape(K, -1).sum(1)
        stacked = StackedQwen3(ms)
        self.params = {k: v.clone().requires_grad_(True) for k, v in stacked.params.items()}
        self.stacked = StackedQwen3(ms, self.params)
        self.lean = [StackedQwen3([m], {k: v[a:a + 1].detach().clone().requires_grad_(True)
                                        for k, v in stacked.params.items()}) for a, m in enumerate(ms)]
        self.opts = [torch.optim.AdamW(m.parameters(), lr=1e-4, weight_decay=0.0) for m in ms]
        self.st_opt = torch.optim.AdamW(self.params.values(), lr=1e-4, weight_decay=0.0)
        for m in ms:
            m.train()

    def separate(self) -> list[torch.Tensor]:
        lps = []
        for a, m in enumerate(self.ms):
            m.zero_grad(set_to_none=True)
            lp = token_logprobs(m, self.ids[a], self.att[a], self.msk[a])
            (-(lp * self.msk[a]).sum() / self.n[a]).backward()
            lps.append(lp.detach())
        return lps

    def separate_lean(self) -> None:
        for a, s in enumerate(self.lean):
            for p in s.params.values():
                p.grad = None
            lp = s.token_logprobs(self.ids[a:a + 1], self.att[a:a + 1], self.msk[a:a + 1])
            (-(lp * self.msk[a:a + 1]).sum() / self.n[a]).backward()

    def together(self) -> torch.Tensor:
        for p in self.params.values():
            p.grad = None
        lp = self.stacked.token_logprobs(self.ids, self.att, self.msk)
        (-((lp * self.msk).reshape(len(self.ms), -1).sum(1) / self.n).sum()).backward()
        return lp.detach()

    def adamw_separate(self) -> None:
        for o in self.opts:
            o.step()

    def adamw_together(self) -> None:
        self.st_opt.step()


#: what kit.train.ablation._run_arms runs in each worker process (one per arm)
ARM_WORKER = "import sys; from kit.train.ablation import _arm_cli; _arm_cli(sys.argv[1:])"


def arm_process_cpu(policy: Path, out: Path, algorithm: str, steps: int) -> tuple[float, float]:
    """CPU seconds of one ablation arm's worker process tree (as ``_run_arms`` starts it, 1 thread,
    sandbox and verifier children included) training ``steps`` steps from ``policy``, and the
    in-step CPU seconds its metrics rows count (``time_cpu_generate_s + time_cpu_update_s``)."""
    cfg = load("tiny", {"ablation.steps": steps, "ablation.seeds": [0]})
    arm = next(a for a in ablation_arms(cfg, out / f"steps{steps}") if a.algorithm.label == algorithm)
    rd = Path(arm.run_dir)
    shutil.rmtree(rd, ignore_errors=True)
    rd.mkdir(parents=True)
    save(dataclasses.replace(arm, model=dataclasses.replace(arm.model, torch_threads=1)), rd)
    return _child_cpu([sys.executable, "-c", ARM_WORKER, str(rd), str(policy)]), sum(
        r["time_cpu_generate_s"] + r["time_cpu_update_s"] for r in map(json.loads, (rd / "metrics.jsonl").read_text().splitlines()))


def _child_cpu(cmd: list[str]) -> float:
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)


def process_costs(policy: Path, algorithm: str) -> None:
    """What one process per arm costs beyond the arm's steps: an arm worker at 1 and at 3 steps
    (twice each, alternating) gives the CPU per step and the fixed CPU per process; the worker on an
    arm already finished (it returns at once) gives the part that is imports and start-up alone."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        res: dict[int, list[tuple[float, float]]] = {1: [], 3: []}
        for steps in (1, 3, 1, 3):
            res[steps].append(arm_process_cpu(policy, out, algorithm, steps))
        finished = [_child_cpu([sys.executable, "-c", ARM_WORKER, str(out / "steps1" / f"{algorithm}_seed0"), str(policy)])
                    for _ in range(2)]
    per_step = [(b[0] - a[0]) / 2 for a, b in zip(res[1], res[3], strict=True)]
    fixed = [a[0] - p for a, p in zip(res[1], per_step, strict=True)]
    in_step = [(b[1] - a[1]) / 2 for a, b in zip(res[1], res[3], strict=True)]
    print(f"  {algorithm} arm worker, 1 thread: {statistics.mean(per_step):.2f} CPU s a step (process tree; "
          f"{statistics.mean(in_step):.2f} of it counted by the rows' time_cpu_*), {statistics.mean(fixed):.2f} CPU s "
          f"fixed per process, of which imports and start-up {statistics.mean(finished):.2f}")
    print(f"arm_step_cpu_s={statistics.mean(per_step):.2f} arm_fixed_cpu_s={statistics.mean(fixed):.2f} "
          f"arm_startup_cpu_s={statistics.mean(finished):.2f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--arms", type=int, default=10)
    ap.add_argument("--rows", default="8,36,64,36/18", help="decode rows per arm, comma-separated cases; 'a/b': half "
                    "the arms at a rows, half at b (the ablation's GRPO-RoC arms average 36 rows a forward, GRPO's fewer)")
    ap.add_argument("--cache", type=int, default=200, help="KV cache columns of the decode step")
    ap.add_argument("--update-rows", type=int, default=48, help="kept rows per arm (P x G)")
    ap.add_argument("--update-tokens", type=int, default=300, help="padded row length of the update")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (the ablation's arms run 1 each)")
    ap.add_argument("--rounds", type=int, default=5, help="decode rounds (each --decode-calls calls per variant)")
    ap.add_argument("--update-rounds", type=int, default=2, help="update rounds (one call per variant)")
    ap.add_argument("--decode-calls", type=int, default=50, help="decode calls per round and variant")
    ap.add_argument("--policy", type=Path, help="an SFT policy folder: also time one arm's worker process "
                    "(steps and fixed cost per process; ~2 minutes)")
    ap.add_argument("--algorithm", default="grpo_roc", help="the arm --policy times")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    ms = models(args.arms)
    K, n = args.arms, args.decode_calls
    rows = args.rows.split(",")
    print(f"K={K} arms, {args.threads} thread(s); CPU ms, median over rounds, interleaved")
    dec_ratio = {}
    for spec in rows:
        per_arm = [int(r) for r in spec.split("/")]
        per_arm = [per_arm[a * len(per_arm) // K] for a in range(K)]  # "36/18": half the arms at 36, half at 18
        dec = DecodeCase(ms, per_arm, args.cache)
        diff, bitwise = dec.difference()
        t = {"sep": [], "st": []}
        for _ in range(args.rounds):
            t["sep"].append(cpu(dec.separate, n))
            t["st"].append(cpu(dec.together, n))
        sep, st = statistics.median(t["sep"]), statistics.median(t["st"])
        dec_ratio[spec] = sep / st
        print(f"  decode step, {spec} rows x {args.cache} cols per arm: separate {1e3 * sep / K:.2f} per arm, "
              f"stacked {1e3 * st / K:.2f} per arm, ratio {sep / st:.2f}; "
              f"max |stacked - separate| logit {diff:.3g} (bitwise: {bitwise})")

    upd = UpdateCase(ms, args.update_rows, args.update_tokens)
    lp_sep = upd.separate()
    grads_sep = {n: torch.stack([dict(m.named_parameters())[n].grad for m in ms]) for n in upd.params}
    lp_st = upd.together()
    lp_diff = max(float((lp_st[a] - lp_sep[a]).abs().max()) for a in range(K))
    g_diff = max(float((upd.params[n].grad - grads_sep[n]).abs().max()) for n in upd.params)
    g_max = max(float(g.abs().max()) for g in grads_sep.values())
    t = {k: [] for k in ("upd_sep", "upd_lean", "upd_st", "adam_sep", "adam_st")}
    for _ in range(args.update_rounds):
        t["upd_sep"].append(cpu(upd.separate))
        t["upd_lean"].append(cpu(upd.separate_lean))
        t["upd_st"].append(cpu(upd.together))
        t["adam_sep"].append(cpu(upd.adamw_separate, 5))
        t["adam_st"].append(cpu(upd.adamw_together, 5))
    med = {k: statistics.median(v) for k, v in t.items()}
    print(f"  update fwd+bwd, {args.update_rows} rows x {args.update_tokens} tokens per arm: separate (transformers) "
          f"{1e3 * med['upd_sep'] / K:.1f} per arm, separate lean {1e3 * med['upd_lean'] / K:.1f}, "
          f"stacked {1e3 * med['upd_st'] / K:.1f}; max |stacked - separate| log-prob {lp_diff:.3g}, "
          f"gradient {g_diff:.3g} (largest gradient {g_max:.3g})")
    print(f"  AdamW step: separate {1e3 * med['adam_sep'] / K:.2f} per arm, stacked {1e3 * med['adam_st'] / K:.2f}")
    mid = "36" if "36" in dec_ratio else rows[0]
    print(f"decode_ratio={dec_ratio[mid]:.2f} update_ratio={med['upd_sep'] / med['upd_st']:.2f} "
          f"update_lean_ratio={med['upd_lean'] / med['upd_st']:.2f} adamw_ratio={med['adam_sep'] / med['adam_st']:.2f}")
    if args.policy is not None:
        process_costs(args.policy, args.algorithm)

if __name__ == "__main__":
    main()
