"""The related-work studies as data: one :class:`Study` record each, one registry (:data:`STUDIES`).

A study is a paper the kit reruns beside rStar2-Agent on the same seams (ReTool's PPO arms, issue
#33; Agent-R's revision self-training, issue #34; B-STaR's balanced self-training, issue #47): a notebook of the series with its own run folder,
its claims section in ``kit/reference/claims.yaml``, its page in the report. Everything that used to
name the studies one by one reads this registry instead (issue #43):

- the series (:func:`kit.plan.series`: one entry per study, before 20) and notebook 20's one
  ``study_dirs`` parameter (``{study key: run folder}``);
- the claims' run folders (:class:`kit.claims.RunDirs` ``studies``) and the summary's pages
  (:func:`kit.report.summary.section_page`: title, text, figures);
- the config's reserved run folders (:data:`kit.config.loading.RUN_FOLDERS`), the background jobs
  (:data:`kit.pipeline.overlap.STANDARD_JOBS`), the notebooks that launch VERL
  (:data:`kit.pipeline.LAUNCHES_VERL`), the paper profiles' dry run (:mod:`kit.bridge.stages`) and
  ``python -m kit claims --section``.

This module imports nothing of the kit: the config, the plan and the bridge all read it. A study's
code is named by dotted paths (``module:function``), resolved only when used (:func:`resolve`).

A study may also live outside the kit, in a package of its own with its notebook and its claims file
beside it: ``KIT_STUDIES=mypackage.study:STUDY`` (several separated by commas) appends each named
:class:`Study` to the registry when this module is first imported, in every process that sees the
variable (the runner's kernels inherit it). The module named is imported while this one loads, so it
may import nothing of the kit but ``kit.studies`` (keep the record in a module of its own; the study's
code in others). ``tests/studies/toy_study`` is such a study.
"""

from __future__ import annotations

import importlib
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: the cold start's series entry: what a study's ``upstream`` most often names
COLD_START = "02_cold_start_sft"


@dataclass(frozen=True)
class Study:
    """One related-work study of the series.

    Attributes:
        key: its run folder inside a pipeline run (``reports/<profile>/<run>/<key>/``), its key in
            notebook 20's ``study_dirs`` and its name in :meth:`kit.claims.RunDirs.folder` (a claim's
            ``folder:``).
        section: its claims' ``section`` in ``kit/reference/claims.yaml`` (the report page's name).
        notebook: its notebook's stem in ``notebooks/`` (also its name in the series and in
            ``pipeline_state.json``).
        upstream: parameter -> the series entry whose run folder it reads (``{"sft_dir": COLD_START}``);
            the runner passes each folder explicitly.
        product: the file its notebook leaves in its folder when done (what 20's upstream check looks for).
        title, what: its report page's title and the paragraph saying what the notebook compares.
        figures: ``(figure file stem, label)`` drawn by its notebook into its folder; notebook 20 copies
            them into ``figures/`` and its page shows them.
        job: a module run as ``python -m <job> '<papermill parameters as JSON>'`` in the background
            once :attr:`job_after` has finished (:mod:`kit.pipeline.overlap`); ``""``: none.
        job_after: the series entry after which :attr:`job` may start.
        launches_verl: whether its notebook launches VERL stages under ``runtime=verl``
            (:func:`kit.pipeline.check_verl_device` checks the device before anything runs).
        dry_run: ``"module:function"`` giving its lines of a paper profile's dry run, called as
            ``f(cfg, run_dir, dirs, cluster) -> list[str]`` (``dirs``: run folder by name); ``""``: none.
        notebook_dir: the folder of its notebook (``""``: the kit's ``notebooks/``).
        claims_file: a YAML file of its own claims, all of ``section`` (``""``: they are in
            ``kit/reference/claims.yaml``; :func:`kit.claims.load_claims` reads both).
        claim_kinds: ``"module:attribute"`` naming a dict of its own claim test kinds (kind name ->
            ``f(RunDirs, spec, TestResult) -> TestResult``, as :data:`kit.claims.kinds.KINDS`); ``""``: it
            uses the kit's. :func:`kit.claims.kinds.all_kinds` adds them.
        paired_kinds: which of :attr:`claim_kinds` compare two arms or checkpoints of one run (pooled over
            seeds as paired differences, :func:`kit.claims.pool.arm_comparisons`).
        arms: the arms its notebook trains, each in ``<key>/<arm>/`` (read by its own package and by its
            dry run in :mod:`kit.bridge.study_runs`, which may not import the study's package); ``()``: not named here.
    """

    key: str
    section: str
    notebook: str
    upstream: Mapping[str, str] = field(hash=False)  # a dict: compared, not hashed
    product: str
    title: str
    what: str
    figures: tuple[tuple[str, str], ...] = ()
    job: str = ""
    job_after: str = COLD_START
    launches_verl: bool = False
    dry_run: str = ""
    notebook_dir: str = ""
    claims_file: str = ""
    claim_kinds: str = ""
    paired_kinds: tuple[str, ...] = ()
    arms: tuple[str, ...] = ()


