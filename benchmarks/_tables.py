"""The template language and the blocks of benchmarks/report.py's declarative table.

Templates are text with fields ``{PATH|FILTER|FILTER(ARG):FORMAT}``:

- PATH: keys joined by dots, relative to the row (``test.bleu``); ``[best.pt]`` for a key
  with dots in it, ``[0]``/``[-1]`` for list items, ``[*]``/``.*`` for every item (a list),
  ``[kind=reverse]`` for the first item whose ``kind`` is ``reverse``, ``[$.metric]`` for the
  key that another path gives. ``$`` starts at the file, ``^`` at the parent row (rows from a
  path with two ``*``), ``@`` is the row's key or index (``^@`` the parent's) and ``~`` the
  file's name. A trailing ``?`` makes the path optional (missing: empty, or the text after
  the ``?``).
- FILTER: see ``FILTERS`` (``clean`` makes a recorded command repository-relative,
  ``range`` gives min-max of a list, ``minus(PATH)`` a difference, ``bold_if(A==B)`` bold...).
- FORMAT: Python's format spec (``.2f``, ``,``, ``.0%``, ``+.2f``).
"""

from __future__ import annotations

import json
import math
import re
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
MOVED = ("seeds", "rerank_seeds", "rerank_ensemble_report", "mbr", "backtranslation",
         "gpu_step_profile", "gpu_rerank_ensemble", "gpu_seeds", "gpu_suite", "gpu_env")
"""Scripts that wrote some results from benchmarks/ and now live in experiments/."""


class ReportError(ValueError):
    """A results file lacks what its entry in the table names (or the entry is malformed)."""


def clean(text: str) -> str:
    """A command as recorded, with the paths of the machine it ran on made repository-relative.

    ``NMTKIT_DATA=../shared/data`` (the offline mirror) becomes ``NMTKIT_DATA=MIRROR``, the
    old tree of ``--src`` becomes ``OLD_TREE`` (``NEW_TREE`` beside ``--baseline-src OLD_TREE``),
    a run directory becomes ``runs/...``, ``/tmp/...`` or the checkout's absolute path are
    dropped, and a script that has moved to experiments/ is named where it now is.
    """
    text = re.sub(r"NMTKIT_DATA=\S+", "NMTKIT_DATA=MIRROR", text)
    text = re.sub(r"(?:\.\./)+shared/data", "MIRROR", text)
    new_old = "--baseline-src" in text  # then --src is the new tree, --baseline-src the old one
    text = re.sub(r"--baseline-src \S+", "--baseline-src OLD_TREE", text)
    text = re.sub(r"--src \S+", "--src NEW_TREE" if new_old else "--src OLD_TREE", text)
    text = re.sub(r"(?<![\w.])/work/(?:[\w.-]+/)*?(runs/)", r"\1", text)
    text = re.sub(r"(?<![\w.])/(?:work/main|tmp)/", "", text)
    return re.sub(rf"\bbenchmarks/({'|'.join(MOVED)})\.(py|sh)\b", r"experiments/\1.\2", text)


# ---------------------------------------------------------------------------------------
# The template language: paths into a file's JSON, filters, formats.

@dataclass(frozen=True)
class Ctx:
    """Where a template is rendered: the file, the row, its key, the row it came from."""

    file: str
    root: Any
    row: Any
    key: Any = None
    parent: Ctx | None = None

    def fail(self, message: str) -> ReportError:
        return ReportError(f"benchmarks/results/{self.file}: {message}")


MISSING = object()


@dataclass(frozen=True)
class Bold:
    """A value to be shown in bold (``bold_if``)."""

    value: Any


def tokens(path: str) -> list[str]:
    """``a.b[c.d][0].*`` -> ``['a', 'b', '[c.d]', '[0]', '*']``."""
    out, i = [], 0
    while i < len(path):
        if path[i] == "[":
            depth, j = 0, i
            for j in range(i, len(path)):  # the matching "]" (a key path may have brackets)
                depth += (path[j] == "[") - (path[j] == "]")
                if depth == 0:
                    break
            else:
                raise ReportError(f"unbalanced brackets in {path!r}")
            out.append(path[i:j + 1])
            i = j + 1
        elif path[i] == ".":
            i += 1
        else:
            j = i
            while j < len(path) and path[j] not in ".[":
                j += 1
            out.append(path[i:j])
            i = j
    return out


