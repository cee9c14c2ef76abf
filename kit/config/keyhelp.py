"""Help text of every config key, read from where it is written: the comments beside the fields of
:mod:`kit.config.schema` and beside the keys of the profile files (``python -m kit config``).

A field's help is its trailing comment plus the comment block directly above it (in the dataclass
source, read with :mod:`tokenize`); a key's profile note is the comment on its line in
``kit/profiles/<name>.toml`` (and the indented comment lines below it), from the profile and the
profiles it inherits from, the child's first. A table's help is the first paragraph of its
dataclass's docstring. The walk is generic over dataclass trees: a field that holds a dataclass,
or a tuple or list of dataclasses (``[[stages]]``: keys ``stages.<name>.steps``, ...), is a subtree.

Example::

    >>> rows = config_rows(load("tiny", write=False), "tiny", "algorithm.clip_ratio_high")
    >>> rows[0].key, rows[0].value
    ('algorithm.clip_ratio_high', 0.28)
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import inspect
import io
import json
import re
import textwrap
import tokenize
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kit.config.checks import ConfigError
from kit.config.loading import PROFILE_DIR, RETIRED_KEYS


@dataclass(frozen=True)
class KeyRow:
    """One line of ``kit config``: a dotted key, its resolved value, the schema's help and the
    profiles' notes (``(file name, comment)``). A table's row has ``value = None`` and ``table = True``."""

    key: str
    value: Any
    help: str
    notes: tuple[tuple[str, str], ...] = ()
    table: bool = False


@functools.cache
def field_help(cls: type) -> dict[str, str]:
    """Field name -> help text of a dataclass ``cls``, from the comments in its source: the comment
    block directly above the field and the comment at the end of its line (joined by "; "). Fields without either
    are absent. Raises ``OSError``/``TypeError`` when the source cannot be read."""
    path = Path(inspect.getsourcefile(cls) or "")
    source = path.read_text()
    lines = source.splitlines()
    comments = {tok.start[0]: tok.string.lstrip("#").strip()
                for tok in tokenize.generate_tokens(io.StringIO(source).readline) if tok.type == tokenize.COMMENT}
    node = next((n for n in ast.walk(ast.parse(source)) if isinstance(n, ast.ClassDef) and n.name == cls.__name__), None)
    if node is None:
        raise TypeError(f"class {cls.__name__} not found in {path}")
    out: dict[str, str] = {}
    for stmt in node.body:
        if not (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)):
            continue
        above, n = [], stmt.lineno - 1
        while n >= 1 and n in comments and lines[n - 1].lstrip().startswith("#"):
            above.insert(0, comments[n])
            n -= 1
        trailing = [comments[i] for i in range(stmt.lineno, (stmt.end_lineno or stmt.lineno) + 1) if i in comments]
        text = "; ".join(part for part in (" ".join(above), " ".join(trailing)) if part)
        if text:
            out[stmt.target.id] = text
    return out


def table_help(cls: type) -> str:
    """The first paragraph of ``cls``'s docstring on one line ("" without one)."""
    doc = inspect.getdoc(cls) or ""
    return " ".join(doc.split("\n\n")[0].split()) if cls.__doc__ else ""


_HEADER = re.compile(r"^\s*(\[\[?)\s*([A-Za-z0-9_.\-]+)\s*\]\]?")
_KEY = re.compile(r"^\s*([A-Za-z0-9_\-]+)\s*=")


def _split_comment(line: str) -> tuple[str, str]:
    """``'x = "a#b"  # note'`` -> ``('x = "a#b"', 'note')``: the first ``#`` outside a TOML string."""
    quote = ""
    for i, ch in enumerate(line):
        if quote:
            if ch == quote:
                quote = ""
        elif ch in "\"'":
            quote = ch
        elif ch == "#":
            return line[:i].rstrip(), line[i + 1:].strip()
    return line.rstrip(), ""


@functools.cache
def profile_notes(path: Path) -> dict[str, str]:
    """Dotted key -> the comment beside it in the profile file ``path``; a table header's comment
    under the table's key. Indented comment-only lines continue the key above them; ``[[name]]``
    tables are ``name.0``, ``name.1``, ..., or ``name.<its name key>`` once the table sets ``name`` Raises ``OSError`` when the file cannot be read."""
    notes: dict[str, str] = {}
    table, last, arrays = "", "", {}  # current table, key of the last key line, [[name]] counts
    header_array = ""  # the [[name]] of the current table ("" for a plain [table])
    for line in path.read_text().splitlines():
        code, comment = _split_comment(line)
        if not code.strip():
            if comment and last and line[:1].isspace():
                notes[last] = f"{notes.get(last, '')} {comment}".strip()
            elif not line.strip():
                last = ""
            continue
        header = _HEADER.match(code)
        if header:
            header_array = header.group(2) if header.group(1) == "[[" else ""
            if header_array:
                arrays[header_array] = arrays.get(header_array, -1) + 1
                table = f"{header_array}.{arrays[header_array]}"
            else:
                table = header.group(2)
            last = table
        elif (key := _KEY.match(code)) is not None:
            named = re.match(r"""\s*name\s*=\s*["']([^"']+)["']""", code)
            if named and header_array and table == f"{header_array}.{arrays[header_array]}":
                # a [[stages]] table goes by its name (stages.stage2.steps, the form --set takes)
                old_prefix, table = table, f"{header_array}.{named.group(1)}"
                notes = {(table + k[len(old_prefix):] if k == old_prefix or k.startswith(old_prefix + ".") else k): v
                         for k, v in notes.items()}
                last = table if last == old_prefix else last
            last = f"{table}.{key.group(1)}" if table else key.group(1)
        if comment and last:
            notes[last] = f"{notes.get(last, '')} {comment}".strip()
    return notes


