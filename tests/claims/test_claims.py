"""kit.claims on small synthetic run folders whose answer is known: for every test kind one run
that reproduces the claim, one that rules it out and one that is inconclusive."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml

from kit import studies
from kit.claims import (
    CLAIMS_FILE,
    VERDICTS,
    ClaimsError,
    RunDirs,
    claims_table,
    evaluate_claims,
    load_claims,
    load_preconditions,
    read_claims,
    write_claims,
)
from kit.claims.kinds import all_kinds, label_key

CLAIMS = {c["id"]: c for c in load_claims()}
#: the kinds' tests feed one part of a run: its cold start is taken to have learned (the precondition's
#: own tests are below)
PASS = {q["name"]: {"passed": True, "reason": "a test's run"} for q in load_preconditions()}  # every registered one


def verdict(root: Path, claim_id: str) -> str:
    (res,) = evaluate_claims(RunDirs.under(root), [CLAIMS[claim_id]], preconditions=PASS)
    return res.verdict


def write_rows(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def make_arm(root: Path, alg: str, seed: int, steps: int, **curves) -> None:
    """``ablation/<alg>_seed<seed>/metrics.jsonl``; each curve is ``(start, end)`` (linear in step)
    plus deterministic seed noise of 0.002 (ratios) or 0.5 (lengths)."""
    rows = []
    for s in range(steps):
        row = {"stage": "stage1", "step": s + 1, "algorithm": alg, "seed": seed}
        for key, (a, b) in curves.items():
            jitter = (0.5 if key == "response_len_mean" else 0.002) * ((seed * 7 + s * 3) % 5 - 2) / 2
            row[key] = a + (b - a) * s / max(1, steps - 1) + jitter
        rows.append(row)
    write_rows(root / "ablation" / f"{alg}_seed{seed}" / "metrics.jsonl", rows)


def ablation(root: Path, seeds=(0, 1, 2), steps=40, roc=None, grpo=None) -> Path:
    roc = roc or {}
    grpo = grpo or {}
    for s in seeds:
        make_arm(root, "grpo_roc", s, steps, **{k: v(s) if callable(v) else v for k, v in roc.items()})
        make_arm(root, "grpo", s, steps, **{k: v(s) if callable(v) else v for k, v in grpo.items()})
    return root


ERR = "tool_error_ratio_correct_before"


# --------------------------------------------------------------------------- Figure 4


def test_fig4_fall_reproduced_not_reproduced_inconclusive(tmp_path):
    assert verdict(ablation(tmp_path / "a", roc={ERR: (0.14, 0.05)}), "fig4_roc_tool_errors_fall") == "reproduced"
    assert verdict(ablation(tmp_path / "b", roc={ERR: (0.05, 0.14)}), "fig4_roc_tool_errors_fall") == "not reproduced"
    # seeds that disagree: one falls a lot, two rise a little
    mixed = ablation(tmp_path / "c", roc={ERR: lambda s: (0.14, 0.02) if s == 0 else (0.10, 0.11)})
    assert verdict(mixed, "fig4_roc_tool_errors_fall") == "inconclusive"


def test_fig4_needs_two_seeds_and_ten_steps(tmp_path):
    one_seed = ablation(tmp_path / "a", seeds=(0,), roc={ERR: (0.14, 0.05)})
    (res,) = evaluate_claims(RunDirs.under(one_seed), [CLAIMS["fig4_roc_tool_errors_fall"]], preconditions=PASS)
    assert res.verdict == "inconclusive" and "at least 2" in res.tests[0].reason
    short = ablation(tmp_path / "b", steps=8, roc={ERR: (0.14, 0.05)})
    (res,) = evaluate_claims(RunDirs.under(short), [CLAIMS["fig4_roc_tool_errors_fall"]], preconditions=PASS)
    assert res.verdict == "inconclusive" and "10 steps" in res.tests[0].reason


def test_fig4_window_is_max_5_or_a_fifth(tmp_path):
    root = ablation(tmp_path, roc={ERR: (0.14, 0.05)})
    (res,) = evaluate_claims(RunDirs.under(root), [CLAIMS["fig4_roc_tool_errors_fall"]], preconditions=PASS)
    w = res.tests[0].detail["windows"]["0"]
    assert (w["steps"], w["W"]) == (40, 8)
    # the statistic is first-8 mean minus last-8 mean: about (0.14 - 0.05) * 32 / 39
    assert res.tests[0].value == pytest.approx(0.09 * 32 / 39, abs=0.003)


def test_fig4_below_grpo_needs_more_than_the_seed_spread(tmp_path):
    clear = ablation(tmp_path / "a", roc={ERR: (0.14, 0.05)}, grpo={ERR: (0.13, 0.09)})
    assert verdict(clear, "fig4_roc_below_grpo") == "reproduced"
    worse = ablation(tmp_path / "b", roc={ERR: (0.14, 0.10)}, grpo={ERR: (0.13, 0.05)})
    assert verdict(worse, "fig4_roc_below_grpo") == "not reproduced"
    # a small consistent gap (paired interval above 0) inside a large seed spread: not enough
    spread = ablation(tmp_path / "c", roc={ERR: lambda s: (0.14, 0.05 + 0.04 * s)},
                      grpo={ERR: lambda s: (0.13, 0.056 + 0.04 * s)})
    (res,) = evaluate_claims(RunDirs.under(spread), [CLAIMS["fig4_roc_below_grpo"]], preconditions=PASS)
    assert res.tests[0].ci95[0] > 0  # the paired interval alone would pass
    assert res.verdict == "inconclusive" and "seed spread" in res.tests[0].reason


# --------------------------------------------------------------------------- Figure 9


def test_fig9_accuracy_non_inferiority_margin(tmp_path):
    same = ablation(tmp_path / "a", roc={"accuracy": (0.75, 0.90)}, grpo={"accuracy": (0.75, 0.90)})
    assert verdict(same, "fig9_roc_accuracy_not_below") == "reproduced"  # equal is not below
    lower = ablation(tmp_path / "b", roc={"accuracy": (0.75, 0.70)}, grpo={"accuracy": (0.75, 0.90)})
    assert verdict(lower, "fig9_roc_accuracy_not_below") == "not reproduced"
    noisy = ablation(tmp_path / "c", roc={"accuracy": lambda s: (0.75, [0.70, 0.95, 0.85][s])},
                     grpo={"accuracy": (0.75, 0.86)})
    assert verdict(noisy, "fig9_roc_accuracy_not_below") == "inconclusive"


def test_fig9_shorter_responses(tmp_path):
    L = "response_len_mean"
    assert verdict(ablation(tmp_path / "a", roc={L: (126, 118)}, grpo={L: (123, 130)}),
                   "fig9_roc_shorter_responses") == "reproduced"
    assert verdict(ablation(tmp_path / "b", roc={L: (126, 140)}, grpo={L: (123, 120)}),
                   "fig9_roc_shorter_responses") == "not reproduced"
    assert verdict(ablation(tmp_path / "c", roc={L: lambda s: (126, [110, 150, 125][s])}, grpo={L: (123, 128)}),
                   "fig9_roc_shorter_responses") == "inconclusive"


# --------------------------------------------------------------------------- Figure 8


def stages(root: Path, rewards=(0.70, 0.75, 0.78, 0.82), n=128, lengths=((120, 4), (150, 4)), budgets=(384, 576),
           steps=8, outcomes=True) -> Path:
    """Stage folders; with ``outcomes`` each summary lists per-problem outcomes, ``round(r n)`` problems
    correct, drawn afresh for every stage (so two stages are about as unpaired as two samples can be)."""
    rng = np.random.default_rng(3)
    for name, r in zip(("sft", "stage1", "stage2", "stage3"), rewards, strict=True):
        (root / name).mkdir(parents=True, exist_ok=True)
        doc = {"heldout_sampled_reward": r, "heldout_n": n}
        if outcomes:
            correct = np.zeros(n, dtype=int)
            correct[rng.permutation(n)[:round(r * n)]] = 1
            doc.update(heldout_problems=[f"p{i}" for i in range(n)], heldout_sampled_correct=correct.tolist())
        (root / name / "summary.json").write_text(json.dumps(doc))
    cfg = {"stages": {"stage1": {"max_response_tokens": budgets[0]}, "stage2": {"max_response_tokens": budgets[1]}}}
    for name, (mean, sd) in zip(("stage1", "stage2"), lengths, strict=True):
        (root / name / "config.json").write_text(json.dumps(cfg))
        rows = [{"stage": name, "step": s + 1, "response_len_mean": mean + sd * ((s * 5) % 7 - 3) / 3}
                for s in range(steps)]
        write_rows(root / name / "metrics.jsonl", rows)
    return root


FIG8 = "fig8_accuracy_rises_no_stage_below"


def test_fig8_accuracy_rise_and_no_stage_below(tmp_path):
    assert verdict(stages(tmp_path / "a", (0.60, 0.70, 0.75, 0.85), n=512), FIG8) == "reproduced"
    # a clear drop at one stage rules the claim out even though the end is higher
    assert verdict(stages(tmp_path / "b", (0.60, 0.95, 0.70, 0.85)), FIG8) == "not reproduced"
    assert verdict(stages(tmp_path / "c", (0.70, 0.72, 0.71, 0.73)), FIG8) == "inconclusive"
    # the smoke profile's 32 held-out problems are below the minimum of 50
    assert verdict(stages(tmp_path / "d", (0.0, 0.5, 0.8, 1.0), n=32), FIG8) == "inconclusive"
    # a small rise with 128 problems: the margin test cannot tell 0.05 down from level
    (res,) = evaluate_claims(RunDirs.under(stages(tmp_path / "e", (0.60, 0.70, 0.75, 0.85))), [CLAIMS[FIG8]],
                             preconditions=PASS)
    assert [t.verdict for t in res.tests] == ["reproduced", "inconclusive"] and res.tests[1].value == pytest.approx(6 / 128)  # 96 - 90 problems
    # runs before issue #42 have no per-problem outcomes: the non-inferiority test cannot be computed
    (res,) = evaluate_claims(RunDirs.under(stages(tmp_path / "f", outcomes=False)), [CLAIMS[FIG8]], preconditions=PASS)
    assert "per-problem held-out outcomes" in res.tests[1].reason


def test_the_superseded_fig8_claim_stays_in_the_file_and_is_not_evaluated():
    every = {c["id"]: c for c in load_claims(include_superseded=True)}
    assert every["fig8_accuracy_rises_across_stages"]["superseded_by"] == FIG8
    assert "fig8_accuracy_rises_across_stages" not in CLAIMS and FIG8 in CLAIMS


def test_fig8_pairs_the_stages_problem_by_problem_when_the_summaries_list_them(tmp_path):
    """The held-out set is the same at every stage: 8 more of 128 problems solved and none lost is a rise a
    paired interval sees and Newcombe's unpaired one does not (issue #42)."""
    root = stages(tmp_path / "a", (0.5, 0.5, 0.5, 0.5625), outcomes=False)
    ids = [f"p{i}" for i in range(128)]
    before = [int(i < 64) for i in range(128)]
    after = [int(i < 72) for i in range(128)]
    for name, corr in (("sft", before), ("stage1", before), ("stage2", before), ("stage3", after)):
        doc = json.loads((root / name / "summary.json").read_text())
        (root / name / "summary.json").write_text(json.dumps({**doc, "heldout_problems": ids,
                                                              "heldout_sampled_correct": corr}))
    (res,) = evaluate_claims(RunDirs.under(root), [CLAIMS[FIG8]], preconditions=PASS)
    rise = res.tests[0]
    assert rise.value == pytest.approx(0.0625) and rise.interval.startswith("paired bootstrap over 128")
    assert rise.verdict == "reproduced" and rise.ci95[0] > 0
    assert res.tests[1].verdict == "reproduced" and res.tests[1].value == 0.0  # nothing lost at any stage
    unpaired = stages(tmp_path / "b", (0.5, 0.5, 0.5, 0.5625), outcomes=False)
    (res,) = evaluate_claims(RunDirs.under(unpaired), [CLAIMS[FIG8]], preconditions=PASS)
    assert res.tests[0].interval.startswith("Newcombe") and res.tests[0].verdict == "inconclusive"