def children(value: Any) -> list[tuple[Any, Any]]:
    if isinstance(value, dict):
        return list(value.items())
    if isinstance(value, list):
        return list(enumerate(value))
    return []


def step(value: Any, token: str, ctx: Ctx) -> Any:
    """One token of a path applied to ``value`` (``MISSING`` if it is not there)."""
    key: Any = token
    if token.startswith("["):
        key = token[1:-1]
        if key[:1] in "$^@~":
            key = resolve(ctx, key)
        elif "=" in key and isinstance(value, list):
            name, wanted = key.split("=", 1)
            return next((x for x in value if isinstance(x, dict) and str(x.get(name)) == wanted),
                        MISSING)
    if isinstance(value, list):
        if isinstance(key, str) and re.fullmatch(r"-?\d*:-?\d*", key):
            a, b = (int(x) if x else None for x in key.split(":"))
            return value[a:b]
        try:
            return value[int(key)]
        except (ValueError, IndexError):
            return MISSING
    if isinstance(value, dict):
        return value.get(key, MISSING)
    return MISSING


def start(ctx: Ctx, path: str) -> tuple[Any, str]:
    """The value a path starts from, and the rest of the path."""
    if path.startswith("^@"):
        return (ctx.parent.key if ctx.parent else MISSING), path[2:]
    if path.startswith("@"):
        return ctx.key, path[1:]
    if path.startswith("~"):
        return ctx.file, path[1:]
    if path.startswith("$"):
        return ctx.root, path[1:]
    if path.startswith("^"):
        parent = ctx.parent or ctx
        return parent.row, path[1:]
    return ctx.row, path


def resolve(ctx: Ctx, path: str) -> Any:
    """The value at ``path``; ``[*]`` gives a list. ``path?`` (or ``path?DEFAULT``): ``None``
    (or DEFAULT) where missing; otherwise missing is a :class:`ReportError`."""
    path, optional, default = split_optional(path)
    value, rest = start(ctx, path.strip())
    values, wild = [value], False
    for token in tokens(rest):
        if token in ("*", "[*]"):
            wild = True
            values = [c for v in values for _, c in children(v)]
            continue
        values = [step(v, token, ctx) for v in values]
        if wild:
            values = [v for v in values if v is not MISSING]
        elif values[0] is MISSING:
            if optional:
                return default or None
            raise ctx.fail(f"no {token!r} in {path!r} (row {ctx.key!r})")
    if not wild and values[0] is MISSING:  # (a path of one special, such as ^@ at the top)
        if optional:
            return default or None
        raise ctx.fail(f"nothing at {path!r}")
    if wild and not values and optional:
        return default or None
    return values if wild else values[0]


def split_optional(path: str) -> tuple[str, bool, str]:
    """``a.b[$.c?d]?e`` -> ``('a.b[$.c?d]', True, 'e')``: the ``?`` outside brackets."""
    depth = 0
    for i, ch in enumerate(path):
        depth += (ch == "[") - (ch == "]")
        if ch == "?" and depth == 0:
            return path[:i], True, path[i + 1:]
    return path, False, ""


def flat(value: Any) -> list[Any]:
    return [y for x in value for y in flat(x)] if isinstance(value, list) else [value]


def _number_after(value: Any, text: str, ctx: Ctx) -> Any:
    m = re.search(re.escape(text) + r"(-?[0-9][0-9,]*\.?[0-9]*)", str(value))
    if not m:
        raise ctx.fail(f"no number after {text!r} in {value!r}")
    return float(m.group(1).replace(",", ""))


def _condition(arg: str, ctx: Ctx) -> bool:
    """``A==B`` or ``A!=B``: each side a path or a 'quoted' literal."""
    op = "!=" if "!=" in arg else "=="
    a, b = (_side(x.strip(), ctx) for x in arg.split(op, 1))
    return (str(a) == str(b)) == (op == "==")


def _side(text: str, ctx: Ctx) -> Any:
    return text[1:-1] if text[:1] == "'" else resolve(ctx, text)


def _brief(value: Any) -> str:
    """A command without the prose of its ``--note``, ``--title``, ``--protocol`` options."""
    return re.sub(r" --(?:note|title|protocol|command) (?:'(?:[^']|'\"'\"')*'|.*?(?= --\w|$))",
                  " ...", clean(str(value)))


