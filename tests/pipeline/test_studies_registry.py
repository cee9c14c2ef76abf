"""The related-work studies as data (issue #43): one :class:`kit.studies.Study` record each, and every
part of the kit that used to name ReTool and Agent-R one by one reads the registry instead."""

from __future__ import annotations

import ast
import dataclasses
import importlib
import re
from pathlib import Path

import nbformat
import pytest
import yaml

from kit import claims, pipeline, plan, studies
from kit.config import StagesConfig
from kit.config.loading import RUN_FOLDERS
from kit.pipeline import overlap, state
from kit.plan import Layout, UpstreamMissing, require_upstream

SERIES = plan.series(StagesConfig().names)
BY_NAME = {e.name: e for e in SERIES}


@pytest.mark.parametrize("study", studies.STUDIES, ids=lambda s: s.key)
def test_each_study_is_a_series_entry_with_its_folder_claims_job_and_dry_run(study):
    names = [e.name for e in SERIES]
    entry = BY_NAME[study.notebook]
    assert (entry.folder, dict(entry.upstream), entry.product) == (study.key, dict(study.upstream), study.product)
    assert (pipeline.NOTEBOOK_DIR / f"{study.notebook}.ipynb").exists()
    # it runs after everything it reads and before 20, which reads it
    assert all(names.index(up) < names.index(study.notebook) for up in study.upstream.values())
    assert names.index(study.notebook) < names.index("20_figures_and_tables")
    assert study.key in RUN_FOLDERS  # no RL stage may be named like its folder
    assert any(c.get("section") == study.section for c in claims.load_claims())
    assert (study.notebook in overlap.STANDARD_JOBS) == bool(study.job)
    if study.job:
        assert overlap.STANDARD_JOBS[study.notebook].argv[-1] == study.job and importlib.util.find_spec(study.job)
    assert (study.notebook in pipeline.LAUNCHES_VERL) == study.launches_verl
    assert not study.dry_run or callable(studies.resolve(study.dry_run))  # "" = no dry-run lines of its own
    assert len({study, studies.by_key(study.key)}) == 1  # a record is hashable (its upstream dict is not hashed)


def test_notebook_20_takes_one_folder_per_study_and_reads_its_figures():
    nb = nbformat.read(pipeline.NOTEBOOK_DIR / "20_figures_and_tables.ipynb", as_version=4)
    params = next(c.source for c in nb.cells if "parameters" in c.metadata.get("tags", []))
    (default,) = [ast.literal_eval(n.value) for n in ast.parse(params).body
                  if isinstance(n, ast.AnnAssign) and n.target.id == "study_dirs"]
    assert default == {}  # every registered study's folder under run_dir: a new study needs no edit here
    assert plan.study_folders("/r", {"retool": "/x/retool"}) == {s.key: "/x/retool" if s.key == "retool" else f"/r/{s.key}"
                                                                  for s in studies.STUDIES}
    with pytest.raises(ValueError, match=r"study_dirs: \['nope'\] are no registered study"):
        plan.study_folders("/r", {"nope": "/x"})
    assert BY_NAME["20_figures_and_tables"].upstream["study_dirs"] == {s.key: s.notebook for s in studies.STUDIES}
    params = dict(plan.series_parameters(Layout.for_run("smoke", "t", "/tmp/r"), 0))
    assert params["20_figures_and_tables"]["study_dirs"] == {s.key: params[s.notebook]["run_dir"]
                                                             for s in studies.STUDIES}


def test_the_claims_find_each_study_s_folder_by_its_key(tmp_path):
    dirs = claims.RunDirs.under(tmp_path, studies={"retool": tmp_path / "elsewhere"})
    assert dirs.folder("retool") == tmp_path / "elsewhere" and dirs.folder("agent_r") == tmp_path / "agent_r"
    assert claims.RunDirs.under(tmp_path, agent_r=tmp_path / "x").folder("agent_r") == tmp_path / "x"
    with pytest.raises(ValueError, match=r"unknown run folder\(s\) \['star_r'\]"):
        claims.RunDirs.under(tmp_path, studies={"star_r": tmp_path})
    with pytest.raises(claims.Missing, match="no run folder called 'studies'"):
        dirs.folder("studies")


def test_20_s_upstream_check_names_the_study_that_writes_a_missing_folder(tmp_path):
    lay = Layout.for_run("smoke", "t", tmp_path)
    (tmp_path / "smoke" / "t" / "retool").mkdir(parents=True)
    (tmp_path / "smoke" / "t" / "retool" / "retool.json").write_text("{}")
    dirs = {s.key: lay.dir(s.key) for s in studies.STUDIES}
    with pytest.raises(UpstreamMissing, match=r"needs .*agent_r/summary.json, which 11_agent_r writes"):
        require_upstream("20_figures_and_tables", profile="smoke", study_dirs=dirs)
    keyed = re.escape(str(sorted(s.key for s in studies.STUDIES)))
    with pytest.raises(ValueError, match=rf"study_dirs takes one folder per study, keyed {keyed}"):
        require_upstream("20_figures_and_tables", study_dirs={"retool": lay.dir("retool")})


