"""What a time budget affords: a recipe's ``train.budget_tiers`` choose a larger recipe when
the budget buys more compute.

A minute of a 2-core laptop and a minute of a 64-core server do not buy the same model. The
budget is measured in the work the host can do: ``train.max_minutes`` x 60 x the host's
measured float32 matrix-product rate (GFLOP/s), in GFLOP. A recipe lists, smallest first,
the budgets from which another recipe trains instead::

    train:
      max_minutes: 10
      budget_tiers:
        - gflop: 230000                     # from 230,000 GFLOP of budget on ...
          recipe: multi30k_transformer_hour  # ... this recipe (its model, batches, rates)

The recipe itself is the smallest budget's choice. The chosen recipe is read with the same
``--set`` overrides (the language pair, the minutes), so a user's explicit values always
win; its own tiers are not followed again. The rule follows the budgeted-training findings
the recipes were tuned on: a short budget learns most from a narrow model and many small
updates, a long one from a wider model (Li et al. 2020, "Budgeted Training"; Araabi & Monz
2020 on small-data Transformers; the measurements are in docs/ablations.md).

This module only decides; the rate is measured above (:mod:`nmtkit.fast.host_rate`) and
passed in as a function, called only when a recipe has tiers and a time budget.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .checks import ConfigError
from .limits import brief

MAX_TIERS = 16
"""Tiers a recipe may list: a handful of model sizes is what any budget ladder needs."""


@dataclass(frozen=True)
class Tier:
    """From ``gflop`` of budget on, train ``recipe`` (a packaged recipe's name or a path)."""

    gflop: float
    recipe: str


@dataclass(frozen=True)
class TierChoice:
    """A decision and why (one log line): the tier chosen, None for the recipe as it is."""

    tier: Tier | None
    reason: str


TierPicker = Callable[[tuple[Tier, ...], float], TierChoice]
"""Chooses among a recipe's tiers (never empty) for a budget of so many minutes (> 0)."""


def parse_tiers(value: Any, where: str) -> tuple[Tier, ...]:
    """``train.budget_tiers`` as read from YAML -> tiers; a ConfigError names the entry and
    its problem. They must be listed by increasing ``gflop``."""
    if value is None:
        return ()
    if not isinstance(value, list):
        raise ConfigError(f"{where}: train.budget_tiers must be a list of {{gflop, recipe}} "
                          f"entries, got {brief(value)}")
    if len(value) > MAX_TIERS:
        raise ConfigError(f"{where}: train.budget_tiers has {len(value)} entries; at most "
                          f"{MAX_TIERS}")
    tiers: list[Tier] = []
    for i, entry in enumerate(value):
        name = f"{where}: train.budget_tiers[{i}]"
        if not isinstance(entry, dict) or set(entry) != {"gflop", "recipe"}:
            raise ConfigError(f"{name}: expected exactly the keys gflop and recipe, got "
                              f"{brief(entry)}")
        gflop, recipe = entry["gflop"], entry["recipe"]
        if isinstance(gflop, bool) or not isinstance(gflop, (int, float)) \
                or not math.isfinite(gflop) or gflop <= 0:
            raise ConfigError(f"{name}.gflop: a positive number of GFLOP, got {brief(gflop)}")
        if not isinstance(recipe, str) or not recipe.strip():
            raise ConfigError(f"{name}.recipe: a recipe's name or path, got {brief(recipe)}")
        if tiers and gflop <= tiers[-1].gflop:
            raise ConfigError(f"{name}.gflop: {gflop:g} must be above the entry before it "
                              f"({tiers[-1].gflop:g}): tiers go from small budgets to large")
        tiers.append(Tier(float(gflop), recipe))
    return tuple(tiers)


def by_host_rate(rate_gflops: Callable[[], float]) -> TierPicker:
    """A fresh run's choice: the budget in work, ``minutes`` x 60 x ``rate_gflops()`` (the
    host's measured float32 matmul rate, GFLOP/s, measured only when there is a choice to
    make), affords the last tier whose ``gflop`` it reaches."""
    def pick(tiers: tuple[Tier, ...], minutes: float) -> TierChoice:
        rate = rate_gflops()
        if not math.isfinite(rate) or rate <= 0:
            raise ValueError(f"a measured matmul rate must be positive, got {rate!r}")
        budget = minutes * 60.0 * rate
        chosen = None
        for tier in tiers:
            if budget >= tier.gflop:
                chosen = tier
        said = (f"{minutes:g} min x {rate:.1f} GFLOP/s = {budget:,.0f} GFLOP of budget "
                f"(tiers from {tiers[0].gflop:,.0f})")
        return TierChoice(chosen, said)
    return pick


def as_before(recipe_name: str) -> TierPicker:
    """A resumed run's choice: the tier whose recipe is named ``recipe_name`` (the name its
    checkpoint's config holds), whatever the host measures now; none of them: the recipe
    as it is."""
    def pick(tiers: tuple[Tier, ...], minutes: float) -> TierChoice:
        chosen = next((t for t in tiers if Path(t.recipe).stem == recipe_name), None)
        return TierChoice(chosen, f"as the run being resumed ({recipe_name})")
    return pick