def test_fig8_length_with_budget(tmp_path):
    assert verdict(stages(tmp_path / "a", lengths=((120, 4), (150, 4))), "fig8_length_grows_with_budget") == "reproduced"
    assert verdict(stages(tmp_path / "b", lengths=((150, 4), (120, 4))), "fig8_length_grows_with_budget") == "not reproduced"
    assert verdict(stages(tmp_path / "c", lengths=((120, 30), (123, 30))), "fig8_length_grows_with_budget") == "inconclusive"
    # without a larger budget the claim is not tested
    (res,) = evaluate_claims(RunDirs.under(stages(tmp_path / "d", budgets=(384, 384))), [CLAIMS["fig8_length_grows_with_budget"]])
    assert res.verdict == "inconclusive" and "budget" in res.tests[0].reason


# --------------------------------------------------------------------------- pass@k and the cold start


def passk(root: Path, sft: np.ndarray, rl: np.ndarray, *, calls=None, errors=None, answered=None,
          folder: str = "passk") -> Path:
    """``eval/<folder>`` files for two policies; ``sft``/``rl`` are (N, n) 0/1 arrays."""
    base = root / "eval" / folder
    base.mkdir(parents=True, exist_ok=True)
    labels = ["SFT (cold start)", "RL (stage 3)"]
    (base / "passk_curves.json").write_text(json.dumps({"source": "heldout", "labels": labels}))
    for label, c in zip(labels, (sft, rl), strict=True):
        key = label_key(label)
        N, n = c.shape
        cl = calls if calls is not None and key == "sft_cold_start" else np.ones_like(c)
        er = errors if errors is not None and key == "sft_cold_start" else np.zeros_like(c)
        an = answered if answered is not None and key == "sft_cold_start" else np.ones_like(c)
        per = [{"id": f"p{i}", "correct": c[i].astype(int).tolist(),
                "answers": [("1" if an[i, j] else None) for j in range(n)],
                "tool_calls": cl[i].astype(int).tolist(), "tool_errors": er[i].astype(int).tolist()} for i in range(N)]
        (base / f"heldout_{key}.json").write_text(json.dumps({"per_problem": per}))
    return root


