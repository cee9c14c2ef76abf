"""RoC scores and selection: hand-computed cases, the release's text reading, and properties."""

import ast
import inspect
from itertools import pairwise
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

import kit.algo.roc as roc_module
import kit.algo.roc_penalties as roc_penalties_module
import kit.algo.roc_selection as roc_selection_module
from kit.algo import (
    RocParams,
    allocate,
    counters,
    p_err,
    p_format,
    p_total,
    release_p_err,
    release_p_format,
    roc_select,
    roc_step,
)
from kit.algo.roc_penalties import tool_failure_count
from kit.algo.roc_selection import select_positives

# ------------------------------------------------------------------ p_err / p_format


def test_p_err_hand_cases():
    #        no call | 1 of 2 fail | all fail | 1 fail of 3 with 1 infra | only infra
    calls = [0, 2, 3, 3, 2]
    fails = [0, 1, 3, 1, 0]
    infra = [0, 0, 0, 1, 2]
    assert p_err(calls, fails, infra).tolist() == [0.5, 0.5, 1.0, 0.5, 0.5]
    assert p_err([4], [0]).tolist() == [0.0]


def test_p_err_rejects_impossible_counts_naming_the_row():
    with pytest.raises(ValueError, match="row 1 has 3 failures"):
        p_err([1, 2], [0, 3])
    with pytest.raises(ValueError, match="n_tool_calls: negative count at row 0"):
        p_err([-1], [0])


def test_p_format_hand_cases_first_turn_counted():
    # no answer | one answer, single no-tool turn | 2 answers over 4 turns | 3 answers over 2 turns
    assert p_format([0, 1, 2, 3], [1, 1, 4, 2]).tolist() == [1.0, 0.0, 0.25, 1.0]
    with pytest.raises(ValueError, match="row 0 has 1 answer tags but 0 turns"):
        p_format([1], [0])


def test_p_total_switches():
    pe, pf = np.array([0.5, 0.0]), np.array([1.0, 0.25])
    assert p_total(pe, pf).tolist() == [1.5, 0.25]
    assert p_total(pe, pf, use_error_ratio=False).tolist() == [1.0, 0.25]
    assert p_total(pe, pf, use_answer_format=False).tolist() == [0.5, 0.0]


def _resp(*turns):
    """A decoded response as the release sees it: the first turn's header is in the prompt."""
    body = turns[0]
    for t in turns[1:]:
        body += "<|im_end|>\n<|im_start|>user\n" + t[0] + "<|im_end|>\n<|im_start|>assistant\n<reason>" + t[1]
    return body + "<|im_end|>"


def test_release_text_reading_reproduces_its_quirks():
    no_tool = _resp("<reason>2+2=4</reason> <answer>\\boxed{4}</answer>")
    clean = _resp("<tool_call>{}</tool_call>", ("<tool_response>\n4\n</tool_response>", "<answer>4</answer>"))
    exc = _resp("<tool_call>{}</tool_call>",
                ("<tool_response>\nNameError: x\n</tool_response>", "<answer>4</answer>"))
    timeout = _resp("c", ("<tool_response>\nTool call failure\nreason: worker_timeout\n</tool_response>",
                          "<answer>4</answer>"))
    bad_json = _resp("c", ("<tool_response>\nFailed to decode tool call: Expecting ','\n</tool_response>",
                           "<answer>4</answer>"))
    prints_error = _resp("c", ("<tool_response>\nerror bars: 0.1\n</tool_response>", "<answer>4</answer>"))
    texts = [no_tool, clean, exc, timeout, bad_json, prints_error]
    assert release_p_err(texts).tolist() == [0.5, 0.0, 1.0, 0.0, 0.0, 1.0]
    # the no-tool answer has no counted turn -> 1.0; the others have one counted turn -> 0.0
    assert release_p_format(texts).tolist() == [1.0, 0.0, 0.0, 0.0, 0.0, 0.0]
    # worst score for the correct no-tool answer (1.5), best for one clean call (0.0)
    assert p_total(release_p_err(texts), release_p_format(texts))[:2].tolist() == [1.5, 0.0]
    # the structured reading gives the no-tool answer p_format 0 and counts timeouts/bad JSON
    assert p_format([1], [1]).tolist() == [0.0]
    assert release_p_format(["<answer>1</answer> <answer>2"]).tolist() == [1.0]  # unbalanced