def test_each_study_has_its_report_page_text_and_a_resolvable_dry_run():
    for s in studies.STUDIES:
        assert studies.by_section(s.section) is s and studies.by_key(s.key) is s and s.title and s.what
    assert studies.by_section("rStar2-Agent") is None
    with pytest.raises(KeyError, match=re.escape(f"registered: {[s.key for s in studies.STUDIES]}")):
        studies.by_key("star_r")
    with pytest.raises(ValueError, match="expected 'module:function'"):
        studies.resolve("kit.bridge.study_runs")


def test_a_study_from_outside_the_kit_is_named_by_module_and_attribute(monkeypatch):
    assert studies.plugin_studies("") == () and studies.plugin_studies(" , ") == ()
    with pytest.raises(ValueError, match="KIT_STUDIES: 'toy' is not 'module:attribute'"):
        studies.plugin_studies("toy")
    with pytest.raises(ValueError, match="KIT_STUDIES: 'kit.studies:by_key' is function, not a kit.studies.Study"):
        studies.plugin_studies("kit.studies:by_key")
    with pytest.raises(ValueError, match="has the key 'retool' of study 'retool'"):
        studies.plugin_studies("kit.studies:RETOOL")
    with pytest.raises(ImportError, match="KIT_STUDIES: 'no_such_module_here:STUDY': No module named"):
        studies.plugin_studies("no_such_module_here:STUDY")
    for bad in ({"key": "figures"}, {"key": "a/b"}, {"notebook": "07_behavior_analysis"}, {"notebook": "90_toy"}):
        fields = {"key": "toy", "section": "Toy", "notebook": "19_toy", **bad}
        monkeypatch.setattr(studies, "_probe", dataclasses.replace(studies.RETOOL, **fields), raising=False)
        with pytest.raises(ValueError, match="must be a plain identifier|is a notebook of the kit's series|numbered 10-19"):
            studies.plugin_studies("kit.studies:_probe")
    monkeypatch.setattr(studies, "_probe", dataclasses.replace(studies.RETOOL, key="toy", notebook="19_toy",
                                                               section=claims.DEFAULT_SECTION), raising=False)
    with pytest.raises(ValueError, match="section 'rStar2-Agent' is the kit's own paper's"):
        studies.plugin_studies("kit.studies:_probe")


def test_a_study_s_own_claims_file_holds_only_its_section(tmp_path, monkeypatch):
    own = tmp_path / "claims.yaml"
    claim = next(c for c in claims.load_claims() if c.get("section") == "ReTool")
    own.write_text(yaml.safe_dump({"claims": [{**claim, "id": "toy_x", "section": "Toy"}]}))
    toy = dataclasses.replace(studies.RETOOL, key="toy", section="Toy", notebook="19_toy", claims_file=str(own))
    monkeypatch.setattr(claims, "STUDIES", (*studies.STUDIES, toy))
    assert [c["id"] for c in claims.load_claims() if c.get("section") == "Toy"] == ["toy_x"]
    own.write_text(yaml.safe_dump({"claims": [{**claim, "id": "toy_x"}]}))
    with pytest.raises(claims.ClaimsError, match="claim toy_x: section 'ReTool', but this file is study 'Toy''s own"):
        claims.load_claims()


def test_a_moved_run_folder_keeps_its_finished_notebooks():
    old, new = "/old/reports/smoke/t", Path("/new/r/smoke/t2")
    stored = {"profile": "smoke", "run_dir": f"{old}/retool", "init_dir": f"{old}/sft", "data_dir": "/data/elsewhere"}
    now = {"profile": "smoke", "run_dir": f"{new}/retool", "init_dir": f"{new}/sft", "data_dir": "/data/elsewhere"}
    assert state.same_parameters(stored, now, new)
    assert not state.same_parameters({**stored, "data_dir": f"{old}/data"}, now, new)  # a parameter that changed
    report = {"run_dir": old, "stage_dirs": [f"{old}/stage1"], "study_dirs": {"retool": f"{old}/retool"}}
    assert state.same_parameters(report, {"run_dir": str(new), "stage_dirs": [f"{new}/stage1"],
                                        "study_dirs": {"retool": f"{new}/retool"}}, new)
    assert state.relocated(f"{old}x/sft", old, str(new)) == f"{old}x/sft"  # a sibling folder is not inside