def _short(value: Any) -> str:
    """A description without its asides: bracketed parts dropped, cut at ``: `` or ``; ``."""
    text, before = str(value), ""
    while text != before:
        before, text = text, re.sub(r"\s*\([^()]*\)", "", text)
    return re.split(r": |; ", text, maxsplit=1)[0]


FILTERS: dict[str, Callable[[Any, str, Ctx], Any]] = {
    "clean": lambda v, a, c: clean(str(v)),
    "join": lambda v, a, c: (a or ", ").join(str(x) for x in flat(v)),
    "fmt": lambda v, a, c: [format(x, a) for x in flat(v)],
    "range": lambda v, a, c: f"{format(min(flat(v)), a)}-{format(max(flat(v)), a)}",
    "min": lambda v, a, c: min(flat(v)),
    "max": lambda v, a, c: max(flat(v)),
    "mean": lambda v, a, c: statistics.mean(flat(v)),
    "len": lambda v, a, c: len(v),
    "date": lambda v, a, c: str(v)[:10],
    "millions": lambda v, a, c: v / 1e6,
    "round": lambda v, a, c: round(v),
    "minus": lambda v, a, c: v - resolve(c, a),
    "after": _number_after,
    "items": lambda v, a, c: (", ".join(f"{k} {format(x, a)}" for k, x in v.items())
                              if isinstance(v, dict) else format(v, a)),
    "paren": lambda v, a, c: f" ({a}{v})" if v not in ("", [], None) else "",
    "suffix": lambda v, a, c: f"{v}{a}",
    "label": lambda v, a, c: f"{a} {v:g}" if v else "",  # (0 hidden: rerank 0, mbr 0)
    "tag": lambda v, a, c: f"{a} {v:g}",  # (0 shown: a weight of 0)
    "or": lambda v, a, c: v,  # (applied to None by render: see NONE_FILTERS)
    "short": lambda v, a, c: _short(v),
    "brief": lambda v, a, c: _brief(v),
    "bold_if": lambda v, a, c: Bold(v) if _condition(a, c) else v,
}
NONE_FILTERS = {"or"}
"""Filters that also see a missing optional value (the others pass ``None`` on)."""

FIELD = re.compile(r"\{([^{}]+)\}")


def split_top(text: str, sep: str) -> list[str]:
    """``text`` split at ``sep`` outside brackets and parentheses."""
    parts, depth, cur = [], 0, ""
    for ch in text:
        depth += ch in "[(" and 1 or (ch in "])" and -1 or 0)
        if ch == sep and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    return [*parts, cur]


def value_of(spec: str, ctx: Ctx) -> Any:
    """A field's value after its filters (a :class:`Bold` if one made it bold), unformatted."""
    path, *filters = split_top(spec, "|")
    value = resolve(ctx, path)
    for f in filters:
        name, _, arg = f.partition("(")
        arg = arg[:-1] if arg else ""
        if name not in FILTERS:
            raise ctx.fail(f"unknown filter {name!r} in {{{spec}}}")
        if value is None and name in NONE_FILTERS:
            value = arg
        elif value is not None:
            inner = value.value if isinstance(value, Bold) else value
            out = FILTERS[name](inner, arg, ctx)
            value = Bold(out) if isinstance(value, Bold) and not isinstance(out, Bold) else out
    return value


def render(template: str, ctx: Ctx, blank: bool = False) -> str:
    """``template`` with every ``{field}`` filled in from ``ctx`` (``blank``: nothing at all
    where every field of the template is empty)."""
    filled: list[bool] = []

    def fill(m: re.Match[str]) -> str:
        text = _fill(m)
        filled.append(bool(text))
        return text

    def _fill(m: re.Match[str]) -> str:
        parts = split_top(m.group(1), ":")
        spec, fmt = (":".join(parts[:-1]), parts[-1]) if len(parts) > 1 else (parts[0], "")
        value = value_of(spec, ctx)
        bold = isinstance(value, Bold)
        value = value.value if bold else value
        if value is None:
            return ""
        try:
            text = format(value, fmt) if fmt else (f"{value:g}" if isinstance(value, float)
                                                  and math.isfinite(value) else str(value))
        except (TypeError, ValueError) as e:
            raise ctx.fail(f"{{{m.group(1)}}}: cannot format {value!r} ({e})") from e
        return f"**{text}**" if bold else text
    out = FIELD.sub(fill, template.replace("{{", "\0").replace("}}", "\1"))
    if blank and filled and not any(filled):
        return ""
    return out.replace("\0", "{").replace("\1", "}")


