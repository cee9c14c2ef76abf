"""``python -m kit <verb>``: :func:`kit.cli.main`."""

from kit.cli import main

raise SystemExit(main())