def test_counters_from_trajectory_objects_and_extra_fields():
    traj = SimpleNamespace(tool_calls=3, tool_errors={"exception": 1, "timeout": 1, "infra": 5},
                           infra_errors=0, answer_tags=1, turns=4)
    row = {"tool_calls": 2, "tool_errors": 1, "answer_tags": 0, "turns": 1}
    c = counters([traj, row])
    assert c["tool_failures"].tolist() == [2, 1]
    assert c["infra_errors"].tolist() == [0, 0] and c["turns"].tolist() == [4, 1]
    with pytest.raises(KeyError, match="trajectory 0 has no 'turns'"):
        counters([{"tool_calls": 1, "answer_tags": 1}])
    assert tool_failure_count({"malformed": 2, "memory": 1, "output": 1, "infra": 4}) == 4


def test_no_extractable_answer_is_a_format_failure():
    """Issue #30: one <answer> tag whose final box is abandoned (``answered`` False) gets p_format 1;
    rows that do not say (``answered`` missing or None) are read from their tags as before."""
    rows = [{"tool_calls": 1, "answer_tags": 1, "turns": 2, "answered": False},
            {"tool_calls": 1, "answer_tags": 1, "turns": 2, "answered": True},
            {"tool_calls": 1, "answer_tags": 1, "turns": 2, "answered": None},
            {"tool_calls": 1, "answer_tags": 1, "turns": 2}]
    c = counters(rows)
    assert c["answered"].tolist() == [False, True, True, True]
    assert p_format(c["answer_tags"], c["turns"], c["answered"]).tolist() == [1.0, 0.0, 0.0, 0.0]
    _, m = roc_step([1.0, 1.0, 0.0, 0.0], [0, 0, 0, 0], c, RocParams(group_size=2, min_positive=1, min_negative=1))
    assert m["p_format_mean_before"] == 0.25  # roc_step reads ``answered`` from the counters
    with pytest.raises(ValueError, match="answered"):
        p_format([1, 1], [1, 1], [True])


# ------------------------------------------------------------------ allocation


@pytest.mark.parametrize(
    ("n_pos", "n_neg", "G", "expected"),
    [
        (16, 16, 16, (8, 8)),
        (3, 29, 16, (2, 14)),   # 1.5 -> 2 (half to even); k_neg 14.5 -> 14 in the release too
        (5, 27, 16, (2, 14)),   # 2.5 -> 2, 13.5 -> 14 (the release's banker's rounding)
        (1, 31, 16, (1, 15)),   # round(15.5) = 16 negatives would leave none: min(2, 1) = 1 positive
        (31, 1, 16, (15, 1)),   # the single negative survives through min_negative
        (32, 0, 16, (16, 0)),   # all correct
        (0, 32, 16, (0, 16)),   # all wrong
        (2, 3, 16, (2, 3)),     # fewer rows than G: keep all
    ],
)
def test_allocate_hand_cases(n_pos, n_neg, G, expected):
    assert allocate(n_pos, n_neg, G) == expected


@pytest.mark.parametrize(
    ("n_pos", "n_neg", "G", "expected"),
    [
        (3, 7, 5, (2, 3)),   # issue #6: k_pos = round(#pos * G / 2G) = round(1.5) = 2 (rounding negatives gave 1)
        (5, 5, 5, (2, 3)),   # round(2.5) = 2
        (3, 3, 3, (2, 1)),   # round(1.5) = 2
    ],
)
def test_allocate_rounds_the_positive_share_for_odd_G(n_pos, n_neg, G, expected):
    assert allocate(n_pos, n_neg, G, min_positive=0, min_negative=0) == expected
    assert allocate(n_pos, n_neg, G, min_positive=0, min_negative=0)[0] == round(n_pos * G / (n_pos + n_neg))


