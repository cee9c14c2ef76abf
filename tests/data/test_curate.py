"""Curation filters, funnel arithmetic, consistency filter, stage-3 hard subset, parquet output."""

import pandas as pd
import pytest

from kit.config import DataConfig
from kit.config.paths import data_dir
from kit.data.curate import (
    FILTERS,
    AnswerTooLarge,
    build_hard_subset,
    consistency_filter,
    curate,
    curate_from_config,
    funnel_table,
    parse_integer_answer,
    write_curated,
)
from kit.data.decontam import NgramIndex
from kit.data.pools import Problem


@pytest.mark.parametrize("raw, value", [
    ("42", 42), ("+5", 5), ("-3", -3), ("05", 5), ("000", 0), ("1,000", 1000), ("12,345,678", 12345678),
    ("1\\,000", 1000), ("1{,}000", 1000), ("$42$", 42), ("\\boxed{17}", 17), ("\\(8\\)", 8),
    ("104924.0", 104924), ("1e3", 1000), (" 7 ", 7),
    ("-0", 0), ("3.0", 3), ("1 000", 1000), ("\u22125", -5), ("$\u221212$", -12), ("\u22121,000", -1000),
])
def test_integer_answers_accepted(raw, value):
    assert parse_integer_answer(raw) == value


@pytest.mark.parametrize("raw", [
    "3/4", "\\frac{1}{2}", "2^{10}", "\\sqrt{2}", "336^\\circ", "12 cm", "0.5", "1,13717420,8", "1,00",
    "", "x=3", "5a411d7b", "1.25e1",
])
def test_non_integers_rejected(raw):
    assert parse_integer_answer(raw) is None


def test_too_large_raises_without_materialising():
    with pytest.raises(AnswerTooLarge):
        parse_integer_answer("6.5e27330467")  # report §4.2's example; must return at once
    with pytest.raises(AnswerTooLarge):
        parse_integer_answer("1" * 19, max_digits=18)
    assert parse_integer_answer("1" * 18, max_digits=18) == int("1" * 18)
    assert parse_integer_answer("-0000123", max_digits=3) == -123  # leading zeros are not digits


def _p(src, i, text, ans, **meta):
    return Problem(src, str(i), text, ans, meta)


def test_funnel_counts_each_filter_and_adds_up():
    bench = "a completely unique benchmark sentence about seven purple elephants dancing in the rain"
    pools = {
        "a": [_p("a", 0, "Compute two plus two please now.", "4"),
              _p("a", 1, "Compute  two plus TWO please now!", "4"),                 # duplicate of a/0
              _p("a", 2, "What fraction is one half of one?", "1/2"),              # non_integer
              _p("a", 3, "How big is it", "99999999999999999999"),                 # too_large
              _p("a", 4, "No answer here", " "),                                   # missing_answer
              _p("a", 5, "Say: about seven purple elephants dancing in the rain today", "7")],  # decontaminated
        "pe": [_p("pe", 1, "Read names.txt and sum", "5", needs_file=True, md5_ok=True),
               _p("pe", 2, "Count things", "6", needs_file=False, md5_ok=False, md5_known=True),
               _p("pe", 3, "Compute two plus two please now", "4", needs_file=False, md5_ok=True)],  # dup across pools
        "aime": [_p("aime", "2024_AIME_I_1", "A new problem nobody has seen", "12", year=2024),
                 _p("aime", "2019_AIME_I_1", "An old problem about cubes", "12", year=2019)],
    }
    idx = NgramIndex({"bench": [("0", bench)]}, 8)
    r = curate(pools, max_answer_digits=18, index=idx, benchmark_years=(2024,))
    c = r.counts
    assert c["a"] == {"in": 6, "missing_answer": 1, "decontaminated": 1, "needs_file": 0, "answer_unconfirmed": 0,
                      "non_integer": 1, "too_large": 1, "duplicate": 1, "out": 1}
    assert c["pe"]["needs_file"] == 1 and c["pe"]["answer_unconfirmed"] == 1 and c["pe"]["duplicate"] == 1
    assert c["aime"]["decontaminated"] == 1 and c["aime"]["out"] == 1
    assert [p.uid for p in r.problems] == ["a/0", "aime/2019_AIME_I_1"]
    assert len(r.removed) == sum(c[p][f] for p in c for f in FILTERS)
    table = funnel_table(c)
    assert table.loc["total", "in"] == 11 and table.loc["total", "out"] == 2
    assert (table["in"] - table[list(FILTERS)].sum(axis=1) == table["out"]).all()


def test_funnel_table_rejects_inconsistent_counts():
    bad = {"x": {"in": 3, **{f: 0 for f in FILTERS}, "out": 2}}
    with pytest.raises(ValueError, match="'x'"):
        funnel_table(bad)


def test_consistency_filter_two_of_sixteen():
    probs = [_p("s", i, f"q{i}", "10") for i in range(4)]
    answers = {"s/0": ["10", "10"] + ["3"] * 14,           # 2 of 16 match -> kept
               "s/1": ["10"] + [None] * 15,                # 1 of 16 -> dropped
               "s/2": ["010", "+10", "1,0"] + ["9"] * 13}  # integer normalisation: 2 match -> kept
    kept, stats = consistency_filter(probs, answers, min_matches=2)
    assert [p.id for p in kept] == ["0", "2"]
    assert stats == {"in": 4, "no_samples": 1, "inconsistent": 1, "out": 2}


