"""A YAML recipe read into a :class:`~nmtkit.config.run.Config`: ``--set section.key=value``
overrides are applied before validation, so an impossible run fails before any work starts.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from .checks import ConfigError
from .run import Config, check_installed


def parse_override(item: str) -> tuple[list[str], Any]:
    """``a.b=c`` -> (["a", "b"], YAML-parsed c)."""
    if "=" not in item:
        raise ConfigError(f"--set {item!r}: expected section.key=value")
    key, value = item.split("=", 1)
    path = key.strip().split(".")
    if not all(p.strip() for p in path):
        raise ConfigError(f"--set {item!r}: expected section.key=value")
    try:
        parsed = _yaml(value) if value != "" else ""
    except yaml.YAMLError as e:
        first = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise ConfigError(f"--set {item!r}: the value is not valid YAML ({first})") from None
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
                raise ConfigError(f"--set {item!r}: {p} is not a section")
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
                    None, None, f"duplicate key {key!r} (first given on line {first[key] + 1})",
                    key_node.start_mark)
            first[key] = key_node.start_mark.line
        mapping: dict[Any, Any] = super().construct_mapping(node, deep)
        return mapping


def _yaml(text: str) -> Any:
    return yaml.load(text, Loader=_RecipeLoader)  # noqa: S506  (a SafeLoader subclass)


def load(path: str | Path, overrides: list[str] | None = None) -> Config:
    """Read a YAML recipe, apply ``--set`` overrides, validate."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{path}: config file not found") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not a UTF-8 text file (a YAML recipe was expected)") from None
    except OSError as e:  # a directory, no permission
        raise ConfigError(f"{path}: cannot read the config file: {e.strerror or e}") from None
    try:
        raw = _yaml(text) or {}
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)  # one line: file:line: the problem
        where = f"{path}:{mark.line + 1}" if mark is not None else str(path)
        problem = " ".join(filter(None, (getattr(e, "context", None), getattr(e, "problem", None))))
        raise ConfigError(f"{where}: invalid YAML: {problem or e}") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: top level must be a mapping of sections (data, model, "
                          f"train, decode), got a {type(raw).__name__}")
    raw = apply_overrides(raw, overrides or [])
    if "name" not in raw:
        raw["name"] = path.stem
    cfg = Config.from_dict(raw, str(path))
    check_installed(cfg, str(path))
    return cfg
