"""Curate the real pools in the data directory and print the funnel (report §4.2) and timings.

Usage: .venv/bin/python benchmarks/curation_funnel.py [max_df]
"""

import sys
import time

import pandas as pd

from kit.config import DataConfig
from kit.data.curate import curate_from_config, funnel_table


def main() -> None:
    max_df = int(sys.argv[1]) if len(sys.argv) > 1 else 10
    t0 = time.perf_counter()
    result = curate_from_config(DataConfig(), max_df=max_df)
    seconds = time.perf_counter() - t0
    pd.set_option("display.width", 200)
    pd.set_option("display.max_columns", 20)
    print(funnel_table(result.counts).to_string())
    aime_bench = [u for u, f, _ in result.removed if u.startswith(("aime_history/2024_", "aime_history/2025_"))]
    print(f"aime_history 2024_/2025_ rows removed: {len(aime_bench)} (decontaminated: "
          f"{sum(1 for u, f, _ in result.removed if f == 'decontaminated' and u in set(aime_bench))})")
    conflicts = sum(1 for _, f, d in result.removed if f == "duplicate" and "label differs" in d)
    print(f"duplicates whose label differs from the kept copy: {conflicts}")
    print(f"max_df={max_df} load+curate seconds={seconds:.2f}")
    print("name=curation_funnel")


if __name__ == "__main__":
    main()
