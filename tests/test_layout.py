"""Repository rules from DEVELOPERS.md that a reviewer would otherwise check by hand.

The import rules walk every import at every level of every ``kit`` module (``ast``), not only the
module-level ones: a lazy import is still a dependency.
"""

import ast
import json
import re
from collections import defaultdict
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
KIT = ROOT / "kit"
HEAVY = {"verl", "ray", "sglang"}
#: optional dependencies a function may import where it needs them (with a comment saying why):
#: VERL, Ray, SGLang, papermill kernels, nbconvert's LaTeX export, and kit.bridge (which imports VERL)
LAZY_ALLOWED = ("verl", "ray", "sglang", "papermill", "nbconvert", "kit.bridge")
#: files that import each of their verbs' modules when that verb runs (with a comment each)
LAZY_DISPATCH = {"kit/cli.py": "`python -m kit --help` and `config` load neither torch nor papermill"}
#: files whose function-level imports are still to be hoisted, with who edits them now (#14 left
#: them so as not to collide): remove an entry once the file follows the rule
LAZY_PENDING = {
    "kit/reward/api.py": "math_verify (sympy + its LaTeX parser, ~1 s) loaded only when a response needs it",
    "kit/reward/worker.py": "math_verify loaded in the verifier worker process, not in its parent",
    "kit/sandbox/worker.py": "#18 (the sandbox worker imports in its forked children on purpose)",
    "kit/bridge/verl_cpu/rollout.py": "#15 (kit.models, kit.rollout.engine inside the Ray server actor)",
    "kit/bridge/verl_cpu/runner.py": "#15 (torch, kit.config, signal)",
    "kit/bridge/verl_cpu/tiny_run.py": "#15 (kit.train, pandas, kit.data.tasks)",
}
#: private names still imported across packages: (importer, module, name) -> owner
PRIVATE_PENDING = {("kit.bridge.ray_sandbox", "kit.sandbox.workers", "_infra"): "#18 owns kit/sandbox/workers.py",
                   ("kit.bridge.verl_cpu.tiny_run", "kit.bridge.launch", "_task_rows"): "#15 (tiny_run's parquet rows)"}
#: the only modules that may import kit.bridge (the rest of the kit runs without VERL)
#: (kit.pipeline: the paper profiles' dry run; kit.pipeline.verl_runtime: the device check, the VERL CPU session;
#: kit.pipeline.fanout: seeds side by side on Ray, kit.bridge.seed_fanout)
BRIDGE_IMPORTERS = {"kit.runtime.verl", "kit.runtime.paper", "kit.pipeline", "kit.pipeline.verl_runtime",
                    "kit.pipeline.fanout"}


@cache
def _modules() -> dict[str, Path]:
    out = {}
    for py in sorted(KIT.rglob("*.py")):
        parts = py.relative_to(ROOT).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = py
    return out


@cache
def _tree(name: str) -> ast.Module:
    return ast.parse(_modules()[name].read_text())


def _imports(name: str):
    """``(node, imported module, imported names, nested)`` for every import of module ``name``;
    ``nested``: inside a function, class, ``if``, ``try`` or ``with``."""
    def walk(node, nested):
        for ch in ast.iter_child_nodes(node):
            if isinstance(ch, ast.Import):
                for a in ch.names:
                    yield ch, a.name, [], nested
            elif isinstance(ch, ast.ImportFrom) and ch.module and not ch.level:
                yield ch, ch.module, [a.name for a in ch.names], nested
            yield from walk(ch, nested or isinstance(ch, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef,
                                                          ast.If, ast.Try, ast.With)))
    yield from walk(_tree(name), False)


def _targets(name: str):
    """The kit modules module ``name`` imports (a ``from pkg import sub`` counts as ``pkg.sub``)."""
    mods = _modules()
    for _, module, names, _ in _imports(name):
        if not module.startswith("kit"):
            continue
        subs = [f"{module}.{n}" for n in names if f"{module}.{n}" in mods]
        yield from subs or ([module] if module in mods else [])


def _is(module: str, prefixes) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def test_only_bridge_imports_verl_ray_sglang_at_any_level():
    offenders = [f"{_modules()[m].relative_to(ROOT)}:{node.lineno} imports {mod}"
                 for m in _modules() if not _is(m, ["kit.bridge"])
                 for node, mod, _, _ in _imports(m) if mod.split(".")[0] in HEAVY]
    assert not offenders, offenders


def test_no_sglang_import_anywhere_in_kit():
    for py in KIT.rglob("*.py"):
        assert "import sglang" not in py.read_text() and "from sglang" not in py.read_text(), py


def test_only_the_verl_runtime_the_recipe_and_the_runner_import_the_bridge():
    offenders = sorted({m for m in _modules() if not _is(m, ["kit.bridge"]) and m not in BRIDGE_IMPORTERS
                        for t in _targets(m) if _is(t, ["kit.bridge"])})
    assert not offenders, offenders


