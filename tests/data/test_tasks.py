"""The tiny task family: seeded, distinct, held-out disjoint, answers right, demos well formed; the
family registry generates what the old if-chain did."""

import hashlib
import json
import random
import subprocess
import sys

import pytest

from kit import prompts
from kit.data import tasks
from kit.rollout.protocol import parse_tool_calls


def test_split_is_seeded_and_disjoint():
    a = tasks.make_split(300, 40, seed=3)
    b = tasks.make_split(300, 40, seed=3)
    assert a == b
    assert tasks.make_split(300, 40, seed=4).train != a.train
    train_q = {p.question for p in a.train}
    assert len(train_q) == 300
    assert not train_q & {p.question for p in a.heldout}
    # the held-out set does not move when the train size changes
    assert tasks.make_split(100, 40, seed=3).heldout == a.heldout


def test_every_family_and_level_reference_code_prints_the_answer():
    rng = random.Random(0)
    progs = []
    for fam in tasks.FAMILIES:
        for level in tasks.LEVELS:
            p = tasks.make_problem(fam, level, rng)
            assert p.answer.lstrip("-").isdigit(), p
            progs.append(p)
    # run the reference programs in a plain interpreter: they must print exactly the answer
    script = "import sys,io,contextlib,json\nout=[]\n"
    for p in progs:
        script += (f"sys.stdin=io.StringIO({p.input!r})\nbuf=io.StringIO()\n"
                   f"with contextlib.redirect_stdout(buf): exec({p.code!r}, {{}})\nout.append(buf.getvalue().strip())\n")
    script += "print(json.dumps(out))"
    res = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout) == [p.answer for p in progs]


def test_answers_are_short_enough_to_copy_and_to_verify():
    rng = random.Random(7)
    for fam in tasks.FAMILIES:
        for level in tasks.LEVELS:
            for _ in range(40):
                p = tasks.make_problem(fam, level, rng)
                assert 1 <= len(p.answer) <= tasks.MAX_ANSWER_DIGITS, p


def test_levels_grow_harder():
    # higher levels: longer numbers in the question (more to copy) on average
    rng = random.Random(1)
    digits = {}
    for level in tasks.LEVELS:
        qs = [tasks.make_problem(f, level, rng).question for f in tasks.FAMILIES for _ in range(20)]
        digits[level] = sum(c.isdigit() for q in qs for c in q) / len(qs)
    assert digits[1] < digits[2] < digits[3]


def test_demo_kinds_shares_are_exact():
    kinds = tasks.demo_kinds(1000, error_fraction=0.25, direct_fraction=0.2, seed=0)
    assert kinds.count("direct") == 200
    assert kinds.count("tool_error") == 200
    assert kinds.count("tool") == 600
    with pytest.raises(ValueError, match="demo_error_fraction"):
        tasks.demo_kinds(10, 1.5, 0.0, 0)


def test_demos_parse_with_the_rollout_parser():
    rng = random.Random(2)
    split = tasks.make_split(60, 0, seed=0)
    for p in split.train:
        for kind in tasks.DEMO_KINDS:
            d = tasks.make_demo(p, kind, rng)
            for text, call in d.turns:
                parsed = parse_tool_calls(text + "\n" + tasks.tool_call_text(call))
                assert len(parsed) == 1 and parsed[0].error is None
                assert (parsed[0].code, parsed[0].input) == (call.code, call.input)
            assert d.final.count(prompts.ANSWER_OPEN) == 1
            assert f"\\boxed{{{p.answer}}}" in d.final
            if kind == "tool_error":
                assert d.turns[0][1].code != p.code and d.turns[1][1].code == p.code
            assert len(d.turns) == {"tool": 1, "tool_error": 2, "direct": 0}[kind]


def test_broken_first_calls_really_fail():
    rng = random.Random(5)
    codes = []
    for fam in tasks.FAMILIES:
        p = tasks.make_problem(fam, 1, rng)
        for _ in range(3):
            codes.append((tasks.make_demo(p, "tool_error", rng).turns[0][1], p))
    for call, _p in codes:
        res = subprocess.run([sys.executable, "-c", call.code], input=call.input, capture_output=True, text=True,
                             timeout=30)
        assert res.returncode != 0, call.code
        assert "Error" in res.stderr


