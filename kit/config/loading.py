"""Profiles, overrides and type checks: :func:`load` resolves a :class:`kit.config.KitConfig`.

Config flows one way (STYLE.md): the dataclass defaults (:mod:`kit.config.schema`, the paper's
values), then a named profile file ``kit/profiles/<name>.toml`` (``inherit`` names its parent),
then overrides (dotted keys, nested dicts or ``key=value`` strings). Every value is checked
against its field's annotation (strings from a command line are parsed) and unknown keys are
rejected with a message naming the dotted key; :func:`kit.config.checks.check` then applies the
rules between keys. :func:`save` / :func:`from_json` write and read ``run_dir/config.json``.
:mod:`kit.config` re-exports every name.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
import tomllib
import types
import typing
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from kit.config.checks import ConfigError, check
from kit.config.schema import KitConfig, StageConfig, StagesConfig
from kit.studies import FIXED_FOLDERS, STUDIES, STUDIES_ENV

PROFILE_DIR = Path(__file__).resolve().parent.parent / "profiles"
#: more folders of profile files, searched after ``kit/profiles`` (``os.pathsep``-separated; the
#: tests' profiles live in ``tests/profiles``); the pipeline's kernels inherit it
PROFILE_PATH_ENV = "KIT_PROFILE_PATH"


def _profile_dirs() -> list[Path]:
    extra = [Path(p) for p in os.environ.get(PROFILE_PATH_ENV, "").split(os.pathsep) if p]
    return [PROFILE_DIR, *extra]


def available_profiles() -> list[str]:
    """Names of the profile files in ``kit/profiles`` (and the folders of ``KIT_PROFILE_PATH``)."""
    return sorted({p.stem for d in _profile_dirs() for p in d.glob("*.toml")})


def _profile_file(name: str) -> Path:
    for d in _profile_dirs():
        if (d / f"{name}.toml").exists():
            return d / f"{name}.toml"
    return PROFILE_DIR / f"{name}.toml"


#: Folders of a pipeline run that are not a stage's (kit.plan's series and the runner write them): a
#: stage is its own folder, so a stage named like one of these would share it, and the runner empties
#: a stage's folder before it runs afresh (tests/pipeline/test_stage_list.py keeps the two lists equal).
#: Each related-work study's folder (kit.studies.STUDIES) is one of them.
RUN_FOLDERS = frozenset(FIXED_FOLDERS - {"root", "stages", "studies"} | {s.key for s in STUDIES})
_STAGE_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]*")


def check_stage_name(name: str, where: str) -> None:
    """A stage's name is its run folder and its key in overrides (``stages.<name>.steps``): a plain
    identifier (letters, digits, ``_``; a letter first) that is not one of :data:`RUN_FOLDERS`.

    Raises:
        ConfigError: naming ``where`` (the profile file and table) and the name.
    """
    if not _STAGE_NAME.fullmatch(name):
        raise ConfigError(f"{where}: stage name {name!r} must be a plain identifier (letters, digits and _, a letter "
                          "first): it is the stage's run folder and its key in overrides, stages.<name>.steps")
    if name in RUN_FOLDERS:
        owner = next((f"study {s.key!r} ({s.notebook}; a study from outside the kit is named by {STUDIES_ENV})"
                      for s in STUDIES if s.key == name), "")
        raise ConfigError(f"{where}: stage name {name!r} is a folder the run already uses for something else "
                          + (f"(the run folder of {owner}): rename the stage or the study's key"
                             if owner else f"({', '.join(sorted(RUN_FOLDERS))}); pick another (stage4, ...)"))


def _stage_tables(tables: Any, where: str) -> dict[str, dict[str, Any]]:
    """A ``[[stages]]`` list (TOML, ``config.json``) as ``{name: table}`` in order, each table keeping
    its ``name`` (how :func:`_build_stages` tells a declared stage from an override's typo).

    Raises:
        ConfigError: an entry is not a table, lacks a ``name`` or repeats one (names ``where``).
    """
    if isinstance(tables, Mapping):  # config.json written before the list, or overrides
        return {str(k): dict(v) if isinstance(v, Mapping) else v for k, v in tables.items()}
    if not isinstance(tables, list):
        raise ConfigError(f"{where}: stages must be a list of [[stages]] tables, got {type(tables).__name__}")
    out: dict[str, dict[str, Any]] = {}
    for i, table in enumerate(tables):
        if not isinstance(table, Mapping) or not isinstance(table.get("name"), str) or not table["name"]:
            raise ConfigError(f"{where}: stages[{i}] needs a name (name = \"stage1\"), got {table!r}")
        check_stage_name(table["name"], f"{where}: stages[{i}]")
        if table["name"] in out:
            raise ConfigError(f"{where}: two [[stages]] tables are named {table['name']!r}")
        out[table["name"]] = dict(table)
    return out


def _read_profile(name: str, seen: tuple[str, ...] = ()) -> dict[str, Any]:
    path = _profile_file(name)
    if not path.exists():
        raise ConfigError(f"unknown profile {name!r}; available: {', '.join(available_profiles())}")
    if name in seen:
        raise ConfigError(f"profile inheritance cycle: {' -> '.join((*seen, name))}")
    with path.open("rb") as fh:
        try:
            raw = tomllib.load(fh)
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{path}: {exc}") from exc
    parent = raw.pop("inherit", None)
    if "stages" in raw:  # merged by name onto the parent's: a new name adds a stage after its parent's
        raw["stages"] = _stage_tables(raw["stages"], str(path))
    base = _read_profile(parent, (*seen, name)) if parent else {}
    return _deep_merge(base, raw)


def _deep_merge(base: dict[str, Any], top: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in top.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = _deep_merge(dict(out[key]), value)
        else:
            out[key] = value
    return out


def _nest(flat: Mapping[str, Any]) -> dict[str, Any]:
    """Turn ``{"a.b": 1, "a__c": 2, "d": {...}}`` into nested dicts."""
    out: dict[str, Any] = {}
    for key, value in flat.items():
        parts = key.replace("__", ".").split(".")
        node = out
        for part in parts[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ConfigError(f"override {key!r} conflicts with another override of {part!r}")
        if isinstance(value, Mapping):
            node[parts[-1]] = _deep_merge(node.get(parts[-1], {}), _nest(value))
        else:
            node[parts[-1]] = value
    return out


def _coerce(value: Any, tp: Any, key: str) -> Any:
    """Check ``value`` against the annotation ``tp``; strings from a CLI are parsed."""
    origin = typing.get_origin(tp)
    if origin is Literal:
        allowed = typing.get_args(tp)
        if value not in allowed:
            raise ConfigError(f"{key}: {value!r} is not one of {list(allowed)}")
        return value
    if origin in (tuple, Sequence) or tp is tuple:
        if isinstance(value, str):
            value = [v.strip() for v in value.split(",") if v.strip()]
        if not isinstance(value, list | tuple):
            raise ConfigError(f"{key}: expected a list, got {type(value).__name__} {value!r}")
        (item_tp, *_rest) = typing.get_args(tp) or (Any,)
        return tuple(_coerce(v, item_tp, f"{key}[{i}]") for i, v in enumerate(value))
    if origin in (types.UnionType, typing.Union):
        for arg in typing.get_args(tp):
            try:
                return _coerce(value, arg, key)
            except ConfigError:
                continue
        raise ConfigError(f"{key}: {value!r} does not match {tp}")
    if tp is Any:
        return value
    if tp is bool:
        if isinstance(value, str) and value.lower() in ("true", "false", "1", "0"):
            return value.lower() in ("true", "1")
        if not isinstance(value, bool):
            raise ConfigError(f"{key}: expected bool, got {type(value).__name__} {value!r}")
        return value
    if tp is int:
        if isinstance(value, str):
            try:
                return int(value)
            except ValueError:
                raise ConfigError(f"{key}: expected int, got {value!r}") from None
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{key}: expected int, got {type(value).__name__} {value!r}")
        return value
    if tp is float:
        if isinstance(value, str):
            try:
                number = float(value)
            except ValueError:
                raise ConfigError(f"{key}: expected float, got {value!r}") from None
        elif isinstance(value, bool) or not isinstance(value, int | float):
            raise ConfigError(f"{key}: expected float, got {type(value).__name__} {value!r}")
        else:
            number = float(value)
        if not math.isfinite(number):  # config.json is strict JSON: no NaN or Infinity in it
            raise ConfigError(f"{key}: expected a finite float, got {value!r}")
        return number
    if tp is str:
        if not isinstance(value, str):
            raise ConfigError(f"{key}: expected str, got {type(value).__name__} {value!r}")
        return value
    raise ConfigError(f"{key}: unsupported annotation {tp}")


#: keys that no longer exist -> what replaces them (issue #43: one meaning per knob)
RETIRED_KEYS = {
    "algorithm.name": 'algorithm.selection ("grpo_roc" is selection = "roc", "grpo" is selection = "all"; '
                      'the arm\'s label follows from selection and adv_estimator)',
    "algorithm.roc_with_gae": 'algorithm.selection = "roc" with algorithm.adv_estimator = "gae" (PPO keeps every '
                              'trajectory with selection = "all")',
}


def _build(cls: type, values: Mapping[str, Any], prefix: str) -> Any:
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(values) - names)
    retired = [f"{prefix}{k}" for k in unknown if f"{prefix}{k}" in RETIRED_KEYS]
    if retired:
        raise ConfigError(f"config key '{retired[0]}' is retired: use {RETIRED_KEYS[retired[0]]}")
    if unknown:
        where = f" in [{prefix.rstrip('.')}]" if prefix else ""
        raise ConfigError(
            f"unknown config key '{prefix}{unknown[0]}'{where}; known keys: {', '.join(sorted(names))}"
        )
    kwargs: dict[str, Any] = {}
    default = cls()
    for f in dataclasses.fields(cls):
        tp = hints[f.name]
        key = f"{prefix}{f.name}"
        if tp is StagesConfig:
            kwargs[f.name] = _build_stages(values.get(f.name, {}), StagesConfig(), key)  # as declared: unresolved budgets
        elif dataclasses.is_dataclass(tp):
            sub = values.get(f.name, {})
            if not isinstance(sub, Mapping):
                raise ConfigError(f"{key}: is a section; set its keys as {key}.<name>")
            # start from the parent's default for this section, as declared (the stages are
            # _build_stages': KitConfig() has already filled their budgets from rollout's)
            declared = f.default_factory() if f.default_factory is not dataclasses.MISSING else getattr(default, f.name)
            base = dataclasses.asdict(declared)
            kwargs[f.name] = _build(tp, _deep_merge(_flatten_one(base, tp), sub), f"{key}.")
        elif f.name in values:
            kwargs[f.name] = _coerce(values[f.name], tp, key)
    return cls(**kwargs)


def _build_stages(values: Any, declared: StagesConfig, key: str) -> StagesConfig:
    """The stages: ``declared`` (the paper's, by name) with ``values`` (``{name: table}``) merged by
    name; a table of a new name that the profile declared (it carries ``name``) is added after them.

    Raises:
        ConfigError: ``values`` is not a section, or names a stage no profile declared (the dotted key).
    """
    if not isinstance(values, Mapping):
        raise ConfigError(f"{key}: is a list of [[stages]] tables; set a stage's keys as {key}.<stage>.<name>")
    tables = {st.name: dataclasses.asdict(st) for st in declared}
    for name, table in values.items():
        if not isinstance(table, Mapping):
            raise ConfigError(f"{key}.{name}: is a section; set its keys as {key}.{name}.<name>")
        if name not in tables and "name" not in table:
            raise ConfigError(f"unknown stage '{key}.{name}'; the profile's stages are {', '.join(tables)}")
        if table.get("name", name) != name:
            raise ConfigError(f"{key}.{name}.name: a stage's name cannot change (got {table['name']!r})")
        tables[name] = _deep_merge(tables.get(name, {"name": name}), table)
    return StagesConfig(tuple(_build(StageConfig, t, f"{key}.{n}.") for n, t in tables.items()))


def _flatten_one(base: dict[str, Any], tp: type) -> dict[str, Any]:
    """asdict() output restricted to what ``_build`` accepts (it re-checks every value)."""
    return {k: v for k, v in base.items() if k in {f.name for f in dataclasses.fields(tp)}}


def load(
    profile: str = "tiny",
    overrides: Mapping[str, Any] | Sequence[str] | None = None,
    *,
    write: bool = True,
    **kwargs: Any,
) -> KitConfig:
    """Resolve a profile plus overrides into a :class:`KitConfig`.

    Args:
        profile: name of a file in ``kit/profiles`` (``tiny``, ``smoke``, ``paper-14b``,
            ``paper-32b``).
        overrides: a mapping with dotted keys (``{"algorithm.lr": 1e-4}``) or nested dicts, or
            ``["algorithm.lr=1e-4", ...]`` strings from a command line.
        write: write ``run_dir/config.json`` when ``run_dir`` is set.
        **kwargs: more overrides; papermill parameters pass straight through (``seed=3``,
            ``run_dir="runs/x"``); ``algorithm__lr=1e-4`` is the same as ``algorithm.lr``.
    Returns:
        The frozen, type-checked config.
    Raises:
        ConfigError: an unknown profile, an unknown key or a value of the wrong type; the
            message names the dotted key.
    """
    values = _read_profile(profile)
    values["profile"] = profile
    if overrides is not None and not isinstance(overrides, Mapping):
        parsed: dict[str, Any] = {}
        for item in overrides:
            if "=" not in item:
                raise ConfigError(f"override {item!r} is not of the form key=value")
            k, v = item.split("=", 1)
            parsed[k.strip()] = v.strip()
        overrides = parsed
    merged = _deep_merge(values, _nest(dict(overrides or {})))
    merged = _deep_merge(merged, _nest(kwargs))
    cfg = check(_build(KitConfig, merged, ""))
    if write and cfg.run_dir:
        save(cfg, cfg.run_dir)
    return cfg


def save(cfg: KitConfig, run_dir: str | os.PathLike) -> Path:
    """Write ``cfg`` as ``run_dir/config.json`` and return the path."""
    path = Path(run_dir) / "config.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(cfg.to_dict(), indent=2) + "\n")
    return path


def _migrated_algorithm(a: dict[str, Any]) -> dict[str, Any]:
    """A stored ``algorithm`` table with the retired keys (:data:`RETIRED_KEYS`) translated: a run folder written
    before issue #43 stays readable. ``name = "grpo_roc"`` kept RoC's selection unless the estimator was
    ``"gae"`` without ``roc_with_gae`` (PPO kept every row); ``"grpo"`` never selected."""
    if "name" not in a and "roc_with_gae" not in a:
        return a
    a = dict(a)
    name, with_gae = a.pop("name", "grpo_roc"), a.pop("roc_with_gae", False)
    roc = name == "grpo_roc" and (a.get("adv_estimator", "grpo") != "gae" or with_gae)
    a.setdefault("selection", "roc" if roc else "all")
    return a


def from_json(path: str | os.PathLike) -> KitConfig:
    """Read a ``config.json`` written by :func:`save` back into a :class:`KitConfig`.

    A file written before issue #43 (``algorithm.name``, ``algorithm.roc_with_gae``) is read with those keys
    translated to ``algorithm.selection``; a profile or an override naming them is refused instead.

    Raises:
        ConfigError: the file holds unknown keys or wrong types (e.g. written by another
            version of the kit); the message names the file and the key.
    """
    data = json.loads(Path(path).read_text())
    if isinstance(data, dict) and isinstance(data.get("algorithm"), dict):
        data["algorithm"] = _migrated_algorithm(data["algorithm"])
    if isinstance(data, dict) and "stages" in data:
        data["stages"] = _stage_tables(data["stages"], str(path))
    try:
        return check(_build(KitConfig, data, ""))
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from exc
