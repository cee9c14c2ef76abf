"""What a finished `smoke` notebook chain must leave, on either runtime: the assertions shared by
the local chain (tests/pipeline/test_smoke_chain.py) and the chain through VERL's trainer on CPU
(tests/bridge/test_verl_cpu_chain.py). Each check takes the run's ``Layout`` and the config the
chain trained with (importable from every test module: tests/conftest.py puts this folder on the path).

The two runtimes differ in the RL rows' keys (VERL logs a subset: ``kit.bridge.metric_map.METRIC_MAP``, from ``kit.metrics``),
in the cold start (the local SFT logs its steps; VERL's smoke chain links a checkpoint), and in
how many RL steps the chain trains; everything else is asserted the same way.
"""

from __future__ import annotations

import json
import subprocess

import pandas as pd
import pytest

from kit import claims, pipeline, plan
from kit.analysis import code_behaviour
from kit.studies.agent_r import iterate
from kit.studies.bstar import loop

#: keys every local RL row must have (each declared in kit.metrics.RL_KEYS: tests/test_metrics_schema.py)
LOCAL_RL_KEYS = ("stage", "step", "global_step", "reward_mean", "accuracy", "response_len_mean", "truncation_ratio",
                 "tool_calls_per_traj", "tool_error_ratio_correct_before", "tool_error_ratio_correct_after",
                 "p_format_mean", "kept", "time_generate_s", "time_tool_s", "time_verify_s", "time_update_s",
                 "algorithm", "seed", *code_behaviour.KEYS)
#: the keys of a VERL RL row of every algorithm (kit.bridge.metric_map.METRIC_MAP, from kit.metrics)
VERL_RL_KEYS = ("stage", "step", "global_step", "reward_mean", "accuracy", "response_len_mean", "truncation_ratio",
                "tool_calls_per_traj", "time_generate_s", "time_tool_s", "time_update_s", "algorithm", "seed",
                "code_ratio", "self_corrections")  # ReTool's behaviour keys that are never NaN (the others may be absent)