def test_select_rejects_non_finite_rewards_naming_the_row():
    with pytest.raises(ValueError, match="reward of row 1 is nan"):
        roc_select([1.0, float("nan"), 0.0, 0.0], [0] * 4, [0.5] * 4, group_size=2, min_positive=1, min_negative=1)


def test_roc_params_reject_bad_settings_up_front():
    # a typo in sampler_kwargs.mode used to pass construction and fail after the first rollout
    with pytest.raises(ValueError, match="mode must be 'sample' or 'rank'"):
        RocParams(group_size=4, mode="ranked")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="exceeds group_size"):
        RocParams(group_size=2)
    with pytest.raises(ValueError, match="bad counts"):
        RocParams(group_size=4, min_positive=-1)


def test_allocate_rejects_minimums_larger_than_the_group():
    with pytest.raises(ValueError, match="exceeds group_size"):
        allocate(4, 4, 3, min_positive=2, min_negative=2)


# ------------------------------------------------------------------ selection: hand cases


def test_rank_mode_keeps_lowest_penalties_ties_in_rollout_order():
    # one group of 8, G = 4: positives at rows 0..3 with penalties, negatives rows 4..7
    rewards = [1, 1, 1, 1, 0, 0, 0, 0]
    pt = [1.5, 0.0, 0.5, 0.5, 2.0, 2.0, 2.0, 2.0]
    sel = roc_select(rewards, ["q"] * 8, pt, group_size=4, mode="rank", min_positive=1, min_negative=1)
    kept = sel.kept.tolist()
    assert len(kept) == 4 and [i for i in kept if i < 4] == [1, 2]  # 0.0 then the first 0.5
    assert sel.positives_kept == 2 and sel.negatives_kept == 2


def test_sample_mode_takes_zero_penalty_positives_first():
    rewards = [1, 1, 1, 1, 0, 0, 0, 0]
    pt = [0.0, 1.0, 0.0, 2.0, 1, 1, 1, 1]
    for seed in range(50):
        sel = roc_select(rewards, [0] * 8, pt, group_size=4, mode="sample", seed=seed)
        assert [i for i in sel.kept if i < 4] == [0, 2]


def test_all_correct_all_wrong_and_short_groups():
    G = 4
    rewards = [1] * 8 + [0] * 8 + [1, 0, 1]
    gids = ["all_ok"] * 8 + ["all_bad"] * 8 + ["short"] * 3
    pt = [0.0, 0.0, 0.5, 0.5, 1.0, 1.0, 1.5, 1.5] + [1.0] * 8 + [0.0] * 3
    sel = roc_select(rewards, gids, pt, group_size=G, mode="rank", drop_equal_reward_groups=False)
    kept = sel.kept.tolist()
    assert [i for i in kept if i < 8] == [0, 1, 2, 3]          # RoC chooses among positives
    assert len([i for i in kept if 8 <= i < 16]) == G          # uniform negatives
    assert [i for i in kept if i >= 16] == [16, 17, 18] and sel.short_groups == ["short"]
    dropped = roc_select(rewards, gids, pt, group_size=G, mode="rank", drop_equal_reward_groups=True)
    assert dropped.dropped_equal_reward == ["all_ok", "all_bad"] and dropped.kept.tolist() == [16, 17, 18]


def test_minimum_counts_raise_the_rare_side():
    # 1 positive of 8, G = 4: round(7 * 4 / 8) = 4 negatives would drop it; min(2, 1) keeps it
    rewards = [0, 0, 0, 1, 0, 0, 0, 0]
    sel = roc_select(rewards, [0] * 8, np.ones(8), group_size=4)
    assert 3 in sel.kept and len(sel.kept) == 4
    sel0 = roc_select(rewards, [0] * 8, np.ones(8), group_size=4, min_positive=0, min_negative=0)
    assert 3 not in sel0.kept


