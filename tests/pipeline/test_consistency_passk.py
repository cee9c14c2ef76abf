"""kit.chain.consistency_check and kit.chain.passk_boundary (notebook 08): real sandbox pool and
verifier, scripted or tiny-model backends, small real inputs."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from kit import chain, prompts
from kit.config import load
from kit.data.curate import CurationResult, write_curated
from kit.data.pools import Problem
from kit.models import build_tiny_model, save_policy, train_tokenizer


def _cfg(**over):
    return load("smoke", {"sandbox.num_workers": 1, "model.torch_threads": 1, **over}, write=False)


@pytest.fixture(scope="module")
def tok():
    cfg = _cfg()
    texts = [p.question for p in chain.heldout_problems(cfg)] + [f"Add {a} and {a}." for a in range(20)]
    corpus = [prompts.render_prompt(t) + f"</reason> <answer> \\boxed{{{i}}} </answer>" + prompts.IM_END
              for i, t in enumerate(texts)]
    return train_tokenizer(corpus, vocab_size=500)


def _counter_script(right):
    """Backend script: ``right(question, k) -> bool`` decides whether sample k of a question is right."""
    seen: dict[str, int] = {}

    def script(context):
        q = context.split("This is the problem:\n")[-1].split(prompts.IM_END)[0]
        k = seen[q] = seen.get(q, 0) + 1
        ok, answer = right(q, k)
        return f"done</reason> <answer> \\boxed{{{answer if ok else 999999}}} </answer>"

    return script


def test_consistency_check_keeps_consistent_labels_and_writes_files(tok, tmp_path):
    from kit.rollout import ScriptedBackend

    cfg = _cfg(**{"data.consistency_samples": 4, "rollout.max_prompt_tokens": 256})
    probs = [Problem("t", str(a), f"Add {a} and {a}.", str(2 * a)) for a in range(5)]
    probs.append(Problem("t", "bad", "Add 7 and 7.", "15"))  # wrong label: never matched
    probs.append(Problem("t", "long", "Add 1 and 1. " + "Think hard. " * 300, "2"))  # prompt over budget
    write_curated(tmp_path / "data", CurationResult(probs, {}))
    curated = tmp_path / "data" / "data" / "curated.parquet"

    def right(q, k):  # 2 of 4 samples right for "Add 3", 1 of 4 for "Add 4", all for the others
        a = int(q.split("Add ")[1].split(" ")[0])
        return (k <= {3: 2, 4: 1}.get(a, 4)), 2 * a

    out = chain.consistency_check(cfg, "scripted", curated, tmp_path / "eval", n_problems=0,
                                  backend=ScriptedBackend(tok, _counter_script(right)), tokenizer=tok)
    row = out.funnel.iloc[0]
    assert (row["prompt_too_long"], row["in"], row["inconsistent"], row["out"]) == (1, 6, 2, 4)
    rows = out.rows.set_index("uid")
    assert rows.loc["t/3", "matches"] == 2 and rows.loc["t/3", "kept"]
    assert rows.loc["t/4", "matches"] == 1 and not rows.loc["t/4", "kept"]
    assert rows.loc["t/bad", "matches"] == 0 and rows.loc["t/bad", "answered"] == 4
    assert sorted(p.uid for p in out.kept) == ["t/0", "t/1", "t/2", "t/3"]
    saved = json.loads(out.paths["json"].read_text())
    assert saved["n"] == 4 and saved["out"] == 4 and saved["pool_size"] == 7 and saved["kept"] == ["t/0", "t/1", "t/2", "t/3"]
    assert len(pd.read_parquet(out.paths["parquet"])) == 6
    # a sample size draws that many problems, seeded
    few = chain.consistency_check(cfg, "scripted", curated, tmp_path / "few", n_problems=2, n=2,
                                  backend=ScriptedBackend(tok, _counter_script(right)), tokenizer=tok)
    assert few.funnel.iloc[0]["in"] == 2 and len(few.rows) == 2


def test_consistency_check_errors(tok, tmp_path):
    with pytest.raises(FileNotFoundError, match="01_data_curation"):
        chain.consistency_check(_cfg(), "x", tmp_path / "none.parquet", tmp_path)
    with pytest.raises(ValueError, match="tokenizer"):
        chain.consistency_check(_cfg(), "x", tmp_path, tmp_path, backend=object())
    bad = tmp_path / "bad.parquet"
    pd.DataFrame({"question": ["q"]}).to_parquet(bad)
    with pytest.raises(ValueError, match="bad.parquet: not a curated parquet"):
        chain.consistency_check(_cfg(), "x", bad, tmp_path, backend=object(), tokenizer=tok)
    (tmp_path / "empty_policy").mkdir()
    with pytest.raises(FileNotFoundError, match="no config.json"):
        chain.load_run_policy(tmp_path / "empty_policy")


def test_passk_boundary_rejects_bad_labels_and_missing_policies_before_evaluating(tok, tmp_path):
    from kit.rollout import ScriptedBackend

    calls = []
    ok = ScriptedBackend(tok, lambda *a, **k: calls.append(1) or "x")
    with pytest.raises(ValueError, match="labels must differ"):
        chain.passk_boundary(_cfg(), {"RL": "a", "rl": "b"}, tmp_path, n=2, backends={"RL": (ok, tok), "rl": (ok, tok)})
    with pytest.raises(FileNotFoundError, match="'RL': no model at"):
        chain.passk_boundary(_cfg(), {"SFT": "s", "RL": tmp_path / "missing"}, tmp_path, n=2, backends={"SFT": (ok, tok)})
    assert calls == []  # nothing was sampled


def test_passk_boundary_curves_from_two_backends(tok, tmp_path):
    from kit.rollout import ScriptedBackend

    cfg = _cfg()
    answers = {p.question: p.answer for p in chain.heldout_problems(cfg)}
    _, items = chain.passk_items(cfg, "heldout", 3)
    order = [it.question for it in items]
    base = ScriptedBackend(tok, _counter_script(lambda q, k: (k == 1, answers[q])))  # 1 of 4 right
    rl = ScriptedBackend(tok, _counter_script(lambda q, k: (order.index(q) < 2, answers[q])))  # 2 of 3 always
    out = chain.passk_boundary(cfg, {"base": "b", "RL (stage 3)": "r"}, tmp_path, n_problems=3, n=4,
                               backends={"base": (base, tok), "RL (stage 3)": (rl, tok)})
    assert list(out.curves.index) == [1, 2, 3, 4] and list(out.curves.columns) == ["base", "RL (stage 3)"]
    assert out.curves["base"].tolist() == pytest.approx([0.25, 0.5, 0.75, 1.0])
    assert out.curves["RL (stage 3)"].tolist() == pytest.approx([2 / 3] * 4)
    files = {p.name for p in (tmp_path / "passk").iterdir()}
    assert files == {"passk_curves.csv", "passk_curves.json", "passk_curves.png", "passk_curves.pdf",
                     "heldout_base.json", "heldout_rl_stage_3.json"}
    meta = json.loads((tmp_path / "passk" / "passk_curves.json").read_text())
    assert "held-out tiny task problems" in meta["title"] and meta["n"] == 4 and meta["problems"] == 3
    assert (tmp_path / "passk" / "passk_curves.png").stat().st_size > 5000
    copied = chain.copy_passk_figure(tmp_path, tmp_path / "figures")
    assert sorted(p.name for p in copied) == ["passk_curves.pdf", "passk_curves.png"]
    assert chain.copy_passk_figure(tmp_path / "nothing", tmp_path / "figures2") == []


def test_passk_boundary_with_a_saved_tiny_policy(tok, tmp_path):
    """The default path: load the policy folder, HF backend, real sandbox; one policy twice gives
    the same samples (same seed), so the same curve."""
    cfg = _cfg(**{"eval.max_tokens": 12, "eval.max_turns": 1})
    save_policy(build_tiny_model(cfg.model, tok, seed=0), tok, tmp_path / "policy")
    out = chain.passk_boundary(cfg, {"a": tmp_path / "policy", "b": tmp_path / "policy"}, tmp_path / "run",
                               n_problems=2, n=2)
    assert out.curves.shape == (2, 2) and out.curves["a"].equals(out.curves["b"])
    ra, rb = out.results["a"], out.results["b"]
    assert [p["answers"] for p in ra.per_problem] == [p["answers"] for p in rb.per_problem]
    assert ra.manifest["sampling"]["max_tokens"] == 12


def test_profiles_size_the_new_steps():
    paper, tiny, smoke = (load(p, write=False) for p in ("paper-14b", "tiny", "smoke"))
    assert (paper.eval.passk_n, paper.eval.passk_problems, paper.eval.consistency_problems) == (16, 0, 0)
    assert paper.data.consistency_samples == 16 and tiny.data.consistency_samples == 16
    assert (tiny.eval.consistency_problems, tiny.eval.passk_problems, tiny.eval.passk_n) == (3, 64, 16)
    assert smoke.eval.consistency_problems * smoke.data.consistency_samples <= 8
    assert smoke.eval.passk_problems * smoke.eval.passk_n <= 16
    assert (tiny.eval.passk_hard_problems, tiny.eval.passk_hard_n) == (16, 128) and paper.eval.passk_hard_problems == 0
    assert chain.passk_items(smoke)[0] == "heldout" and chain.passk_items(paper, n_problems=1)[0] == "aime24"


def test_the_hard_subset_is_chosen_on_a_draw_of_its_own_and_evaluated_apart(tok, tmp_path):
    """Issue #45: screening with the selection seed, the hard problems, then both policies on them into passk_hard/."""
    cfg = _cfg(**{"eval.max_tokens": 12, "eval.max_turns": 1, "eval.passk_hard_pool": 4, "eval.passk_hard_select_n": 2,
                  "eval.passk_hard_max_correct": 2, "eval.passk_hard_problems": 3, "eval.passk_hard_n": 3})
    save_policy(build_tiny_model(cfg.model, tok, seed=0), tok, tmp_path / "policy")
    policies = {"SFT (cold start)": tmp_path / "policy", "RL (stage 3)": tmp_path / "policy"}
    out = chain.passk_hard_boundary(cfg, policies, tmp_path / "run")
    sel = json.loads((tmp_path / "run" / "passk_hard" / "selection.json").read_text())
    assert sel["screened"] == 4 and sel["select_n"] == 2 and len(sel["hard"]) == 3  # max_correct 2 of 2: all hard
    assert sel["hard"] == list(sel["counts"])[:3]  # the first ones in source order
    assert out is not None and out.curves.shape == (3, 2)
    meta = json.loads((tmp_path / "run" / "passk_hard" / "passk_curves.json").read_text())
    assert meta["n"] == 3 and meta["problems"] == 3 and "hard heldout problems" in meta["title"]
    assert chain.passk_hard_boundary(load("smoke", {"eval.passk_hard_problems": 0}, write=False), policies,
                                     tmp_path / "off") is None