def test_label_key_is_the_pass_at_k_file_name():
    # kit.chain.passk_boundary writes <source>_<key>.json for the notebook's labels
    assert label_key("SFT (cold start)") == "sft_cold_start"
    assert label_key("RL (stage 3)") == "rl_stage_3"


def matrix(rate: float, N: int = 24, n: int = 16, seed: int = 0) -> np.ndarray:
    return (np.random.default_rng(seed).random((N, n)) < rate).astype(int)


def test_passk_rl_beats_sft_and_gap_closes(tmp_path):
    sft = matrix(0.7, seed=1)
    rl = matrix(0.92, seed=2)
    root = passk(tmp_path / "a", sft, rl)
    assert verdict(root, "passk_rl_beats_sft_at_1") == "reproduced"
    # RL worse at pass@1 and the gap wider at k = n: both ruled out
    sft2 = np.ones((24, 16), dtype=int)
    rl2 = np.zeros((24, 16), dtype=int)
    rl2[:, 0] = 1  # RL solves each problem once: pass@1 1/16, pass@16 1
    rl2[:6] = 0    # and a quarter of the problems never
    root = passk(tmp_path / "b", sft2, rl2)
    assert verdict(root, "passk_rl_beats_sft_at_1") == "not reproduced"
    same = matrix(0.7, seed=3)
    root = passk(tmp_path / "c", same, np.roll(same, 1, axis=1))  # same counts per problem
    assert verdict(root, "passk_rl_beats_sft_at_1") == "not reproduced"  # gap exactly 0 everywhere
    base = np.zeros((24, 16), dtype=int)
    base[:, :8] = 1
    mixed = base.copy()
    mixed[:12, 8:10] = 1  # RL two more right on half the problems,
    mixed[12:, 7] = 0     # one fewer on the other half: gap +1/32 with a wide interval
    noisy = passk(tmp_path / "d", base, mixed)
    assert verdict(noisy, "passk_rl_beats_sft_at_1") == "inconclusive"
    small = passk(tmp_path / "e", matrix(0.2, N=4, n=4), matrix(0.9, N=4, n=4))  # the smoke profile's size
    assert verdict(small, "passk_rl_beats_sft_at_1") == "inconclusive"