def test_selection_is_seeded_and_deterministic():
    rng = np.random.default_rng(0)
    rewards = rng.integers(0, 2, 64)
    gids = np.repeat(np.arange(4), 16)
    pt = rng.random(64) * 2
    a = roc_select(rewards, gids, pt, group_size=8, seed=11).kept
    b = roc_select(rewards, gids, pt, group_size=8, seed=11).kept
    c = roc_select(rewards, gids, pt, group_size=8, seed=12).kept
    assert a.tolist() == b.tolist() and a.tolist() != c.tolist()


def test_roc_step_metrics_hand_computed():
    # 1 prompt, 4 rows, G = 2; rows 0, 1 correct; row 0: 1 of 2 calls failed, row 1: 0 of 2
    counts = {"tool_calls": np.array([2, 2, 1, 0]), "tool_failures": np.array([1, 0, 1, 0]),
              "infra_errors": np.array([0, 0, 0, 0]), "answer_tags": np.array([1, 1, 0, 2]),
              "turns": np.array([3, 3, 2, 1])}
    params = RocParams(group_size=2, mode="rank", min_positive=1, min_negative=1)
    sel, m = roc_step([1, 1, 0, 0], ["p"] * 4, counts, params)
    assert sel.kept.tolist()[0] == 1                  # the clean positive (p_total 0 vs 0.5)
    assert m["tool_error_ratio_correct_before"] == pytest.approx(1 / 4)
    assert m["tool_error_ratio_correct_after"] == 0.0
    assert m["kept"] == 2 and m["sampled"] == 4 and m["positives_kept"] == 1


def test_roc_step_accepts_the_release_text_reading():
    counts = {k: np.zeros(4, dtype=int) for k in ("tool_calls", "tool_failures", "infra_errors")}
    counts.update(answer_tags=np.ones(4, dtype=int), turns=np.ones(4, dtype=int))
    pen = (np.array([0.5, 0.0, 0.5, 0.5]), np.array([1.0, 0.0, 1.0, 1.0]))
    sel, _ = roc_step([1, 1, 0, 0], [0] * 4, counts, RocParams(group_size=2, mode="rank", min_positive=1,
                                                                min_negative=1), penalties=pen)
    assert sel.kept.tolist()[0] == 1


# ------------------------------------------------------------------ properties


@settings(max_examples=150, deadline=None)
@given(
    G=st.integers(2, 12),
    n_groups=st.integers(1, 5),
    factor=st.sampled_from([1, 2]),
    mins=st.tuples(st.integers(0, 3), st.integers(0, 3)),
    mode=st.sampled_from(["sample", "rank"]),
    seed=st.integers(0, 2**16),
)
def test_property_exactly_G_per_group_with_proportions_kept(G, n_groups, factor, mins, mode, seed):
    min_pos, min_neg = mins
    if min_pos + min_neg > G:
        min_pos, min_neg = 0, 0
    rng = np.random.default_rng(seed)
    n = 2 * G if factor == 2 else G + rng.integers(1, G + 1)
    rewards = rng.integers(0, 2, n * n_groups).astype(float)
    gids = np.repeat(np.arange(n_groups), n)
    pt = rng.choice([0.0, 0.25, 0.5, 1.0, 1.5], n * n_groups)
    sel = roc_select(rewards, gids, pt, group_size=G, mode=mode, min_positive=min_pos,
                     min_negative=min_neg, drop_equal_reward_groups=False, seed=seed)
    assert len(set(sel.kept.tolist())) == sel.kept.size
    for g in range(n_groups):
        rows = np.flatnonzero(gids == g)
        kept = np.intersect1d(sel.kept, rows)
        assert kept.size == G
        n_pos = int((rewards[rows] > 0).sum())
        n_neg = n - n_pos
        k_pos = int((rewards[kept] > 0).sum())
        k_neg = G - k_pos
        ideal = n_pos * G / n
        raised = k_pos == min(min_pos, n_pos) or k_neg == min(min_neg, n_neg)
        assert abs(k_pos - ideal) <= 0.5 + 1e-9 or raised
        assert k_pos >= min(min_pos, n_pos) and k_neg >= min(min_neg, n_neg)


