"""The README's pooled claims table from a ``pooled_claims.json`` (``python -m kit claims pool ... --out DIR``):
one row per test of each SECTION's current claims (superseded ones left out; SECTIONS comma-separated, in that
order), within a section primaries first, then secondaries, then world checks (marked: never counted), the test's
name shortened, its runs, the pooled statistic with its 95% interval over runs, and the verdict.
``--no-world-checks``: the world checks left out (the README states them apart).

    python scripts/claims_table.py reports/tiny/ar-pooled/pooled_claims.json rStar2-Agent,ReTool,Agent-R,B-STaR \
        reports/claims_pooled.csv --no-world-checks
"""
import csv
import json
import sys

args = [a for a in sys.argv[1:] if a != "--no-world-checks"]
world = "--no-world-checks" not in sys.argv[1:]
if len(args) != 3:
    sys.exit("usage: claims_table.py POOLED_CLAIMS.json SECTION[,SECTION...] OUT.csv [--no-world-checks]")
doc = json.load(open(args[0]))
sections = args[1].split(",")
SHORT = {"minus good-only": "minus good-only", "minus the null arm": "minus null arm",
         "last minus first iteration": "last minus first iteration", "minus direct revision": "minus direct revision",
         "accuracy, Agent-R (last iteration) minus good-only": "accuracy minus good-only, margin 0.05",
         "reflection share, Agent-R (last iteration) minus cold start": "reflection share minus cold start",
         "accuracy, B-STaR (last iteration) minus the fixed arm": "accuracy minus fixed arm, margin 0.05",
         "pass@k, B-STaR (last iteration) minus the fixed arm": "pass@k minus fixed arm",
         "distinct correct per task, cold start minus the fixed arm (last iteration)": "distinct correct, cold start minus fixed arm",
         "PPO minus its clean cold start, failed calls fixed, paired over problems": "fixed failed calls, PPO minus clean cold start",
         "PPO minus its clean cold start, first-call position, paired over problems": "first-call position, PPO minus clean cold start",
         "reflection tokens per post-feedback token, RL minus SFT": "reflection per post-feedback token, RL minus SFT"}
ORDER = {"primary": 0, "secondary": 1, "world_check": 2}
def short(name):
    for k, v in sorted(SHORT.items(), key=lambda kv: -len(kv[0])):  # the longest match first
        if name.endswith(k):
            return v
    return name
def f(x):
    return "n/a" if x is None else f"{x:+.3f}"
rows = []
claims = [c for c in doc["claims"] if c["section"] in sections and not c.get("superseded_by")
          and (world or c.get("role") != "world_check")]
missing = set(sections) - {c["section"] for c in claims}
if missing:
    sys.exit(f"no claims of section(s) {sorted(missing)} in {args[0]}")
# stable: the file's order within a section and role
for c in sorted(claims, key=lambda c: (sections.index(c["section"]), ORDER.get(c.get("role"), 1))):
    role = {"primary": " (primary)", "world_check": " (world check, not counted)"}.get(c.get("role"), "")
    for t in c["tests"]:
        lab = f"`{c['id']}`{role}: {short(t['name'])}"
        lo, hi = t.get("ci95") or (None, None)
        rows.append([lab, t["n"], f"{f(t['value'])} ({f(lo)} to {f(hi)})", t["verdict"]])
with open(args[2], "w", newline="") as fh:
    w = csv.writer(fh)
    w.writerow(["claim (test)", "runs", "pooled (95% interval over runs)", "verdict"])
    w.writerows(rows)
print(open(args[2]).read())
