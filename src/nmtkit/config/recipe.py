"""A YAML recipe read into a :class:`~nmtkit.config.run.Config`: ``--set section.key=value``
overrides are applied before validation, so an impossible run fails before any work starts.

The recipes of the repository's ``configs/`` ship inside the package (``nmtkit/recipes/``,
package data; ``configs`` is a link to it), so an installed nmtkit finds them by name:
:func:`find_recipe` takes a path or a name (``copy_task``), :func:`packaged_recipes` lists them.
"""

from __future__ import annotations

import logging
import os
import stat
import textwrap
from importlib.resources import files
from pathlib import Path
from typing import Any

import yaml

from .checks import ConfigError
from .limits import MAX_CONFIG_DEPTH, MAX_RECIPE_BYTES, brief
from .run import Config, check_installed
from .tiers import TierPicker, parse_tiers

log = logging.getLogger(__name__)


def parse_override(item: str) -> tuple[list[str], Any]:
    """``a.b=c`` -> (["a", "b"], YAML-parsed c)."""
    if "=" not in item:
        raise ConfigError(f"--set {brief(item)}: expected section.key=value")
    key, value = item.split("=", 1)
    path = key.strip().split(".")
    if not all(p.strip() for p in path):
        raise ConfigError(f"--set {brief(item)}: expected section.key=value")
    try:
        parsed = _yaml(value, f"--set {brief(item)}") if value != "" else ""
    except yaml.YAMLError as e:
        first = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise ConfigError(f"--set {brief(item)}: the value is not valid YAML ({first})") from None
    return path, parsed