def rows_of(ctx: Ctx, path: str, unless: str = "") -> list[Ctx]:
    """The rows a table makes of one file: ``""`` the file itself, ``runs[*]`` each run,
    ``runs[*].checkpoints.*`` each checkpoint of each run (its parent row: the run). A path
    ending in ``?`` gives no rows where something on it is missing. Rows that have the
    key ``unless`` are left out."""
    optional = path.endswith("?")
    items = [(ctx, ctx.row)]  # (the last row a * gave, the value reached from it)
    for token in tokens(path.rstrip("?")):
        if token in ("*", "[*]"):
            items = [(Ctx(c.file, c.root, child, k, c), child)
                     for c, v in items for k, child in children(v)]
            continue
        nxt = []
        for c, v in items:
            v = step(v, token, c)
            if v is MISSING:
                if optional:
                    continue
                raise c.fail(f"no {token!r} in the rows' path {path!r}")
            nxt.append((c, v))
        items = nxt
    items = [c if c.row is v else Ctx(c.file, c.root, v, c.key, c) for c, v in items]
    return [c for c in items if not unless or resolve(c, unless + "?") is None]


# ---------------------------------------------------------------------------------------
# The blocks of a section.

@dataclass(frozen=True)
class Text:
    """A paragraph (``optional``: left out where a key it names is missing)."""

    template: str
    optional: bool = False
    file: str = ""  # rendered on this results file instead of the section's


@dataclass(frozen=True)
class Table:
    """One row per item at ``rows`` (per file, then over the section's files); ``columns``
    are (header, cell template) pairs. A column whose every cell is empty is left out; an
    empty cell shows ``-``."""

    rows: str
    columns: tuple[tuple[str, str], ...]
    unless: str = ""


@dataclass(frozen=True)
class Pivot:
    """A grid: each item at ``rows`` fills the cell at (``row``, ``column``), both templates
    on the item, in the order first seen; ``empty`` names a column whose label is empty."""

    rows: str
    corner: str
    row: str
    column: str
    cell: str
    empty: str = ""


@dataclass(frozen=True)
class Grid:
    """A table written row by row: ``rows`` of cell templates on the file (a row whose
    first cell starts with ``?`` is left out where a key it names is missing)."""

    header: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]


@dataclass(frozen=True)
class Code:
    """The commands at the first of ``paths`` that the file has, in a bash block."""

    paths: tuple[str, ...]
    label: str = "Commands:"


Block = Text | Table | Pivot | Grid | Code


@dataclass(frozen=True)
class Section:
    """Files matching ``glob`` (sorted by name) under the page part ``part``. ``per_file``:
    a heading and the blocks for each file; otherwise one heading, and each table gathers
    its rows from every file (text blocks are then plain text)."""

    part: str
    glob: str
    heading: str
    blocks: tuple[Block, ...]
    per_file: bool = True