def test_a_study_brings_its_own_claim_kinds_and_may_not_take_a_kit_kind_s_name(tmp_path, monkeypatch):
    """Agent-R's ``agent_r_diff`` lives in its wing (kit/studies/agent_r/kinds.py) and reaches the claims through
    its record; the toy study's ``toy_figures`` the same way, judged on a folder with one figure."""
    from kit.claims import files, kinds, pool

    assert "agent_r_diff" not in kinds.KINDS and kinds.all_kinds()["agent_r_diff"].__module__ == "kit.studies.agent_r.kinds"
    assert "agent_r_diff" in pool.arm_comparisons()  # pooled as a paired difference
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1] / "studies"))
    toy = importlib.import_module("toy_study.study").STUDY
    for module in (studies, claims, files):
        monkeypatch.setattr(module, "STUDIES", (*studies.KIT_STUDIES, toy))
    (tmp_path / "toy").mkdir()
    (tmp_path / "toy" / "toy_figure.png").write_bytes(b"")
    (claim,) = [c for c in claims.load_claims() if c.get("section") == "Toy"]
    (res,) = claims.evaluate_claims(claims.RunDirs.under(tmp_path), [{**claim, "tests": claim["tests"][1:]}],
                                    preconditions={})
    assert (res.tests[0].kind, res.tests[0].value, res.tests[0].verdict) == ("toy_figures", 1.0, "reproduced")
    clash = dataclasses.replace(toy, claim_kinds="kit.studies.agent_r.kinds:KINDS")
    monkeypatch.setattr(studies, "STUDIES", (*studies.KIT_STUDIES, clash))
    with pytest.raises(ValueError, match="study 'toy': claim kind 'agent_r_diff' is already kit.studies.agent_r"):
        kinds.all_kinds()


def test_the_file_order_of_notebooks_is_the_series_order():
    """Issue #43: ``ls notebooks/`` reads in the order the series runs: the studies (10-19) before the
    report (20), and the template of added stages right after the last stage notebook it follows."""
    files = sorted(p.stem for p in pipeline.NOTEBOOK_DIR.glob("*.ipynb"))
    kit_series = [e.name for e in SERIES if not e.name.startswith(tuple(s.notebook for s in studies.STUDIES
                                                                         if s not in studies.KIT_STUDIES))]
    assert [f for f in files if f != plan.STAGE_TEMPLATE] == kit_series
    assert files.index(plan.STAGE_TEMPLATE) == files.index("05_rl_stage3") + 1


def test_a_record_in_a_package_that_imports_the_kit_first_is_named_as_the_cycle_it_is(tmp_path):
    """The reviewer's case: the record in the package's ``__init__``, and a process (a background job) that
    imports the package before the kit: ``kit.studies`` then finds the package half imported."""
    import os
    import subprocess
    import sys

    pkg = tmp_path / "halfpkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("from kit.studies import COLD_START, Study\n\nSTUDY = Study(key='half', "
                                     "section='Half', notebook='18_half', upstream={'sft_dir': COLD_START}, "
                                     "product='summary.json', title='t', what='w')\n")
    env = {**os.environ, "KIT_STUDIES": "halfpkg:STUDY",
           "PYTHONPATH": os.pathsep.join([str(tmp_path), str(Path(studies.__file__).resolve().parents[2])])}
    res = subprocess.run([sys.executable, "-c", "import halfpkg"], env=env, capture_output=True, text=True)
    assert res.returncode == 1 and "'halfpkg' is still being imported" in res.stderr, res.stderr[-2000:]
    assert "keep the Study record in a module of its own" in res.stderr


def test_a_study_s_paired_kinds_must_be_its_own_kinds(monkeypatch):
    from kit.claims import kinds

    bogus = dataclasses.replace(studies.AGENT_R, paired_kinds=("agent_r_diff", "no_such_kind"))
    monkeypatch.setattr(studies, "STUDIES", (studies.RETOOL, bogus))
    with pytest.raises(ValueError, match=r"study 'agent_r': paired_kinds \['no_such_kind'\] are not kinds of"):
        kinds.all_kinds()


def test_a_study_record_s_upstream_and_section_are_checked_when_the_series_is_built(monkeypatch):
    """A fresh-user review (issue #43) could send a study's products into the cold start's folder (upstream named
    ``run_dir``), make it read notebook 20 (a loop), or take the kit's own claims section: each is refused, naming
    the study."""
    base = studies.AGENT_R
    cases = {"run_dir": ({"run_dir": studies.COLD_START}, "the runner sets"),
             "loop": ({"sft_dir": "20_figures_and_tables"}, "runs at or after"),
             "unknown": ({"sft_dir": "nope_notebook"}, "'nope_notebook' is no entry of the series")}
    for upstream, message in cases.values():
        bad = dataclasses.replace(base, upstream=upstream)
        monkeypatch.setattr(plan, "STUDIES", (studies.RETOOL, bad))
        with pytest.raises(ValueError, match=rf"study 'agent_r' \(11_agent_r\), upstream .*{message}"):
            plan.series(("stage1",))
    assert studies.KIT_SECTION == claims.DEFAULT_SECTION


def test_a_claim_of_the_kit_s_file_names_a_known_section(tmp_path, monkeypatch):
    text = claims.CLAIMS_FILE.read_text().replace("section: Agent-R", "section: Agent R", 1)
    bad = tmp_path / "claims.yaml"
    bad.write_text(text)
    monkeypatch.setattr(claims, "CLAIMS_FILE", bad)
    with pytest.raises(claims.ClaimsError, match="section 'Agent R' is no registered study's"):
        claims.load_claims()