def apply_overrides(raw: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    for item in overrides:
        path, value = parse_override(item)
        node = raw
        for p in path[:-1]:
            if node.get(p) is None:  # absent, or an empty section in YAML (``train:``)
                node[p] = {}
            node = node[p]
            if not isinstance(node, dict):
                raise ConfigError(f"--set {brief(item)}: {p} is not a section")
        node[path[-1]] = value
    return raw


class _RecipeLoader(yaml.SafeLoader):  # type: ignore[misc]  # PyYAML has no type hints
    """YAML's safe loader, except that a key given twice in one mapping is an error (the
    later value would silently win: two ``lr:`` lines in ``train``, the second forgotten)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        first: dict[Any, int] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            try:
                seen = key in first
            except TypeError:  # an unhashable key: the safe loader's own error says so
                break
            if seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {brief(key)} (first given on line {first[key] + 1})",
                    key_node.start_mark)
            first[key] = key_node.start_mark.line
        mapping: dict[Any, Any] = super().construct_mapping(node, deep)
        return mapping


def _yaml(text: str, where: str) -> Any:
    """The YAML ``text`` as Python values, once its nesting is known to be within
    :data:`~nmtkit.config.limits.MAX_CONFIG_DEPTH` (PyYAML builds nested values recursively:
    a list nested 200,000 deep would end in a ``RecursionError``; its parser is not
    recursive, so its events are counted first). Aliases are not expanded here: a "billion
    laughs" is refused by its size when the config is read (:func:`check_shape`)."""
    depth = 0
    for event in yaml.parse(text, Loader=_RecipeLoader):
        if isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
            depth += 1
            if depth > MAX_CONFIG_DEPTH:
                line = event.start_mark.line + 1
                raise ConfigError(f"{where}:{line}: the YAML is nested more than {MAX_CONFIG_DEPTH} "
                                  "levels deep (mappings and lists within each other): not a config")
        elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
            depth -= 1
    try:
        return yaml.load(text, Loader=_RecipeLoader)  # noqa: S506  (a SafeLoader subclass)
    except ValueError as e:  # int() of a number of over 4,300 digits: Python refuses it
        raise ConfigError(f"{where}: a number YAML cannot read ({str(e).split(':')[0]}): no "
                          "setting needs one of thousands of digits") from None


RECIPE_SUFFIX = ".yaml"


def recipes_dir() -> Path:
    """The packaged recipes' folder, ``nmtkit/recipes`` (package data, no module: a file-system
    install, as pip makes, gives a real directory)."""
    return Path(str(files("nmtkit") / "recipes"))


def packaged_recipes() -> dict[str, Path]:
    """Every packaged recipe by name (its file name without ``.yaml``), sorted by name."""
    folder = recipes_dir()
    found = sorted(folder.glob(f"*{RECIPE_SUFFIX}")) if folder.is_dir() else []
    return {p.name[:-len(RECIPE_SUFFIX)]: p for p in found}


def find_recipe(name_or_path: str | Path) -> Path:
    """The recipe that ``name_or_path`` names: a file that exists wins; else the packaged
    recipe of that name (``copy_task``, or ``copy_task.yaml`` without a folder); else a
    :class:`ConfigError` that lists the packaged names (and, for a missing ``configs/NAME.yaml``
    of a packaged NAME, says to give the name)."""
    path = Path(name_or_path)
    if path.exists():
        return path
    name = str(name_or_path)
    name = name[:-len(RECIPE_SUFFIX)] if name.endswith(RECIPE_SUFFIX) else name
    recipes = packaged_recipes()
    if path.parent == Path(".") and name in recipes:
        return recipes[name]
    if path.name.removesuffix(RECIPE_SUFFIX) in recipes:
        raise ConfigError(f"{path}: config file not found; the packaged recipe of that name is "
                          f"used by its name: {path.name.removesuffix(RECIPE_SUFFIX)}")
    listed = ", ".join(recipes) if recipes else "none (nmtkit/recipes is missing)"
    raise ConfigError(f"{path}: config file not found, and no packaged recipe has that name "
                      f"(packaged recipes: {listed}; nmtkit train --list describes them)")


def recipe_purpose(path: Path, longest: int = 100) -> str:
    """What a recipe is for: the first sentence of the comment that opens it (its lines up
    to the first example command or blank comment line; a sentence ends at a full stop
    outside parentheses; the stop left out), cut at its first colon outside parentheses where it runs over
    ``longest`` characters (what follows the colon details the shape); "" for a recipe that
    opens without a comment."""
    words: list[str] = []
    for line in path.read_text(encoding="utf-8").splitlines():
        text = line[1:] if line.startswith("#") else None
        if text is None or not text.strip() or text.startswith("  ") or \
                text.strip().startswith("nmtkit "):
            break
        words.append(text.strip())
    sentence, depth, colon = " ".join(words), 0, None
    for i, char in enumerate(sentence):
        depth += {"(": 1, ")": -1}.get(char, 0)
        at_end = sentence[i + 1:i + 2] in ("", " ")
        if char == "." and depth == 0 and at_end:
            sentence = sentence[:i]
            break
        if char == ":" and depth == 0 and at_end and colon is None:
            colon = i
    if len(sentence) > longest and colon is not None:
        return sentence[:colon]
    return sentence.rstrip(":,;")


def describe_recipes(width: int = 100) -> str:
    """``nmtkit train --list``: one packaged recipe a line, its name and what it is for."""
    recipes = packaged_recipes()
    column = max(map(len, recipes), default=0) + 2
    return "\n".join(textwrap.fill(recipe_purpose(path), width, initial_indent=name.ljust(column),
                                   subsequent_indent=" " * column) if recipe_purpose(path)
                     else name for name, path in recipes.items())


def read_small_file(path: str | Path, limit: int, what: str) -> bytes:
    """The bytes of ``path``, a regular file of at most ``limit`` bytes (``what`` names it in
    the messages: "a recipe"); otherwise a :class:`ConfigError` naming the file
    and the limit, at once: a device (``/dev/zero`` would be read until memory runs out), a
    FIFO (opened without waiting for a writer, which would hang), a socket, a directory, a
    file over the limit (also one that grows past it while read). ``FileNotFoundError`` and
    other ``OSError`` are raised as they are."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        kind = ("a directory" if stat.S_ISDIR(st.st_mode) else "a FIFO (named pipe)"
                if stat.S_ISFIFO(st.st_mode) else "a device")
        raise ConfigError(f"{path} is {kind}: {what} must be a regular file")
    with os.fdopen(fd, "rb") as f:
        data = f.read(limit + 1) if st.st_size <= limit else b""
    if st.st_size > limit or len(data) > limit:
        raise ConfigError(f"{path}: over {limit:,} bytes, the most that {what} may have")
    return data


def load(path: str | Path, overrides: list[str] | None = None,
         pick_tier: TierPicker | None = None) -> Config:
    """Read a YAML recipe (a path, or the name of a packaged recipe: :func:`find_recipe`),
    apply ``--set`` overrides, validate.

    ``train.budget_tiers`` (:mod:`nmtkit.config.tiers`) is a choice between recipes, not a
    setting: with ``pick_tier`` (``nmtkit train`` passes one that measures the host) and a
    time budget, the recipe of the tier it picks is read instead, with the same overrides;
    without, the recipe as it is."""
    path = find_recipe(path)
    try:  # (a device, a FIFO, a file over the size limit: a ConfigError)
        text = read_small_file(path, MAX_RECIPE_BYTES, "a recipe").decode("utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{path}: config file not found") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not a UTF-8 text file (a YAML recipe was expected)") from None
    except OSError as e:  # no permission, a socket
        raise ConfigError(f"{path}: cannot read the config file: {e.strerror or e}") from None
    try:
        raw = _yaml(text, str(path)) or {}
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)  # one line: file:line: the problem
        where = f"{path}:{mark.line + 1}" if mark is not None else str(path)
        problem = " ".join(filter(None, (getattr(e, "context", None), getattr(e, "problem", None))))
        raise ConfigError(f"{where}: invalid YAML: {problem or e}") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: top level must be a mapping of sections (data, model, "
                          f"train, decode), got a {type(raw).__name__}")
    raw = apply_overrides(raw, overrides or [])
    train = raw.get("train")
    tiers = parse_tiers(train.pop("budget_tiers", None) if isinstance(train, dict) else None,
                        str(path))
    if "name" not in raw:
        raw["name"] = path.stem
    cfg = Config.from_dict(raw, str(path))
    check_installed(cfg, str(path))
    if pick_tier is None or not tiers or cfg.train.max_minutes <= 0:
        return cfg
    choice = pick_tier(tiers, cfg.train.max_minutes)
    if choice.tier is None:
        log.info("train.budget_tiers: %s: %s as it is", choice.reason, cfg.name)
        return cfg
    log.info("train.budget_tiers: %s: trains %s instead of %s", choice.reason,
             choice.tier.recipe, cfg.name)
    chosen = choice.tier.recipe
    if chosen.endswith((".yaml", ".yml")) and not Path(chosen).is_absolute():
        chosen = str(path.parent / chosen)  # a path: beside the recipe that names it
    return load(chosen, overrides)  # (no pick_tier: the chosen recipe's own tiers are not followed)
