"""Property test: random and adversarial LaTeX never make a call run past the verifier's bound, and
the pool stays healthy (issue #4, Measure). The bound: the item's CPU limit decides a timeout, and a
worker the machine starves is stopped at ``wall_factor x timeout_s`` wall seconds and retried once
(issue #41), so no call takes longer than two such attempts plus a worker start."""

import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kit.reward import REASONS, Verifier

TIMEOUT_S = 1.0

ATOMS = ["7", "2", "x", "0", "10^{9}", "e", "\\pi", "1.5", "3.1e99999999", "\\infty", "i", "-1"]
ADVERSARIAL = [
    "7^{7^{7^{7^7}}}", "\\frac{(x+1)^{300}-(x-1)^{300}}{x}", "\\prod_{k=1}^{10^{9}} k",
    "\\binom{10^{8}}{5\\cdot 10^{7}}", "\\sum_{k=1}^{\\infty} k^{k}", "{{{{{{", "\\frac{1}{0}",
    "\\sqrt(3)", "\\left(", "((((((((((1))))))))))", "\\begin{pmatrix}", "10^{10^{10}}!",
    "\\int_0^{10^{9}} x^{x} dx", "\\lim_{n\\to\\infty} (1+1/n)^{n^{2}}", "x^{x^{x^{x}}}=2",
]


@st.composite
def latex(draw, depth=0):
    if depth > 3 or draw(st.booleans()):
        return draw(st.sampled_from(ATOMS + ADVERSARIAL))
    a, b = draw(latex(depth + 1)), draw(latex(depth + 1))
    form = draw(st.sampled_from(["{}^{{{}}}", "\\frac{{{}}}{{{}}}", "{}+{}", "({},{})", "\\sqrt{{{}}}{}",
                                 "{}={}", "{}!{}", "\\{{{},{}\\}}", "{} \\cdot {}"]))
    return form.format(a, b)


@pytest.fixture(scope="module")
def small_pool():
    with Verifier(2, timeout_s=TIMEOUT_S) as v:
        assert v.wait_ready(60)  # the first call must not pay the worker start-up
        yield v


@pytest.mark.slow
@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(gold=st.one_of(st.integers(-10**6, 10**6).map(str), latex()), answer=st.one_of(latex(), st.text(max_size=40)))
def test_no_call_exceeds_timeout_and_pool_stays_healthy(small_pool, gold, answer):
    t = time.monotonic()
    v = small_pool.verify(gold, "<answer>\\boxed{" + answer + "}</answer>")
    elapsed = time.monotonic() - t
    assert elapsed <= 2 * small_pool.wall_factor * TIMEOUT_S + 5.0, (gold, answer, v, elapsed, small_pool.stats)
    assert v.reason in REASONS and (v.correct == (v.reason == "correct"))
    assert small_pool.alive
    assert small_pool.verify("4", r"\boxed{2+2}").correct  # still answers after anything