CROSS = "passk_crossing_on_hard_problems"


def test_passk_crossing_on_the_hard_subset(tmp_path):
    """Issue #45: RL above the cold start at pass@1 and below it at pass@n on problems the cold start rarely
    solves, read from eval/passk_hard/."""
    N, n = 16, 128
    rng = np.random.default_rng(0)
    sft = (rng.random((N, n)) < 0.05).astype(int)  # rare successes on every problem: coverage 1
    rl = np.zeros((N, n), dtype=int)
    rl[:10] = (rng.random((10, n)) < 0.5).astype(int)  # RL solves 10 problems often and 6 never
    root = passk(tmp_path / "a", sft, rl, folder="passk_hard")
    (res,) = evaluate_claims(RunDirs.under(root), [CLAIMS[CROSS]], preconditions=PASS)
    assert [t.verdict for t in res.tests] == ["reproduced", "reproduced"], [t.reason for t in res.tests]
    assert res.tests[1].value == pytest.approx(-6 / 16)  # pass@n: coverage 10/16 against 16/16
    # RL keeps every problem the cold start can solve: no crossing, the claim is ruled out
    wide = passk(tmp_path / "b", sft, np.maximum(sft, (rng.random((N, n)) < 0.5).astype(int)), folder="passk_hard")
    (res,) = evaluate_claims(RunDirs.under(wide), [CLAIMS[CROSS]], preconditions=PASS)
    assert res.verdict == "not reproduced" and res.tests[1].verdict == "not reproduced"
    # the held-out curves (eval/passk) are not the hard subset's; too few samples per problem is too little data
    assert verdict(passk(tmp_path / "c", sft, rl), CROSS) == "inconclusive"
    few = passk(tmp_path / "d", sft[:, :64], rl[:, :64], folder="passk_hard")
    (res,) = evaluate_claims(RunDirs.under(few), [CLAIMS[CROSS]], preconditions=PASS)
    assert "at least 128" in res.tests[0].reason