def _negative_inclusion_counts(selector_kept, n_seeds=2000):
    counts = np.zeros(16)
    for seed in range(n_seeds):
        counts[selector_kept(seed)] += 1
    return counts


def test_property_negatives_are_uniform_chi_square():
    # G = 8 of 16 rows, 4 positives: round(12 * 8 / 16) = 6 of 12 negatives (rows 4..15)
    rewards = np.array([1] * 4 + [0] * 12, dtype=float)
    pt = np.linspace(0.1, 1.9, 16)  # negatives' penalties must not matter

    def kit(seed):
        return roc_select(rewards, [0] * 16, pt, group_size=8, seed=seed).kept

    counts = _negative_inclusion_counts(kit)[4:]
    assert counts.sum() == 2000 * 6
    assert stats.chisquare(counts).pvalue > 1e-3
    # the same test rejects the release's rule (first k negatives in rollout order)
    release = _negative_inclusion_counts(lambda s: np.r_[np.arange(2), np.arange(4, 10)])[4:]
    assert stats.chisquare(release + 1e-9).pvalue < 1e-6


def test_property_positive_first_pick_follows_inverse_penalty():
    p = np.array([0.25, 0.5, 1.0, 1.5, 2.0])
    w = (1 / p) / (1 / p).sum()
    rng = np.random.default_rng(0)
    n = 6000
    picks = np.bincount([select_positives(p, 1, "sample", rng)[0] for _ in range(n)], minlength=5)
    assert stats.chisquare(picks, w * n).pvalue > 1e-3
    # rank mode would always take the first; the test would see that
    assert stats.chisquare(np.bincount([0] * n, minlength=5) + 1e-9, w * n).pvalue < 1e-6


def test_property_positive_inclusion_in_a_group_matches_sequential_draws():
    # G = 8 of 16 rows with 5 positives: k_neg = round(11 * 8 / 16 = 5.5) = 6, so k_pos = 2
    p = np.array([0.25, 0.5, 1.0, 1.5, 2.0])
    rewards = np.r_[np.ones(5), np.zeros(11)]
    pt = np.r_[p, np.ones(11)]
    w = 1 / p
    W = w.sum()
    exact = np.array([w[i] / W + sum(w[j] / W * w[i] / (W - w[j]) for j in range(5) if j != i) for i in range(5)])
    n = 3000
    inc = np.zeros(5)
    for seed in range(n):
        kept = roc_select(rewards, [0] * 16, pt, group_size=8, seed=seed).kept
        assert (kept < 5).sum() == 2
        inc[kept[kept < 5]] += 1
    assert stats.chisquare(inc, exact * n).pvalue > 1e-3
    assert all(a > b for a, b in pairwise(inc))  # lower penalty, more often kept


# ------------------------------------------------------------------ issue #17: the release's kept set, exactly


def _release_kept(rewards, uids, penalties, G, min_neg=2, min_pos=2):
    """The release's per-group loop after its PR #50, written out from the research note (§4.2):
    groups with fewer than G rows dropped, exactly G kept whole; else proportional counts with
    round() per side and the minimum guards; positives by penalty (stable), negatives in rollout
    order."""
    kept = []
    for uid in dict.fromkeys(uids):
        idx = [i for i, u in enumerate(uids) if u == uid]
        if len(idx) < G:
            continue
        if len(idx) == G:
            kept += idx
            continue
        neg = [i for i in idx if rewards[i] <= 0]
        pos = sorted((i for i in idx if rewards[i] > 0), key=lambda i: penalties[i])
        k_neg, k_pos = round(len(neg) * G / len(idx)), round(len(pos) * G / len(idx))
        if k_neg < min_neg and k_pos < min_pos:
            kept += idx
            continue
        if k_neg <= min(min_neg, len(neg)):
            k_neg = min(min_neg, len(neg))
            k_pos = G - k_neg
        if k_pos <= min(min_pos, len(pos)):
            k_pos = min(min_pos, len(pos))
            k_neg = G - k_pos
        assert k_pos + k_neg == G
        kept += pos[:k_pos] + neg[:k_neg]
    return sorted(kept)


