"""score_samples on hand-made trajectories; the evaluate driver through the real agent loop with
a scripted backend, a fake tool executor and the real verifier; manifests; pass@k curves."""

import json
from dataclasses import dataclass, field

import numpy as np
import pytest
from doubles import FakeExecutor, Res, call

from kit import prompts
from kit.eval.benchmarks import BenchItem
from kit.eval.evaluate import EvalResult, evaluate, load_result, passk_curves, save_result, score_samples
from kit.eval.manifest import build_manifest, sha256_file


@dataclass
class V:
    correct: bool
    extracted: str | None


@dataclass
class Tr:
    response_ids: list
    response_mask: list
    tool_calls: int = 0
    tool_errors: dict = field(default_factory=dict)
    truncated: bool = False


def _tr(length, model, calls=0, errors=0, truncated=False):
    return Tr(list(range(length)), [1] * model + [0] * (length - model), calls, {"exception": errors}, truncated)


def test_score_samples_hand_example():
    trajs = [[_tr(10, 8, calls=2, errors=1), _tr(20, 20), _tr(30, 25, calls=1, truncated=True)],
             [_tr(40, 30, calls=1), _tr(50, 50), _tr(60, 60, calls=0)]]
    verdicts = [[V(True, "12"), V(False, "13"), V(True, " 12")],
                [V(False, None), V(False, "7"), V(False, "7")]]
    r = score_samples("toy", ["a", "b"], trajs, verdicts, bootstrap_samples=200)
    assert (r.n_problems, r.n_samples) == (2, 3)
    assert r.avg_at_n == pytest.approx(2 / 6)
    assert r.pass_at_k[1] == pytest.approx(2 / 6) and r.pass_at_k[3] == pytest.approx(0.5)
    assert r.pass_at_k[2] == pytest.approx((1 - 0 / 3) / 2)  # problem a: every pair holds a correct one
    assert r.maj_at_k[3] == pytest.approx(0.5)  # "12" (outer spaces ignored) wins on a, "7" wrong on b
    assert r.response_tokens_mean == pytest.approx(35.0) and r.response_tokens_median == pytest.approx(35.0)
    assert r.model_tokens_mean == pytest.approx((8 + 20 + 25 + 30 + 50 + 60) / 6)
    assert r.tool_calls_per_traj == pytest.approx(4 / 6)
    assert r.tool_error_ratio == pytest.approx(1 / 4)
    assert r.truncation_ratio == pytest.approx(1 / 6)
    assert r.ci95[0] <= r.avg_at_n <= r.ci95[1]
    assert r.correct.tolist() == [[1, 0, 1], [0, 0, 0]]


def test_score_samples_rejects_ragged_rows():
    with pytest.raises(ValueError, match="same number of samples"):
        score_samples("toy", ["a", "b"], [[_tr(1, 1)], [_tr(1, 1), _tr(1, 1)]], [[V(1, "1")], [V(1, "1"), V(1, "1")]])
    with pytest.raises(ValueError, match="2 ids"):
        score_samples("toy", ["a", "b"], [[_tr(1, 1)]], [[V(1, "1")]])


def test_save_load_roundtrip_and_passk_curves(tmp_path):
    rng = np.random.default_rng(0)
    results = {}
    for label, p in [("base", 0.2), ("rl", 0.5)]:
        correct = (rng.random((5, 4)) < p)
        trajs = [[_tr(5, 5) for _ in range(4)] for _ in range(5)]
        verdicts = [[V(bool(c), "1" if c else "0") for c in row] for row in correct]
        r = score_samples("toy", list("abcde"), trajs, verdicts, bootstrap_samples=50)
        r.manifest = {"model": label}
        path = save_result(tmp_path, r, tag=label)
        assert path == tmp_path / "eval" / f"toy_{label}.json"
        results[label] = load_result(path)
        assert results[label].pass_at_k == r.pass_at_k and results[label].correct.tolist() == r.correct.tolist()
    curves = passk_curves(results)
    assert list(curves.index) == [1, 2, 3, 4] and list(curves.columns) == ["base", "rl"]
    assert curves.loc[1, "rl"] == pytest.approx(results["rl"].avg_at_n)
    other = EvalResult.from_dict({**results["rl"].to_dict(), "benchmark": "other"})
    with pytest.raises(ValueError, match="same benchmark problems"):
        passk_curves({"a": results["base"], "b": other})


