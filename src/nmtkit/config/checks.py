"""The checks a section makes of its own values, and the error they raise.

Every message starts with the source (a recipe file, ``--set``, a checkpoint) and names the
key in full (``model.d_model``), so a bad value is found where it was written.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator
from typing import Any

from ..errors import UserError
from .limits import brief


class ConfigError(UserError):
    """A configuration that cannot describe a valid run."""


MAX_SEED = (1 << 63) - 1
"""The largest seed a torch random generator takes (``decode.sampling_seed``, ``train.seed``)."""


class Checks:
    """The checks one section makes of its own values. Every message starts with the source
    file and names the key in full (``model.d_model``)."""

    def __init__(self, section: Any, name: str, source: str):
        self.section, self.name, self.source = section, name, source

    def require(self, cond: bool, msg: str) -> None:
        if not cond:
            raise ConfigError(f"{self.source}: {msg}")

    def _each(self, names: tuple[str, ...]) -> Iterator[tuple[str, Any]]:
        for name in names:
            yield f"{self.name}.{name}", getattr(self.section, name)

    def finite(self) -> None:
        """Every float field is a finite number (NaN and inf are never a meaningful setting)."""
        names = tuple(f.name for f in dataclasses.fields(self.section))
        for key, value in self._each(names):
            values = value if isinstance(value, tuple) else (value,)
            self.require(all(not isinstance(v, float) or math.isfinite(v) for v in values),
                         f"{key} must be a finite number, got {brief(value)}")

    def one_of(self, name: str, allowed: tuple[str, ...]) -> None:
        value = getattr(self.section, name)
        self.require(value in allowed, f"{self.name}.{name} must be {'|'.join(allowed)}, got {brief(value)}")

    def at_least(self, low: int, *names: str) -> None:
        for key, value in self._each(names):
            self.require(value >= low, f"{key} must be >= {low}, got {brief(value)}")

    def at_most(self, high: float, *names: str) -> None:
        for key, value in self._each(names):  # (a float bound as 1000, an integer one in full)
            self.require(value <= high, f"{key} must be <= {high:g}, got {value:g}"
                         if isinstance(high, float) else f"{key} must be <= {high}, got {brief(value)}")

    def within(self, limit: int | float, *names: str) -> None:
        """Sizes under one of :mod:`nmtkit.config.limits` (checked before the other checks of
        the section, so that nothing is computed from a value past its limit)."""
        shown = f"{limit:,}" if isinstance(limit, int) else f"{limit:g}"
        for key, value in self._each(names):
            values = value if isinstance(value, tuple) else (value,)
            self.require(all(v <= limit for v in values),
                         f"{key} must be at most {shown} (a limit of nmtkit's, far above real "
                         f"use: nmtkit.config.limits), got {brief(value)}")

    def positive(self, *names: str) -> None:
        for key, value in self._each(names):
            self.require(value > 0, f"{key} must be > 0, got {brief(value)}")

    def fraction(self, *names: str) -> None:
        """In [0, 1): a dropout or smoothing probability."""
        for key, value in self._each(names):
            self.require(0.0 <= value < 1.0, f"{key} must be in [0, 1), got {value}")

    def in_unit_interval(self, *names: str) -> None:
        for key, value in self._each(names):
            self.require(0.0 <= value <= 1.0, f"{key} must be in [0, 1], got {value}")