def test_unknown_family_and_level_are_rejected():
    with pytest.raises(ValueError, match="unknown task family"):
        tasks.generate(3, 0, families=("nope",))
    with pytest.raises(ValueError, match="level"):
        tasks.make_problem("product", 7, random.Random(0))


#: sha256 (first 16 hex) of the problems' JSON, computed with the if-chain generator of main at 7eeac50
#: (before the registry): 8 seeds x 12 problems per family, 8 seeds x 40 mixed, one split (30 + 10, seed 3).
OLD_HASHES = {
    "product": "6206c67b17fb51e3", "digit_sum_factorial": "277f796420f6d00b", "divisor_count": "b3deff9fd322c4f4",
    "mod_pow": "c3eeb755a1dcc2f1", "gcd_lcm": "1b66fea224cc608d", "prime_count": "74a38b368743cafe",
    "range_sum": "9a69c4b1b4d37ac4", "all": "1ed0049df10438c4", "split": "7f1c7e9d44bdd2bf",
}


def _digest(problems) -> str:
    return hashlib.sha256(json.dumps([p.to_dict() for p in problems], sort_keys=True).encode()).hexdigest()[:16]


def test_the_registry_generates_what_the_if_chain_did_bit_for_bit():
    assert tasks.FAMILIES == tuple(tasks.REGISTRY) == tuple(k for k in OLD_HASHES if k not in ("all", "split"))
    got = {fam: _digest([p for s in range(8) for p in tasks.generate(12, s, families=(fam,))]) for fam in tasks.FAMILIES}
    got["all"] = _digest([p for s in range(8) for p in tasks.generate(40, s)])
    split = tasks.make_split(30, 10, 3)
    got["split"] = _digest([*split.train, *split.heldout])
    assert got == OLD_HASHES


def test_an_unknown_family_names_the_registered_ones_and_a_new_one_is_one_function(monkeypatch):
    with pytest.raises(ValueError, match=r"unknown task family 'nope' \(config data.task_families\); registered: "
                                         r"product, digit_sum_factorial, .*range_sum"):
        tasks.generate(3, 0, families=("nope",))
    with pytest.raises(ValueError, match="registered twice"):
        tasks.register_family("product")(lambda level, rng: ("", 0, "", ""))
    monkeypatch.setattr(tasks, "REGISTRY", dict(tasks.REGISTRY))
    tasks.register_family("square")(lambda level, rng: (f"What is {(n := rng.randint(10, 99))}^2?", n * n,
                                                        f"print({n} ** 2)", ""))
    ps = tasks.generate(5, 0, families=("square",))
    assert [p.family for p in ps] == ["square"] * 5 and all(int(p.answer) == int(p.code[6:8]) ** 2 for p in ps)


def test_preambles_vary_the_opening_and_zero_keeps_earlier_demos():
    """data.demo_preamble_max (issue #45): 0 draws exactly what the demos drew before the key existed (one
    opener per turn, the break first), so earlier runs' demos are unchanged; 3 opens tool demos with 0-3
    distinct reasoning sentences, every count seen, the opener last."""
    p = tasks.make_split(1, 0, seed=0).train[0]
    for kind, draws in (("tool", lambda r: [r.choice(tasks._OPENERS)]),
                        ("tool_error", lambda r: [tasks._break(p.code, r), r.choice(tasks._OPENERS), r.choice(tasks._FIXES)])):
        for seed in range(20):
            old, new = random.Random(seed), random.Random(seed)
            expected = draws(old)
            d = tasks.make_demo(p, kind, new, 0)
            assert d.turns[0][0] == expected[1 if kind == "tool_error" else 0] and new.getstate() == old.getstate()
    rng, counts = random.Random(1), set()
    for _ in range(200):
        text = tasks.make_demo(p, "tool", rng, 3).turns[0][0]
        opener = next(o for o in tasks._OPENERS if text.endswith(o))
        pre = [s for s in tasks._PREAMBLE if s in text[: len(text) - len(opener)]]
        assert text == " ".join([*sorted(pre, key=text.index), opener])
        counts.add(len(pre))
    assert counts == {0, 1, 2, 3}
    with pytest.raises(ValueError, match="demo_preamble_max"):
        tasks.make_demo(p, "tool", random.Random(0), 7)
