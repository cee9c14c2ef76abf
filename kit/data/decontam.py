"""N-gram decontamination of training problems against evaluation benchmarks (report §4.2).

A training problem is contaminated when it shares at least one n-gram (default n = 8) of
normalised tokens with any benchmark problem. Normalisation lowercases the text and keeps runs
of letters and digits only, so LaTeX markup (``$``, ``\\frac{..}{..}``, braces), punctuation and
spacing cannot hide a copy: ``$\\frac{1}{2}$`` and ``\\( \\frac 12 \\)`` differ only where the
digits are split.

Boilerplate: math problems share stock phrases ("where m and n are relatively prime positive
integers", "not divisible by the square of any prime"), and on the real pools a literal
any-shared-8-gram rule flags 9% of DAPO, almost all through such phrases. :meth:`NgramIndex.
drop_common` removes benchmark n-grams found in more than ``max_df`` training problems (default
10, measured: 2,448 -> 922 flagged rows out of 26,853; every AIME 2024/2025 row in the history
CSV is still caught); ``max_df=0`` keeps the literal rule.

What it does not catch: paraphrases, translated problems, or the same problem with changed
numbers (those share fewer than n consecutive tokens). A benchmark problem shorter than n tokens
contributes its whole token sequence as one gram (so a very short problem is still matched when
copied verbatim).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from kit.eval.benchmarks import load_benchmark

_TOKEN = re.compile(r"[a-z0-9]+")
#: Fraction variants that render alike (\\dfrac, \\tfrac, \\cfrac -> \\frac).
_FRAC = re.compile(r"\\[dtc]frac(?![a-zA-Z])")
#: Sizing/style commands with no content (\\left( ... \\right), \\displaystyle, \\bigl).
_LAYOUT = re.compile(r"\\(left|right|middle|displaystyle|textstyle|[bB]igg?[lrm]?)(?![a-zA-Z])")


def normalize_tokens(text: str) -> list[str]:
    """Lowercased alphanumeric tokens of ``text`` (LaTeX commands keep their letters).

    Unicode is folded first (NFKD, accents dropped: ``𝑥²`` -> ``x2``, ``café`` -> ``cafe``),
    ``\\dfrac``/``\\tfrac``/``\\cfrac`` count as ``\\frac`` and sizing commands (``\\left``,
    ``\\right``, ``\\displaystyle``, ``\\big``...) are dropped, so these variants of a copy share
    its n-grams.

    Example:
        >>> normalize_tokens(r"Find $\\frac{a}{b}$, if A=12.")
        ['find', 'frac', 'a', 'b', 'if', 'a', '12']
    """
    folded = "".join(ch for ch in unicodedata.normalize("NFKD", text) if not unicodedata.combining(ch))
    folded = _LAYOUT.sub(" ", _FRAC.sub(r"\\frac", folded))
    return _TOKEN.findall(folded.lower())


def ngrams(tokens: Sequence[str], n: int) -> set[tuple[str, ...]]:
    """All n-grams of ``tokens`` as tuples; a sequence shorter than n gives itself (if non-empty).

    Raises:
        ValueError: ``n < 1``.
    """
    if n < 1:
        raise ValueError(f"n-gram size must be >= 1, got {n}")
    if len(tokens) < n:
        return {tuple(tokens)} if tokens else set()
    return {tuple(tokens[i: i + n]) for i in range(len(tokens) - n + 1)}


@dataclass(frozen=True)
class Hit:
    """Why a training text was flagged: the benchmark item it overlaps and one shared n-gram."""

    benchmark: str
    item_id: str
    ngram: str


class NgramIndex:
    """Index of benchmark n-grams; ``match(text)`` returns the first overlap or None.

    Args:
        items: ``{benchmark name: [(item id, text), ...]}``.
        n: n-gram size in normalised tokens (``DataConfig.decontam_ngram``, 8 in the report).
    """

    def __init__(self, items: Mapping[str, Iterable[tuple[str, str]]], n: int = 8):
        self.n = n
        self._grams: dict[tuple[str, ...], tuple[str, str]] = {}
        self.sizes: dict[str, int] = {}
        for bench, rows in items.items():
            count = 0
            for item_id, text in rows:
                count += 1
                for g in ngrams(normalize_tokens(text), n):
                    self._grams.setdefault(g, (bench, str(item_id)))
            self.sizes[bench] = count

    def drop_common(self, texts: Iterable[str], max_df: int = 10) -> int:
        """Forget benchmark n-grams that occur in more than ``max_df`` of ``texts`` (stock
        phrases, not copies); ``max_df <= 0`` keeps everything. Returns how many were dropped."""
        if max_df <= 0:
            return 0
        df: dict[tuple[str, ...], int] = {}
        for text in texts:
            for g in ngrams(normalize_tokens(text), self.n):
                if g in self._grams:
                    df[g] = df.get(g, 0) + 1
        common = [g for g, c in df.items() if c > max_df]
        for g in common:
            del self._grams[g]
        return len(common)

    def __len__(self) -> int:
        return len(self._grams)

    def match(self, text: str) -> Hit | None:
        """First benchmark n-gram found in ``text`` (scanning left to right), else None.

        A training text shorter than n tokens is matched only against benchmark problems that
        are themselves shorter than n and equal to it.
        """
        tokens = normalize_tokens(text)
        if len(tokens) < self.n:
            g = tuple(tokens)
            hit = self._grams.get(g) if tokens else None
            return Hit(hit[0], hit[1], " ".join(g)) if hit else None
        for i in range(len(tokens) - self.n + 1):
            g = tuple(tokens[i: i + self.n])
            hit = self._grams.get(g)
            if hit:
                return Hit(hit[0], hit[1], " ".join(g))
        return None


def benchmark_index(benchmarks: Sequence[str], n: int = 8, data_dir: str | None = None,
                    gpqa_path: str = "") -> NgramIndex:
    """Build an :class:`NgramIndex` from benchmark names (``aime24``, ``aime25``, ``math500``,
    ``hmmt25``, ``gpqa``) using :func:`kit.eval.benchmarks.load_benchmark`.

    Raises:
        KeyError: an unknown benchmark name.
        kit.config.paths.DataFileMissing: a benchmark file is absent.
    """
    items = {}
    for name in benchmarks:
        items[name] = [(it.id, it.question) for it in load_benchmark(name, data_dir=data_dir, gpqa_path=gpqa_path)]
    return NgramIndex(items, n)