def _profile_chain(profile: str) -> list[Path]:
    """The profile file and the files it inherits from, the profile's own first."""
    chain, name = [], profile
    while name and name not in [p.stem for p in chain]:
        path = PROFILE_DIR / f"{name}.toml"
        if not path.exists():
            break
        chain.append(path)
        name = tomllib.loads(path.read_text()).get("inherit", "")
    return chain


def _children(value: Any) -> list[tuple[str, Any, type | None]] | None:
    """``(name, value, owner class)`` of the keys under ``value``, or None for a leaf."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = dataclasses.fields(value)
        if [f.name for f in fields] == ["items"]:  # a named list (kit.config.StagesConfig): keys by element name
            return _children(value.items)
        return [(f.name, getattr(value, f.name), type(value)) for f in fields]
    if isinstance(value, (tuple, list)) and value and all(dataclasses.is_dataclass(v) for v in value):
        # ``stages.stage2.steps``: the form ``--set`` takes; an element without a name goes by its index
        return [(str(getattr(v, "name", "") or i), v, None) for i, v in enumerate(value)]
    return None


def config_rows(cfg: Any, profile: str, key: str = "") -> list[KeyRow]:
    """The rows of ``kit config``: every table and leaf key of the resolved config ``cfg`` (a
    :class:`kit.config.KitConfig`, or any dataclass tree) under ``key`` ("" = all; a table such as
    ``stages`` or a leaf such as ``algorithm.clip_ratio_high``; an element of a list of tables by
    its ``name``: ``stages.stage1``, the form ``--set`` takes), in field order, with its help.

    Raises:
        ConfigError: ``key`` names no key of the config (the message names it and the keys at
            the level where it stopped matching).
    """
    node, parts = cfg, [p for p in key.split(".") if p] if key else []
    owner: type | None = None
    for i, part in enumerate(parts):
        kids = _children(node)
        names = [name for name, _, _ in kids or []]
        match = next((k for k in kids or [] if part in (k[0], k[2] is None and getattr(k[1], "name", None))), None)
        if match is None:
            retired = ".".join(parts[:i + 1])
            if retired in RETIRED_KEYS:
                raise ConfigError(f"config key '{retired}' is retired: use {RETIRED_KEYS[retired]}")
            where = ".".join(parts[:i]) or "the config"
            raise ConfigError(f"unknown config key {key!r}: {where} has " + (
                f"no key {part!r}; its keys: {', '.join(names)}" if kids else "no keys under it (it is a value)"))
        parts[i], node, owner = match
    notes = [(p.name, profile_notes(p)) for p in _profile_chain(profile)]
    rows: list[KeyRow] = []

    def visit(path: str, value: Any, owner: type | None, name: str) -> None:
        kids = _children(value)
        text = field_help(owner).get(name, "") if owner is not None else ""
        found = tuple((file, n[path]) for file, n in notes if path in n)
        if kids is None:
            rows.append(KeyRow(path, value, text, found))
            return
        own = table_help(type(value)) if dataclasses.is_dataclass(value) else ""
        if path:
            rows.append(KeyRow(path, None, " ".join(t for t in (text, own) if t), found, table=True))
        for child, child_value, child_owner in kids:
            visit(f"{path}.{child}" if path else child, child_value, child_owner, child)

    visit(".".join(parts), node, owner, parts[-1] if parts else "")
    return rows


def _toml_value(value: Any) -> str:
    """A value as TOML writes it (tuples as arrays)."""
    return json.dumps(value if not isinstance(value, tuple) else list(value))


def format_rows(rows: list[KeyRow], width: int = 100) -> str:
    """``key = value`` per leaf (``[table]`` per table), each followed by its help and profile notes,
    indented and wrapped at ``width`` characters."""
    out: list[str] = []
    for row in rows:
        out.append(f"[{row.key}]" if row.table else f"{row.key} = {_toml_value(row.value)}")
        texts = ([row.help] if row.help else []) + [f"{file}: {note}" for file, note in row.notes]
        for text in texts:
            out += textwrap.wrap(text, width, initial_indent="    ", subsequent_indent="      ")
    return "\n".join(out)

