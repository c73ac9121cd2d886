"""Every figure the guide states about a run is the figure of that run's JSON.

Each claim below is a phrase of docs/guide.src.md with its numbers formatted from the files
in benchmarks/results/ (the guide's line breaks and blockquote marks do not matter). A run
whose numbers change, or a guide whose numbers are edited by hand, fails here until the two
agree again.
"""

from __future__ import annotations

import csv
import json
import re
from functools import cache

import pytest

from .helpers import ROOT

RESULTS = ROOT / "benchmarks" / "results"


@cache
def _json(name: str) -> dict:
    data: dict = json.loads((RESULTS / name).read_text(encoding="utf-8"))
    return data


def value(name: str, *path: str | int) -> float:
    """The number at ``path`` (keys and list indices) of benchmarks/results/``name``."""
    node: object = _json(name)
    for key in path:
        node = node[key]  # type: ignore[index]
    return float(node)  # type: ignore[arg-type]


def last_tokens(run: str) -> int:
    """Target tokens trained on at the last row of a saved run's metrics.csv."""
    with open(RESULTS / run / "metrics.csv", encoding="utf-8") as f:
        return int(list(csv.DictReader(f))[-1]["tgt_tokens"])


def guide_text() -> str:
    """The guide's source as one line: blockquote marks dropped, whitespace runs as one space."""
    text = (ROOT / "docs" / "guide.src.md").read_text(encoding="utf-8")
    text = re.sub(r"^> ?", "", text, flags=re.M)
    return re.sub(r"\s+", " ", text)


SMALL_700 = "multi30k_small_700steps_eval_cpu_2026-11-24.json"
NOAM_1 = "multi30k_small_1h_cpu_2026-11-22.json"
NOAM_2 = "multi30k_small_1h_cpu_2026-11-22_run2.json"
BUDGET = "multi30k_1h_budget_cpu_2026-11-25.json"
SEEDS = "multi30k_hour_seeds_cpu_2026-11-25.json"
HOMEWORK = "homework_rnn_vs_transformer_cpu_2026-12-06/summary.json"
CURVES = "curves_rnn_vs_transformer_cpu_2026-11-24/summary.json"