def test_cold_start_format_without_reasoning(tmp_path):
    N, n = 24, 16
    rng = np.random.default_rng(0)
    calls = (rng.random((N, n)) < 0.7).astype(int)
    errors = ((rng.random((N, n)) < 0.1) & (calls > 0)).astype(int)
    correct = calls * (rng.random((N, n)) < 0.95)  # right only through the tool
    good = passk(tmp_path / "a", correct, matrix(0.9), calls=calls, errors=errors)
    assert verdict(good, "table1_cold_start_format_not_reasoning") == "reproduced"
    # answers guessed right without the tool: the reasoning test rules the claim out
    guessing = passk(tmp_path / "b", np.ones((N, n), dtype=int), matrix(0.9), calls=calls, errors=errors)
    (res,) = evaluate_claims(RunDirs.under(guessing), [CLAIMS["table1_cold_start_format_not_reasoning"]], preconditions=PASS)
    assert res.verdict == "not reproduced"
    assert [t.verdict for t in res.tests][-1] == "not reproduced"
    # a policy that never answers and never calls (an untrained one) does not pass the format tests,
    # even though it has "no reasoning"
    silent = passk(tmp_path / "c", np.zeros((N, n), dtype=int), matrix(0.9), calls=np.zeros((N, n)),
                   answered=np.zeros((N, n)))
    (res,) = evaluate_claims(RunDirs.under(silent), [CLAIMS["table1_cold_start_format_not_reasoning"]], preconditions=PASS)
    assert res.verdict == "not reproduced" and res.tests[-1].verdict == "reproduced"
    # answer rate right at the threshold of 0.9: its interval contains it
    at = (rng.random((N, n)) < 0.9).astype(int)
    edge = passk(tmp_path / "d", correct, matrix(0.9), calls=calls, errors=errors, answered=at)
    (res,) = evaluate_claims(RunDirs.under(edge), [CLAIMS["table1_cold_start_format_not_reasoning"]], preconditions=PASS)
    assert res.tests[0].verdict == "inconclusive" and res.verdict == "inconclusive"


