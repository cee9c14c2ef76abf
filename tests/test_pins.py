"""One set of pins (issue #31): ``environment.yml`` installs what ``pyproject.toml`` declares, with the same
version specifiers, so a conda user and a ``make setup`` user get the same packages."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import yaml
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[1]


def _by_name(specs) -> dict[str, Requirement]:
    reqs = [Requirement(s) for s in specs]
    return {r.name.lower().replace("_", "-"): r for r in reqs}


def pyproject_pins() -> dict[str, Requirement]:
    """``[project] dependencies`` plus the ``dev`` extra (what ``make setup`` installs; ``gpu`` is not in the
    conda file either)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return _by_name([*project["dependencies"], *project["optional-dependencies"]["dev"]])


def conda_pins() -> dict[str, Requirement]:
    """The ``pip:`` list of ``environment.yml`` without the editable install of the kit itself."""
    deps = yaml.safe_load((ROOT / "environment.yml").read_text())["dependencies"]
    pip = next(d["pip"] for d in deps if isinstance(d, dict) and "pip" in d)
    return _by_name([s for s in pip if not s.startswith("-e")])


def test_every_package_pinned_in_both_files_agrees():
    py, conda = pyproject_pins(), conda_pins()
    differ = {n: (str(py[n].specifier), str(conda[n].specifier)) for n in py.keys() & conda.keys()
              if py[n].specifier != conda[n].specifier or py[n].extras != conda[n].extras}
    assert not differ, f"pyproject.toml against environment.yml (name: (pyproject, conda)): {differ}"


def test_environment_yml_installs_exactly_the_pyproject_packages():
    py, conda = pyproject_pins(), conda_pins()
    assert sorted(py.keys() - conda.keys()) == [], "declared in pyproject.toml, missing from environment.yml"
    assert sorted(conda.keys() - py.keys()) == [], "in environment.yml, not declared in pyproject.toml"


def test_jsonschema_imports_without_building_rfc3987_syntax_parsers():
    """``make setup`` removes rfc3987-syntax (see the Makefile's ``$(STAMP)`` rule): it costs ~2 s of CPU in every
    process that imports jsonschema, which every Ray worker and VERL process does. A fresh process that imports
    ``ray`` (hence jsonschema's format checkers) must not have loaded it."""
    code = "import sys, ray, jsonschema; print('rfc3987_syntax' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "False", "rfc3987_syntax is installed: run `make setup` (or `pip uninstall rfc3987-syntax`)"
