"""The tiny profile's task family: generated integer-answer problems where the tool is the way.

Like the report's curated RL data (rStar2-Agent §4.2: integer answers, problems that reward
computing over guessing), every problem here has an exact integer answer that a 0.5M-parameter
model cannot produce in its head (products of large numbers, digit sums of factorials, divisor
and prime counts, modular powers, gcd/lcm, power sums), but that a two-line Python program
computes in milliseconds. Each family has three difficulty levels (larger numbers to copy and
longer answers), used by the RL stages (stage 1 level 1, stage 2 level 2, stage 3 level 3).

Demonstrations follow the rStar2 trajectory format (:mod:`kit.prompts`): a short reasoning line,
a ``<tool_call>`` with the JSON call of ``execute_python_code_with_standard_io``, the tool
response as a user turn, then ``</reason>`` and an ``<answer>`` block with ``\\boxed{}``. Three
kinds:

    * ``tool``: one clean call, then the answer;
    * ``tool_error``: the first call fails (a missing import, a misspelt name, an unclosed
      parenthesis), the model reads the traceback and sends the fixed call, then answers. These
      are the correct-with-tool-errors trajectories that RoC (§2.2.2) selects away;
    * ``direct``: no tool, the answer written directly (the model has to guess it). These give
      RL something to fix: the SFT policy sometimes skips the tool and is then nearly always
      wrong (measured: 96-97 % of its tool-using samples at T = 1 are right, its guesses almost never).

This module only generates problems and the *model side* of demonstrations (texts and code).
Running the code and rendering the tool feedback is done by :mod:`kit.data.sft` through the same
sandbox and feedback renderer the agent loop uses, so demos match RL rollouts byte for byte.

Not done here: no natural-language variety (one template per family), no multi-step problems.
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from kit import prompts
from kit.config import KitConfig

LEVELS = (1, 2, 3)
DEMO_KINDS = ("tool", "tool_error", "direct")


@dataclass(frozen=True)
class TaskProblem:
    """One generated problem.

    Attributes:
        id: stable id ``<family>-L<level>-<hash of the question>``.
        family: a registered family (:func:`register_family`; :data:`FAMILIES`).
        level: difficulty 1..3.
        question: the problem text (what goes after the user prefix).
        answer: the exact integer answer as a decimal string.
        code: the reference program (prints the answer); ``input`` is its stdin.
        input: stdin text for ``code`` ("" for most problems).
    """

    id: str
    family: str
    level: int
    question: str
    answer: str
    code: str
    input: str = ""

    def to_dict(self) -> dict:
        return {"id": self.id, "family": self.family, "level": self.level, "question": self.question,
                "answer": self.answer, "code": self.code, "input": self.input}


@dataclass(frozen=True)
class DemoCall:
    """One tool call of a demonstration: the code the model writes and its stdin."""

    code: str
    input: str = ""


@dataclass(frozen=True)
class Demo:
    """The model side of one demonstration (texts before each call, and the final text).

    Attributes:
        problem: the problem it solves.
        kind: one of :data:`DEMO_KINDS`.
        turns: ``(text_before_call, call)`` per tool-calling assistant turn, in order. The text
            of turn ``i`` is what the model writes after the ``<reason>`` prefill, before the
            ``<tool_call>`` block.
        final: the last assistant turn's text (after its ``<reason>`` prefill): the closing
            ``</reason>`` and the ``<answer>`` block.
    """

    problem: TaskProblem
    kind: str
    turns: tuple[tuple[str, DemoCall], ...] = field(default_factory=tuple)
    final: str = ""


# --------------------------------------------------------------------------- problem families

# Per level: ranges of the numbers the model must copy. Wider numbers are harder to copy
# exactly and give longer answers (more tokens to get right).
_DIGITS = {1: (3, 4), 2: (4, 5), 3: (5, 6)}
#: Longest answer any family gives (digits); within ``DataConfig.max_answer_digits`` (18) and
#: short enough for the tiny model to copy from the tool output (a test checks it).
MAX_ANSWER_DIGITS = 16


def _num(rng: random.Random, digits: tuple[int, int]) -> int:
    d = rng.randint(*digits)
    return rng.randint(10 ** (d - 1), 10**d - 1)


def _prime_count_below(n: int) -> int:
    sieve = bytearray([1]) * n
    sieve[:2] = b"\x00\x00"[: min(2, n)]
    for i in range(2, int(n**0.5) + 1):
        if sieve[i]:
            sieve[i * i :: i] = bytearray(len(range(i * i, n, i)))
    return sum(sieve)


def _divisor_count(n: int) -> int:
    count, d = 0, 1
    while d * d <= n:
        if n % d == 0:
            count += 1 if d * d == n else 2
        d += 1
    return count


#: One problem of a family at a level: ``(question, answer, code, stdin)`` from ``rng``.
Generator = Callable[[int, random.Random], tuple[str, int, str, str]]
#: The registered task families, in registration order (:func:`register_family`).
REGISTRY: dict[str, Generator] = {}


def register_family(name: str) -> Callable[[Generator], Generator]:
    """Register ``fn(level, rng) -> (question, answer, code, stdin)`` as the task family ``name``.

    A new family is one decorated function here (or in any module imported before the config
    names it in ``data.task_families``); its answer must be an integer of at most
    :data:`MAX_ANSWER_DIGITS` digits that ``code`` prints.

    Raises:
        ValueError: ``name`` is already registered.
    """
    def add(fn: Generator) -> Generator:
        if name in REGISTRY:
            raise ValueError(f"task family {name!r} is registered twice")
        REGISTRY[name] = fn
        return fn
    return add


def family(name: str) -> Generator:
    """The generator of the registered family ``name``.

    Raises:
        ValueError: ``name`` is not registered (the message lists the registered families).
    """
    try:
        return REGISTRY[name]
    except KeyError:
        raise ValueError(f"unknown task family {name!r} (config data.task_families); registered: "
                         f"{', '.join(REGISTRY)}") from None


@register_family("product")
def _product(level: int, rng: random.Random) -> tuple[str, int, str, str]:
    a, b = _num(rng, _DIGITS[level]), _num(rng, _DIGITS[level])
    if rng.random() < 0.5:
        return f"What is {a} * {b}?", a * b, "a, b = map(int, input().split())\nprint(a * b)", f"{a} {b}"
    return f"What is {a} * {b}?", a * b, f"print({a} * {b})", ""


@register_family("digit_sum_factorial")
def _digit_sum_factorial(level: int, rng: random.Random) -> tuple[str, int, str, str]:
    n = rng.randint(*{1: (10, 60), 2: (60, 200), 3: (200, 500)}[level])
    return (f"What is the sum of the digits of {n}!?", sum(map(int, str(math.factorial(n)))),
            f"import math\nprint(sum(map(int, str(math.factorial({n})))))", "")


@register_family("divisor_count")
def _divisor_count_problem(level: int, rng: random.Random) -> tuple[str, int, str, str]:
    n = _num(rng, {1: (4, 5), 2: (5, 6), 3: (6, 7)}[level])
    return (f"How many positive divisors does {n} have?", _divisor_count(n),
            f"n = {n}\nprint(sum(1 for d in range(1, n + 1) if n % d == 0))", "")


@register_family("mod_pow")
def _mod_pow(level: int, rng: random.Random) -> tuple[str, int, str, str]:
    a, b = _num(rng, _DIGITS[level]), _num(rng, _DIGITS[level])
    m = _num(rng, {1: (3, 4), 2: (4, 5), 3: (5, 6)}[level])
    return f"What is {a}^{b} mod {m}?", pow(a, b, m), f"print(pow({a}, {b}, {m}))", ""


@register_family("gcd_lcm")
def _gcd_lcm(level: int, rng: random.Random) -> tuple[str, int, str, str]:
    g = _num(rng, (2, 3))
    a, b = g * _num(rng, _DIGITS[level]), g * _num(rng, _DIGITS[level])  # lcm < 10^15
    if rng.random() < 0.5:
        return f"What is the gcd of {a} and {b}?", math.gcd(a, b), f"import math\nprint(math.gcd({a}, {b}))", ""
    return f"What is the lcm of {a} and {b}?", math.lcm(a, b), f"import math\nprint(math.lcm({a}, {b}))", ""


@register_family("prime_count")
def _prime_count(level: int, rng: random.Random) -> tuple[str, int, str, str]:
    n = rng.randint(*{1: (100, 2000), 2: (2000, 20000), 3: (20000, 100000)}[level])
    code = f"n = {n}\nprint(sum(all(k % d for d in range(2, int(k ** 0.5) + 1)) for k in range(2, n)))"
    return f"How many primes are there below {n}?", _prime_count_below(n), code, ""


@register_family("range_sum")
def _range_sum(level: int, rng: random.Random) -> tuple[str, int, str, str]:
    p = rng.randint(2, 3)
    a = rng.randint(1, 10**level)
    b = a + rng.randint(10**level, 10 ** (level + 1))  # sum of k^3 below 4 * 10^15
    return (f"What is the sum of k^{p} for k from {a} to {b}?", sum(k**p for k in range(a, b + 1)),
            f"print(sum(k ** {p} for k in range({a}, {b} + 1)))", "")


#: The families registered here, in order (the default of ``DataConfig.task_families``).
FAMILIES = tuple(REGISTRY)


def make_problem(name: str, level: int, rng: random.Random) -> TaskProblem:
    """Draw one problem.

    Args:
        name: a registered family (:func:`register_family`).
        level: difficulty in :data:`LEVELS`.
        rng: the random source (a ``random.Random``; the draw is deterministic given its state).
    Returns:
        The :class:`TaskProblem`; its ``code`` prints ``answer``.
    Raises:
        ValueError: unknown family or level.
    """
    if level not in LEVELS:
        raise ValueError(f"task level {level!r} is not one of {LEVELS}")
    question, answer, code, stdin = family(name)(level, rng)
    digest = format(abs(hash_text(question)) % 16**8, "08x")
    return TaskProblem(f"{name}-L{level}-{digest}", name, level, question, str(answer), code, stdin)


def hash_text(text: str) -> int:
    """A stable (process-independent) 64-bit hash of ``text`` (FNV-1a)."""
    h = 0xCBF29CE484222325
    for byte in text.encode():
        h = ((h ^ byte) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def generate(n: int, seed: int, families: Sequence[str] = FAMILIES, levels: Sequence[int] = LEVELS,
             exclude: frozenset[str] | set[str] = frozenset()) -> list[TaskProblem]:
    """``n`` distinct problems, families and levels drawn uniformly, seeded.

    Args:
        n: number of problems.
        seed: random seed; the same ``(n, seed, families, levels, exclude)`` gives the same list.
        families: families to draw from.
        levels: levels to draw from.
        exclude: question texts that must not appear (e.g. the held-out split).
    Returns:
        ``n`` problems with pairwise distinct questions, none in ``exclude``.
    Raises:
        ValueError: empty ``families`` or ``levels``, an unknown family, or a space too small
            to give ``n`` distinct problems.
    """
    if not families or not levels:
        raise ValueError("generate: families and levels must not be empty")
    for f in families:
        family(f)  # raises for an unregistered name, listing the registered ones
    rng = random.Random(seed)
    seen, out = set(exclude), []
    tries = 0
    while len(out) < n:
        tries += 1
        if tries > 50 * n + 1000:
            raise ValueError(f"generate: could not draw {n} distinct problems from {list(families)} x {list(levels)}")
        p = make_problem(rng.choice(list(families)), rng.choice(list(levels)), rng)
        if p.question not in seen:
            seen.add(p.question)
            out.append(p)
    return out


@dataclass(frozen=True)
class TaskSplit:
    """Train and held-out problems of the tiny task family (disjoint by question text)."""

    train: tuple[TaskProblem, ...]
    heldout: tuple[TaskProblem, ...]

    def level(self, level: int, split: str = "train") -> list[TaskProblem]:
        """Problems of one difficulty level from ``split`` ("train" or "heldout")."""
        if split not in ("train", "heldout"):
            raise ValueError(f"split must be 'train' or 'heldout', got {split!r}")
        return [p for p in getattr(self, split) if p.level == level]


def make_split(train_size: int, heldout_size: int, seed: int, families: Sequence[str] = FAMILIES) -> TaskSplit:
    """The seeded train/held-out split used by SFT, RL and evaluation.

    The held-out problems are drawn first from their own stream (``seed`` + 1,000,003), so the
    held-out set does not change when ``train_size`` changes; train problems never repeat a
    held-out question.

    Args:
        train_size, heldout_size: numbers of problems (all levels mixed, uniform).
        seed: the run seed.
        families: task families (``cfg.data.task_families``).
    Returns:
        A :class:`TaskSplit`.
    """
    heldout = generate(heldout_size, seed + 1_000_003, families)
    train = generate(train_size, seed, families, exclude={p.question for p in heldout})
    return TaskSplit(tuple(train), tuple(heldout))


def task_slice(problems: Sequence[Any], n: int, iteration: int) -> list[Any]:
    """The ``n`` training tasks of 1-based ``iteration`` of a self-training loop (Agent-R, B-STaR): consecutive
    slices of ``problems``, wrapping around."""
    if not problems:
        return []
    start = (iteration - 1) * n
    return [problems[(start + i) % len(problems)] for i in range(min(n, len(problems)))]


def task_split(cfg: KitConfig) -> TaskSplit:
    """The run's train/held-out task split (``cfg.data.task_*``; seed ``cfg.data.split_seed``, or ``cfg.seed`` when -1)."""
    seed = cfg.seed if cfg.data.split_seed < 0 else cfg.data.split_seed
    return make_split(cfg.data.task_train_size, cfg.data.task_heldout_size, seed, cfg.data.task_families)


