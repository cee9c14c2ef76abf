"""Root conftest: where the test doubles shared across folders are found.

The doubles live in ``tests/doubles.py`` (``call``, ``corpus``, ``Res``, ``FakeExecutor``,
``pair``); loading this file puts ``tests/`` on ``sys.path`` (pytest's default import mode), so
a test module in any folder imports them with ``from doubles import ...`` instead of keeping a
copy. Folder conftests hold only the fixtures of their folder.

The session's smoke chain (``smoke_chain``, ``smoke_run``) is here, not in tests/pipeline: the
pipeline tests (smoke chain, browser) and the VERL CPU chain's test (tests/bridge) all read it.

The tests' own profiles (``tests/profiles/*.toml``, e.g. ``four_stages``) are found through
``KIT_PROFILE_PATH``, set here for the session (the pipeline's kernels inherit it).
"""

import os
import time
from pathlib import Path

import pytest

# the kit's tests are about the kit's own studies: a study registered from outside (KIT_STUDIES, DEVELOPERS.md
# "Add a study") would join every registry the tests enumerate; the toy-study test sets it for its subprocess
os.environ.pop("KIT_STUDIES", None)
os.environ["KIT_PROFILE_PATH"] = os.pathsep.join(
    p for p in (os.environ.get("KIT_PROFILE_PATH", ""), str(Path(__file__).resolve().parent / "profiles")) if p)


#: the session's smoke chain profile: smoke with a fourth RL stage (tests/profiles/four_stages.toml)
SMOKE_PROFILE = "four_stages"


@pytest.fixture(scope="session")
def smoke_chain(tmp_path_factory):
    """The whole notebook series (00-11, then 20) with :data:`SMOKE_PROFILE` (the smoke profile plus a fourth
    RL stage of one step, defined only in tests/profiles/four_stages.toml: the recipe's stages are
    data, issue #29), run once per session by the runner `make reproduce` uses: ``(Layout, exit code)``,
    not asserted (:func:`smoke_run` asserts it; the browser test needs only its 01 and 02 to have
    finished). Nobody writes into it after it is built."""
    from kit import cli, pipeline  # here: every test loads this conftest, few run the chain

    root = tmp_path_factory.mktemp("reports")
    t0 = time.perf_counter()
    # a cell that hangs fails the test with the notebook and cell named instead of blocking the suite
    code = cli.main(["reproduce", "--profile", SMOKE_PROFILE, "--run", "t", "--reports-root", str(root),
                     "--cell-timeout", "600"])
    print(f"smoke chain: {time.perf_counter() - t0:.0f} s")
    return pipeline.Layout.for_run(SMOKE_PROFILE, "t", root), code


@pytest.fixture(scope="session")
def smoke_chain_loaded(smoke_chain, tmp_path_factory):
    """The same chain (profile, seed, command; no report PDF, which is not compared) again, into another
    folder, beside two busy loops that keep both cores loaded for its whole length (issue #41):
    ``(Layout, exit code)``. Compared file by file with :func:`smoke_chain` in
    tests/pipeline/test_repeatable_series.py."""
    import subprocess
    import sys

    from kit import cli, pipeline

    root = tmp_path_factory.mktemp("reports_loaded")
    loops = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
    t0 = time.perf_counter()
    try:
        code = cli.main(["reproduce", "--profile", SMOKE_PROFILE, "--run", "t", "--reports-root", str(root),
                         "--cell-timeout", "900", "--no-report"])  # the PDF is a rendering, not compared
    finally:
        for p in loops:
            p.kill()
            p.wait()
    print(f"smoke chain beside two busy loops: {time.perf_counter() - t0:.0f} s")
    return pipeline.Layout.for_run(SMOKE_PROFILE, "t", root), code


@pytest.fixture(scope="session")
def smoke_run(smoke_chain):
    """The session's smoke chain, finished: ``(Layout, KitConfig)``. tests/pipeline/test_smoke_chain.py
    asserts it; the browser test copies its 01/02 products (data, cold-start policy) instead of training
    them again (~95 s of the suite)."""
    from kit.config import load

    lay, code = smoke_chain
    assert code == 0, "the smoke chain failed; see the STOPPED message above"
    return lay, load(SMOKE_PROFILE, write=False)
