"""kit.fingerprint (issue #41): the environment a run computes on, the repeatability stamp, and both in
pipeline_state.json; a resume onto another environment is said and stored, never refused."""

from __future__ import annotations

import json

import pytest

from kit import fingerprint
from kit.config import load
from kit.pipeline import Layout, NotebookRun, run_series
from kit.plan import read_run_keys, read_state
from kit.report import builder

CPUINFO = """processor\t: 0
model name\t: Intel(R) Xeon(R) Platinum 8480+
flags\t\t: fpu sse4_2 avx avx2 fma avx512f avx512_bf16 amx_tile amx_bf16 hypervisor
processor\t: 1
model name\t: something else on a second line
"""


@pytest.fixture
def cpuinfo(tmp_path):
    p = tmp_path / "cpuinfo"
    p.write_text(CPUINFO)
    return str(p)


def _fp(cpuinfo, threads=2, **env):
    return fingerprint.environment_fingerprint(load("tiny", {"model.torch_threads": threads}, write=False),
                                               environ=env, cpuinfo=cpuinfo)


def test_the_fingerprint_names_cpu_flags_builds_and_threads_and_its_key_survives_json(cpuinfo):
    fp = _fp(cpuinfo, MKL_CBWR="COMPATIBLE", HOME="/root")
    assert fp["cpu"]["model"] == "Intel(R) Xeon(R) Platinum 8480+"
    assert fp["cpu"]["flags"] == ["sse4_2", "avx", "avx2", "fma", "avx512f", "avx512_bf16", "amx_tile", "amx_bf16"]
    assert fp["threads"] == {"torch_threads": 2, "effective": "2", "torch_intra_op": fp["threads"]["torch_intra_op"],
                             "env": {"MKL_CBWR": "COMPATIBLE"}}  # only the float-deciding variables
    import numpy
    import torch

    assert fp["torch"]["version"] == torch.__version__ and fp["numpy"] == numpy.__version__
    assert fp["torch"]["mkl_available"] is torch.backends.mkl.is_available()
    if torch.backends.mkl.is_available():  # this kit's CPU wheel: MKL BLAS, its version from the build text
        assert fp["torch"]["blas"] == "mkl" and fp["torch"]["mkl"][:2] == "20"
    back = json.loads(json.dumps(fp))
    assert fingerprint.fingerprint_key(back) == fp["key"] and len(fp["key"]) == 12
    assert fingerprint.differences(fp, back) == []


def test_the_key_follows_what_decides_floats_only(cpuinfo, tmp_path):
    base = _fp(cpuinfo)
    assert _fp(cpuinfo)["key"] == base["key"]
    assert _fp(cpuinfo, MKL_CBWR="AVX2")["key"] != base["key"]
    assert _fp(cpuinfo, threads=1)["key"] != base["key"]
    other = tmp_path / "amd"
    other.write_text(CPUINFO.replace("Intel(R) Xeon(R) Platinum 8480+", "AMD EPYC 9654"))
    amd = _fp(str(other))
    assert amd["key"] != base["key"]
    assert fingerprint.differences(base, amd) == ["cpu.model: 'Intel(R) Xeon(R) Platinum 8480+' -> 'AMD EPYC 9654'"]
    host = json.loads(json.dumps(base))
    host["platform"], host["cpu"]["logical_cores"], host["threads"]["torch_intra_op"] = "another kernel", 96, 96
    assert fingerprint.fingerprint_key(host) == base["key"]  # the host's size decides nothing at fixed threads


@pytest.mark.parametrize(("threads", "runtime", "bitwise", "said"), [
    (2, "local", True, "fixed thread count"),
    (-2, "local", False, "load-adaptive speed mode"),
    (0, "local", False, "follows the machine's cores"),
    (2, "verl", False, "VERL"),
])
def test_only_fixed_threads_on_the_local_runtime_are_stamped_bitwise(threads, runtime, bitwise, said):
    cfg = load("tiny", {"model.torch_threads": threads}, write=False)
    if runtime == "verl":
        import dataclasses

        cfg = dataclasses.replace(cfg, runtime="verl")
    stamp = fingerprint.repeatability(cfg)
    assert stamp["bitwise"] is bitwise and said in stamp["why"]
    assert fingerprint.repeatability(None)["bitwise"] is False


def test_the_paper_profile_is_never_stamped_repeatable():
    stamp = fingerprint.repeatability(load("paper-14b", write=False))
    assert not stamp["bitwise"] and "VERL" in stamp["why"] and "torch_threads = 0" in stamp["why"]


