"""Root conftest: where the test doubles shared across folders are found.

The doubles live in ``tests/doubles.py`` (``call``, ``corpus``, ``Res``, ``FakeExecutor``,
``pair``); loading this file puts ``tests/`` on ``sys.path`` (pytest's default import mode), so
a test module in any folder imports them with ``from doubles import ...`` instead of keeping a
copy. Folder conftests hold only the fixtures of their folder.

The tests' own profiles (``tests/profiles/*.toml``, e.g. ``four_stages``) are found through
``KIT_PROFILE_PATH``, set here for the session (the pipeline's kernels inherit it).
"""

import os
from pathlib import Path

os.environ["KIT_PROFILE_PATH"] = os.pathsep.join(
    p for p in (os.environ.get("KIT_PROFILE_PATH", ""), str(Path(__file__).resolve().parent / "profiles")) if p)