def test_manifest_records_hashes_and_sampling(tmp_path):
    f = tmp_path / "bench.json"
    f.write_text("[]")
    m = build_manifest(model="m", backend="b", sampling={"n": 16, "temperature": 0.6}, seed=3, data_files=[f])
    assert m["data_files"][str(f)] == sha256_file(f) == "4f53cda18c2baa0c0354bb5f9a3ecbe5ed12ab4d8e11ba873c2f11161202b945"
    assert m["sampling"]["temperature"] == 0.6 and m["seed"] == 3 and m["kit_version"]
    json.dumps(m)


# ----------------------------------------------------------------------- through the agent loop


def _evaluate_print(code, _stdin):
    """The sandbox's answer to ``print(<expr>)``: the value, or a traceback."""
    try:
        return Res("ok", stdout=str(eval(code.removeprefix("print(")[:-1])) + "\n")  # noqa: S307
    except Exception as exc:  # noqa: BLE001
        return Res("error", stderr=f"Traceback (most recent call last):\n{exc!r}")


@pytest.fixture(scope="module")
def tok():
    from kit.models import train_tokenizer

    corpus = [prompts.render_prompt(f"What is {a} * {a + 3}?") + call(f"print({a}*{a + 3})") + prompts.IM_END
              + prompts.feedback_block([str(a * (a + 3))]) + f"</reason> <answer> \\boxed{{{a * (a + 3)}}} </answer>"
              + prompts.IM_END for a in range(30)]
    return train_tokenizer(corpus, vocab_size=600)


def test_evaluate_runs_the_agent_loop_and_writes_result(tok, tmp_path):
    from kit.rollout import ScriptedBackend

    items = [BenchItem("toy", "0", "What is 6 * 7?", "42"), BenchItem("toy", "1", "What is 3 * 5?", "15")]
    state = {}

    def script(context):
        # first turn: call the tool; after the tool response: answer with what it printed,
        # except that every second sample of problem 1 answers wrongly
        if "<tool_response>" not in context:
            q = context.split("What is ")[-1].split("?")[0]
            return "compute " + call(f"print({q})")
        printed = context.rsplit("<tool_response>", 1)[1].split("</tool_response>")[0].strip()
        k = state[printed] = state.get(printed, 0) + 1
        value = printed if not (printed == "15" and k % 2 == 0) else "16"
        return f"ok</reason> <answer> \\boxed{{{value}}} </answer>"

    r = evaluate(ScriptedBackend(tok, script), "toy", n=4, temperature=0.6, top_p=0.95, max_tokens=400,
                 max_turns=4, tokenizer=tok, executor=FakeExecutor(_evaluate_print), items=items, run_dir=tmp_path,
                 model_name="scripted", rollout_kwargs={"call_factory": lambda code, stdin: (code, stdin)},
                 bootstrap_samples=100)
    assert r.correct[0].tolist() == [1, 1, 1, 1] and r.correct[1].sum() == 2
    assert r.avg_at_n == pytest.approx(6 / 8) and r.pass_at_k[4] == 1.0
    assert r.tool_calls_per_traj == 1.0 and r.tool_error_ratio == 0.0 and r.truncation_ratio == 0.0
    assert r.manifest["sampling"] == {"n": 4, "temperature": 0.6, "top_p": 0.95, "max_tokens": 400,
                                      "max_turns": 4, "greedy": False}
    assert len(r.manifest["system_prompt_sha256"]) == 64 and r.manifest["benchmark"] == "toy"
    saved = json.loads((tmp_path / "eval" / "toy.json").read_text())
    assert saved["manifest"]["model"] == "scripted" and saved["avg_at_n"] == pytest.approx(0.75)


def test_plot_passk_curves_draws_one_line_per_model():
    import matplotlib

    matplotlib.use("Agg")
    import pandas as pd

    from kit.eval.evaluate import plot_passk_curves

    curves = pd.DataFrame({"base": [0.1, 0.3, 0.5], "rl": [0.4, 0.5, 0.55]}, index=pd.Index([1, 2, 4], name="k"))
    ax = plot_passk_curves(curves, title="AIME24")
    assert [line.get_label() for line in ax.get_lines()] == ["base", "rl"]
    assert list(ax.get_lines()[1].get_ydata()) == [0.4, 0.5, 0.55] and ax.get_title() == "AIME24"