def rows(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def claimed_keys_have_their_declared_population(run_dir) -> int:
    """Issue #29: on a VERL run folder, every claimed ``metrics.jsonl`` key of every row is filled from a
    VERL step metric of the population kit.metrics declares (VERL's ``verl/step_metrics.jsonl``, the
    same step): e.g. ``response_len_mean`` from the kit buffer's sampled ``rstar2/response_len_mean``,
    never from VERL's ``response_length/mean`` over RoC's kept rows. Returns the values checked."""
    from kit.metrics import RL_KEYS, VERL_POPULATION

    keys = {t["key"] for c in claims.load_claims() for t in c["tests"] if t.get("key") in RL_KEYS}
    verl = {}
    for line in rows(run_dir / "verl" / "step_metrics.jsonl"):
        verl.setdefault(int(line["step"]), {}).update(line.get("data", {}))
    n = 0
    for row in rows(run_dir / "metrics.jsonl"):
        data = verl[row["global_step"]]
        for key in sorted(keys):
            if key not in row or row[key] is None:
                # a ratio that may be undefined at a step (no correct rollout, no call) is left out there
                assert (RL_KEYS[key].population != "sampled" or key.startswith("tool_error")
                        or key in code_behaviour.MAY_BE_UNDEFINED), (run_dir, key)
                continue
            sources = [s for s in RL_KEYS[key].verl if s in data]
            assert sources and data[sources[0]] == pytest.approx(row[key]), (run_dir, key, row[key], sources)
            assert VERL_POPULATION[sources[0]] == RL_KEYS[key].population, (run_dir, key, sources[0])
            n += 1
    return n


def every_notebook_executed_and_recorded(lay) -> None:
    """Every entry of the profile's series (one per RL stage of its ``[[stages]]`` list) ran and was recorded."""
    series = [name for name, _ in plan.series_parameters(lay, 0)]
    state = pipeline.read_state(lay)
    assert [n for n in series if state.get(n, {}).get("status") == "done"] == series
    assert all((lay.executed / f"{n}.ipynb").exists() for n in series)


def rl_metrics_have_keys_and_step_counts(lay, cfg, keys) -> None:
    """Each stage's ``metrics.jsonl``: ``stages.<stage>.steps`` rows with ``keys``, steps 1..n, and
    global steps that continue across the stages."""
    last_global = 0
    for stage in cfg.stages.names:
        steps = cfg.stages[stage].steps
        got = rows(lay.root / stage / "metrics.jsonl")
        assert len(got) == steps, stage
        assert all(set(keys) <= set(r) for r in got), f"{stage}: missing {set(keys) - set(got[0])}"
        assert [r["step"] for r in got] == list(range(1, steps + 1))
        assert got[0]["global_step"] == last_global + 1  # global steps continue across stages
        last_global = got[-1]["global_step"]


def ablation_runs_both_algorithms_for_every_seed(lay, cfg, keys) -> None:
    df = pd.concat([pd.DataFrame(rows(p)) for p in (lay.root / "ablation").rglob("metrics.jsonl")])
    assert set(keys) <= set(df.columns), set(keys) - set(df.columns)
    counts = df.groupby(["algorithm", "seed"]).size()
    assert set(counts.index) == {(a, s) for a in ("grpo", "grpo_roc") for s in cfg.ablation.seeds}
    assert (counts == cfg.ablation.steps).all()


def evaluation_on_the_real_benchmarks(lay, cfg) -> None:
    for bench in ("aime24", "aime25", "math500", "hmmt25"):
        d = json.loads((lay.root / "eval" / "eval" / f"{bench}.json").read_text())
        assert d["n_samples"] == cfg.eval.n_samples and d["n_problems"] == cfg.eval.max_problems
        assert d["manifest"]["data_files"] and len(d["per_problem"]) == cfg.eval.max_problems
        correct = [c for p in d["per_problem"] for c in p["correct"]]
        assert len(correct) == cfg.eval.max_problems * cfg.eval.n_samples
        # the headline numbers are the per-sample grades in the same file, aggregated
        assert d["avg_at_n"] == pytest.approx(sum(correct) / len(correct))
        solved = sum(any(p["correct"]) for p in d["per_problem"]) / len(d["per_problem"])
        assert d["pass_at_k"][str(cfg.eval.n_samples)] == pytest.approx(solved)


def consistency_filter_and_passk_curves(lay, cfg) -> None:
    ev = lay.root / "eval"
    c = json.loads((ev / "consistency.json").read_text())
    assert c["n"] == cfg.data.consistency_samples and c["in"] == cfg.eval.consistency_problems
    assert c["in"] == c["no_samples"] + c["inconsistent"] + c["out"] == len(pd.read_parquet(ev / "consistency.parquet"))
    curves = pd.read_csv(ev / "passk" / "passk_curves.csv", index_col=0)
    assert list(curves.columns) == ["SFT (cold start)", "RL (stage 3)"]
    assert list(curves.index) == list(range(1, cfg.eval.passk_n + 1))
    assert ((curves >= 0) & (curves <= 1)).all().all() and (curves.diff().dropna() >= -1e-12).all().all()
    assert json.loads((ev / "passk" / "passk_curves.json").read_text())["problems"] == cfg.eval.passk_problems
    for ext in ("png", "pdf"):
        assert (ev / "passk" / f"passk_curves.{ext}").stat().st_size > 5000
        assert (lay.root / "figures" / f"passk_curves.{ext}").exists()  # copied by 20


def figures_tables_and_report(lay) -> None:
    for name in ("figure4_tool_errors", "figure8_stages", "figure9_roc_ablation"):
        for ext in ("png", "pdf"):
            assert (lay.root / "figures" / f"{name}.{ext}").stat().st_size > 5000, name
    for name in ("table3_math", "table4_response_tokens", "table5_generalization", "table6_32b"):
        df = pd.read_csv(lay.root / "tables" / f"{name}.csv", index_col=0)
        assert df.columns[0].startswith(f"reproduced: {lay.profile}, tiny Qwen3")
        assert any(c.startswith("paper: ") for c in df.columns[1:])
        assert (lay.root / "tables" / f"{name}.tex").exists()
    t3 = pd.read_csv(lay.root / "tables" / "table3_math.csv", index_col=0)
    assert t3.iloc[:, 0].notna().all()  # all four math benchmarks measured
    pdf = lay.report_pdf
    info = subprocess.run(["pdfinfo", str(pdf)], capture_output=True, text=True, check=True).stdout
    pages = int(next(ln.split()[-1] for ln in info.splitlines() if ln.startswith("Pages:")))
    images = len(subprocess.run(["pdfimages", "-list", str(pdf)], capture_output=True, text=True).stdout.splitlines()) - 2
    assert pages >= 10 and images >= 3
    # issue #30: every executed notebook of the run went through the LaTeX route (its part heading is in
    # the PDF), not the figures-and-tables fallback, which has no notebook in it
    text = "".join(subprocess.run(["pdftotext", str(pdf), "-"], capture_output=True, text=True, check=True).stdout.split())
    executed = sorted(p.stem for p in lay.executed.glob("*.ipynb"))
    assert executed and "figuresandtablesonly" not in text
    assert [name for name in executed if f"Notebook{name}" not in text] == [], "notebooks missing from the LaTeX report"


def claims_file_and_summary_page(lay) -> None:
    """Notebook 20 writes claims.json in its schema; smoke is too short to reproduce anything, so no
    verdict may say it did; the report opens with the one-page summary (issue #16)."""
    doc = claims.read_claims(lay.root / "claims.json")  # raises on a missing key or an unknown verdict
    assert doc["profile"] == lay.profile and doc["schema_version"] == claims.SCHEMA_VERSION
    assert [c["id"] for c in doc["claims"]] == [c["id"] for c in claims.load_claims()]
    assert {c["verdict"] for c in doc["claims"]} <= set(claims.VERDICTS)
    assert all(t["verdict"] in claims.VERDICTS for c in doc["claims"] for t in c["tests"])
    assert doc["counts"]["reproduced"] == 0, [c["id"] for c in doc["claims"] if c["verdict"] == "reproduced"]
    first = subprocess.run(["pdftotext", "-f", "1", "-l", "1", str(lay.report_pdf), "-"], capture_output=True,
                           text=True, check=True).stdout
    assert "pre-registered" in first and "What this profile cannot show" in first
    # then a page per other paper whose claims the run tests (the claims file's section:), in its order
    nxt = [" ".join(subprocess.run(["pdftotext", "-f", str(k), "-l", str(k), str(lay.report_pdf), "-"], capture_output=True,
                                   text=True, check=True).stdout.split()) for k in (2, 3)]
    assert "ReTool (Feng et al. 2025) on this run" in nxt[0] and "Agent-R (Yuan et al. 2025) on this run" in nxt[1]


def retool_arms_and_inconclusive_verdicts(lay, cfg) -> None:
    """Notebook 10 (issue #33): a PPO arm per ablation seed (smoke: one) with ReTool's behaviour keys in
    every row, its figure copied by 20 for the summary's ReTool page, and ReTool's claims, all
    inconclusive on a run this short (one seed, two steps), in its verdicts.json and in claims.json."""
    arms = [name for name, _ in plan.retool_arms(cfg)]
    assert arms and all(len(rows(lay.root / "retool" / a / "metrics.jsonl")) == cfg.ablation.steps for a in arms)
    assert all(set(code_behaviour.KEYS) <= set(r) and r["algorithm"] == "ppo"
               for a in arms for r in rows(lay.root / "retool" / a / "metrics.jsonl"))
    ids = [c["id"] for c in claims.load_claims() if c.get("section") == "ReTool"]
    assert json.loads((lay.root / "retool" / "verdicts.json").read_text()) == dict.fromkeys(ids, "inconclusive")
    doc = claims.read_claims(lay.root / "claims.json")
    assert {c["id"]: c["verdict"] for c in doc["claims"] if c["section"] == "ReTool"} == dict.fromkeys(ids, "inconclusive")
    assert (lay.root / "figures" / "retool_behaviour.png").stat().st_size > 5000
    # the emergence arm (issue #45): a clean cold start without fixed demos, PPO from it, both sampled alike
    em, summary = lay.root / "retool" / "emergence", json.loads((lay.root / "retool" / "retool.json").read_text())
    if cfg.retool.emergence_seeds == 0:  # the VERL chain
        assert summary["emergence"] == {} and not em.exists()
        return
    clean = json.loads((em / "cold_start" / "config.json").read_text())["data"]
    assert clean["demo_error_fraction"] == 0 and clean["demo_preamble_max"] == cfg.retool.clean_preamble_max
    assert json.loads((em / "cold_start" / "config.json").read_text())["sft"]["steps"] == (cfg.retool.clean_sft_steps or cfg.sft.steps)
    sft_data = json.loads((em / "cold_start" / "sft_data.json").read_text())
    assert {d["kind"] for d in sft_data["demos"]} <= {"tool", "direct"}  # no demo fails and is then fixed
    assert sorted(summary["emergence"]["arms"]) == [f"ppo_seed{s}" for s in plan.arm_seeds(cfg)[:cfg.retool.emergence_seeds]]
    ev = rows(em / "eval.jsonl")
    n = (cfg.retool.eval_problems or cfg.data.task_heldout_size) * cfg.retool.eval_samples
    assert [sum(r["policy"] == p for r in ev) for p in ("cold_start", "ppo")] == [n, n * cfg.retool.emergence_seeds]
    by_policy = {p: [r["problem"] for r in ev if r["policy"] == p] for p in ("cold_start", "ppo")}
    assert by_policy["cold_start"] == by_policy["ppo"][:n]  # the same problems, each eval_samples times, in one order


def agent_r_runs_both_arms_and_stays_inconclusive(lay, cfg) -> None:
    """Notebook 11 (issue #34): every policy sampled on the same held-out tasks, the search's cost per
    arm and iteration (its full budget of rollouts), the parquet for VERL, and the Agent-R claims
    inconclusive on smoke (below their minimum data)."""
    a, d = cfg.agent_r, lay.root / "agent_r"
    ev = pd.DataFrame(rows(d / "policy_eval.jsonl"))
    per = ev.groupby(["policy", "iteration"]).size()
    expect = {("cold_start", 0), *{(arm, k) for arm in iterate.ARMS for k in range(1, a.iterations + 1)}}
    assert {"agent_r", "direct", "good_only", "null"} <= set(iterate.ARMS)  # issue #46's four arms
    assert set(per.index) == expect and (per == a.eval_problems * a.eval_samples).all()
    probe = pd.DataFrame(rows(d / "probe_eval.jsonl")).groupby(["policy", "iteration"]).size()  # issue #46
    assert set(probe.index) == expect and (probe == a.eval_problems * a.probe_samples).all()
    cost = pd.DataFrame(rows(d / "search_cost.jsonl"))
    assert len(cost) == len(iterate.SEARCHED) * a.iterations and (cost["rollouts"] == a.tasks * a.simulations).all()
    its = pd.DataFrame(rows(d / "iterations.jsonl")).set_index(["arm", "iteration"])
    # iteration 1: both revising arms search the cold start with one seed, so they find the same pairs and skip the
    # same ones (later iterations search with different policies)
    for key in ("good", "pairs", "revision", "skipped"):
        assert its.loc[("direct", 1), key] == its.loc[("agent_r", 1), key], key
    assert (cost["live_calls"] >= 0).all() and (cost["cpu_s"] > 0).all()
    pq = pd.read_parquet(d / "verl" / "revision_sft.parquet")
    own = int((pq["kind"] != "general").sum())
    assert (pq["kind"] == "general").sum() == (max(1, round(a.eta * own)) if own else 0)  # eta per Agent-R row
    doc = claims.read_claims(lay.root / "claims.json")
    mine = [c for c in doc["claims"] if c["section"] == "Agent-R"]
    registered = [c for c in claims.load_claims() if c.get("section") == "Agent-R"]
    assert len(mine) == len(registered) >= 5 and all(c["id"].startswith("agentr_") and c["verdict"] == "inconclusive" for c in mine)
    assert (lay.root / "figures" / "agent_r_policies.png").stat().st_size > 5000  # drawn by 11, copied by 20


def bstar_runs_both_arms_and_stays_inconclusive(lay, cfg) -> None:
    """Notebook 12 (issue #47): both arms sample the same training tasks each iteration; B-STaR's pair is the best
    of its own dev sweep and its threshold the best on its full pool; every policy is sampled on the same held-out
    tasks; the curves are drawn and copied; the B-STaR claims are inconclusive on smoke (below their minimum data)."""
    b, d = cfg.bstar, lay.root / "bstar"
    its = pd.DataFrame(rows(d / "iterations.jsonl")).set_index(["arm", "iteration"])
    sweep = pd.DataFrame(rows(d / "sweep.jsonl"))
    assert set(its.index) == {(arm, k) for arm in ("bstar", "fixed") for k in range(1, b.iterations + 1)}
    assert (its.loc["fixed", "temperature"] == b.fixed_temperature).all()
    assert (its.loc["fixed", "threshold"] == b.fixed_threshold).all()
    assert list(its.loc["bstar", "tasks"]) == list(its.loc["fixed", "tasks"])  # the same tasks, iteration by iteration
    for k in range(1, b.iterations + 1):
        dev = sweep[(sweep["iteration"] == k) & (sweep["phase"] == "dev")]
        assert len(dev) == len(b.temperatures) * len(b.thresholds)
        best = loop.choose(dev.to_dict("records"))  # the rule the loop applied
        if best is not None:
            assert its.loc[("bstar", k), "temperature"] == best["temperature"]
        full = sweep[(sweep["iteration"] == k) & (sweep["phase"] == "full")].dropna(subset=["balance"])
        if len(full):
            assert its.loc[("bstar", k), "balance"] == full["balance"].max()
    ev = pd.DataFrame(rows(d / "eval.jsonl"))
    per = ev.groupby(["policy", "iteration"])["problem"].apply(tuple)
    assert len(per) == 1 + 2 * b.iterations and per.nunique() == 1  # every policy, the same held-out tasks
    assert (ev["samples"] == b.eval_samples).all() and len(per.iloc[0]) == b.eval_problems
    doc = claims.read_claims(lay.root / "claims.json")
    mine = [c for c in doc["claims"] if c["section"] == "B-STaR"]
    registered = [c for c in claims.load_claims() if c.get("section") == "B-STaR"]
    assert len(mine) == len(registered) and all(c["verdict"] == "inconclusive" for c in mine)
    assert (lay.root / "figures" / "bstar_curves.png").stat().st_size > 5000  # drawn by 12, copied by 20