def _release_text(rng, correct):
    """A decoded response the release's text reading scores: 0-3 tool responses (some with an
    error), 0-2 answer spans, extra assistant turns."""
    parts = []
    for _ in range(int(rng.integers(0, 4))):
        body = "NameError: x" if rng.random() < 0.4 else "42"
        parts.append(f"<tool_call>...</tool_call><|im_end|>\n<|im_start|>user\n<tool_response>\n{body}\n</tool_response>"
                     "<|im_end|>\n<|im_start|>assistant\n<reason>step")
    answers = int(rng.integers(0, 3))
    parts.append("".join(f"<answer>\\boxed{{{'7' if correct else '8'}}}</answer>" for _ in range(answers)))
    return "".join(parts) + "<|im_end|>"


@pytest.mark.parametrize("G, sizes", [(4, [8, 8, 6, 11]), (16, [32, 32, 32]), (8, [16, 13, 25, 9]), (6, [12, 7, 20])])
def test_release_options_reproduce_the_release_kept_set_exactly(G, sizes):
    """mode='rank' + negative_order='rollout' + the release's text reading keeps exactly the rows
    the release keeps, for even G and groups of any size above G (before: negatives were drawn at
    random, so the kept set differed whenever a group had more negatives than it kept)."""
    rng = np.random.default_rng(G)
    for trial in range(20):
        uids = [u for u, n in enumerate(sizes) for _ in range(n)]
        order = rng.permutation(len(uids))  # groups interleaved as a trainer batch may be
        uids = [uids[i] for i in order]
        rewards = (rng.random(len(uids)) < rng.uniform(0.2, 0.8)).astype(float)
        texts = [_release_text(rng, r > 0) for r in rewards]
        pe, pf = release_p_err(texts), release_p_format(texts)
        expected = _release_kept(list(rewards), uids, pe + pf, G)
        counts = {k: np.zeros(len(uids), dtype=np.int64) for k in ("tool_calls", "tool_failures", "answer_tags")}
        counts["turns"] = np.ones(len(uids), dtype=np.int64)
        params = RocParams(group_size=G, mode="rank", negative_order="rollout", drop_equal_reward_groups=False)
        sel, _ = roc_step(rewards, uids, counts, params, seed=trial, penalties=(pe, pf))
        assert sel.kept.tolist() == expected, (trial, G)


def test_negative_order_rollout_takes_the_first_negatives_and_is_read_from_config():
    rewards = [0, 1, 0, 0, 1, 0, 0, 1, 0, 0]  # 3 positives, 7 negatives, G = 5 -> k_pos 2 (round 1.5), k_neg 3
    sel = roc_select(rewards, [0] * 10, np.zeros(10), group_size=5, mode="rank", negative_order="rollout")
    assert sel.kept.tolist() == [0, 1, 2, 3, 4]
    cfg = SimpleNamespace(group_size=5, roc_mode="rank", roc_use_error_ratio=True, roc_use_answer_format=True,
                          min_positive=2, min_negative=2, drop_equal_reward_groups=True, roc_negative_order="rollout")
    assert RocParams.from_config(cfg).negative_order == "rollout"
    from kit.config import load

    algo = load("tiny", {"algorithm.roc_negative_order": "rollout"}, write=False).algorithm
    assert RocParams.from_config(algo).negative_order == "rollout"
    assert RocParams.from_config(load("tiny", write=False).algorithm).negative_order == "random"
    with pytest.raises(ValueError, match="negative_order must be 'random' or 'rollout'"):
        RocParams(negative_order="sorted")