# --------------------------------------------------------------------------- entropy


def entropy(root: Path, rl: tuple[float, float], sft: tuple[float, float], n: int = 24, high: int = 20,
            seed: int = 0) -> Path:
    """``analysis/entropy_tokens.jsonl``: per checkpoint ``(forking share, reflection share)``,
    per-trajectory counts drawn binomially."""
    rng = np.random.default_rng(seed)
    rows = []
    for ck, (fk, rf) in (("sft", sft), ("rl", rl)):
        for i in range(n):
            f = int(rng.binomial(high, fk))
            r = int(rng.binomial(high - f, rf / max(1e-9, 1 - fk)))
            rows.append({"checkpoint": ck, "problem": i, "forking": f, "reflection": r, "other": high - f - r, "high": high,
                         "window_tokens": 24})  # one tool response each
    write_rows(root / "analysis" / "entropy_tokens.jsonl", rows)
    return root


def test_entropy_forking_and_reflection(tmp_path):
    assert verdict(entropy(tmp_path / "a", (0.2, 0.3), (0.2, 0.1)), "entropy_forking_and_reflection") == "reproduced"
    assert verdict(entropy(tmp_path / "b", (0.2, 0.0), (0.2, 0.1)), "entropy_forking_and_reflection") == "not reproduced"
    few = entropy(tmp_path / "c", (0.2, 0.3), (0.2, 0.1), n=8)  # fewer than 16 trajectories
    assert verdict(few, "entropy_forking_and_reflection") == "inconclusive"


REFLECT = "entropy_reflection_per_window_above_sft"


def test_entropy_reflection_per_post_feedback_token(tmp_path):
    assert verdict(entropy(tmp_path / "a", (0.2, 0.3), (0.2, 0.1)), REFLECT) == "reproduced"
    assert verdict(entropy(tmp_path / "b", (0.2, 0.1), (0.2, 0.3)), REFLECT) == "not reproduced"
    # RL reflection counts alternate 2, 6 (0.167 per window token), SFT's 3, 4 (0.146): a gap inside the noise
    rows = [{"checkpoint": ck, "problem": i, "forking": 4, "reflection": counts[i % 2], "other": 16 - counts[i % 2],
             "high": 20, "window_tokens": 24} for ck, counts in (("rl", (2, 6)), ("sft", (3, 4))) for i in range(24)]
    write_rows(tmp_path / "c" / "analysis" / "entropy_tokens.jsonl", rows)
    (res,) = evaluate_claims(RunDirs.under(tmp_path / "c"), [CLAIMS[REFLECT]], preconditions=PASS)
    assert res.tests[0].value == pytest.approx(1 / 48) and res.verdict == "inconclusive"


def test_more_tool_responses_alone_do_not_raise_reflection(tmp_path):
    """Issue #45: the superseded share of high-entropy tokens rose with the number of tool responses. Here RL
    makes three tool responses where SFT makes one, at the same reflection rate after each."""
    rows = [{"checkpoint": ck, "problem": i, "forking": 4, "reflection": 2 * k, "other": 14 - 2 * k, "high": 20,
             "window_tokens": 24 * k} for ck, k in (("rl", 3), ("sft", 1)) for i in range(24)]
    write_rows(tmp_path / "analysis" / "entropy_tokens.jsonl", rows)
    (res,) = evaluate_claims(RunDirs.under(tmp_path), [CLAIMS[REFLECT]], preconditions=PASS)
    assert res.tests[0].value == pytest.approx(0.0) and res.verdict == "not reproduced"
    old = next(c for c in load_claims(include_superseded=True) if c["id"] == "entropy_more_reflection_than_sft")
    (res,) = evaluate_claims(RunDirs.under(tmp_path), [old], preconditions=PASS)
    assert res.tests[0].value == pytest.approx(0.2) and res.verdict == "reproduced"  # what the old statistic said
    for r in rows:
        del r["window_tokens"]
    write_rows(tmp_path / "analysis" / "entropy_tokens.jsonl", rows)
    (res,) = evaluate_claims(RunDirs.under(tmp_path), [CLAIMS[REFLECT]], preconditions=PASS)
    assert "no 'window_tokens'" in res.tests[0].reason