@pytest.mark.slow  # over ~3 s: make test, not the inner loop (make test-fast)
def test_the_series_records_the_environment_and_a_resume_elsewhere_warns_and_is_stored(tmp_path, make_notebook):
    a = make_notebook(tmp_path / "src" / "a.ipynb", 'run_dir = ""', "x = 1")
    lay = Layout(root=tmp_path / "out", profile="tiny")
    runs = [NotebookRun(a, {"run_dir": lay.dir("a"), "overrides": {"model.torch_threads": 2}}, (lay.dir("a"),))]
    lines: list[str] = []
    assert [r["status"] for r in run_series(runs, lay, progress_bar=False, echo=lines.append)] == ["done"]
    raw = json.loads(lay.state_path.read_text())
    assert list(raw)[:2] == ["environment", "repeatable"]  # the run's own keys first, then the notebooks
    env = json.loads(json.dumps(raw["environment"]))
    assert raw["repeatable"]["bitwise"] is True  # the notebooks' overrides: torch_threads = 2
    assert env["threads"]["torch_threads"] == 2 and env["key"] == fingerprint.fingerprint_key(env)
    assert raw["a"]["environment_key"] == env["key"]
    assert list(read_state(lay)) == ["a"] and read_run_keys(lay)["environment"] == env
    assert builder.failed_notebooks(lay) == {}  # the run's keys are no notebook
    assert not any(line.startswith("WARNING") for line in lines)

    # the same folder resumed on "another machine": skipped as finished, the difference said and stored
    raw["environment"]["cpu"]["model"] = "Some Other CPU"
    raw["environment"]["key"] = fingerprint.fingerprint_key(raw["environment"])
    lay.state_path.write_text(json.dumps(raw))
    lines.clear()
    assert [r["status"] for r in run_series(runs, lay, progress_bar=False, echo=lines.append)] == ["skipped"]
    warning = next(line for line in lines if line.startswith("WARNING"))
    assert "differs from this machine's" in warning and "cpu.model: 'Some Other CPU'" in warning and "(a)" in warning
    stored = read_run_keys(lay)["environment"]
    assert fingerprint.differences(env, stored) == [], warning
    assert stored["key"] == env["key"] and stored["warnings"] == [warning.removeprefix("WARNING: ")]
    # the next resume here keeps the warning (notebook a still ran elsewhere) and does not repeat it
    lines.clear()
    run_series(runs, lay, progress_bar=False, echo=lines.append)
    assert not any(line.startswith("WARNING") for line in lines)
    assert read_run_keys(lay)["environment"]["warnings"] == stored["warnings"]
    # --force reruns everything here: nothing of the other environment is kept
    run_series(runs, lay, force=True, progress_bar=False, echo=lines.append)
    assert "warnings" not in read_run_keys(lay)["environment"]


def test_a_run_begun_before_fingerprints_warns_that_its_environment_is_unknown(tmp_path, make_notebook):
    a = make_notebook(tmp_path / "src" / "a.ipynb", 'run_dir = ""', "x = 1")
    lay = Layout(root=tmp_path / "out", profile="tiny")
    runs = [NotebookRun(a, {"run_dir": lay.dir("a"), "overrides": {"model.torch_threads": -2}}, (lay.dir("a"),))]
    run_series(runs, lay, progress_bar=False, echo=lambda s: None)
    raw = json.loads(lay.state_path.read_text())
    del raw["environment"], raw["repeatable"]
    lay.state_path.write_text(json.dumps(raw))
    lines: list[str] = []
    run_series(runs, lay, progress_bar=False, echo=lines.append)
    assert any("stored environment (not recorded)" in line for line in lines if line.startswith("WARNING"))
    stamp = read_run_keys(lay)["repeatable"]  # the speed mode the overrides chose
    assert stamp["bitwise"] is False and "load-adaptive" in stamp["why"]


@pytest.mark.slow  # over ~3 s: make test, not the inner loop (make test-fast)
def test_cpu_generations_and_the_mkl_mode_in_effect_change_the_key(tmp_path):
    """Review of issue #41: one model name ("AMD EPYC") covers several generations, and MKL_CBWR in the
    environment is not the mode a process that used oneMKL before importing kit runs."""
    import subprocess
    import sys

    from kit import fingerprint

    def info(family, model):
        p = tmp_path / f"cpu{family}_{model}"
        p.write_text(f"model name\t: AMD EPYC\ncpu family\t: {family}\nmodel\t\t: {model}\nstepping\t: 1\n"
                     "flags\t\t: sse4_2 avx avx2 fma\n")
        return str(p)

    a = fingerprint.environment_fingerprint(None, environ={}, cpuinfo=info(23, 49))
    b = fingerprint.environment_fingerprint(None, environ={}, cpuinfo=info(25, 1))
    assert (a["cpu"]["family"], a["cpu"]["model_number"], a["cpu"]["stepping"]) == ("23", "49", "1")
    assert a["key"] != b["key"] and "cpu.family: '23' -> '25'" in fingerprint.differences(a, b)
    code = ("import sys\nif sys.argv[1] == 'used':\n    import torch; (torch.ones(64, 64) @ torch.ones(64, 64)).sum()\n"
            "import warnings; warnings.simplefilter('ignore')\nimport kit.fingerprint as f; print(f._mkl_cbwr())")
    env = {k: v for k, v in __import__("os").environ.items() if k != "MKL_CBWR"}
    modes = [subprocess.run([sys.executable, "-c", code, how], capture_output=True, text=True, env=env,
                            timeout=300).stdout.split()[-1] for how in ("kit-first", "used")]
    if modes[0] == "None":
        return  # a torch without oneMKL
    assert modes == ["AUTO,STRICT", "BRANCH_OFF"]
