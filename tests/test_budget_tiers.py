"""train.budget_tiers: the recipe a time budget affords, chosen from the budget's compute
(minutes x the host's measured matmul rate), never from the minutes alone."""

from __future__ import annotations

import pytest

from nmtkit.config import load
from nmtkit.config.checks import ConfigError
from nmtkit.config.tiers import Tier, as_before, by_host_rate, parse_tiers
from nmtkit.fast.host_rate import matmul_gflops

LADDER = [{"gflop": 200_000, "recipe": "multi30k_transformer_hour"},
          {"gflop": 2_000_000, "recipe": "big"}]


def test_tiers_parse_in_order():
    assert parse_tiers(LADDER, "r.yaml") == (Tier(200_000.0, "multi30k_transformer_hour"),
                                             Tier(2_000_000.0, "big"))
    assert parse_tiers(None, "r.yaml") == () and parse_tiers([], "r.yaml") == ()


@pytest.mark.parametrize("value, problem", [
    ({"gflop": 1, "recipe": "x"}, "must be a list"),
    ([{"gflop": 1}], "exactly the keys gflop and recipe"),
    ([{"gflop": 1, "recipe": "x", "extra": 2}], "exactly the keys gflop and recipe"),
    ([{"gflop": -5, "recipe": "x"}], "budget_tiers[0].gflop: a positive number"),
    ([{"gflop": True, "recipe": "x"}], "a positive number"),
    ([{"gflop": float("nan"), "recipe": "x"}], "a positive number"),
    ([{"gflop": 10, "recipe": ""}], "budget_tiers[0].recipe"),
    ([{"gflop": 10, "recipe": "a"}, {"gflop": 10, "recipe": "b"}], "must be above the entry"),
    ([{"gflop": i + 1, "recipe": "a"} for i in range(17)], "at most 16"),
])
def test_bad_tiers_are_refused_with_the_entry_named(value, problem):
    with pytest.raises(ConfigError, match="r.yaml") as e:
        parse_tiers(value, "r.yaml")
    assert problem in str(e.value)


def test_the_budget_in_work_chooses_the_tier():
    tiers = parse_tiers(LADDER, "r.yaml")
    # 10 minutes of a 2-core AVX2 host (128 GFLOP/s): 76,800 GFLOP, the recipe as it is
    small = by_host_rate(lambda: 128.0)(tiers, 10)
    assert small.tier is None and "76,800 GFLOP of budget" in small.reason
    # the same minutes on a host 3x as fast afford the next tier ...
    assert by_host_rate(lambda: 384.0)(tiers, 10).tier == tiers[0]
    # ... and so do more minutes on the slow host; the boundary belongs to the larger tier
    assert by_host_rate(lambda: 128.0)(tiers, 30).tier == tiers[0]
    assert by_host_rate(lambda: 100.0)(tiers, 2_000_000 / 60 / 100.0).tier == tiers[1]
    with pytest.raises(ValueError, match="positive"):
        by_host_rate(lambda: 0.0)(tiers, 10)


def test_a_resumed_run_keeps_its_tier_whatever_the_host_measures_now():
    tiers = parse_tiers(LADDER, "r.yaml")
    assert as_before("multi30k_transformer_hour")(tiers, 10).tier == tiers[0]
    assert as_before("multi30k_transformer_quick")(tiers, 60).tier is None


def test_the_host_rate_is_measured_within_its_time():
    rate = matmul_gflops(repeats=1, budget_s=0.5)
    assert 0.5 < rate < 1e6  # GFLOP/s of any CPU of the last 20 years, busy or not


def _pick(rate: float):
    return by_host_rate(lambda: rate)


def test_the_quick_recipe_trains_the_hour_recipe_when_the_budget_buys_it():
    """The main job's choice, made by the library: 10 and 40 minutes of a 2-core AVX2 host keep
    the narrow model (at 40 it measured 7 BLEU ahead of width 256), 100 of them (or 10 of a
    host 10x as fast) the hour recipe's width 256; the user's --set values (the language pair,
    the minutes) reach the chosen recipe."""
    sets = ["data.src_lang=en", "data.tgt_lang=de"]
    for minutes in (10, 40):
        kept = load("multi30k_transformer_quick", [*sets, f"train.max_minutes={minutes}"],
                    _pick(128.0))
        assert (kept.name, kept.model.d_model, kept.data.src_lang) == (
            "multi30k_transformer_quick", 128, "en")
    for minutes, rate in ((100, 128.0), (10, 1280.0)):
        big = load("multi30k_transformer_quick", [*sets, f"train.max_minutes={minutes}"], _pick(rate))
        assert (big.name, big.model.d_model, big.data.src_lang) == ("multi30k_transformer_hour", 256, "en")
        assert big.train.max_minutes == minutes and big.data.tgt_lang == "de"
    # without a picker (Python callers, evaluate) or with the tiers emptied: the recipe as it is
    assert load("multi30k_transformer_quick", ["train.max_minutes=600"]).model.d_model == 128
    assert load("multi30k_transformer_quick", ["train.max_minutes=600", "train.budget_tiers=[]"],
                _pick(1000.0)).model.d_model == 128


def test_a_tier_names_a_recipe_beside_its_own_and_bad_tiers_are_refused(tmp_path):
    (tmp_path / "big.yaml").write_text("name: big\nmodel: {arch: transformer, d_model: 64}\n")
    small = tmp_path / "small.yaml"
    small.write_text("model: {arch: transformer, d_model: 32}\ntrain:\n  max_minutes: 5\n"
                     "  budget_tiers: [{gflop: 1000, recipe: big.yaml}]\n")
    assert load(small, [], _pick(1.0)).model.d_model == 32  # 300 GFLOP
    assert load(small, [], _pick(10.0)).model.d_model == 64  # 3,000 GFLOP
    small.write_text("train:\n  max_minutes: 5\n  budget_tiers: [{gflop: 1000, recipe: gone.yaml}]\n")
    with pytest.raises(ConfigError, match="gone.yaml"):
        load(small, [], _pick(10.0))
    small.write_text("train:\n  budget_tiers: [{gflop: 0, recipe: big.yaml}]\n")
    with pytest.raises(ConfigError, match=r"small.yaml: train.budget_tiers\[0\].gflop"):
        load(small)


@pytest.mark.slow
def test_nmtkit_train_measures_the_host_for_a_new_run_and_keeps_a_resumed_runs_recipe(copy_run):
    """The command's choice: ``--resume`` in a run directory takes the tier its last.pt was
    trained with (``copy_task`` here) however little the host measures now; a new run
    measures the host (a tier of 10^12 GFLOP is out of reach of 10 minutes of any CPU)."""
    from nmtkit.cli.train import tier_picker
    from nmtkit.train.start import Start

    tiers = parse_tiers([{"gflop": 1e12, "recipe": "copy_task"}], "r.yaml")
    assert tier_picker(Start.resume(), str(copy_run))(tiers, 10).tier == tiers[0]
    fresh = tier_picker(Start.scratch(), str(copy_run))(tiers, 10)
    assert fresh.tier is None and "GFLOP/s" in fresh.reason
