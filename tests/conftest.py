"""Root conftest: where the test doubles shared across folders are found.

The doubles live in ``tests/doubles.py`` (``call``, ``corpus``, ``Res``, ``FakeExecutor``,
``pair``); loading this file puts ``tests/`` on ``sys.path`` (pytest's default import mode), so
a test module in any folder imports them with ``from doubles import ...`` instead of keeping a
copy. Folder conftests hold only the fixtures of their folder.
"""
