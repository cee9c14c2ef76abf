"""8-gram decontamination: planted overlaps are caught, near misses kept, markup ignored."""

import pytest

from kit.config.paths import data_dir
from kit.data.decontam import NgramIndex, benchmark_index, ngrams, normalize_tokens

BENCH = ("Let $x$ and $y$ be positive reals with $xy = 12$. Find the least possible value of "
         "$x^2 + 3y^2$ and give its integer part.")


def _index(n=8):
    return NgramIndex({"fake": [("b0", BENCH), ("b1", "Short one.")]}, n)


def test_normalisation_drops_markup():
    assert normalize_tokens(r"Find $\frac{A}{B}$, if  x=12.") == ["find", "frac", "a", "b", "if", "x", "12"]
    assert normalize_tokens(r"\( x \cdot y \)") == normalize_tokens("x cdot y")


def test_latex_and_unicode_variants_of_a_copy_are_caught():
    # review #8: \\dfrac/\\tfrac, \\left(...\\right) and Unicode math letters hid copies
    bench = r"Compute $\frac{1}{2}+\frac{3}{4}+\frac{5}{6}+\frac{7}{8}$ exactly."
    index = NgramIndex({"fake": [("b0", bench)]}, 8)
    for variant in (r"Compute $\dfrac{1}{2}+\dfrac{3}{4}+\dfrac{5}{6}+\dfrac{7}{8}$ exactly.",
                    r"Compute $\tfrac{1}{2}+\cfrac{3}{4}+\left(\frac{5}{6}\right)+\displaystyle\frac{7}{8}$ exactly."):
        assert index.match(variant) is not None, variant
    assert normalize_tokens("Let 𝑥² be café") == ["let", "x2", "be", "cafe"]
    assert normalize_tokens(r"\bigl( \bigcup \leftarrow \dfracx") == ["bigcup", "leftarrow", "dfracx"]


def test_ngrams_sizes():
    toks = list("abcdefghij")
    assert len(ngrams(toks, 8)) == 3
    assert ngrams(toks[:3], 8) == {("a", "b", "c")}
    with pytest.raises(ValueError):
        ngrams(toks, 0)


def test_planted_8gram_is_caught_with_different_markup():
    toks = normalize_tokens(BENCH)
    planted = "Consider this: " + " ".join(toks[5:13]) + " and then something else entirely."
    hit = _index().match(planted)
    assert hit is not None and hit.benchmark == "fake" and hit.item_id == "b0"
    assert hit.ngram == " ".join(toks[5:13])
    # same tokens, different LaTeX and spacing
    assert _index().match(r"Let \(x\) and \(y\) be positive reals with \( xy=12 \), then go.") is not None


def test_near_miss_7gram_is_kept():
    toks = normalize_tokens(BENCH)
    seven = " ".join(toks[5:12])
    near = f"Other words {seven} but here it diverges with new words"
    assert _index().match(near) is None
    assert NgramIndex({"fake": [("b0", BENCH)]}, 7).match(near) is not None  # a 7-gram index would flag it
    # one token changed inside every 8-window of a copy
    changed = toks[:]
    for i in range(3, len(changed), 7):
        changed[i] = "zzz"
    assert _index().match(" ".join(changed)) is None


def test_short_benchmark_item_matches_only_exact_copy():
    idx = _index()
    assert idx.match("short ONE") is not None
    assert idx.match("a short one here") is None


def test_drop_common_removes_boilerplate_only():
    boiler = "where m and n are relatively prime positive integers find m n"
    idx = NgramIndex({"b": [("0", f"The probability is m/n {boiler}."), ("1", BENCH)]}, 8)
    train = [f"Problem {i}: a coin is tossed, the chance is m/n {boiler}" for i in range(12)]
    assert idx.match(train[0]) is not None
    dropped = idx.drop_common(train, max_df=10)
    assert dropped > 0
    assert idx.match(train[0]) is None  # stock phrase no longer counts
    assert idx.match(BENCH) is not None  # a real copy still does


@pytest.mark.skipif(not (data_dir() / "benchmarks").is_dir(), reason="no shared data")
def test_real_benchmark_index_catches_aime_2024_and_2025_rows():
    from kit.data.pools import load_aime_history

    idx = benchmark_index(("aime24", "aime25", "math500", "hmmt25"), 8)
    assert idx.sizes == {"aime24": 30, "aime25": 30, "math500": 500, "hmmt25": 30}
    rows = [p for p in load_aime_history() if p.id.startswith(("2024_AIME", "2025_AIME"))]
    assert len(rows) == 44
    missed = [p.id for p in rows if idx.match(p.problem) is None]
    assert missed == []