# --------------------------------------------------------------------------- demonstrations

_OPENERS = ("I should compute this exactly with python.", "Let me compute this with python.",
            "I will use python to get the exact value.")
_FIXES = ("The code failed. Let me fix it.", "There is an error in my code. Let me correct it.")
#: reasoning sentences a tool demo may open with before its opener (``data.demo_preamble_max``, issue #45): they
#: move the first call later by a varied amount, so that a cold start does not pin where the call starts
_PREAMBLE = ("The answer is an exact integer.", "Working this out by hand would be slow and error-prone.",
             "The numbers involved are too large to handle in my head.", "Let me first think about what to compute.",
             "A short program can read the input and print the result.", "I need the exact value, not an estimate.")


def _break(code: str, rng: random.Random) -> str:
    """A plausible first attempt that fails: missing import, misspelt name or unclosed paren."""
    options = []
    if code.startswith("import math\n"):
        options.append(code[len("import math\n"):])  # NameError: name 'math' is not defined
    options.append(code.replace("print(", "pritn(", 1))  # NameError
    options.append(code.rstrip(")") if code.endswith("))") else code[:-1])  # SyntaxError: '(' was never closed
    return rng.choice(options)


def failing_call(problem: TaskProblem, rng: random.Random) -> DemoCall:
    """A first attempt at ``problem`` that fails as the ``tool_error`` demos' do (missing import, misspelt name or
    unclosed paren, drawn from ``rng``): the task family's own error generator (Agent-R's probes, issue #46)."""
    return DemoCall(_break(problem.code, rng), problem.input)


