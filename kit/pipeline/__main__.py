"""``python -m kit.pipeline run ...``: :func:`kit.pipeline.main`."""

from kit.pipeline import main

raise SystemExit(main())
