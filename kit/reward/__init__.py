r"""Answer verification and the binary reward (rStar2-Agent §2.2.1; issue #4).

The reward is 1 when the model's final answer matches the reference, else 0. Every wrong
verdict is a training bug, so grading is split in three:

1. :func:`extract_final_answer` (``extract.py``): the last ``\boxed{}`` of the final
   ``<answer>`` block, else of the model's own text (none when that last box is unclosed,
   empty or cut off, or a later unboxed answer block takes it back); tool responses and
   tool-call code are removed first. Strict by default; ``fallback=True`` for other models.
2. Exact rules in the caller's process (``rules.py``): integers (the whole RL data), decimals,
   scientific notation, choice letters, equations offered for a value. No sympy, cannot hang.
3. math_verify with guards (``mathcheck.py``), in warm worker processes with a soft alarm, a
   hard kill at ``timeout_s`` CPU seconds and an address-space cap (``pool.py``, :class:`Verifier`).
   CPU time decides a ``timeout``, never the wall clock (issue #41); a worker killed mid-item by
   something else, or starved past ``wall_factor * timeout_s`` wall seconds, is retried once and
   then answered ``infra_error`` (issue #44; both trainers drop such items: the local one in
   ``kit.train.update.select``, VERL's in the kit's replay buffers, ``kit.bridge.sampler.graded_rows``).

Public API::

    extract_final_answer(response, fallback=False) -> str | None
    verify(gold, response, *, timeout_s=5.0, fallback=False, verifier=None) -> Verdict
    verify_batch(pairs, *, workers=None, timeout_s=5.0, fallback=False) -> list[Verdict]
    averify(...), averify_batch(...)                  # asyncio forms
    count_reasons(verdicts) -> {reason: count}        # all of REASONS present
    compute_score(data_source, solution_str, ground_truth, extra_info=None, **kw) -> dict
    compute_score_batch(data_sources, solution_strs, ground_truths, extra_infos=None, **kw)
    Verifier(workers, timeout_s=5.0, memory_mb=1024)  # long-lived pool, context manager
    grade_answer(gold, answer) -> (reason, detail)    # in-process, unbounded (debugging)

``Verdict(correct, reason, extracted, seconds, detail)``; reason is one of ``correct``,
``wrong``, ``no_answer``, ``timeout`` (CPU-time or memory limit hit; scored 0), ``parse_error``,
``infra_error`` (the verifier failed twice; scored 0, never the model's; both trainers leave it out).

Lenient-case policy (each row is tested in ``tests/reward/test_reward_policy.py``):

====================================  ====================================================
case (gold vs answer)                 decision
====================================  ====================================================
percent: ``25`` vs ``25\%``           correct: a trailing percent sign is dropped on both
                                      sides and the numbers compared *as written*, so
                                      ``25\%`` vs ``0.25`` is wrong. The words ``percent``,
                                      ``percentage``, ``pct`` after a number (bare or in
                                      ``\text{}``, any case) grade like ``%``: ``25 percent``
                                      vs ``25`` correct, vs ``0.25`` wrong.
degrees: ``30^\circ`` vs ``30``       correct (``^\circ``, ``^{\circ}``, ``°``, ``\degree``
                                      dropped); ``30^\circ`` vs ``\frac{\pi}{6}`` is wrong:
                                      units are never converted.
units: ``5`` vs ``5\text{ cm}``       correct: *one* trailing unit is dropped, a ``\text{}``/
                                      ``\mathrm{}``/``\mbox{}`` group (optionally ``^2``) or
                                      bare words after a number (``5 cm``, ``12 sq ft``), and
                                      only when every word is a unit (``wording.UNIT_WORDS``:
                                      lengths, areas, volumes, masses, times, currencies,
                                      angles; ``per``, ``/``). math_verify's own unit
                                      reading is off (it dropped ``5t``, ``5 less``).
words (issue #44)                     a word in a text group that is not a unit, a function
                                      name, ``or``/``and`` between values, or a word of the
                                      gold makes the answer wrong: ``30 \text{ or less}``,
                                      ``\text{at least } 5``, ``5\text{ (approx.)}``,
                                      ``5\text{ not}``, ``5\text{ apples}`` vs ``30``/``5``;
                                      bare letters are variables (``5x``, ``5t`` vs ``5``
                                      wrong), so are bare non-unit words (``5 less``).
counted nouns (decision)              only unit words may be dropped: ``12\text{ ways}``,
                                      ``12 \text{ apples}`` vs ``12`` are wrong. Cost: a
                                      model that names what it counted loses the reward;
                                      the alternative (dropping any noun) let qualifiers
                                      through (``30\text{ or less}``).
relations (issue #44)                 an answer that starts with a relation, braces
                                      removed (``< 9``, ``{\le} 9``, ``\in 9``, ``\to 9``)
                                      states no value: wrong unless the gold starts with
                                      one too. Every relation but ``=`` is a hedge when
                                      the gold has none but ``=``: ``x \approx 9``,
                                      ``n \ge 3``, ``x \to 9``, ``x \propto 9``,
                                      ``x \equiv 9`` are wrong; cost: ``x \in [2,3]`` vs
                                      ``[2,3]`` is wrong too. ``=`` keeps its own row.
control words (issue #44)             an allowlist, not a blocklist (math_verify drops
                                      words it does not know: ``\lessgtr 9`` read 9):
                                      ``wording.KNOWN_COMMANDS`` (layout, ``\frac``,
                                      ``\sqrt``, ``\binom``, ``\pi``, greek, trig, ``\log``,
                                      delimiters, set operators, known relations) and the
                                      gold's own; any other control word or non-ASCII sign
                                      (``\foo``, ``\textless``, ``\uparrow``, ``\stackrel``,
                                      ``≦``) is ``parse_error`` (detail
                                      ``unread_command \foo``), so is ``\frac 9`` (missing
                                      argument). A leading operator (``\cdot 9``) is wrong.
                                      math_verify's plain-expression reading counts only
                                      when it covers the whole answer (it found ``9`` in
                                      ``x \big 9``): else ``answer_partly_read``.
operators not evaluated (#44)         ``\max``, ``\min``, ``\sup``, ``\inf``, ``\lim``,
                                      ``\limsup``, ``\liminf``, ``\sum``, ``\prod``,
                                      ``\int``, ``\gcd``, ``\lcm``, ``\det`` (as commands,
                                      ``\operatorname{max}`` or ``max(``) in an answer whose
                                      gold applies none: wrong (``unevaluated max``);
                                      ``\max 30``, ``\max(30)`` vs ``30`` (sympy made Max(30)
                                      30). Cost: ``\max(3, 5)`` vs ``5`` is wrong too.
unfinished lists (issue #44)          ``\ldots``, ``\dots``, ``\cdots``, ``...``, ``…`` are
                                      not a value: ``9\ldots``, ``9,\ldots`` vs ``9`` wrong
                                      (detail ``ellipsis``) unless the gold has one.
invisible text (issue #44)            graded as the box shows it: ``\phantom``,
                                      ``\hphantom``, ``\vphantom`` and their argument are
                                      removed (``\hphantom{9}`` is empty: wrong;
                                      ``\vphantom{8}9`` is ``9``), ``\smash{9}``,
                                      ``\mathrlap{9}`` show ``9``, ``\hspace{}`` is space.
                                      Colour (``\color{white}``) is not read (parse_error).
``\mathrm{e}``, ``\mathrm{i}``        Euler's number and the imaginary unit, as ``e``, ``i``
                                      (gold ``\mathrm{e}^2`` vs ``e^{2}`` correct), unbraced
                                      too: ``\mathrm e^2``, ``{\rm e}^2``, ``\rm e^2``.
``3`` vs ``x=3``                      correct when the left side is a single name (``x``,
                                      ``a_1``, ``\theta``, ``f(2)``); an equation with
                                      anything else on the left (``2x-y+5=0`` vs ``0``) is
                                      wrong, not unwrapped. Gold ``x=5`` vs ``5``: correct.
several values (gold or answer)       gold and answer are split the same way (top-level
                                      commas, ``or``/``and``, ``\quad``; each item
                                      ``value`` or ``name=value``) and compared as *sets of
                                      values*, never the last one alone: gold ``a=2, a=5``
                                      vs ``5`` wrong, vs ``2, 5``, ``5, 2``, ``a=5, a=2``
                                      correct; answer ``x=3 \text{ or } x=4`` vs gold ``4``
                                      wrong, vs ``3,4`` correct. When both sides name every
                                      value with distinct names (``m=1, n=6``), values are
                                      matched by name: ``n=6, m=1`` correct, ``m=6, n=1``
                                      wrong; other names are dropped from plain numbers
                                      (``k=5`` vs ``n=5`` correct) but not from
                                      expressions (``y=2x+3`` vs ``x=2x+3`` wrong: the
                                      whole equations go to math_verify). A chain
                                      ``x=3=4`` is wrong.
``\dfrac``/``\tfrac`` vs ``\frac``    correct (rewritten to ``\frac``).
scientific: ``4200`` vs ``4.2e3``     correct: ``4.2e3``, ``4.2E3``, ``4.2\times 10^{3}``,
                                      ``4.2\cdot 10^3`` are exact decimals, never Euler's
                                      e; ``3.1`` vs ``3.1e99999999`` wrong at once.
choice letters (gold ``A``-``J``)     the answer must be one letter, optionally in
                                      parentheses or ``\text{}``, any case: ``(c)`` matches
                                      ``C``; an option's value instead of its letter is wrong.
thousands: ``2,500`` vs ``2500``      correct both ways, also ``10,\!080``, ``1{,}000``,
                                      ``10\,000``; only 3-digit groups (``0,1`` is a pair)
                                      after a first group without a leading zero:
                                      ``0,250`` is the two values 0 and 250 (wrong
                                      against ``250``, correct against ``250, 0``).
base subscripts: ``2516_8``           digits and base must match (``2516_{8}`` correct,
                                      ``2516_2`` wrong); the subscript may be left out
                                      (``2516``); a base-10 value (``1358``) is wrong.
plain numbers                         compared exactly as decimals: ``05`` = ``+5`` = ``5``,
                                      ``0.50`` = ``0.5``, ``3.14159265`` vs ``3.1415927`` wrong.
numbers via math_verify               a "match" must also hold to a *relative* 1e-12 (1e-6
                                      with decimals): ``1/2^{60}`` vs ``1/2^{59}`` is wrong.
``\pm 7`` vs ``7``                    wrong (one of two values); ``\pm 7`` vs ``7,-7`` correct.
huge numbers                          an answer over 10,000 digits (``7^{7^{7^{7^7}}}``) is
                                      wrong without evaluation unless the gold is that big.
malformed LaTeX (``5\sqrt(3)``)       ``parse_error`` (score 0), never a partial parse.
matrix row spacing ``\\[3pt]``       dropped (layout, not value): ``\\[3pt]``, ``\\[-0.5em]``
                                      grade like ``\\``; any TeX unit.
abandoned final box (issue #30):      ``no_answer`` (score 0; RoC's ``p_format`` is 1): the
``\boxed{7}`` then ``\boxed{9``       last box decides alone, so one left open (a response
(unclosed), ``\boxed{}`` (empty),     cut off inside it), empty, or cut off right after
a response ending in ``\boxed``       ``\boxed`` means no answer; an earlier box never stands
                                      in for it, in strict and fallback mode alike. ``\fbox``
                                      and ``\boxed {`` are boxes too; boxes in tool output
                                      do not count either way (excluded by tag).
``\boxed`` then a word (issue #44)    not a box: the brace-less form ``\boxed 5`` boxes
                                      only a number or one control word (``\boxed \pi``),
                                      after any space, a newline too (``\boxed``, newline,
                                      ``7`` boxes 7); "I wrote \boxed around it" after
                                      ``\boxed{6}`` leaves ``6`` the answer.
answer block takes the box back       ``no_answer`` (score 0), in both modes: when the final
(issue #44): ``\boxed{6}.``           ``<answer>`` block (tags in any case, ``<answer >``)
``<answer>7</answer>``                has no box and comes after the last box, it is the
                                      model's last statement, read as an answer and graded
                                      against the box (``extract.takes_back``). It takes the
                                      box back when blank; when it has a retraction or hedge
                                      word anywhere (``not``, ``none``, ``no solution``,
                                      ``at least``, ``or``, ``about``, ``I don't know``) or
                                      ``?``; when a number word differs (``seven``); for a
                                      letter box, unless it names that letter alone; else
                                      when, remarks in parentheses (``(from step 2)``) and
                                      leading prose (``The area is``) dropped, what is left
                                      does not state the box's value by the kit's exact
                                      rules or a bounded plain evaluator (``plain.
                                      plain_value``): ``-6``, ``\sqrt{6}``, ``6!``, ``6^6``,
                                      ``6 \times 6``, ``\approx 6`` take ``\boxed{6}`` back;
                                      ``x = 6``, ``6 square units``, ``$6$ cm$^2$``,
                                      ``\frac12`` (box ``\frac{1}{2}``), ``1000`` (box
                                      ``10^3``), ``6^2 = 36`` (box 36), ``(C) 3/4`` (box C),
                                      ``1/3 ≈ 0.333`` (``≈`` a decimal within one unit of
                                      its last place) leave it; so does a block with no
                                      value left (``see above``). A value the kit cannot
                                      show equal (functions, sets it cannot evaluate)
                                      takes the box back; a trailing ``!`` is a factorial.
truncated trajectory (issue #44)      score 0, reason ``no_answer`` (detail ``truncated``),
                                      whatever it boxed before the budget ran out
                                      (``verdict.cut_off``; rStar2-Agent §4.3, no overlong
                                      filtering): the local trainer for ``truncated``
                                      trajectories, ``compute_score`` for
                                      ``extra_info["truncated"]`` (VERL's agent loop field),
                                      the local evaluation (``kit.eval.evaluate``) too.
                                      Ending at ``max_turns`` with a tool call pending is
                                      not a cut: graded from its box.
====================================  ====================================================

Departure from the release: it graded the whole response, tool output included
(``rstar2_agent_release.md`` §5); the kit grades only the model's own text.
"""

from kit.reward.api import (
    acompute_score,
    averify,
    averify_batch,
    close_default_verifiers,
    compute_score,
    compute_score_batch,
    default_verifier,
    grade_answer,
    verify,
    verify_batch,
)
from kit.reward.extract import boxed_contents, extract_final_answer, model_text
from kit.reward.pool import Verifier, VerifierError
from kit.reward.verdict import REASONS, Verdict, count_reasons

__all__ = [
    "REASONS", "Verdict", "Verifier", "VerifierError", "acompute_score", "averify", "averify_batch",
    "boxed_contents", "close_default_verifiers", "compute_score", "compute_score_batch", "count_reasons", "default_verifier",
    "extract_final_answer", "grade_answer", "model_text", "verify", "verify_batch",
]
