"""A mapping (a YAML recipe, a checkpoint's stored config, decoding options) read into a
section's dataclass: every key must name a field (an unknown key is an error, not silently
ignored) and every value is checked against the field's type, with mild numeric coercion.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import Any, cast

from .checks import ConfigError


def _coerce(value: Any, tp: Any, where: str, source: str) -> Any:
    """Check ``value`` against the annotated type ``tp`` (with mild numeric coercion)."""
    origin = typing.get_origin(tp)
    if tp is bool:
        if isinstance(value, bool):
            return value
    elif tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
    elif tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, str):  # YAML 1.1 reads ``1e-3`` (no dot) as a string
            try:
                return float(value)
            except ValueError:
                pass
    elif tp is str:
        if isinstance(value, str):
            return value
    elif origin is tuple:
        args = typing.get_args(tp)
        if len(args) == 2 and args[1] is Ellipsis:  # tuple[str, ...]: a YAML list of any length
            if isinstance(value, (list, tuple)) and dataclasses.is_dataclass(args[0]):
                entry = cast(type, args[0])  # a list of small sections (``data.extra``)
                return tuple(build_section(entry, v, source, f"{where}[{i}].")
                             for i, v in enumerate(value))
            if isinstance(value, (list, tuple)):
                return tuple(_coerce(v, args[0], where, source) for v in value)
            raise ConfigError(f"{source}: {where}: expected a list of {args[0].__name__}, "
                              f"got {value!r}")
        if isinstance(value, (list, tuple)) and len(value) == len(args):
            return tuple(_coerce(v, a, where, source) for v, a in zip(value, args, strict=True))
    elif origin in (types.UnionType, typing.Union):
        for a in typing.get_args(tp):
            try:
                return _coerce(value, a, where, source)
            except ConfigError:
                continue
    raise ConfigError(f"{source}: {where}: expected {getattr(tp, '__name__', tp)}, got {value!r}")


def build_section(cls: type, raw: Any, source: str, prefix: str = "") -> Any:
    """The dataclass ``cls`` (a section such as :class:`~nmtkit.config.decode.DecodeConfig`,
    or the whole :class:`~nmtkit.config.run.Config`) from the mapping ``raw``: names and types
    checked (an error names ``source`` and the key, after ``prefix``: ``"decode."``); the
    values themselves are checked by the section's ``validate``, which this does not call."""
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ConfigError(f"{source}: {prefix or 'top level'}: expected a mapping, got {raw!r}")
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(str(k) for k in set(raw) - names)
    if unknown:
        raise ConfigError(
            f"{source}: unknown key(s) {', '.join(prefix + k for k in unknown)}; "
            f"known: {', '.join(sorted(names))}"
        )
    kwargs = {}
    for name, value in raw.items():
        tp = hints[name]
        if dataclasses.is_dataclass(tp):
            kwargs[name] = build_section(cast(type, tp), value, source, f"{prefix}{name}.")
        else:
            if isinstance(value, bool) and prefix + name in LEGACY_BOOLEANS:
                value = LEGACY_BOOLEANS[prefix + name][value]
            kwargs[name] = _coerce(value, tp, prefix + name, source)
    return cls(**kwargs)


LEGACY_BOOLEANS: dict[str, dict[bool, str]] = {"train.amp": {True: "bf16", False: "off"}}
"""Keys that were booleans before they took a word: what the old values mean now (older
checkpoints store the boolean in their config, and must still load)."""