def test_imports_are_at_the_top_except_heavy_optional_ones_with_a_comment():
    offenders = []
    for m, path in _modules().items():
        rel = str(path.relative_to(ROOT))
        if rel in LAZY_PENDING:
            continue
        lines = path.read_text().splitlines()
        for node, mod, _, nested in _imports(m):
            if not nested or _is_type_checking(m, node):
                continue
            near = lines[node.lineno - 1] + (lines[node.lineno - 2] if node.lineno > 1 else "")
            if not _is(mod, LAZY_ALLOWED) and rel not in LAZY_DISPATCH:
                offenders.append(f"{rel}:{node.lineno} imports {mod} inside a block (move it to the top)")
            elif "#" not in near:
                offenders.append(f"{rel}:{node.lineno} imports {mod} lazily without a comment saying why")
    assert not offenders, "\n".join(offenders)


def _is_type_checking(name: str, target: ast.AST) -> bool:
    for node in ast.walk(_tree(name)):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            if any(n is target for n in ast.walk(node)):
                return True
    return False


def test_no_import_cycles_among_kit_modules():
    graph = defaultdict(set)
    for m in _modules():
        for t in _targets(m):
            # a submodule importing its own package (or the package its submodule) is Python's
            # ordinary parent import, not a cycle between concepts
            if t != m and not m.startswith(t + ".") and not t.startswith(m + "."):
                graph[m].add(t)
    state, stack, cycles = {}, [], []

    def visit(m):
        state[m] = 1
        stack.append(m)
        for t in sorted(graph[m]):
            if state.get(t) == 1:
                cycles.append(stack[stack.index(t):] + [t])
            elif t not in state:
                visit(t)
        stack.pop()
        state[m] = 2

    for m in sorted(_modules()):
        if m not in state:
            visit(m)
    assert not cycles, "\n".join(" -> ".join(c) for c in cycles)


#: DEVELOPERS.md's layers, lowest first: a module imports from its own layer or below (the longest matching
#: prefix decides; ``kit/__init__.py`` and ``kit.studies``' registry are foundations, its study wings are not)
LAYERS = (
    ("foundations", ("kit.config", "kit.prompts", "kit.jsonio", "kit.metrics", "kit.progress", "kit.fingerprint",
                     "kit.plan", "kit.studies")),
    ("the method's parts", ("kit.sandbox", "kit.reward", "kit.algo", "kit.models", "kit.rollout", "kit.sched",
                            "kit.sim", "kit.data", "kit.eval", "kit.analysis", "kit.records", "kit.explore")),
    ("training and runtimes", ("kit.train", "kit.runtime", "kit.bridge")),
    ("the recipe and its studies", ("kit.chain", "kit.claims",
                                    "kit.report", "kit.pipeline", "kit.cli", "kit.preflight", "kit.__main__")),
)


def _layer(module: str) -> int:
    """The index in :data:`LAYERS` of ``module`` (the longest prefix that names it; ``kit`` itself is 0; a
    study's wing, ``kit.studies.<study>``, is the top layer whether or not it is listed)."""
    if module.startswith("kit.studies."):
        return len(LAYERS) - 1
    found = [(len(p), i) for i, (_, prefixes) in enumerate(LAYERS) for p in prefixes if _is(module, [p])]
    if module != "kit" and not found:
        raise AssertionError(f"{module} is in no layer of tests/test_layout.py LAYERS (add it where DEVELOPERS.md puts it)")
    return max(found)[1] if found else 0


def test_no_module_imports_from_a_layer_above_its_own():
    """Issue #43: no upward import, at any level (a lazy import is still a dependency)."""
    offenders = [f"{m} ({LAYERS[_layer(m)][0]}) imports {t} ({LAYERS[_layer(t)][0]})"
                 for m in _modules() for t in _targets(m) if _layer(t) > _layer(m)]
    assert not offenders, offenders


def test_no_module_imports_a_private_name_of_another_package():
    offenders = []
    for m in _modules():
        for node, mod, names, _ in _imports(m):
            if not mod.startswith("kit"):
                continue
            package = m.rsplit(".", 1)[0] if _modules()[m].name != "__init__.py" else m
            for n in names:
                if n.startswith("_") and not n.startswith("__") and not _is(mod, [package]):
                    if (m, mod, n) not in PRIVATE_PENDING:
                        offenders.append(f"{m}:{node.lineno} imports {mod}.{n}")
    assert not offenders, offenders


@pytest.mark.parametrize("rule", ["lazy", "private"])
def test_the_pending_lists_name_only_what_still_breaks_the_rule(rule):
    """An entry that no longer needs its exception must be removed, so the lists only shrink."""
    if rule == "lazy":
        for rel in LAZY_PENDING:
            name = next(m for m, p in _modules().items() if str(p.relative_to(ROOT)) == rel)
            assert any(nested and not _is(mod, LAZY_ALLOWED) for _, mod, _, nested in _imports(name)), rel
    else:
        for importer, module, name in PRIVATE_PENDING:
            assert any(mod == module and name in names for _, mod, names, _ in _imports(importer)), importer