def load(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def files(glob: str, results: Path) -> list[Path]:
    return sorted(p for p in results.glob(glob) if p.suffix == ".json")


def file_ctx(path: Path, results: Path) -> Ctx:
    root = load(path)
    return Ctx(str(path.relative_to(results)), root, root)


def table_lines(header: list[str], rows: list[list[str]]) -> list[str]:
    keep = [i for i in range(len(header)) if any(r[i] for r in rows)]
    return ["| " + " | ".join(header[i] for i in keep) + " |", "|" + "---|" * len(keep),
            *("| " + " | ".join(r[i] or "-" for i in keep) + " |" for r in rows)]


def render_block(block: Block, ctxs: list[Ctx], where: str, results: Path = RESULTS) -> list[str]:
    if isinstance(block, Text) and block.file:
        ctxs = [file_ctx(results / block.file, results)]
    try:
        return _render_block(block, ctxs)
    except ReportError as e:
        raise ReportError(f"{e} [section {where!r}]") from None


def _render_block(block: Block, ctxs: list[Ctx]) -> list[str]:
    head = ctxs[0] if ctxs else Ctx("", {}, {})
    if isinstance(block, Text):
        try:
            return [render(block.template, head), ""]
        except ReportError:
            if block.optional:
                return []
            raise
    if isinstance(block, Code):
        for path in block.paths:
            value = resolve(head, path + "?")
            if value is not None:
                lines = [clean(str(c)) for c in flat(value)]
                return [block.label, "", "```bash", *lines, "```", ""]
        raise head.fail(f"none of {list(block.paths)}")
    if isinstance(block, Grid):
        rows = []
        for cells in block.rows:
            optional = cells[0].startswith("?")
            try:
                rows.append([render(cells[0].removeprefix("?"), head),
                             *(render(x, head) for x in cells[1:])])
            except ReportError:
                if not optional:
                    raise
        return [*table_lines([render(h, head) for h in block.header], rows), ""]
    if isinstance(block, Table):
        rows = [[render(t, r, blank=True) for _, t in block.columns]
                for c in ctxs for r in rows_of(c, block.rows, block.unless)]
        if not rows:
            return []
        return [*table_lines([render(h, head) for h, _ in block.columns], rows), ""]
    cells: dict[tuple[str, str], str] = {}
    row_names: list[str] = []
    col_names: list[str] = []
    for c in ctxs:
        for r in rows_of(c, block.rows):
            name = render(block.row, r)
            col = " ".join(render(block.column, r).split()) or block.empty
            row_names += [name] if name not in row_names else []
            col_names += [col] if col not in col_names else []
            cells[name, col] = render(block.cell, r, blank=True)
    if not cells:
        return []
    return [*table_lines([block.corner, *col_names],
                         [[n, *(cells.get((n, col), "") for col in col_names)]
                          for n in row_names]), ""]


def render_section(section: Section, results: Path = RESULTS) -> list[str]:
    """The lines of one section (nothing when no file matches its glob)."""
    paths = files(section.glob, results)
    if not paths:
        return []
    ctxs = [file_ctx(p, results) for p in paths]
    out: list[str] = []
    if section.per_file:
        for c in ctxs:
            out += [f"### {render(section.heading, c)}", ""]
            for b in section.blocks:
                out += render_block(b, [c], section.heading, results)
    else:
        out += [f"### {section.heading}", ""]
        for b in section.blocks:
            out += render_block(b, [Ctx("", {}, {})] if isinstance(b, Text) else ctxs,
                                section.heading, results)
    return out


# ---------------------------------------------------------------------------------------
# The summary (HEADLINES) and the ablations page (ABLATIONS, FINDINGS).

@dataclass(frozen=True)
class Headline:
    """One row of the summary table: a figure, its machine and command, from one file."""

    file: str
    figure: str
    machine: str = "{machine}"
    command: str = "`{command|brief}`"


@dataclass(frozen=True)
class Line:
    """One line of docs/ablations.md per file matching ``glob``: ``head``, then ``item``
    for each row at ``rows`` joined by ``; ``."""

    glob: str
    head: str
    rows: str = ""
    item: str = ""


def json_link(name: str) -> str:
    return f"[{Path(name).name}](../benchmarks/results/{name})"


def summary_table(headlines: tuple[Headline, ...], results: Path = RESULTS) -> list[str]:
    """The summary table: one row per headline (a missing file is an error)."""
    rows = []
    for h in headlines:
        path = results / h.file
        if not path.exists():
            raise ReportError(f"benchmarks/results/{h.file}: no such file (a HEADLINES row)")
        c = file_ctx(path, results)
        try:
            rows.append([render(h.figure, c), render(h.machine, c), render(h.command, c),
                         json_link(h.file)])
        except ReportError as e:
            raise ReportError(f"{e} [summary row {h.figure!r}]") from None
    return table_lines(["figure", "machine", "command", "JSON"], rows)


def ablation_lines(lines: tuple[Line, ...], results: Path = RESULTS) -> list[str]:
    """One list item per file that each line's glob matches, with a link to the file."""
    out = []
    for line in lines:
        for p in files(line.glob, results):
            c = file_ctx(p, results)
            text = render(line.head, c)
            if line.rows:
                text += "; ".join(render(line.item, r) for r in rows_of(c, line.rows))
            out.append(f"- {text} ({json_link(c.file)})")
    return out


# ---------------------------------------------------------------------------------------
# The table itself.
