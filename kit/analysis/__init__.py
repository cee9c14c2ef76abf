"""Behaviour analysis (rStar2-Agent §5.4): per-token entropy and its HTML view (``entropy``),
forking vs reflection high-entropy tokens (``tokens``), the B-STaR balance score (``bstar``).
Import the submodules directly."""
