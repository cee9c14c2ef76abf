"""Test doubles shared across test folders: tool-call text, a tiny tokenizer corpus, a fake sandbox,
an in-memory TransferQueue (importable from every test module: tests/conftest.py puts this folder
on the path)."""

from __future__ import annotations

import importlib
import importlib.util
import json
import socket
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from kit import prompts

TOOL = prompts.TOOL_NAME


def call(code: str, stdin: str = "", name: str = TOOL) -> str:
    """A well-formed tool call as the model writes it."""
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": {"code": code, "input": stdin}}) + "\n</tool_call>"


def corpus():
    out = []
    for a in range(40):
        out.append(prompts.render_prompt(f"What is {a} * {a + 7}?") + " compute it " + call(f"print({a}*{a + 7})")
                   + prompts.IM_END + prompts.feedback_block([str(a * (a + 7)), "Traceback (most recent call last):"])
                   + f"so</reason> <answer> \\boxed{{{a * (a + 7)}}} </answer>" + prompts.IM_END)
    return out


@dataclass
class Res:
    """Stand-in for kit.sandbox.ToolResult (same fields)."""

    status: str
    stdout: str = ""
    stderr: str = ""
    value: str = ""
    exit_code: int | None = 0
    wall_s: float = 0.01


class FakeExecutor:
    """Answers calls by a function of (code, input); records every batch."""

    def __init__(self, fn=None):
        self.fn = fn or (lambda code, stdin: Res("ok", stdout="42\n"))
        self.batches: list[list[tuple[str, str]]] = []

    async def run_batch(self, calls):
        calls = [(c.code, c.input) if hasattr(c, "code") else (c[0], c[1]) for c in calls]  # ToolCall or pair
        self.batches.append(calls)
        return [self.fn(code, stdin) for code, stdin in calls]


def pair(code, stdin):
    return (code, stdin)


def port_refused(port: int, host: str = "127.0.0.1") -> bool:
    """Whether nothing listens on ``host:port`` any more (a stopped server's port)."""
    try:
        socket.create_connection((host, port), timeout=2).close()
    except ConnectionRefusedError:
        return True
    return False


def load_benchmark(name: str) -> ModuleType:
    """``benchmarks/<name>.py`` imported as a module (the benchmarks folder is not a package)."""
    path = Path(__file__).resolve().parents[1] / "benchmarks" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


#: Modules that call TransferQueue through a module-level ``tq`` (VERL's v1 replay buffer, the kit's buffers).
TQ_USERS = ("verl.trainer.ppo.v1.replay_buffer", "kit.bridge.sampler")  # roc_hook clears through sampler


class FakeTQ:
    """In-memory stand-in for the TransferQueue calls the v1 replay buffers make (kv_list, kv_batch_get,
    kv_clear), returning VERL's real container types; TransferQueue itself needs a Ray cluster (and
    hangs on 2-CPU nodes, verl #7656)."""

    def __init__(self):
        self.tags: dict[str, dict] = {"train": {}, "val": {}}
        self.values: dict[str, dict] = {"train": {}, "val": {}}
        self.refills = 0

    def install(self, monkeypatch) -> FakeTQ:
        """Serve the ``tq`` calls of every module in :data:`TQ_USERS`; returns self."""
        for name in TQ_USERS:
            monkeypatch.setattr(importlib.import_module(name), "tq", self)
        return self

    def add_group(self, rows, step=0, partition="train"):
        """One finished prompt group: ``rows`` of dicts with ``uid``, ``session``, ``score``, ``extra``,
        ``responses`` and optionally ``index`` (the output's number within its session), ``prompts``,
        ``response_mask`` and ``rollout_log_probs``."""
        uid = rows[0]["uid"]
        self.tags[partition][uid] = {"is_prompt": True, "status": "finished", "global_steps": step}
        for r in rows:
            key = f"{uid}_{r['session']}_{r.get('index', 0)}"
            self.tags[partition][key] = {"status": "success", "seq_len": 10, "global_steps": step}
            self.values[partition][key] = {"rm_scores": r["score"], "extra_fields": r["extra"],
                                           "responses": r["responses"],
                                           # the rollout records' fields (kit.bridge.verl_records), when given
                                           **{f: r[f] for f in ("prompts", "response_mask", "rollout_log_probs")
                                              if f in r}}

    def kv_list(self, partition_id=None):
        return {p: dict(t) for p, t in self.tags.items() if partition_id in (None, p)}

    def kv_batch_get(self, keys, partition_id, select_fields=None):
        # VERL's container builder: only the tests that drive a v1 buffer (and so have VERL) get here
        from verl.utils.tensordict_utils import list_of_dict_to_tensordict

        return list_of_dict_to_tensordict([{f: self.values[partition_id][k][f] for f in select_fields} for k in keys])

    def kv_clear(self, keys, partition_id):
        for k in keys:
            self.tags[partition_id].pop(k, None)
            self.values[partition_id].pop(k, None)


