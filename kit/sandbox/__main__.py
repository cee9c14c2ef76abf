"""``python -m kit.sandbox selftest [--isolation bwrap|none] [--workers N]``."""

import argparse
import sys

from kit.config import SandboxConfig
from kit.sandbox.selftest import main as selftest

ap = argparse.ArgumentParser(prog="python -m kit.sandbox")
ap.add_argument("command", choices=["selftest"])
ap.add_argument("--isolation", choices=["bwrap", "none"], default="bwrap")
ap.add_argument("--workers", type=int, default=0)
args = ap.parse_args()
sys.exit(selftest(SandboxConfig(isolation=args.isolation, num_workers=args.workers)))
