"""Every example row of issue #4, graded through the public verify() path (worker pool)."""

import asyncio
import threading
import time

import pytest

from kit.reward import compute_score, verify

TWO_BOXES = r"first try \boxed{4} ... so the final answer is \boxed{9}"

# (gold, response, expected correct, allowed reasons)
CASES = [
    ("9", TWO_BOXES, True, {"correct"}),
    ("4", TWO_BOXES, False, {"wrong"}),
    ("2,500", r"\boxed{2500}", True, {"correct"}),
    ("2500", r"\boxed{2,500}", True, {"correct"}),
    ("3", r"\boxed{7^{7^{7^{7^7}}}}", False, {"wrong"}),
    ("12", r"<tool_response>\boxed{12}</tool_response> ... \boxed{13}", False, {"wrong"}),
    ("4200", r"\boxed{4.2e3}", True, {"correct"}),
    ("3.1", r"\boxed{3.1e99999999}", False, {"wrong"}),
    (r"\frac{\sqrt{2}}{2}", r"\boxed{\dfrac{\sqrt{2}}{2}}", True, {"correct"}),
    ("2x-y+5=0", r"\boxed{x+3y+7=0}", False, {"wrong"}),
    (r"\pm 7", r"\boxed{7}", False, {"wrong"}),
    ("5", r"\boxed{5\sqrt(3)}", False, {"parse_error"}),
    (r"\frac{1}{2^{60}}", r"\boxed{\frac{1}{2^{59}}}", False, {"wrong"}),
    ("41", "**41**", False, {"no_answer"}),
]


@pytest.mark.parametrize("gold,response,correct,reasons", CASES)
def test_issue_table(pool, gold, response, correct, reasons):
    v = pool.verify(gold, response)
    assert v.correct is correct, v
    assert v.reason in reasons, v
    assert v.seconds < 5.0 + 1.0


def test_power_tower_and_huge_exponent_are_fast(pool):
    for gold, resp in [("3", r"\boxed{7^{7^{7^{7^7}}}}"), ("3.1", r"\boxed{3.1e99999999}")]:
        t = time.monotonic()
        v = pool.verify(gold, resp)
        assert not v.correct and v.reason == "wrong"
        assert time.monotonic() - t < 2.0  # decided by a rule, not by the 5 s limit


def test_same_verdicts_from_threads_and_asyncio(pool):
    # the table's own verdicts (not the pool's answers on the main thread, which would only
    # show that threads and asyncio agree with whatever the main thread returns)
    expected = [(c, reason) for _, _, c, (reason,) in CASES]
    from_threads = [None] * len(CASES)

    def work(i, g, r):
        v = pool.verify(g, r)
        from_threads[i] = (v.correct, v.reason)

    threads = [threading.Thread(target=work, args=(i, g, r)) for i, (g, r, _, _) in enumerate(CASES)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert from_threads == expected

    async def main():
        return await pool.averify_batch([(g, r) for g, r, _, _ in CASES])

    from_async = [(v.correct, v.reason) for v in asyncio.run(main())]
    assert from_async == expected


def test_module_level_verify_and_compute_score_from_thread():
    # the shared lazily started pool, called off the main thread (math_verify's own
    # signal-based timeout would raise ValueError here)
    out = {}
    t = threading.Thread(target=lambda: out.update(
        a=verify(r"\frac{1}{2}", r"<answer>\boxed{\frac{2}{4}}</answer>"),
        b=compute_score("dapo", r"<answer>\boxed{1,000}</answer>", 1000),
        c=compute_score("math500", "no box here", r"\frac12")))
    t.start()
    t.join(60)
    assert out["a"].correct and out["a"].reason == "correct"
    assert out["b"] == {"score": 1.0, "acc": 1.0, "reason": "correct", "extracted": "1,000",
                        "verify_s": out["b"]["verify_s"]}
    assert out["c"]["score"] == 0.0 and out["c"]["reason"] == "no_answer" and out["c"]["extracted"] == ""


def test_compute_score_accepts_numpy_integers_and_rejects_floats():
    import numpy as np

    assert compute_score("dapo", r"\boxed{34}", np.int64(34))["score"] == 1.0
    with pytest.raises(TypeError, match="ground_truth must be str or int"):
        compute_score("dapo", r"\boxed{34}", 34.0)


def _child_verdict(conn):
    v = verify(r"\frac{1}{2}", r"\boxed{\frac{3}{6}}")
    conn.send((v.correct, v.reason))


def test_shared_pool_is_recreated_after_fork():
    import multiprocessing as mp

    assert verify(r"\frac{1}{2}", r"\boxed{0.5}").correct  # parent's shared pool is running
    ctx = mp.get_context("fork")
    recv, send = ctx.Pipe(duplex=False)
    p = ctx.Process(target=_child_verdict, args=(send,))
    p.start()
    assert recv.poll(60)
    assert recv.recv() == (True, "correct")
    p.join(10)


def test_compute_score_batch_matches_single_calls():
    from kit.reward import compute_score_batch

    sols = [r"\boxed{1,000}", r"\boxed{7}", "no box", r"<tool_response>\boxed{5}</tool_response>"]
    golds = ["1000", "8", "3", "5"]
    batch = compute_score_batch(["dapo"] * 4, sols, golds)
    assert [d["reason"] for d in batch] == ["correct", "wrong", "no_answer", "no_answer"]
    assert [d["score"] for d in batch] == [compute_score("dapo", s, g)["score"] for s, g in zip(sols, golds, strict=True)]
    with pytest.raises(ValueError, match="lengths differ"):
        compute_score_batch(["dapo"], sols, golds)


@pytest.mark.parametrize("response", [
    r"... so \boxed{7}. On reflection the answer is \boxed{9",
    r"<answer>the answer is \boxed{7}. No wait, \boxed{",   # cut off in its final box
    r"... so \boxed{7}. Finally \boxed{}",
])
def test_abandoned_final_box_earns_no_reward(response):
    """Issue #30: an earlier box must not stand in for an abandoned final one (reward 0, no_answer)."""
    v = verify("7", response)
    assert (v.correct, v.reason, v.extracted) == (False, "no_answer", None)
    s = compute_score("dapo", response, 7)
    assert (s["score"], s["reason"], s["extracted"]) == (0.0, "no_answer", "")