async def scripted_step(tok):
    """One small RL step's rollouts for the record and explorer tests: 2 prompts x 4 trajectories.

    Group 0: correct with an ok call, correct after a failing call (``1/0``), wrong without a
    call, truncated (budget 12 tokens); group 1: four wrong answers (zero reward spread).
    Returns ``(trajectories (8,), rewards (8,), group ids (8,), problem ids (8,))``.
    """
    # imported here, not at the top: most tests that import doubles need no rollout
    from kit.config import RolloutConfig
    from kit.rollout import ScriptedBackend, run_trajectory

    ex = FakeExecutor(lambda code, stdin: Res("error", stderr="ZeroDivisionError: division by zero", exit_code=1)
                      if code == "1/0" else Res("ok", stdout="42\n"))
    cfg = RolloutConfig(max_prompt_tokens=256, max_response_tokens=400, max_turns=4)
    right, wrong = "so</reason> <answer> \\boxed{42} </answer>", "so</reason> <answer> \\boxed{41} </answer>"
    scripts = [(["compute " + call("print(6*7)"), right], 400), ([call("1/0"), call("print(6*7)"), right], 400),
               ([wrong], 400), (["compute it, " * 30], 12)] + [([wrong], 400)] * 4
    trs = [await run_trajectory(ScriptedBackend(tok, s), tok, "What is 6 * 7?", ex, cfg, call_factory=pair,
                                max_response_tokens=b) for s, b in scripts]
    rewards = [1.0, 1.0, 0.0, 0.0] + [0.0] * 4
    return trs, rewards, ["g0"] * 4 + ["g1"] * 4, ["p0"] * 4 + ["p1"] * 4


def fit_masked(model, ids, mask, steps: int, lr: float = 3e-3):
    """Overfit ``model`` on token rows ``ids`` [B, T] with loss where ``mask`` [B, T] is 1 (AdamW at
    ``lr``, ``steps`` full-batch steps, token-mean NLL); returns ``(model in eval mode, last loss)``."""
    import torch

    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    model.train()
    for _ in range(steps):
        logits = model(ids).logits[:, :-1]
        nll = torch.nn.functional.cross_entropy(logits.transpose(1, 2), ids[:, 1:], reduction="none")
        loss = (nll * mask[:, 1:]).sum() / mask[:, 1:].sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
    return model.eval(), loss.item()


def fit_tool_use(tok, steps: int = 55):
    """The tiny profile's model fitted to three trajectories (a call, its output, the boxed answer):
    sampled at T = 1 it calls the tool, fails some calls, answers right and wrong (seed 0)."""
    import torch

    from kit.config import load
    from kit.models import build_tiny_model

    torch.manual_seed(0)
    model = build_tiny_model(load("tiny", write=False).model, tok, seed=0)
    enc = lambda s: tok.encode(s, add_special_tokens=False)  # noqa: E731
    rows = []
    for a in (12, 13, 14):
        p = enc(prompts.render_prompt(f"What is {a} * {a + 7}?"))
        t1 = enc("use python " + call(f"print({a}*{a + 7})") + prompts.IM_END)
        fb = enc(prompts.feedback_block([str(a * (a + 7))]))
        t2 = enc(f"so</reason> <answer> \\boxed{{{a * (a + 7)}}} </answer>" + prompts.IM_END)
        rows.append((p + t1 + fb + t2, [0] * len(p) + [1] * len(t1) + [0] * len(fb) + [1] * len(t2)))
    L = max(len(r[0]) for r in rows)
    ids = torch.tensor([r[0] + [0] * (L - len(r[0])) for r in rows])
    mask = torch.tensor([r[1] + [0] * (L - len(r[1])) for r in rows])
    return fit_masked(model, ids, mask, steps)[0]


def sft_rows(vocab: int, n: int = 48, seed: int = 3) -> list[tuple[list[int], list[int]]]:
    """``n`` random SFT rows shaped like the tiny profile's batch: 60-384 token ids below ``vocab``, the
    loss mask 0 over a prompt of 10 to length-10 tokens, then 1 (seeded)."""
    import random

    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        length = rng.randint(60, 384)
        ids = [rng.randrange(vocab) for _ in range(length)]
        k = rng.randint(10, length - 10)
        rows.append((ids, [0] * k + [1] * (length - k)))
    return rows


def write_notebook(path: Path, parameters: str, *cells: str) -> Path:
    """Write a notebook (the pipeline tests' throwaway notebooks: ``make_notebook`` in tests/pipeline/conftest.py) with a cell tagged ``parameters`` followed by ``cells`` (code)."""
    import nbformat

    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    p = nbformat.v4.new_code_cell(parameters)
    p.metadata["tags"] = ["parameters"]
    nb.cells = [nbformat.v4.new_markdown_cell(f"# {path.stem}"), p] + [nbformat.v4.new_code_cell(c) for c in cells]
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, path)
    return path