def tool_call_text(call: DemoCall, name: str = prompts.TOOL_NAME) -> str:
    """The ``<tool_call>`` block for ``call``, Hermes style (JSON on its own line)."""
    payload = json.dumps({"name": name, "arguments": {"code": call.code, "input": call.input}}, ensure_ascii=False)
    return f"{prompts.TOOL_CALL_OPEN}\n{payload}\n{prompts.TOOL_CALL_CLOSE}"


def answer_text(answer: str, lead: str) -> str:
    """Final assistant text: a lead sentence, ``</reason>``, and the boxed answer block."""
    return (f"{lead}\n{prompts.REASON_CLOSE}\n{prompts.ANSWER_OPEN}\n"
            f"The answer is \\boxed{{{answer}}}.\n{prompts.ANSWER_CLOSE}")


def opening(rng: random.Random, preamble_max: int = 0) -> str:
    """The text a tool-using demo writes before its first call: 0 to ``preamble_max`` reasoning sentences
    (uniform count, distinct sentences of :data:`_PREAMBLE`), then one opener. With ``preamble_max = 0``
    it draws only the opener, so the demos of earlier runs are unchanged.

    Raises:
        ValueError: ``preamble_max`` outside [0, len(_PREAMBLE)].
    """
    if not 0 <= preamble_max <= len(_PREAMBLE):
        raise ValueError(f"data.demo_preamble_max must be in [0, {len(_PREAMBLE)}], got {preamble_max}")
    pre = rng.sample(_PREAMBLE, rng.randint(0, preamble_max)) if preamble_max else []
    return " ".join([*pre, rng.choice(_OPENERS)])


