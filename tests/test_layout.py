"""Repository rules from DEVELOPERS.md that a reviewer would otherwise check by hand."""

import ast
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HEAVY = {"verl", "ray", "sglang"}


def _top_level_imports(path: Path):
    tree = ast.parse(path.read_text())
    for node in tree.body:  # module level only; lazy imports inside functions are fine
        if isinstance(node, ast.Import):
            yield from (a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.module.split(".")[0]


def test_only_bridge_imports_verl_ray_sglang():
    offenders = []
    for py in (ROOT / "kit").rglob("*.py"):
        if "bridge" in py.relative_to(ROOT / "kit").parts:
            continue
        bad = HEAVY & set(_top_level_imports(py))
        if bad:
            offenders.append(f"{py.relative_to(ROOT)}: {sorted(bad)}")
    assert not offenders, offenders


def test_no_sglang_import_anywhere_in_kit():
    for py in (ROOT / "kit").rglob("*.py"):
        assert "import sglang" not in py.read_text() and "from sglang" not in py.read_text(), py


def test_notebooks_committed_without_outputs():
    for nb in (ROOT / "notebooks").glob("*.ipynb"):
        data = json.loads(nb.read_text())
        for cell in data["cells"]:
            if cell["cell_type"] == "code":
                assert not cell.get("outputs"), f"{nb.name} has outputs"
                assert cell.get("execution_count") is None, f"{nb.name} has execution counts"


def test_required_layout_exists():
    for p in ["kit", "notebooks", "reports", "tests", "benchmarks", "environment.yml", "Makefile",
              "pyproject.toml", "README.md", ".ci/run"]:
        assert (ROOT / p).exists(), p