def test_release_table_rows_unbalanced_answer_tags_and_truncated_last_turn():
    """The two p_format rows of the module's table of differences, on one trajectory each."""
    unbalanced = "<answer>7<|im_end|>\n<|im_start|>user\n<tool_response>\n1\n</tool_response><|im_end|>\n" \
                 "<|im_start|>assistant\n<reason>so <answer>\\boxed{7}</answer><|im_end|>"
    assert release_p_format([unbalanced]).tolist() == [1.0]
    assert p_format([2], [2]).tolist() == [0.5]  # the kit counts two <answer> tags over two turns
    # a truncated last turn (no <|im_end|>) is not a turn for the release: 2 answers over the one
    # counted turn (the first turn's header is in the prompt) -> 1.0, where counting it gives 0.5
    fb = "<|im_start|>user\n<tool_response>\n1\n</tool_response><|im_end|>\n"
    truncated = "call<|im_end|>\n" + fb + "<|im_start|>assistant\n<reason><answer>2</answer><|im_end|>\n" + fb + \
                "<|im_start|>assistant\n<reason>again <answer>2</answer> and then the budget ran out"
    assert release_p_format([truncated]).tolist() == [1.0]
    assert release_p_format([truncated.replace("budget ran out", "end<|im_end|>")]).tolist() == [0.5]
    assert p_format([2], [3]).round(3).tolist() == [0.333]  # the kit counts all three turns


@pytest.mark.parametrize("G", [2 * g for g in range(2, 17)])
def test_counts_match_the_release_for_every_even_G_and_group_size(G):
    for n in range(G + 1, 3 * G + 1):
        for n_pos in range(1, n):
            n_neg = n - n_pos
            k_neg, k_pos = round(n_neg * G / n), round(n_pos * G / n)
            assert k_neg + k_pos == G  # round(G - x) == G - round(x) for even G
            assert allocate(n_pos, n_neg, G) == _release_counts(n_pos, n_neg, G)


def _release_counts(n_pos, n_neg, G, mn=2, mp=2):
    n = n_pos + n_neg
    k_neg, k_pos = round(n_neg * G / n), round(n_pos * G / n)
    if k_neg <= min(mn, n_neg):
        k_neg = min(mn, n_neg)
        k_pos = G - k_neg
    if k_pos <= min(mp, n_pos):
        k_pos = min(mp, n_pos)
        k_neg = G - k_pos
    return k_pos, k_neg


def test_roc_defaults_are_written_once_in_the_algorithm_config():
    """The pure functions take their RoC defaults from kit.config.AlgorithmConfig (as RocParams
    does), so changing a default there changes it everywhere; no literal second copy (in any of
    the RoC modules: penalties, selection, the trainers' call)."""
    knobs = {"mode", "min_positive", "min_negative", "drop_equal_reward_groups", "negative_order",
             "use_error_ratio", "use_answer_format"}
    literal = []
    nodes = [n for m in (roc_module, roc_penalties_module, roc_selection_module)
             for n in ast.walk(ast.parse(inspect.getsource(m)))]
    assert sum(isinstance(n, ast.FunctionDef) and n.name in ("p_total", "allocate", "roc_select") for n in nodes) == 3
    for node in nodes:
        if isinstance(node, ast.FunctionDef):
            args = node.args.args + node.args.kwonlyargs
            defaults = [None] * (len(node.args.args) - len(node.args.defaults)) + node.args.defaults \
                + node.args.kw_defaults
            for a, d in zip(args, defaults, strict=True):
                if a.arg in knobs and d is not None and not (
                        isinstance(d, ast.Attribute) and isinstance(d.value, ast.Name) and d.value.id == "AlgorithmConfig"):
                    literal.append(f"{node.name}({a.arg}={ast.unparse(d)})")
    assert not literal, literal