# --------------------------------------------------------------------------- the file and the schema


def test_every_kind_in_the_claims_file_is_implemented_and_six_claims_at_least():
    kinds = {t["kind"] for c in CLAIMS.values() for t in c["tests"]}
    assert kinds <= set(all_kinds())  # the kit's and each study's own (Agent-R's agent_r_diff)
    sources = " ".join(c["source"] for c in CLAIMS.values())
    for fig in ("Figure 4", "Figure 9", "Figure 8", "Table 1", "pass@k", "entropy"):
        assert fig in sources


def test_missing_run_is_inconclusive_and_claims_json_round_trips(tmp_path):
    results = evaluate_claims(RunDirs.under(tmp_path / "nothing"))
    assert {r.verdict for r in results} == {"inconclusive"}
    # no cold start: the claims that require it are not judged; the cold start's own has no data
    assert all(("precondition failed: cold_start_learns" in t.reason) == bool(r.requires) for r in results for t in r.tests)
    assert all("not enough data" in t.reason for r in results if not r.requires for t in r.tests)
    path = write_claims(results, tmp_path / "claims.json", profile="smoke", run="t")
    doc = read_claims(path)
    world = sum(c.get("role") == "world_check" for c in CLAIMS.values())
    assert doc["counts"] == {"reproduced": 0, "not reproduced": 0, "inconclusive": len(CLAIMS) - world, "invalid design": 0}
    assert doc["world_check_counts"] == {"reproduced": 0, "not reproduced": 0, "inconclusive": world, "invalid design": 0}
    assert doc["preconditions"]["cold_start_learns"]["passed"] is False
    assert [c["id"] for c in doc["claims"]] == list(CLAIMS)
    assert all(c["verdict"] in VERDICTS for c in doc["claims"])
    assert list(claims_table(doc).columns) == ["source", "statistic", "value", "ci95", "interval", "verdict"]


def test_read_claims_rejects_an_unknown_verdict(tmp_path):
    path = write_claims(evaluate_claims(RunDirs.under(tmp_path)), tmp_path / "claims.json")
    doc = json.loads(path.read_text())
    doc["claims"][2]["verdict"] = "mostly reproduced"
    path.write_text(json.dumps(doc))
    with pytest.raises(ClaimsError, match="fig9_roc_accuracy_not_below.*mostly reproduced"):
        read_claims(path)


def test_load_claims_names_the_claim_and_key(tmp_path):
    bad = tmp_path / "c.yaml"
    bad.write_text("claims:\n  - id: x\n    source: s\n    claim: c\n    paper: p\n    tests:\n      - name: t\n"
                   "        kind: nope\n        statistic: s\n        interval: t_seeds\n        comparison: '>'\n"
                   "        threshold: 0\n")
    with pytest.raises(ClaimsError, match="claim x.*unknown kind 'nope'"):
        load_claims(bad)
    bad.write_text("claims:\n  - id: y\n    source: s\n    claim: c\n    tests: []\n")
    with pytest.raises(ClaimsError, match="claim y: missing key 'paper'"):
        load_claims(bad)


def test_every_claimed_key_is_a_declared_key_and_an_undeclared_one_is_refused_naming_claim_and_key(tmp_path):
    from kit.metrics import DECLARED

    claimed = {t[f] for c in CLAIMS.values() for t in c["tests"] for f in ("key", "n_key") if f in t}
    assert claimed and claimed <= DECLARED
    bad = tmp_path / "c.yaml"
    bad.write_text("claims:\n  - id: z\n    source: s\n    claim: c\n    paper: p\n    tests:\n      - name: t\n"
                   "        kind: ablation_drop\n        key: response_length_mean\n        statistic: s\n"
                   "        interval: t_seeds\n        comparison: '>'\n        threshold: 0\n")
    with pytest.raises(ClaimsError, match="claim z, test 't': key 'response_length_mean' is not a key kit.metrics"):
        load_claims(bad)