#: each of these once meant two things (issue #14); one name, one meaning: defined in one module only
HOMONYMS = ("run_sync", "run_coroutine", "make_backend", "read_metrics", "metric_rows", "write_json", "problem_key",
            "source_id", "Problem", "TaskProblem", "Trajectory", "SimTrajectory",
            # kit.train.common's (a Path or None) vs kit.bridge.checkpoints' (now latest_verl_checkpoint: a
            # Checkpoint, or CheckpointError); kit.report.tables' table display vs kit.rollout.view's (now show_trajectory)
            "latest_checkpoint", "show")


@pytest.mark.parametrize("name", HOMONYMS)
def test_one_name_one_meaning(name):
    where = [m for m in _modules() for node in _tree(m).body
             if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == name]
    assert len(where) == 1, f"{name} is defined in {where}"


def test_json_files_are_written_without_bare_nan():
    """A module writing JSON files goes through kit.jsonio (NaN as null); ``json.dumps`` straight
    into a file is left only where no float can be NaN (configs, prompts, pipeline state)."""
    allowed = {"kit.jsonio", "kit.config.loading", "kit.pipeline.state", "kit.pipeline.failures", "kit.bridge.launch",
               "kit.bridge.hard_subset",
               "kit.data.curate",
               # #15: Ray/VERL session files (configs, pids, the rollout server's weight log); to move to kit.jsonio
               "kit.bridge.verl_cpu.rollout", "kit.bridge.verl_cpu.runner", "kit.bridge.verl_cpu.session"}
    offenders = []
    for m, path in _modules().items():
        if m in allowed or _is(m, ["kit.sandbox", "kit.reward"]):
            continue
        for i, line in enumerate(path.read_text().splitlines(), 1):
            if "json.dumps(" in line and ("write" in line or "fh." in line):
                offenders.append(f"{path.relative_to(ROOT)}:{i}")
    assert not offenders, offenders


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


#: the modules that may sit loose at the top of ``kit/`` (issue #43: everything else lives in a package)
LOOSE_MODULES = {"__init__", "__main__", "cli", "fingerprint", "jsonio", "metrics", "plan", "preflight", "progress",
                 "prompts"}


def test_at_most_eight_loose_modules_at_the_top_of_kit():
    """A new module goes into the package of its layer (DEVELOPERS.md's map), not beside ``kit/cli.py``."""
    loose = {p.stem for p in KIT.glob("*.py")}
    assert loose <= LOOSE_MODULES, f"new loose modules in kit/: {sorted(loose - LOOSE_MODULES)}"
    assert len(loose - {"__init__", "__main__"}) <= 8


#: a path beside or above the checkout: the shared folders (``../shared/...``, ``shared/data`` ...), an
#: absolute path of this workplace, or code that climbs above the repository root
OUTSIDE = re.compile(r"\.\./shared\b|(?<![\w/])shared/(?:data|research|reference|tools|hooks|STYLE)|/work/"
                     r"|REPO_ROOT\.parent|ROOT\.parent")
#: where a path outside the repository is the point: the data directory's default (a run-time setting,
#: ``KIT_DATA_DIR``) and its test; this file holds the rule's own examples
OUTSIDE_ALLOWED = {"kit/config/paths.py", "tests/foundation/test_paths.py", "tests/test_layout.py"}


def _named_outside(text: str) -> list[str]:
    return [m.group(0) for m in OUTSIDE.finditer(text)]


def test_nothing_in_the_repository_points_outside_it():
    """Docs, code and notebooks name files in the repository only (the style guide ships as STYLE.md);
    the data directory is a run-time setting, so only its default may name a folder beside the checkout."""
    files = [p for d in ("kit", "tests", "notebooks", "benchmarks", "docs") for p in (ROOT / d).rglob("*")
             if p.suffix in (".py", ".ipynb", ".toml", ".yaml", ".md", ".txt", ".sh") and "__pycache__" not in p.parts]
    files += [ROOT / "DEVELOPERS.md", ROOT / "STYLE.md", ROOT / "Makefile"]
    bad = {str(p.relative_to(ROOT)): hits for p in files
           if str(p.relative_to(ROOT)) not in OUTSIDE_ALLOWED and (hits := _named_outside(p.read_text()))}
    assert not bad, f"paths outside the repository (put the fact inline or name a file in the repo): {bad}"
    assert (ROOT / "STYLE.md").is_file()
    # the rule sees what it is for, and a path inside the repository passes
    assert _named_outside("see ../shared/research/verl_on_cpu.md and /work/x; REPO_ROOT.parent / 'shared'") == \
        ["../shared", "/work/", "REPO_ROOT.parent"]
    assert _named_outside("see STYLE.md, kit/reference/paper_values.yaml, ../reports/tiny/lab/data") == []
