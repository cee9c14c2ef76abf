"""Search through the kit's agent loop with a scripted policy; pairs, transition, revision masks,
the alpha schedule (kit/studies/agent_r/)."""

import random

import pytest
from ar_doubles import BAD_CALL, GOOD_CALL, Task, TwoWay, fake_grade, sandbox
from doubles import call

from kit import prompts
from kit.config import RolloutConfig
from kit.rollout import ScriptedBackend, run_coroutine
from kit.studies.agent_r import iterate, revision
from kit.studies.agent_r.replay import turn_bounds
from kit.studies.agent_r.search import SearchParams, search

TASK = Task("t0", "What is 6 * 7?", "42")
RCFG = RolloutConfig(max_prompt_tokens=512, max_response_tokens=400, max_turns=3)


def _search(tok, simulations=4, width=2):
    ex = sandbox()
    p = SearchParams(simulations=simulations, width=width, c_uct=1.0, max_response_tokens=400, max_turns=3)
    trees, cost = run_coroutine(search(ScriptedBackend(tok, TwoWay()), tok, [TASK], ex, p, RCFG, graded=fake_grade))
    return trees[0], cost, ex


def test_search_builds_a_tree_with_a_good_and_a_bad_branch(tok):
    tree, cost, ex = _search(tok)
    assert cost["rollouts"] == 4 and len(tree.trajectories) == 4
    # round 1 expands the root (a good and a broken call); round 2 selects by UCT the child with
    # Q = 1 (the bad one has Q = 0) and expands it: two more correct answers after the good call
    assert sorted(tree.rewards) == [0.0, 1.0, 1.0, 1.0]
    good, bad = sorted(tree.root.children, key=lambda c: c.failed_call)
    assert len(tree.root.children) == 2 and bad.failed_call and not good.failed_call
    assert (tree.root.visits, good.visits, good.q, bad.visits, bad.q) == (4, 3, 1.0, 1, 0.0)
    assert good.expansions == 2 and len(good.children) == 1  # the two answers were identical: merged
    # round 2 expanded a depth-1 node: its prefix was replayed, its call answered from the record
    assert cost["replayed_turns"] >= 1 and cost["replayed_calls"] >= 1
    assert cost["live_calls"] == sum(len(b) for b in ex.batches)


def test_revision_row_masks(tok):
    tree, _, _ = _search(tok)
    pairs = revision.find_pairs(tree, alpha=1.0, beta=0.5, max_pairs=2)
    assert pairs and all(tree.rewards[p.good] == 1.0 and tree.rewards[p.bad] == 0.0 for p in pairs)
    pair = pairs[0]
    t = revision.transition_turn(tree, pair, "first_failed_call", 0.5)
    assert t == 0  # the broken call is the bad branch's first turn
    row = revision.revision_row(tree, pair, t, revision.REVISION_SIGNALS[0], tok)
    seg = {k: (s, e) for k, s, e in row.segments}
    assert list(seg) == ["prompt", "bad", "signal", "good"]  # shared prefix = the prompt (depth 0)
    assert len(row.ids) == len(row.mask)
    for k in ("prompt", "bad"):
        assert sum(row.mask[slice(*seg[k])]) == 0, k  # no loss before the revision signal
    # the signal carries loss (issue #46: the reference trains the revision turn), all of it; v1 rows kept none
    assert row.mask[slice(*seg["signal"])] == [1] * (seg["signal"][1] - seg["signal"][0])
    v1 = revision.revision_row(tree, pair, t, revision.REVISION_SIGNALS[0], tok, train_signal=False)
    assert v1.ids == row.ids and sum(v1.mask[slice(*seg["signal"])]) == 0
    assert v1.mask[:seg["signal"][0]] == row.mask[:seg["signal"][0]] and v1.mask[seg["good"][0]:] == row.mask[seg["good"][0]:]
    good = tree.trajectories[pair.good]
    assert row.mask[seg["good"][0]:] == good.response_mask  # loss after it: model tokens only
    assert row.ids[seg["good"][0]:] == good.response_ids
    text = lambda k: tok.decode(row.ids[slice(*seg[k])], skip_special_tokens=False)  # noqa: E731
    assert "pritn" in text("bad") and "NameError" in text("bad")  # the action and its observation
    assert text("signal").strip() == revision.REVISION_SIGNALS[0]
    assert "print(6*7)" in text("good") and "pritn" not in text("good")
    bad = tree.trajectories[pair.bad]
    assert seg["bad"][1] - seg["bad"][0] == turn_bounds(bad)[0][2]  # through its feedback block


def test_rows_of_the_two_arms(tok):
    tree, _, _ = _search(tok)
    r_rows, r_counts = iterate.build_rows([tree], tok, arm="agent_r", alpha=1.0, beta=0.5, rule="first_failed_call",
                                          max_pairs=2, seed=0)
    g_rows, g_counts = iterate.build_rows([tree], tok, arm="good_only", alpha=1.0, beta=0.5,
                                          rule="first_failed_call", max_pairs=2, seed=0)
    assert g_counts["good"] == r_counts["good"] == 1  # two identical good trajectories count once
    assert r_counts["revision"] >= 1 and g_counts["revision"] == 0
    assert {r.kind for r in g_rows} == {"good"} and "revision" in {r.kind for r in r_rows}
    for arm in ("x", "null"):  # the null arm has no rows of its own
        with pytest.raises(ValueError, match="arm"):
            iterate.build_rows([tree], tok, arm=arm, alpha=1, beta=0.5, rule="value_drop", max_pairs=1, seed=0)
    with pytest.raises(ValueError, match="rule"):
        revision.tree_rows(tree, tok, alpha=1.0, beta=0.5, rule="actor", max_pairs=1, rng=random.Random(0))