def test_each_claims_note_reaches_claims_json_and_the_summary_page(tmp_path):
    from kit.report import summary

    path = write_claims(evaluate_claims(RunDirs.under(tmp_path / "nothing")), tmp_path / "claims.json")
    doc = read_claims(path)
    assert doc["schema_version"] == 5
    notes = {c["id"]: c["note"] for c in doc["claims"]}
    assert "needs window_tokens" in notes[REFLECT]
    assert notes["fig9_roc_accuracy_not_below"].startswith("training accuracy on the tiny task family")
    assert notes["fig4_roc_tool_errors_fall"] == ""
    own = summary.ordered(c for c in doc["claims"] if c["section"] == "rStar2-Agent")  # the rows' order: by role
    row = next(r for r, c in zip(summary.claim_rows(doc), own, strict=True) if c["id"] == "fig9_roc_accuracy_not_below")
    assert "Note: training accuracy on the tiny task" in " ".join(row[0].split())
    old = json.loads(path.read_text())
    del old["claims"][0]["note"]
    path.write_text(json.dumps(old))
    with pytest.raises(ClaimsError, match="fig4_roc_tool_errors_fall: missing key 'note'"):
        read_claims(path)


# --------------------------------------------------------------------------- roles and preconditions (issue #45)


def test_every_claim_has_a_role_and_each_paper_one_or_two_primaries():
    from kit.claims import ROLES
    raw = yaml.safe_load(CLAIMS_FILE.read_text())["claims"]
    assert [c["id"] for c in raw if c.get("role") not in ROLES] == []
    primaries = {}
    for c in raw:
        if c["role"] == "primary":
            primaries.setdefault(c.get("section", "rStar2-Agent"), []).append(c["id"])
    papers = {studies.KIT_SECTION, *(s.section for s in studies.KIT_STUDIES)}  # the kit's paper and each study's
    assert set(primaries) == papers and all(1 <= len(v) <= 2 for v in primaries.values())


def _cold_start(root: Path, sampled: float | None) -> Path:
    (root / "sft").mkdir(parents=True, exist_ok=True)
    doc = {"heldout_n": 128} if sampled is None else {"heldout_sampled_reward": sampled, "heldout_n": 128}
    (root / "sft" / "summary.json").write_text(json.dumps(doc))
    return root


def test_a_cold_start_that_did_not_learn_leaves_the_downstream_claims_unjudged(tmp_path):
    from kit.claims import evaluate_preconditions
    root = _cold_start(ablation(tmp_path / "a", roc={ERR: (0.14, 0.05)}, grpo={ERR: (0.13, 0.09)}), 0.05)
    pre = evaluate_preconditions(RunDirs.under(root))
    assert pre["cold_start_learns"]["passed"] is False and pre["cold_start_learns"]["value"] == 0.05
    (res,) = evaluate_claims(RunDirs.under(root), [CLAIMS["fig4_roc_below_grpo"]])
    assert res.verdict == "inconclusive"
    assert res.tests[0].value > 0.03  # still computed and shown, not judged
    assert "not judged, precondition failed: cold_start_learns (sft/summary.json heldout_sampled_reward = 0.05 " \
           "misses >= 0.2)" in res.tests[0].reason
    _cold_start(root, 0.20)  # the threshold itself passes
    (res,) = evaluate_claims(RunDirs.under(root), [CLAIMS["fig4_roc_below_grpo"]])
    assert res.verdict == "reproduced"
    assert not evaluate_preconditions(RunDirs.under(_cold_start(tmp_path / "b", None)))["cold_start_learns"]["passed"]


def test_a_role_or_precondition_the_file_does_not_know_is_refused(tmp_path):
    raw = yaml.safe_load(CLAIMS_FILE.read_text())
    bad = dict(raw, claims=[dict(raw["claims"][0], role="headline")])
    (tmp_path / "a.yaml").write_text(yaml.safe_dump(bad))
    with pytest.raises(ClaimsError, match="role 'headline' is not one of"):
        load_claims(tmp_path / "a.yaml")
    bad = dict(raw, claims=[dict(raw["claims"][0], requires=["base_is_weak"])])
    (tmp_path / "b.yaml").write_text(yaml.safe_dump(bad))
    with pytest.raises(ClaimsError, match="requires \\['base_is_weak'\\] not among the preconditions"):
        load_claims(tmp_path / "b.yaml")
