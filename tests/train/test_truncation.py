"""Issue #44 part 7: a trajectory the budget cut is a failure (reward 0) whatever it boxed before the
cut (rStar2-Agent §4.3, no overlong filtering), in the local trainer, in VERL's reward function,
and as the explorer's finish column says."""

from doubles import FakeExecutor, Res, pair

from kit.config import RolloutConfig
from kit.explore import render
from kit.models import train_tokenizer
from kit.reward import compute_score, compute_score_batch, verify
from kit.reward.verdict import Verdict, cut_off
from kit.rollout import ScriptedBackend, run_coroutine, run_trajectory
from kit.train.rollouts import cut_truncated

TEXT = "so the answer is \\boxed{42} and now let me double check it once more with a long and slow argument " * 4


def _trajectory(budget):
    tok = train_tokenizer([TEXT, "What is 6 * 7?"], vocab_size=300)
    ex = FakeExecutor(lambda code, stdin: Res("ok", stdout="42\n"))
    cfg = RolloutConfig(max_prompt_tokens=256, max_response_tokens=400, max_turns=2)
    return run_coroutine(run_trajectory(ScriptedBackend(tok, [TEXT]), tok, "What is 6 * 7?", ex, cfg,
                                        call_factory=pair, max_response_tokens=budget))


def test_a_box_before_the_cut_earns_nothing():
    cut = _trajectory(40)
    assert cut.truncated and cut.finish_reason == "length"
    assert "\\boxed{42}" in cut.response_text
    v = verify("42", cut.response_text)
    assert v.correct  # the grade alone would reward the box written before the cut
    (out,) = cut_truncated([v], [cut])
    assert (out.correct, out.reason, out.detail, out.score) == (False, "no_answer", "truncated", 0.0)


def test_a_finished_trajectory_keeps_its_verdict():
    done = _trajectory(400)
    assert not done.truncated
    v = verify("42", done.response_text)
    assert cut_truncated([v], [done]) == [v] and v.correct


def test_cut_off_is_a_zero_whatever_the_grade():
    for v in (Verdict(True, "correct", "42", 0.1), Verdict(False, "wrong", "41", 0.1),
              Verdict(False, "infra_error", "42", 0.1)):
        assert cut_off(v) == Verdict(False, "no_answer", None, 0.1, "truncated")


def test_verl_reward_function_reads_the_loop_s_truncated_field():
    resp = "so \\boxed{42} and then I kept going until the budget ran o"
    assert compute_score("dapo", resp, 42, {"truncated": False})["score"] == 1.0
    assert compute_score("dapo", resp, 42)["score"] == 1.0
    cut = compute_score("dapo", resp, 42, {"truncated": True})
    assert (cut["score"], cut["reason"], cut["extracted"]) == (0.0, "no_answer", "")
    batch = compute_score_batch(["dapo"] * 2, [resp, resp], [42, 42], [{"truncated": True}, None])
    assert [d["score"] for d in batch] == [0.0, 1.0]


def test_the_explorer_s_finish_column_names_the_cut_and_the_rule():
    base = {"traj_index": 0, "reward": 0.0, "p_err": 0.0, "p_format": 0.0, "p_total": 0.0, "kept": True,
            "advantage": -1.0, "tool_calls": 0, "tool_errors": {}, "roc_reason": "", "response_ids": [1, 2],
            "response_mask": [1, 1]}
    cut = render.group_table_html([{**base, "finish_reason": "length", "truncated": True}])
    done = render.group_table_html([{**base, "finish_reason": "answer", "truncated": False}])
    assert "length <span title='" in cut and "✂ cut" in cut and "reward 0 whatever it boxed" in cut
    assert "✂" not in done and "answer</td>" in done