def claims() -> dict[str, str]:
    """name -> the phrase the guide must contain, its numbers read from the JSON."""
    noam1 = value(NOAM_1, "test_2016_flickr", "best.pt_beam5", "bleu")
    noam1_steps = int(value(NOAM_1, "training", "steps"))
    noam2 = value(NOAM_2, "test_2016_flickr_beam5", "best.pt (step 2000, best validation BLEU)",
                  "bleu")
    noam2_steps = int(value(NOAM_2, "training", "steps"))
    budget = value(BUDGET, "runs", 0, "checkpoints", "best.pt", "test", "bleu")
    budget_steps = int(value(BUDGET, "runs", 0, "updates"))
    small = [value(SMALL_700, "result", k) for k in ("bleu", "chrf", "bleu_lc_tok",
                                                     "bleu_official_tok")]
    trained = re.search(r"(\d+) s on a CPU", _json(SMALL_700)["model_trained_by"])
    assert trained is not None
    by_ckpt = _json(SEEDS)["mean_over_seeds_by_checkpoint"]
    avg_below = by_ckpt["best.pt"]["val"] - by_ckpt["avg3.pt"]["val"]
    hw, tf = (_json(HOMEWORK)["runs"][k] for k in ("homework", "transformer"))

    def row(run: dict) -> str:
        g = run["greedy"]["test_2016_flickr"]
        return (f"| {run['train']['step']:,} ({run['train']['epoch']}) | {g['bleu_lc_tok']:.2f} "
                f"| {g['bleu']:.2f} | {g['chrf']:.1f} |")

    def per_update(run: dict) -> str:
        return f"{run['train']['elapsed_s'] / run['train']['step']:.2f} s"

    return {
        "section 16: the 700-update run's evaluation":
            f'{{"bleu": {small[0]:.2f}, "chrf": {small[1]:.2f}, "bleu_lc_tok": {small[2]:.2f}, '
            f'..., "n": 1000, "bleu_official_tok": {small[3]:.2f}',
        "section 16: its training time":
            f"After 700 updates ({int(trained[1]) / 60:.0f} minutes on a 2-core CPU)",
        "section 16: the two Noam hours":
            f"the same recipe scored {noam2:.2f} in one run and {noam1:.2f} in another",
        "section 18: 700 updates": f"| small recipe, 700 updates (section 16) | {small[0]:.2f} |",
        "section 18: the first Noam hour":
            f"a first run ({noam1_steps:,} updates; other jobs shared the processor) | {noam1:.2f} |",
        "section 18: the second Noam hour":
            f"the same, a second run ({noam2_steps:,} updates) | {noam2:.2f} |",
        "section 18: the budget hour":
            f"one hour, budget schedule ({budget_steps:,} updates) | {budget:.2f} |",
        "section 18: three seeds":
            f"mean ± standard deviation | "
            f"{value(SEEDS, 'single_model_chosen_on_val', 'test_mean'):.2f} ± "
            f"{value(SEEDS, 'single_model_chosen_on_val', 'test_stdev'):.2f} |",
        "section 18: the ensemble":
            f"one ensemble ([handbook](handbook.md#ensembles)) | "
            f"{value(SEEDS, 'ensemble', 'test', 'bleu'):.2f} |",
        "section 12: the budget hour":
            f"that recipe scored {budget:.2f} BLEU (test_2016_flickr, {budget_steps:,} updates)",
        "section 12: the Noam hour":
            f"the Noam schedule scored {noam2:.2f} ({noam2_steps:,} updates",
        "section 17: averaging": f"the last three scored {avg_below:.1f} BLEU below `best.pt` on val",
        "section 19: the figures' run":
            f"({noam1:.2f} BLEU, `benchmarks/results/{NOAM_1}`; the second, {noam2:.2f}, is "
            f"`{NOAM_2}`)",
        "section 32: the homework's RNN": f"| the homework's RNN {row(hw)}",
        "section 32: the Transformer": f"| the Transformer hour recipe {row(tf)}",
        "section 32: minutes": f"What it reaches, {value(HOMEWORK, 'minutes'):.0f} minutes each",
        "section 32: time per update":
            f"An RNN update (2,048 tokens) took {per_update(hw)}, a Transformer update "
            f"(4,096 tokens) {per_update(tf)}",
        "section 32: the Transformer with beam 5":
            f"With its own beam 5 the Transformer reaches "
            f"{tf['recipe_decoding']['test_2016_flickr']['bleu_lc_tok']:.2f} `bleu_lc_tok`",
        "section 33: 400 updates":
            f"the Transformer reaches "
            f"{value(CURVES, 'scores', 'transformer', 'test_2016_flickr', 'bleu'):.1f} BLEU and "
            f"the RNN {value(CURVES, 'scores', 'rnn', 'test_2016_flickr', 'bleu'):.1f} after the "
            f"same {last_tokens('curves_rnn_vs_transformer_cpu_2026-11-24/rnn') / 1e6:.2f}M "
            "target tokens",
    }


CLAIMS = claims()


@pytest.mark.parametrize("name", sorted(CLAIMS))
def test_the_guide_states_the_run_figures(name):
    assert CLAIMS[name] in guide_text(), f"{name}: the guide should say {CLAIMS[name]!r}"


def test_both_runs_of_the_curves_saw_the_same_tokens():
    rnn = last_tokens("curves_rnn_vs_transformer_cpu_2026-11-24/rnn")
    assert rnn == last_tokens("curves_rnn_vs_transformer_cpu_2026-11-24/transformer")


def test_a_changed_figure_is_caught():
    text = guide_text()
    claim = CLAIMS["section 18: the ensemble"]
    assert claim in text
    assert claim.replace(claim[-7:-2], "99.99") not in text