RETOOL = Study(
    key="retool", section="ReTool", notebook="10_retool",
    upstream={"init_dir": COLD_START, "data_dir": "01_data_curation", "ablation_dir": "06_roc_ablation"},
    product="retool.json",
    title="ReTool (Feng et al. 2025) on this run: PPO against GRPO-RoC",
    what=("Notebook 10 trains PPO (algorithm.adv_estimator = \"gae\" with a critic) from the same cold-start "
          "policy, for the same steps and seeds as notebook 06's GRPO-RoC arms, and logs ReTool §3.3's "
          "code-interpreter behaviour every step (kit.analysis.code_behaviour) on both."),
    figures=(("retool_behaviour", "ReTool's Figure (a)-(f) panels"),),
    job="kit.studies.retool.job", launches_verl=True, dry_run="kit.bridge.study_runs:retool_dry_run",
    claim_kinds="kit.studies.retool.kinds:KINDS", paired_kinds=("retool_emergence_diff",))

AGENT_R = Study(
    key="agent_r", section="Agent-R", notebook="11_agent_r",
    upstream={"sft_dir": COLD_START}, product="summary.json",
    title="Agent-R (Yuan et al. 2025) on this run: revision trajectories against three baselines",
    what=("Notebook 11 searches the cold-start policy's trajectories (MCTS over assistant turns), trains "
          "agent_r.iterations rounds of SFT on revision + good trajectories (Agent-R), on the same pairs revised "
          "at the bad trajectory's last observation (direct revision), with the same search budget on good "
          "trajectories only, and the same fine-tune on the cold-start data alone (the null arm, the design's "
          "control), and samples every policy after every iteration on the same held-out tasks "
          "(agent_r/policy_eval.jsonl) and after the same forced failing call (agent_r/probe_eval.jsonl)."),
    figures=(("agent_r_policies", "Agent-R's policies by iteration and one search tree"),),
    dry_run="kit.bridge.study_runs:agent_r_dry_run", claim_kinds="kit.studies.agent_r.kinds:KINDS",
    paired_kinds=("agent_r_diff",))

BSTAR = Study(
    key="bstar", section="B-STaR", notebook="12_bstar",
    upstream={"sft_dir": COLD_START}, product="summary.json",
    title="B-STaR (Zeng et al. 2025) on this run: temperature and threshold retuned every iteration, against a fixed pair",
    what=("Notebook 12 self-trains the cold-start policy for bstar.iterations rounds twice: B-STaR picks each round's "
          "sampling temperature and vote-share threshold by the authors' balance score on a dev subset (and the "
          "threshold again on the full pool), the fixed arm keeps one pair (online RFT); both sample the same "
          "training tasks with the same seeds and fine-tune with the same recipe, and every policy is sampled after "
          "every round on the same held-out tasks (bstar/eval.jsonl)."),
    figures=(("bstar_curves", "B-STaR's balance score, chosen pair, exploration and exploitation by iteration"),),
    dry_run="kit.bridge.study_runs:bstar_dry_run", claim_kinds="kit.studies.bstar.kinds:KINDS",
    paired_kinds=("bstar_diff",), arms=("bstar", "fixed"))  # B-STaR's adaptive loop and the fixed pair (online RFT)

#: the kit's own paper's claims section (``kit.claims.DEFAULT_SECTION``): no study may take it
KIT_SECTION = "rStar2-Agent"
#: parameters the runner gives every notebook itself: a study's ``upstream`` may not name them
SERIES_PARAMETERS = frozenset({"profile", "seed", "overrides", "run_dir"})
#: the environment variable naming studies that live outside the kit (``module:attribute``, comma-separated)
STUDIES_ENV = "KIT_STUDIES"
#: the kit's own studies (a study from outside may not reuse their key, section or notebook)
KIT_STUDIES: tuple[Study, ...] = (RETOOL, AGENT_R, BSTAR)
#: folders of a pipeline run that are not a study's (nor a stage's: :data:`kit.config.loading.RUN_FOLDERS`),
#: and the names :meth:`kit.claims.RunDirs.folder` keeps for itself
FIXED_FOLDERS = frozenset({"setup", "data", "sft", "ablation", "analysis", "eval", "figures", "tables", "notebooks",
                           "verl_session", "tracking", "checkpoints", "policy", "root", "stages", "studies"})
_NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"


def plugin_studies(spec: str) -> tuple[Study, ...]:
    """The studies ``spec`` names (``"pkg.mod:STUDY,other:STUDY"``, the value of :data:`STUDIES_ENV`).

    Raises:
        ValueError: an entry is not ``module:attribute``, names no :class:`Study`, or its key, section or
            notebook is already registered (the message names the entry and the variable).
        ImportError: its module cannot be imported (the message names the variable and the entry).
    """
    out: list[Study] = []
    for item in filter(None, (x.strip() for x in spec.split(","))):
        module, sep, name = item.partition(":")
        if not sep or not module or not name:
            raise ValueError(f"{STUDIES_ENV}: {item!r} is not 'module:attribute'")
        try:
            mod = importlib.import_module(module)
        except ImportError as exc:
            raise ImportError(f"{STUDIES_ENV}: {item!r}: {exc}") from exc
        study = getattr(mod, name, None)
        if study is None and getattr(getattr(mod, "__spec__", None), "_initializing", False):
            raise ValueError(f"{STUDIES_ENV}: {item!r}: module {module!r} is still being imported (it imported the "
                             "kit before defining the record): keep the Study record in a module of its own that "
                             "imports only kit.studies, e.g. mypackage/study.py")
        if not isinstance(study, Study):
            raise ValueError(f"{STUDIES_ENV}: {item!r} is {type(study).__name__}, not a kit.studies.Study")
        for s in (*KIT_STUDIES, *out):
            clash = [f for f in ("key", "section", "notebook") if getattr(s, f) == getattr(study, f)]
            if clash:
                raise ValueError(f"{STUDIES_ENV}: {item!r} has the {clash[0]} {getattr(study, clash[0])!r} of study "
                                 f"{s.key!r}; pick another")
        if study.section == KIT_SECTION:
            raise ValueError(f"{STUDIES_ENV}: {item!r}: section {KIT_SECTION!r} is the kit's own paper's; a study's "
                             "claims need a section of their own (its report page's name)")
        if not study.key.isidentifier() or study.key in FIXED_FOLDERS:
            raise ValueError(f"{STUDIES_ENV}: {item!r}: key {study.key!r} must be a plain identifier that is not one of "
                             f"the run's own folders ({', '.join(sorted(FIXED_FOLDERS))})")
        if not re.fullmatch(r"1\d_\w+", study.notebook):
            raise ValueError(f"{STUDIES_ENV}: {item!r}: notebook {study.notebook!r} must be numbered 10-19 (e.g. "
                             "'15_mystudy'): a study runs, and its executed copy sorts, before the report's 20")
        if (_NOTEBOOKS / f"{study.notebook}.ipynb").exists():
            raise ValueError(f"{STUDIES_ENV}: {item!r}: notebook {study.notebook!r} is a notebook of the kit's series")
        out.append(study)
    return tuple(out)


#: the registry: every study of the series, in the order the series runs them (all before notebook 20):
#: the kit's own, then those :data:`STUDIES_ENV` names
STUDIES: tuple[Study, ...] = (*KIT_STUDIES, *plugin_studies(os.environ.get(STUDIES_ENV, "")))


def by_key(key: str) -> Study:
    """The study whose run folder is ``key``.

    Raises:
        KeyError: no such study (the message lists the registered keys).
    """
    for s in STUDIES:
        if s.key == key:
            return s
    raise KeyError(f"no study {key!r}; registered: {[s.key for s in STUDIES]}")


def by_section(section: str) -> Study | None:
    """The study whose claims section is ``section`` (None: the kit's own paper's, or unknown)."""
    return next((s for s in STUDIES if s.section == section), None)


def resolve(dotted: str) -> Callable[..., Any]:
    """The object ``"package.module:attribute"`` names (a study's :attr:`Study.dry_run`, :attr:`Study.claim_kinds`).

    Raises:
        ValueError: ``dotted`` is not ``module:function``.
        ImportError, AttributeError: no such module or function.
    """
    module, sep, name = dotted.partition(":")
    if not sep or not module or not name:
        raise ValueError(f"expected 'module:function', got {dotted!r}")
    return getattr(importlib.import_module(module), name)