def test_maj_at_k_groups_answers_by_the_verifier():
    """Issue #17: 3/4 written as \\frac{3}{4}, 0.75 and 3/4 used to split the vote, so a wrong answer
    given twice won maj@n; the verifier's equivalence now makes them one vote, and the tie rate
    is reported."""
    trajs = [[_tr(5, 5) for _ in range(5)]]
    verdicts = [[V(True, r"\frac{3}{4}"), V(False, "12"), V(True, "0.75"), V(False, "12"), V(True, r"\dfrac34")]]
    raw = score_samples("toy", ["p"], trajs, verdicts, bootstrap_samples=10, equivalent=None)
    grouped = score_samples("toy", ["p"], trajs, verdicts, bootstrap_samples=10)
    assert raw.maj_at_k[5] == 0.0 and grouped.maj_at_k[5] == 1.0
    assert raw.maj_tie_rate[1] == grouped.maj_tie_rate[1] == 0.0
    assert grouped.maj_tie_rate[5] == 0.0 and grouped.summary()["maj@5_tie_rate"] == 0.0
    back = EvalResult.from_dict(json.loads(json.dumps(grouped.to_dict())))
    assert back.maj_tie_rate == grouped.maj_tie_rate
    old = grouped.to_dict()
    del old["maj_tie_rate"]  # files written before the tie rate existed still load
    assert EvalResult.from_dict(old).maj_tie_rate == {}


def test_maj_voting_key_keeps_the_spaces_that_carry_meaning():
    """Review r17: the voting key removed every space, so "12, 345" (two values, graded wrong)
    became the thousands number "12,345" and joined the correct "12345", and "x = 1 or x = 2"
    lost the spaces around "or" and no longer matched "2, 1". Runs of spaces now become one."""
    trajs = [[_tr(5, 5) for _ in range(5)]]
    verdicts = [[V(False, "12, 345"), V(True, "12345"), V(False, "12, 345"), V(True, "12,345"), V(False, "12, 345")]]
    assert score_samples("toy", ["p"], trajs, verdicts, bootstrap_samples=10).maj_at_k[5] == 0.0
    verdicts = [[V(False, "4"), V(True, "x = 1 or x = 2"), V(False, "4"), V(True, "2,  1"), V(True, "x=1 \\text{ or } x=2")]]
    assert score_samples("toy", ["p"], trajs, verdicts, bootstrap_samples=10).maj_at_k[5] == 1.0
    verdicts = [[V(True, " 12"), V(False, "7"), V(True, "12 ")]]  # leading/trailing spaces still vote together
    assert score_samples("toy", ["p"], [[_tr(5, 5)] * 3], verdicts, bootstrap_samples=10, equivalent=None).maj_at_k[3] == 1.0


def test_evaluate_scores_a_trajectory_the_budget_cut_as_training_does(tok, monkeypatch):
    """A box written before the budget ran out earns nothing in evaluation either (rStar2-Agent
    §4.3; kit.reward.verdict.cut_off, as VERL's validation through compute_score), so local and
    VERL pass@k agree. A trajectory that ends at max_turns with a tool call pending is not cut:
    its box is graded."""
    from kit.rollout import ScriptedBackend

    kinds = iter(["answer", "cut", "max_turns"])

    def script(context):
        if "<tool_response>" in context:  # the max_turns sample's last turn: this call never runs
            return "still \\boxed{42} " + call("print(7*6)")
        kind = next(kinds)  # first turns, one kind per sample
        if kind == "answer":
            return "6*7 = 42</reason> <answer> \\boxed{42} </answer>"
        if kind == "cut":  # boxes the right value, then rambles past the token budget
            return "\\boxed{42} then" + " and so on" * 400
        return "so \\boxed{42} " + call("print(6*7)")

    import kit.eval.evaluate as ev

    seen = []

    async def recorded(*a, **kw):
        groups = await rollout_batch(*a, **kw)
        seen.extend((t.finish_reason, int(t.truncated)) for t in groups[0])
        return groups

    rollout_batch = ev.rollout_batch
    monkeypatch.setattr(ev, "rollout_batch", recorded)
    r = evaluate(ScriptedBackend(tok, script), "toy", n=3, max_tokens=300, max_turns=2, tokenizer=tok,
                 executor=FakeExecutor(_evaluate_print), items=[BenchItem("toy", "0", "What is 6 * 7?", "42")],
                 max_concurrency=1, rollout_kwargs={"call_factory": lambda code, stdin: (code, stdin)},
                 bootstrap_samples=10)
    assert sorted(seen) == [("answer", 0), ("length", 1), ("max_turns", 0)]
    p = r.per_problem[0]
    assert sorted(zip(p["truncated"], p["correct"], p["answers"], strict=True)) == [(0, 1, "42"), (0, 1, "42"),
                                                                                 (1, 0, None)]
    assert r.avg_at_n == pytest.approx(2 / 3) and r.truncation_ratio == pytest.approx(1 / 3)
