"""The recipe as data: the folders of one pipeline run, the notebook series, the ablation's arms.

One run of the notebook series lives in ``reports/<profile>/<run>/`` (:class:`Layout`): one run
directory per notebook (``data/ sft/ <stage>/ ... ablation/ analysis/ eval/``, one folder per RL
stage of the profile's ``[[stages]]`` list, ``stage1/ stage2/ stage3/`` for the paper's),
``figures/`` and ``tables/`` (20), ``notebooks/`` (the executed copies), ``report.pdf`` and
``pipeline_state.json``.

The series is written once, in :func:`series`: each entry's notebook, folder, parameters, the
upstream notebooks its parameters name and what it leaves for the notebooks after it. The RL
stages are one entry each, in the profile's order: a stage with a notebook of its own
(``notebooks/NN_rl_<stage>.ipynb``: 03-05 for the paper's three) runs it, any other stage runs the
template ``notebooks/05_rl_stage_n.ipynb`` with its ``stage`` parameter (executed as
``05_rl_<stage>``, after the stage before it). The runner (:mod:`kit.pipeline`) and the report
builder (:mod:`kit.report`) both read this module; it imports neither.

:func:`ablation_arms` is the RoC ablation (report §5.3) as resolved configs, one per (seed,
algorithm), which both runtimes train.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kit.config import KitConfig, StagesConfig, load
from kit.config.paths import REPO_ROOT
from kit.studies import SERIES_PARAMETERS, STUDIES

REPORTS_ROOT = REPO_ROOT / "reports"
STATE_FILE = "pipeline_state.json"
NOTEBOOK_DIR = REPO_ROOT / "notebooks"
#: the notebook a stage without a notebook of its own runs (its ``stage`` parameter names the stage)
STAGE_TEMPLATE = "05_rl_stage_n"


@dataclass(frozen=True)
class Layout:
    """Paths of one pipeline run: ``<reports_root>/<profile>/<run>/`` and its run directories."""

    root: Path
    profile: str

    @classmethod
    def for_run(cls, profile: str, run: str, reports_root: str | os.PathLike | None = None) -> Layout:
        """Layout of ``reports/<profile>/<run>`` (``reports_root`` defaults to the repo's ``reports/``).

        Raises:
            ValueError: ``profile`` or ``run`` is empty or contains a path separator.
        """
        for what, value in (("profile", profile), ("run", run)):
            if not value or "/" in value or os.sep in value or value in (".", ".."):
                raise ValueError(f"--{what} must be a plain folder name, got {value!r}")
        base = Path(reports_root) if reports_root is not None else REPORTS_ROOT
        return cls(root=(base / profile / run).resolve(), profile=profile)

    def dir(self, name: str) -> str:
        """Absolute path (str, for papermill) of the run directory ``name`` inside the run."""
        return str(self.root / name)

    @property
    def executed(self) -> Path:
        """Folder of the executed notebooks."""
        return self.root / "notebooks"

    @property
    def state_path(self) -> Path:
        return self.root / STATE_FILE

    @property
    def report_pdf(self) -> Path:
        return self.root / "report.pdf"


#: top-level keys of ``pipeline_state.json`` (and ``claims.json``) that describe the run, not a notebook
#: (:mod:`kit.fingerprint`: the environment fingerprint, the bitwise-repeatability stamp); :func:`read_state`
#: leaves them out. ``environment`` describes the host: a comparer of two runs' files strips it
ENVIRONMENT_KEY, REPEATABLE_KEY = "environment", "repeatable"
RUN_KEYS = (ENVIRONMENT_KEY, REPEATABLE_KEY)


def read_state(layout: Layout) -> dict[str, Any]:
    """The run's ``pipeline_state.json``: ``{notebook: entry}`` (empty dict when absent), without the
    run's own :data:`RUN_KEYS` (:func:`read_run_keys`). The one reader of the state file, for the runner
    (:mod:`kit.pipeline.series`) and the report (:mod:`kit.report`).

    Raises:
        ValueError: the file exists but is not a JSON object (the message names the file).
    """
    state = _read_state_file(layout)
    return {k: v for k, v in state.items() if k not in RUN_KEYS}


def read_run_keys(layout: Layout) -> dict[str, Any]:
    """The run's :data:`RUN_KEYS` from ``pipeline_state.json`` (``{"environment": fingerprint, "repeatable":
    {"bitwise", "why"}}``, each only where written; empty dict without the file).

    Raises:
        ValueError: as :func:`read_state`.
    """
    state = _read_state_file(layout)
    return {k: state[k] for k in RUN_KEYS if k in state}


def run_parameters(state: dict[str, Any]) -> dict[str, Any]:
    """``profile``, ``seed`` and ``overrides`` of a run from its ``pipeline_state.json`` (parsed): the
    first notebook entry that records each; ``overrides`` defaults to ``{}``, the others are absent when
    no entry records them (:mod:`kit.pipeline.compare`'s notes, :mod:`kit.claims.pool`'s seed)."""
    out: dict[str, Any] = {}
    for entry in state.values():
        params = entry.get("parameters", {}) if isinstance(entry, dict) else {}
        for key in ("profile", "seed", "overrides"):
            if key in params and key not in out:
                out[key] = params[key]
    out.setdefault("overrides", {})
    return out


def _read_state_file(layout: Layout) -> dict[str, Any]:
    if not layout.state_path.exists():
        return {}
    try:
        state = json.loads(layout.state_path.read_text())
    except json.JSONDecodeError as exc:
        raise ValueError(f"{layout.state_path}: not valid JSON ({exc}); delete it to rerun everything") from exc
    if not isinstance(state, dict):
        raise ValueError(f"{layout.state_path}: expected a JSON object, got {type(state).__name__}")
    return state


# --------------------------------------------------------------------------- the series


@dataclass(frozen=True)
class Entry:
    """One notebook run of the series.

    Attributes:
        name: its name in the series (the executed copy, the key in ``pipeline_state.json``,
            ``--until``'s prefix), e.g. ``"04_rl_stage2"``.
        notebook: the source notebook's file name without ``.ipynb`` (a stage without a notebook
            of its own: :data:`STAGE_TEMPLATE`).
        folder: its run directory inside the run (``"stage2"``; ``""``: the run folder itself, 20).
        upstream: parameter -> the entry that writes that folder (a tuple: a list of folders, one per
            entry; a dict: ``{key: folder}``, one per entry, 20's ``study_dirs``).
        product: what it leaves in its folder for later notebooks (``""``: nothing they read).
        fixed: parameters besides ``profile, seed, overrides`` and the folders (``{"stage": ...}``).
        seeded: whether it gets ``seed`` (20 trains nothing).
        notebook_dir: the folder of its notebook (``""``: :data:`NOTEBOOK_DIR`; a study from outside the
            kit brings its own, :attr:`kit.studies.Study.notebook_dir`).
    """

    name: str
    notebook: str
    folder: str
    upstream: dict[str, str | tuple[str, ...] | dict[str, str]] = field(default_factory=dict)
    product: str = ""
    fixed: dict[str, Any] = field(default_factory=dict)
    seeded: bool = True
    notebook_dir: str = ""

    @property
    def producers(self) -> tuple[str, ...]:
        """The entries whose folders it reads, flat, in :attr:`upstream`'s order (a list or a dict counts each)."""
        return tuple(n for up in self.upstream.values()
                     for n in (up.values() if isinstance(up, dict) else (up,) if isinstance(up, str) else up))

    @property
    def source(self) -> Path:
        """The notebook file this entry executes."""
        return (Path(self.notebook_dir) if self.notebook_dir else NOTEBOOK_DIR) / f"{self.notebook}.ipynb"


def _stage_notebook(stage: str, notebook_dir: Path = NOTEBOOK_DIR) -> str | None:
    """The stem of the stage's own notebook ``NN_rl_<stage>.ipynb``, or None."""
    own = sorted(p.stem for p in notebook_dir.glob(f"[0-9][0-9]_rl_{stage}.ipynb"))
    return own[0] if own else None


def series(stages: Sequence[str]) -> list[Entry]:
    """The ordered series for the RL stages ``stages`` (names, in training order).

    Raises:
        ValueError: ``stages`` is empty.
    """
    if not stages:
        raise ValueError("the series needs at least one RL stage")
    out = [Entry("00_setup_and_sandbox_check", "00_setup_and_sandbox_check", "setup"),
           Entry("01_data_curation", "01_data_curation", "data", product="data/curated.parquet"),
           Entry("02_cold_start_sft", "02_cold_start_sft", "sft", product="policy")]
    previous, prefix, stage_entries = "02_cold_start_sft", "03", []
    for stage in stages:
        own = _stage_notebook(stage)
        name = own or f"{prefix}_rl_{stage}"
        prefix = name[:2]
        out.append(Entry(name, own or STAGE_TEMPLATE, stage, {"init_dir": previous, "data_dir": "01_data_curation"},
                         "policy", {} if own else {"stage": stage}))
        previous = name
        stage_entries.append(name)
    first, last = out[3], out[-1]
    out += [Entry("06_roc_ablation", "06_roc_ablation", "ablation",
                  {"init_dir": "02_cold_start_sft", "data_dir": "01_data_curation"}, "ablation.json",
                  {"reuse_dirs": first}),  # the first stage's folder (an Entry: its folder, see series_parameters)
            Entry("07_behavior_analysis", "07_behavior_analysis", "analysis",
                  {"sft_dir": "02_cold_start_sft", "rl_dir": last.name}, "entropy_tokens.jsonl"),
            Entry("08_evaluation", "08_evaluation", "eval",
                  {"policy_dir": last.name, "sft_dir": "02_cold_start_sft", "data_dir": "01_data_curation"}, "eval"),
            # the related-work studies (kit.studies.STUDIES: ReTool's PPO arms, Agent-R), each before 20, which reads them
            *(Entry(s.notebook, s.notebook, s.key, dict(s.upstream), s.product, notebook_dir=s.notebook_dir)
              for s in STUDIES),
            Entry("20_figures_and_tables", "20_figures_and_tables", "",
                  {"stage_dirs": tuple(stage_entries), "ablation_dir": "06_roc_ablation", "eval_dir": "08_evaluation",
                   "sft_dir": "02_cold_start_sft", "analysis_dir": "07_behavior_analysis",
                   "study_dirs": {s.key: s.notebook for s in STUDIES}},
                  seeded=False)]
    _check_study_upstream(out)
    return out


def _check_study_upstream(entries: list[Entry]) -> None:
    """Each study's ``upstream`` names entries that run before it, under parameter names of its own.

    Raises:
        ValueError: naming the study, the parameter and what is wrong (a parameter the runner sets itself, an
            unknown entry, or one that runs at or after the study: 20 reads every study's folder).
    """
    names = [e.name for e in entries]
    for s in STUDIES:
        where = f"study {s.key!r} ({s.notebook}), upstream"
        for key, entry in s.upstream.items():
            if key in SERIES_PARAMETERS:
                raise ValueError(f"{where} {key!r}: the runner sets {sorted(SERIES_PARAMETERS)} itself; name the "
                                 "parameter otherwise (e.g. sft_dir)")
            if entry not in names:
                raise ValueError(f"{where} {key!r}: {entry!r} is no entry of the series ({', '.join(names)})")
            if names.index(entry) >= names.index(s.notebook):
                raise ValueError(f"{where} {key!r}: {entry!r} runs at or after {s.notebook}; a study reads what "
                                 "runs before it")


def stage_names(profile: str | None) -> tuple[str, ...]:
    """The RL stages of ``profile`` (its ``[[stages]]`` names, in order); the paper's for None."""
    return load(profile, write=False).stages.names if profile else StagesConfig().names


def series_parameters(lay: Layout, seed: int, overrides: dict[str, Any] | None = None,
                      stages: Sequence[str] | None = None) -> list[tuple[str, dict[str, Any]]]:
    """``(entry name, papermill parameters)`` of each entry of :func:`series`, upstream run
    directories named explicitly (a notebook's inputs are visible in its parameters cell).

    Args:
        lay: the run's folders.
        seed: passed to every notebook that trains.
        overrides: dotted config keys every notebook gets as ``overrides``.
        stages: the RL stages' names; default the profile's (:func:`stage_names`).
    """
    stages = tuple(stage_names(lay.profile) if stages is None else stages)
    entries = series(stages)
    folder = {e.name: lay.dir(e.folder) for e in entries}
    common: dict[str, Any] = {"profile": lay.profile, "seed": seed}
    if overrides:
        common["overrides"] = dict(overrides)
    out = []
    for e in entries:
        params: dict[str, Any] = dict(common) if e.seeded else {"profile": lay.profile}
        params["run_dir"] = folder[e.name] if e.folder else str(lay.root)
        for key, maker in e.upstream.items():
            if isinstance(maker, dict):
                params[key] = {k: folder[m] for k, m in maker.items()}
            else:
                params[key] = [folder[m] for m in maker] if isinstance(maker, tuple) else folder[maker]
        for key, value in e.fixed.items():
            params[key] = [folder[value.name]] if isinstance(value, Entry) else value
        out.append((e.name, params))
    return out


#: the series' names for the paper's stages (a profile's own: ``[name for name, _ in series_parameters(...)]``)
SERIES: tuple[str, ...] = tuple(e.name for e in series(StagesConfig().names))


def is_stage_entry(name: str) -> bool:
    """Whether ``name`` is an RL stage's entry of a series (``NN_rl_<stage>``)."""
    return name[:2].isdigit() and name[2:6] == "_rl_" and len(name) > 6


def stage_entry(profile: str | None, stage: str) -> str:
    """The series' name of stage ``stage``'s notebook run for ``profile`` (``"03_rl_stage1"``, ``"05_rl_stage4"``).

    Raises:
        KeyError: ``stage`` is not one of the profile's stages.
    """
    for e in series(stage_names(profile)):
        if e.folder == stage and e.upstream.get("init_dir"):
            return e.name
    raise KeyError(f"profile {profile} has no stage {stage!r}; its stages are {list(stage_names(profile))}")


def _entries(profile: str | None) -> dict[str, Entry]:
    return {e.name: e for e in series(stage_names(profile))}


def needed_for(prefixes: Sequence[str], profile: str | None = None, *, producers: bool = True) -> list[str]:
    """The series entries that running the notebooks named by ``prefixes`` needs, in series order: those
    whose name starts with a prefix (a number names its notebook exactly: ``1`` matches none of 01, 10, 11), every
    entry they read a folder of (recursively), and the sandbox check (00) first (``kit reproduce --only``: one study
    over seeds without the whole series). ``producers=False``: the named entries alone.

    Raises:
        ValueError: a prefix that matches no entry of ``profile``'s series (the known names listed).
    """
    entries = _entries(profile)
    want: set[str] = set()
    for p in prefixes:
        # a number names its notebook exactly ("1" is none of 01, 10, 11, 12); any other prefix by its start
        hit = [n for n in entries if (n.split("_", 1)[0] == p if p.isdigit() else n.startswith(p))]
        if not hit:
            near = [n.split("_", 1)[0] for n in entries if p in n.split("_", 1)[0]]
            raise ValueError(f"--only {p!r} matches no notebook of {', '.join(entries)}"
                             + (f" (a number names one exactly: {', '.join(near)}?)" if p.isdigit() and near else ""))
        want |= set(hit)
    if not producers:
        return [n for n in entries if n in want]
    todo = list(want)
    while todo:
        for name in entries[todo.pop()].producers:
            if name not in want:
                want.add(name)
                todo.append(name)
    want.add(next(iter(entries)))
    return [n for n in entries if n in want]


# ------------------------------------------------------------------ upstream checks of a notebook


class UpstreamMissing(FileNotFoundError):
    """An upstream run folder of a notebook lacks what its notebook writes.

    In IPython the error shows as its one-line message, without the traceback (the kit's
    frames say nothing the message does not); papermill and the pipeline still fail the run.
    """

    def _render_traceback_(self) -> list[str]:  # IPython's hook for an exception's own rendering
        return [f"\x1b[0;31m{type(self).__name__}\x1b[0m: {self}"]


def pipeline_command(folder: str | os.PathLike, until: str) -> str:
    """The pipeline command that fills ``folder`` (a run directory ``<reports>/<profile>/<run>/<name>``)
    up to and including notebook ``until`` (e.g. ``"02"``); without ``--reports-root`` when
    ``folder`` is under the repository's ``reports/``."""
    path = Path(folder).resolve()
    run, profile, base = path.parent.name, path.parent.parent.name, path.parent.parent.parent
    root = "" if base == REPORTS_ROOT.resolve() else f" --reports-root {base}"
    return f"python -m kit reproduce --profile {profile} --run {run} --until {until}{root}"


def _pipeline_run(missing: list[tuple[str, Path, str, str]], entries: dict[str, Entry]) -> Path | None:
    """The one ``<reports>/<profile>/<run>`` whose pipeline run writes every missing folder where the
    notebook looks (each named as the pipeline names its notebook's run directory), else None."""
    roots = {Path(folder).resolve().parent for _, _, folder, _ in missing}
    if len(roots) == 1 and all(Path(f).resolve().name == entries[m].folder for m, _, f, _ in missing):
        return roots.pop()
    return None


def study_folders(run_dir: str | os.PathLike, study_dirs: Mapping[str, str] | None = None) -> dict[str, str]:
    """Every registered study's run folder (:data:`kit.studies.STUDIES`) by key: ``study_dirs``'s where it names
    one, else ``run_dir/<key>`` (notebook 20's default ``study_dirs = {}``: a study added to the registry needs
    no edit of the notebook).

    Raises:
        ValueError: a key of ``study_dirs`` is no registered study (names the registered keys).
    """
    given = dict(study_dirs or {})
    unknown = sorted(set(given) - {s.key for s in STUDIES})
    if unknown:
        raise ValueError(f"study_dirs: {unknown} are no registered study; registered: {[s.key for s in STUDIES]}")
    return {s.key: str(given.get(s.key) or Path(run_dir) / s.key) for s in STUDIES}


def require_upstream(notebook: str, *, profile: str | None = None, **dirs: str | os.PathLike | list) -> None:
    """Check, before a notebook does any work, that its upstream run folders hold what their notebooks write.

    Args:
        notebook: the notebook's name in the series, e.g. ``"03_rl_stage1"`` (an entry of
            :func:`series` for ``profile``'s stages; notebooks 00-02 have no upstream folder).
        dirs: the notebook's upstream parameters by name (``init_dir=..., data_dir=...``;
            ``stage_dirs`` a list), relative to the working directory (the notebook's folder in
            JupyterLab). Each must be one of the entry's ``upstream`` parameters.
        profile: the notebook's profile: a command is for it, never for the profile a folder's path
            names (``reports/tiny/lab/...`` read with ``profile="smoke"`` gets the smoke command and
            where to point the parameters).
    Raises:
        UpstreamMissing: in one line, the earliest missing product (its path and the notebook that
            writes it), and the pipeline command that writes every missing one (``--until`` the
            latest notebook missing) when one pipeline run writes them all where the notebook looks
            (else how to point the parameters at a pipeline run's folders).
        KeyError: a parameter name is not one of the notebook's upstream parameters.
        ValueError: a list parameter (20's ``stage_dirs``) has not one folder per producing notebook, or a
            dict parameter (20's ``study_dirs``) not one folder per study key.
    """
    entries = _entries(profile)
    producers = entries[notebook].upstream if notebook in entries else {}
    missing: list[tuple[str, Path, str, str]] = []
    for name, value in dirs.items():
        if name not in producers:
            raise KeyError(f"{notebook} has no upstream parameter {name!r}; known: {sorted(producers)}")
        makers = producers[name]
        if isinstance(makers, dict):
            if not isinstance(value, dict) or set(value) != set(makers):
                raise ValueError(f"{notebook}: {name} takes one folder per study, keyed {sorted(makers)} "
                                 f"(kit.studies.STUDIES), got {value!r}")
            pairs = [(value[k], m) for k, m in makers.items()]
        elif isinstance(makers, tuple):
            if isinstance(value, str | os.PathLike) or len(value) != len(makers):
                raise ValueError(f"{notebook}: {name} takes {len(makers)} folders, one per notebook "
                                 f"({', '.join(makers)}), got {value!r}")
            pairs = list(zip(value, makers, strict=True))
        else:
            pairs = [(value, makers)]
        for folder, maker in pairs:
            product = Path(folder) / entries[maker].product
            if not product.exists():
                missing.append((maker, product, str(folder), name))
    if not missing:
        return
    maker, product, _, _ = min(missing)  # the earliest notebook first: it is the one to run first
    last, _, last_folder, _ = max(missing)  # ... and the pipeline runs up to the latest one missing
    span = maker if last == maker else f"{maker} to {last}"
    root = _pipeline_run(missing, entries)
    if root is None:
        how = ("point its parameters at folders of a pipeline run (`<reports>/<profile>/<run>/`), which "
               "`python -m kit reproduce --until NN` writes")
    elif profile is None or root.parent.name == profile:
        how = f"`{pipeline_command(last_folder, last[:2])}`"
    else:  # the folders are another profile's run: its command would train that profile
        mine = root.parent.parent / profile / root.name
        names = ", ".join(sorted({n for *_, n in missing}))
        how = (f"`{pipeline_command(mine / entries[last].folder, last[:2])}` and point {names} into {mine}/ "
               f"(the folders given are a {root.parent.name} run's; this notebook runs {profile})")
    raise UpstreamMissing(
        f"{notebook} needs {product}, which {maker} writes: run {span} (and the notebooks before) first, or {how}")


# --------------------------------------------------------------------------- the ablation's arms

#: the ablation's arms by label, in the order they train (report §5.3: GRPO against GRPO-RoC) -> the selection
#: each sets (``algorithm.selection``; every arm uses GRPO's estimator, so its label is its key)
ABLATION_SELECTIONS: dict[str, str] = {"grpo": "all", "grpo_roc": "roc"}
ABLATION_ALGORITHMS: tuple[str, ...] = tuple(ABLATION_SELECTIONS)


def arm_seeds(cfg: KitConfig) -> tuple[int, ...]:
    """The ablation's seeds for a run: ``cfg.ablation.seeds`` read as offsets from the run's seed
    (``cfg.seed + s``). Seed 0 gives the listed seeds themselves; ``--seed 7`` gives seeds 7, 8, ...
    that no tuning saw, so a check of the ablation's claims with another run seed uses other
    ablation seeds too (issue #16), and the main first-stage run stays the ``grpo_roc`` arm of the
    first seed (offset 0)."""
    return tuple(cfg.seed + s for s in cfg.ablation.seeds)


def arm_name(arm: KitConfig) -> str:
    """The arm's folder inside the ablation's run directory: ``<label>_seed<seed>`` (``algorithm.label``)."""
    return f"{arm.algorithm.label}_seed{arm.seed}"


def ablation_arms(cfg: KitConfig, run_dir: str | os.PathLike = "") -> list[KitConfig]:
    """The RoC ablation (report §5.3, Figures 4 and 9) as one resolved config per arm, seeds outer
    (:func:`arm_seeds`), algorithms inner (:data:`ABLATION_ALGORITHMS`); both runtimes train these.

    Each arm is ``cfg`` (``dataclasses.replace``; nothing reloaded) with the arm's ``seed`` and
    ``algorithm.selection``, ``data.split_seed`` the run's (the arms train on the run's problems), and its first stage (``cfg.stages[0]``, the stage the arms train) with
    ``steps = ablation.steps`` and ``max_response_tokens = rollout.max_response_tokens``: the
    recipe's base budget (8K on the paper profiles, where stage 1 has it too). The tiny profile
    gives its main stage 1 a tighter budget that binds (for Figure 8's budget step) and keeps the
    ablation at rollout's 384 tokens, where a failed call and its fix fit and RoC has tool errors
    among correct trajectories to act on (issue #16).

    Args:
        cfg: the resolved config of the ablation's notebook.
        run_dir: the ablation's run directory: each arm's ``run_dir`` is ``run_dir/<arm_name>``
            (empty: the arms' ``run_dir`` stays ``cfg.run_dir``).
    Returns:
        ``len(arm_seeds(cfg)) * len(ABLATION_ALGORITHMS)`` configs.
    """
    first = cfg.stages[0]
    stages = cfg.stages.replace(first.name, steps=cfg.ablation.steps, max_response_tokens=cfg.rollout.max_response_tokens)
    data = cfg.data if cfg.data.split_seed >= 0 else dataclasses.replace(cfg.data, split_seed=cfg.seed)
    arms = []
    for seed in arm_seeds(cfg):
        for alg in ABLATION_ALGORITHMS:
            arm = dataclasses.replace(cfg, seed=seed, stages=stages, data=data,
                                      algorithm=dataclasses.replace(cfg.algorithm, selection=ABLATION_SELECTIONS[alg],
                                                                    adv_estimator="grpo"))
            arms.append(dataclasses.replace(arm, run_dir=str(Path(run_dir) / arm_name(arm))) if run_dir else arm)
    return arms


# --------------------------------------------------------------------------- ReTool's arms (issue #33)

#: ReTool's comparison (notebook 10): each arm's name -> the ``algorithm`` fields it sets on the ablation's
#: GRPO-RoC arm of the same seed. PPO: VERL's ``algorithm.adv_estimator = "gae"`` with a critic (G samples
#: per prompt, no RoC selection; ``kit.train.critic``). The baseline is not trained again: it is 06's
#: ``ablation/grpo_roc_seed<s>/`` (:data:`RETOOL_BASELINE`), the same cold start, steps and seeds.
RETOOL_ARMS: dict[str, dict[str, Any]] = {"ppo": {"adv_estimator": "gae", "selection": "all"}}
RETOOL_BASELINE = "grpo_roc"
#: the ReTool arms train the first this many of the ablation's seeds (:func:`arm_seeds`)
RETOOL_SEEDS = 3


def retool_arms(cfg: KitConfig, run_dir: str | os.PathLike = "", arms: dict[str, dict[str, Any]] | None = None,
                n_seeds: int = RETOOL_SEEDS) -> list[tuple[str, KitConfig]]:
    """ReTool's comparison as ``(arm folder, resolved config)`` per (seed, arm), seeds outer: each is the
    ablation's GRPO-RoC arm of that seed (:func:`ablation_arms`: first stage at ``ablation.steps`` steps
    and ``rollout.max_response_tokens``, the run's problems) with the arm's ``algorithm`` fields.

    Args:
        cfg: the resolved config of notebook 10.
        run_dir: its run directory: each arm's ``run_dir`` is ``run_dir/<name>_seed<s>`` (empty: unchanged).
        arms: arm name -> ``AlgorithmConfig`` fields (default :data:`RETOOL_ARMS`).
        n_seeds: the first this many seeds of :func:`arm_seeds` (fewer when the profile has fewer).
    Raises:
        TypeError: an arm names a field ``AlgorithmConfig`` lacks.
    """
    base = [a for a in ablation_arms(cfg) if a.algorithm.label == RETOOL_BASELINE][:max(0, n_seeds)]
    out = []
    for b in base:
        for name, fields in (RETOOL_ARMS if arms is None else arms).items():
            arm = dataclasses.replace(b, algorithm=dataclasses.replace(b.algorithm, **fields))
            folder = f"{name}_seed{arm.seed}"
            out.append((folder, dataclasses.replace(arm, run_dir=str(Path(run_dir) / folder)) if run_dir else arm))
    return out