def make_demo(problem: TaskProblem, kind: str, rng: random.Random, preamble_max: int = 0) -> Demo:
    """The model side of one demonstration of ``problem``.

    Args:
        problem: the problem.
        kind: ``tool``, ``tool_error`` or ``direct`` (see the module docstring).
        rng: random source for the wording and the kind of mistake.
        preamble_max: a tool-using demo opens with 0 to this many reasoning sentences before its opener
            (:func:`opening`; ``cfg.data.demo_preamble_max``).
    Returns:
        A :class:`Demo`. For ``tool_error`` the first call is a broken variant of
        ``problem.code`` that raises (NameError or SyntaxError) and the second is the fixed one.
    Raises:
        ValueError: unknown ``kind``; ``preamble_max`` out of range.
    """
    good = DemoCall(problem.code, problem.input)
    if kind == "tool":
        return Demo(problem, kind, ((opening(rng, preamble_max), good),),
                    answer_text(problem.answer, "The tool printed the result."))
    if kind == "tool_error":
        bad = DemoCall(_break(problem.code, rng), problem.input)  # draws in this order: earlier runs' demos stay
        return Demo(problem, kind, ((opening(rng, preamble_max), bad), (rng.choice(_FIXES), good)),
                    answer_text(problem.answer, "The fixed code printed the result."))
    if kind == "direct":
        return Demo(problem, kind, (), answer_text(problem.answer, "I will work it out in my head."))
    raise ValueError(f"unknown demo kind {kind!r}; known: {', '.join(DEMO_KINDS)}")


def demo_kinds(n: int, error_fraction: float, direct_fraction: float, seed: int) -> list[str]:
    """Kinds for ``n`` demos: exact shares (rounded) of direct and tool-error demos, shuffled.

    Args:
        n: number of demos.
        error_fraction: share of tool-using demos whose first call fails
            (``cfg.data.demo_error_fraction``).
        direct_fraction: share of all demos that answer without the tool
            (``cfg.data.demo_direct_fraction``).
        seed: shuffle seed.
    Raises:
        ValueError: a fraction outside [0, 1].
    """
    for name, f in (("demo_error_fraction", error_fraction), ("demo_direct_fraction", direct_fraction)):
        if not 0.0 <= f <= 1.0:
            raise ValueError(f"data.{name} must be in [0, 1], got {f}")
    n_direct = round(n * direct_fraction)
    n_error = round((n - n_direct) * error_fraction)
    kinds = ["direct"] * n_direct + ["tool_error"] * n_error + ["tool"] * (n - n_direct - n_error)
    random.Random(seed).shuffle(kinds)
    return kinds
