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
from loaded_chain import BUSY, SMOKE_PROFILE, LoadedChain

# the kit's tests are about the kit's own studies: a study registered from outside (KIT_STUDIES, DEVELOPERS.md
# "Add a study") would join every registry the tests enumerate; the toy-study test sets it for its subprocess
os.environ.pop("KIT_STUDIES", None)
os.environ["KIT_PROFILE_PATH"] = os.pathsep.join(
    p for p in (os.environ.get("KIT_PROFILE_PATH", ""), str(Path(__file__).resolve().parent / "profiles")) if p)


@pytest.fixture(scope="session", autouse=True)
def _stop_the_loaded_chain():
    """Leave no loaded chain running after the session, even when a test failed."""
    yield
    if LoadedChain.job is not None:
        LoadedChain.job.stop()


@pytest.fixture(scope="session")
def smoke_chain(tmp_path_factory):
    """The whole notebook series (00-11, then 20) with :data:`SMOKE_PROFILE` (the smoke profile plus a fourth
    RL stage of one step, defined only in tests/profiles/four_stages.toml: the recipe's stages are
    data, issue #29), run once per session by the runner `make reproduce` uses: ``(Layout, exit code)``,
    not asserted (:func:`smoke_run` asserts it; the browser test needs only its 01 and 02 to have
    finished). Nobody writes into it after it is built. It runs on a quiet machine: a loaded chain started
    earlier in the session is finished first."""
    from kit import cli, pipeline  # here: every test loads this conftest, few run the chain

    if LoadedChain.job is not None:
        LoadedChain.job.finish()
    root = tmp_path_factory.mktemp("reports")
    t0 = time.perf_counter()
    # a cell that hangs fails the test with the notebook and cell named instead of blocking the suite
    code = cli.main(["reproduce", "--profile", SMOKE_PROFILE, "--run", "t", "--reports-root", str(root),
                     "--cell-timeout", "600"])
    print(f"smoke chain: {time.perf_counter() - t0:.0f} s")
    return pipeline.Layout.for_run(SMOKE_PROFILE, "t", root), code


@pytest.fixture(scope="session")
def smoke_chain_loaded(smoke_chain, tmp_path_factory):
    """The same chain again, under load (:class:`LoadedChain`): ``(Layout, exit code, what it ran beside)``.
    Compared file by file with :func:`smoke_chain` in tests/pipeline/test_repeatable_series.py. Asks for the
    quiet chain first, so a loaded chain is never started beside it."""
    from kit import pipeline

    job = LoadedChain.start(tmp_path_factory, BUSY)
    code = job.finish()
    return pipeline.Layout.for_run(SMOKE_PROFILE, "t", job.root), code, job.beside


@pytest.fixture(scope="session")
def smoke_run(smoke_chain):
    """The session's smoke chain, finished: ``(Layout, KitConfig)``. tests/pipeline/test_smoke_chain.py
    asserts it; the browser test copies its 01/02 products (data, cold-start policy) instead of training
    them again (~95 s of the suite)."""
    from kit.config import load

    lay, code = smoke_chain
    assert code == 0, "the smoke chain failed; see the STOPPED message above"
    return lay, load(SMOKE_PROFILE, write=False)
