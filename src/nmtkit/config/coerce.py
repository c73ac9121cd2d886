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
from .limits import MAX_INTEGER, brief, check_shape


def _coerce(value: Any, tp: Any, where: str, source: str) -> Any:
    """Check ``value`` against the annotated type ``tp`` (with mild numeric coercion)."""
    origin = typing.get_origin(tp)
    if tp is bool:
        if isinstance(value, bool):
            return value
    elif tp is int:
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if isinstance(value, int) and not isinstance(value, bool):
            if abs(value) > MAX_INTEGER:  # before any message writes it out in full
                raise ConfigError(f"{source}: {where}: {brief(value)} is out of range: no "
                                  f"setting needs an integer beyond +-{MAX_INTEGER}")
            return value
    elif tp is float:
        if isinstance(value, (int, float, str)) and not isinstance(value, bool):
            try:  # a string: YAML 1.1 reads ``1e-3`` (no dot) as one
                return float(value)
            except ValueError:
                pass
            except OverflowError:  # an integer of hundreds of digits
                raise ConfigError(f"{source}: {where}: {brief(value)} is out of range: not "
                                  "a finite number") from None
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
                              f"got {brief(value)}")
        if isinstance(value, (list, tuple)) and len(value) == len(args):
            return tuple(_coerce(v, a, where, source) for v, a in zip(value, args, strict=True))
    elif origin in (types.UnionType, typing.Union):
        for a in typing.get_args(tp):
            try:
                return _coerce(value, a, where, source)
            except ConfigError:
                continue
    raise ConfigError(f"{source}: {where}: expected {getattr(tp, '__name__', tp)}, got {brief(value)}")


def _key_name(key: Any) -> str:
    """A key as an error message names it: a string without its quotes (escaped, cut short),
    anything else (a YAML number or list as a key) by its bounded ``repr``."""
    text = brief(key)
    return text[1:-1] if isinstance(key, str) and text[-1:] in ("'", '"') else text


def build_section(cls: type, raw: Any, source: str, prefix: str = "") -> Any:
    """The dataclass ``cls`` (a section such as :class:`~nmtkit.config.decode.DecodeConfig`,
    or the whole :class:`~nmtkit.config.run.Config`) from the mapping ``raw``: names and types
    checked (an error names ``source`` and the key, after ``prefix``: ``"decode."``); the
    values themselves are checked by the section's ``validate``, which this does not call."""
    if raw is None:
        raw = {}
    too_big = check_shape(raw, source) if not prefix else None  # the whole, before any value
    if too_big:
        raise ConfigError(too_big)
    if not isinstance(raw, dict):
        raise ConfigError(f"{source}: {prefix or 'top level'}: expected a mapping, got {brief(raw)}")
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(_key_name(k) for k in set(raw) - names)
    if unknown:
        more = f" and {len(unknown) - 5} more" if len(unknown) > 5 else ""
        raise ConfigError(
            f"{source}: unknown key(s) {', '.join(prefix + k for k in unknown[:5])}{more}; "
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