class LateAnswer(TwoWay):
    """TwoWay, but after the broken call's error it makes a second, working call before answering wrong: the bad
    branch has two observed turns, so timely and direct revision cut at different turns."""

    def __call__(self, context: str) -> str:
        if "<tool_response>" in context and "NameError" in context.split("<tool_response>")[-1]:
            return "again " + call("print(6*7)")
        if "NameError" in context:
            return "so</reason> <answer> \\boxed{1} </answer>" + prompts.IM_END
        return super().__call__(context)


def test_direct_revision_cuts_at_the_bad_branchs_last_observation(tok):
    p = SearchParams(simulations=4, width=2, c_uct=1.0, max_response_tokens=400, max_turns=3)
    trees, _ = run_coroutine(search(ScriptedBackend(tok, LateAnswer()), tok, [TASK], sandbox(), p, RCFG,
                                    graded=fake_grade))
    tree = trees[0]
    pair = revision.find_pairs(tree, alpha=1.0, beta=0.5, max_pairs=2)[0]
    bad, good = tree.trajectories[pair.bad], tree.trajectories[pair.good]
    assert len(turn_bounds(bad)) == 3  # broken call, working call, wrong answer
    assert revision.transition_turn(tree, pair, "first_failed_call", 0.5) == 0
    assert revision.last_observed_turn(tree, pair) == 1  # the final answer has no observation after it
    timely = revision.revision_row(tree, pair, 0, revision.REVISION_SIGNALS[0], tok)
    direct = revision.revision_row(tree, pair, 1, revision.REVISION_SIGNALS[0], tok)
    seg = {k: (s, e) for k, s, e in direct.segments}
    assert direct.ids[:seg["signal"][0]] == bad.prompt_ids + bad.response_ids[:turn_bounds(bad)[1][2]]
    text = tok.decode(direct.ids[slice(*seg["bad"])], skip_special_tokens=False)
    assert "pritn" in text and "again" in text and "boxed{1}" not in text  # both calls and their feedback, no answer
    assert seg["signal"][0] > {k: s for k, s, _ in timely.segments}["signal"]  # later than the timely cut
    assert direct.ids[seg["good"][0]:] == good.response_ids == timely.ids[-len(good.response_ids):]
    assert direct.mask[seg["signal"][0]:] == timely.mask[-(len(direct.ids) - seg["signal"][0]):]  # same loss after
    assert sum(direct.mask[:seg["signal"][0]]) == 0  # nothing before the signal is imitated
    rows = {arm: iterate.build_rows([tree], tok, arm=arm, alpha=1.0, beta=0.5, rule="first_failed_call",
                                    max_pairs=2, seed=0) for arm in ("agent_r", "direct")}
    assert rows["direct"][1] == rows["agent_r"][1]  # the same pairs, the same skips, the same row counts
    assert [r.transition for r in rows["direct"][0] if r.kind == "revision"] == \
        [revision.last_observed_turn(tree, q) for q in revision.find_pairs(tree, 1.0, 0.5, 2)]


def test_alpha_schedule_and_mix():
    assert [iterate.alpha_at((0.5, 0.7, 1.0), k) for k in (1, 2, 3, 4)] == [0.5, 0.7, 1.0, 1.0]
    assert iterate.mix_fraction(0.2) == pytest.approx(1 / 6)
    assert [t for t in iterate.task_slice(list("abcde"), 2, 3)] == ["e", "a"]
    with pytest.raises(ValueError):
        iterate.alpha_at((0.5,), 0)


def test_calls_are_real_strings():
    assert "pritn" in BAD_CALL and "print(6*7)" in GOOD_CALL


def test_the_verl_parquet_carries_general_data_at_eta_per_agent_r_row():
    from kit.studies.agent_r.parquet import general_share

    general = [([i], [1]) for i in range(100)]
    mix = general_share(general, 20, 0.2, seed=3)
    assert len(mix) == 4 and len(set(map(str, mix))) == 4 and mix == general_share(general, 20, 0.2, seed=3)
    assert general_share(general, 2, 0.2) and len(general_share(general, 2, 0.2)) == 1  # at least one row
    assert general_share(general, 20, 0.0) == [] and general_share([], 20, 0.2) == []


def test_the_coloured_view_marks_the_trained_revision_signal(tok):
    """Issue #46 review: revisions.jsonl said loss 0 for the signal although the row trains it; the view reads the mask."""
    from kit.studies.agent_r.chain import revision_json
    from kit.studies.agent_r.revision import RevisionRow

    segs = [("prompt", 0, 2), ("bad", 2, 4), ("signal", 4, 6), ("good", 6, 10)]
    for trained in (1, 0):
        row = RevisionRow(list(range(10, 20)), [0, 0, 0, 0, trained, trained, 1, 1, 0, 1], segs, "revision", "t", 1, "rs")
        loss = {s["kind"]: s["loss"] for s in revision_json(row, tok)["segments"]}
        assert loss["signal"] == trained and loss["bad"] == 0 and loss["prompt"] == 0
        assert loss["good"] == 1 and loss["feedback"] == 0  # the continuation split by its mask