def test_hard_subset_drops_only_fully_solved():
    probs = ["p0", "p1", "p2", "p3"]
    hard, stats = build_hard_subset(probs, [8, 7, 0, 8], n=8)
    assert hard == ["p1", "p2"] and stats == {"in": 4, "solved_all": 2, "out": 2, "solved_none": 1}
    calls = []

    def solver(items, n):
        calls.append((list(items), n))
        return [n if x.endswith("0") else 1 for x in items]

    hard, _ = build_hard_subset(probs, solver, n=4)
    assert hard == ["p1", "p2", "p3"] and calls == [(probs, 4)]
    with pytest.raises(ValueError, match="outside"):
        build_hard_subset(probs, [9, 0, 0, 0], n=8)
    with pytest.raises(ValueError, match="3 solve counts for 4"):
        build_hard_subset(probs, [1, 2, 3], n=8)


@pytest.mark.skipif(not (data_dir() / "train").is_dir(), reason="no shared data")
@pytest.mark.slow  # over ~3 s: make test, not the inner loop (make test-fast)
def test_real_curation_removes_benchmark_rows_and_writes_parquet(tmp_path):
    r = curate_from_config(DataConfig())
    table = funnel_table(r.counts)
    assert table.loc["total", "in"] == 17917 + 7473 + 476 + 982 + 5
    reasons = {uid: (f, d) for uid, f, d in r.removed}
    bench_rows = [u for u in reasons if u.startswith(("aime_history/2024_", "aime_history/2025_"))]
    assert len(bench_rows) == 64 and all(reasons[u][0] == "decontaminated" for u in bench_rows)
    # AIME 2024 II / 2025 are caught by n-grams, not only by their year
    assert all("'" in reasons[u][1] for u in bench_rows if "_AIME_" in u)
    # near misses survive decontamination: most AIME 2023 problems are not benchmark problems
    # (many of them leave later as duplicates of DAPO rows, which hold old AIME problems)
    y2023 = [u for u in reasons if u.startswith("aime_history/2023_")]
    kept = {p.uid for p in r.problems}
    not_decontaminated = sum(reasons[u][0] != "decontaminated" for u in y2023) + sum(
        u.startswith("aime_history/2023_") for u in kept)
    assert not_decontaminated >= 20
    assert all(parse_integer_answer(p.answer) is not None for p in r.problems)
    paths = write_curated(tmp_path, r)
    df = pd.read_parquet(paths["parquet"])
    assert len(df) == table.loc["total", "out"] == len(r.problems)
    assert df.reward_model.iloc[0]["ground_truth"] == df.answer.iloc[0]
    assert pd.read_csv(paths["funnel"], index_col=0).loc["total", "out"] == len(df)


def test_consistency_filter_over_backend_samples():
    """sample_answers runs the agent loop with a scripted backend; wrong labels are filtered."""
    import json

    from kit import prompts
    from kit.data.curate import sample_answers
    from kit.models import train_tokenizer
    from kit.rollout import ScriptedBackend, run_coroutine

    tok = train_tokenizer([prompts.render_prompt(f"Add {a} and {a}.") + f"</reason> <answer> \\boxed{{{2 * a}}} "
                           "</answer>" + prompts.IM_END for a in range(20)], vocab_size=400)
    seen = {}

    def script(context):
        a = int(context.split("Add ")[-1].split(" ")[0])
        seen[a] = seen.get(a, 0) + 1
        value = 2 * a if seen[a] % 4 else 999  # one in four samples is wrong
        return f"easy</reason> <answer> \\boxed{{{value}}} </answer>"

    problems = [_p("t", 0, "Add 3 and 3.", "6"), _p("t", 1, "Add 5 and 5.", "11")]  # second label is wrong
    answers = run_coroutine(sample_answers(ScriptedBackend(tok, script), problems, tokenizer=tok, executor=None, n=8,
                                      max_tokens=64, max_turns=2))
    assert sorted(answers["t/0"]) == ["6"] * 6 + ["999"] * 2
    kept, stats = consistency_filter(problems, answers, min_matches=2)
    assert [p.uid for p in kept] == ["t/0"] and stats["inconsistent"] == 1
    json.dumps(answers)


def test_write_hard_subset_from_curated_parquet(tmp_path):
    from kit.data.curate import CurationResult, write_hard_subset

    probs = [Problem("s", str(i), f"problem {i}", str(i), {}) for i in range(5)]
    counts = {"s": {"in": 5, **{f: 0 for f in FILTERS}, "out": 5}}
    write_curated(tmp_path, CurationResult(probs, counts))
    path, stats = write_hard_subset(tmp_path, [8, 3, 8, 0, 7], n=8)
    df = pd.read_parquet(path)
    assert path.name == "hard.parquet" and df.id.tolist() == ["1", "3", "4"]
    assert stats["solved_all"] == 2 and df.reward_model.iloc[0]["ground_truth"] == "1"
    with pytest.raises(FileNotFoundError, match="write_curated"):
        write_hard_subset(tmp_path / "nowhere", [1])
