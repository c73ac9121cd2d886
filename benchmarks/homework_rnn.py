"""The homework's recipe against the Transformer under the same budget (the guide, Part II).

Trains ``configs/multi30k_homework_rnn.yaml`` (the seq2seq homework's model, optimiser,
schedule, tokenisation, early stopping and greedy decoding, on Multi30k de->en) and
``configs/multi30k_transformer_hour.yaml`` for the same ``--minutes`` each, one after the
other (each alone on the machine); evaluates each ``best.pt`` on val and test_2016_flickr
with greedy decoding (the homework's) and with its recipe's own decoding; keeps each run's
``metrics.csv``, ``losses.csv`` and ``samples.txt`` and draws the curves; writes one JSON.
``bleu`` is cased sacreBLEU on detokenized text, ``bleu_lc_tok`` the homework's (lowercased
WordPunct tokens), ``bleu_official_tok`` against Multi30k's official tokenized references.

    NMTKIT_DATA=../shared/data python benchmarks/homework_rnn.py --minutes 60 \\
        --out benchmarks/results/homework_rnn_vs_transformer_cpu_DATE

``--out DIR`` receives ``summary.json``, ``curves_<name>.png``, ``compare.png`` and a folder
per run with its csv files. A run directory that already holds a finished run (``--runs``)
is evaluated, not trained again, unless ``--retrain`` (one trained for another ``--minutes``
stops the script).
"""

from __future__ import annotations

import argparse
import csv
import json
import shutil
from pathlib import Path

from _common import emit, machine, run_nmtkit  # benchmarks/ is the script's directory

from nmtkit.config import load

ROOT = Path(__file__).resolve().parents[1]
RECIPES = {"homework": "configs/multi30k_homework_rnn.yaml",
           "transformer": "configs/multi30k_transformer_hour.yaml"}
LABELS = {"homework": "RNN, the homework's recipe", "transformer": "Transformer (hour recipe)"}
SPLITS = ("val", "test_2016_flickr")
KEYS = ("bleu", "bleu_lc_tok", "bleu_official_tok", "chrf", "length_ratio")


def kept_budget(run: Path) -> float:
    """The ``train.max_minutes`` that the finished run in ``run`` was trained with (its
    ``best.pt`` stores the config; a release checkpoint, read through nmtkit's one door)."""
    from nmtkit.checkpoint import load_checkpoint

    return float(load_checkpoint(run / "best.pt")["config"]["train"]["max_minutes"])


def train(name: str, run: Path, minutes: float, retrain: bool) -> dict:
    """Train one recipe for ``minutes`` (or keep a finished run of the same budget) and return
    its last JSON line. A finished run of another budget stops the script: reported beside a
    run of ``minutes``, it would compare unequal budgets."""
    cmd = ["train", RECIPES[name], "--run-dir", str(run), "--set", f"train.max_minutes={minutes:g}"]
    if not retrain and (run / "best.pt").is_file():
        kept = kept_budget(run)  # (one read of the checkpoint)
        if kept != minutes:
            raise SystemExit(f"{run}: holds a finished run of {kept:g} minutes, not "
                             f"{minutes:g}: --retrain to train it again, or another --runs")
        return {"command": "nmtkit " + " ".join(cmd), "kept": str(run)}
    out = run_nmtkit(*cmd, *(["--overwrite"] if run.exists() else []))
    return {"command": "nmtkit " + " ".join(cmd), **json.loads(out.strip().splitlines()[-1])}


def scores(run: Path, beam: int) -> dict:
    """BLEU and friends of ``run/best.pt`` on each split with beam ``beam`` (1 = greedy)."""
    out = {}
    for split in SPLITS:
        ev = json.loads(run_nmtkit("evaluate", "--model", str(run / "best.pt"), "--split", split,
                                   "--beam", str(beam)))
        out[split] = {k: ev[k] for k in KEYS if k in ev}
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--minutes", type=float, default=60, help="training budget of each run")
    p.add_argument("--runs", default="runs/homework_vs_transformer", help="run directories")
    p.add_argument("--out", required=True, help="results directory (summary.json, figures, csv)")
    p.add_argument("--retrain", action="store_true", help="train again over finished runs")
    a = p.parse_args()
    runs, out = ROOT / a.runs, Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    result: dict = {"benchmark": "homework_rnn_vs_transformer", "machine": machine(),
                    "minutes": a.minutes, "recipes": RECIPES, "runs": {}}
    for name in RECIPES:
        run = runs / name
        trained = train(name, run, a.minutes, a.retrain)
        with open(run / "metrics.csv", encoding="utf-8") as f:
            rows = list(csv.DictReader(f))
        beam = load(ROOT / RECIPES[name]).decode.beam
        greedy = scores(run, 1)
        result["runs"][name] = {
            "train": trained, "validations": rows, "recipe_beam": beam,
            "best_valid_bleu": max(float(r["valid_bleu"]) for r in rows if r["valid_bleu"]),
            "greedy": greedy, "recipe_decoding": greedy if beam == 1 else scores(run, beam),
        }
        keep = out / name
        keep.mkdir(exist_ok=True)
        for file in ("metrics.csv", "losses.csv", "samples.txt"):
            if (run / file).is_file():
                shutil.copy2(run / file, keep / file)
        run_nmtkit("plot", "curves", "--run", str(keep), "-o", str(out / f"curves_{name}.png"))
    run_nmtkit("plot", "compare", *[x for n in RECIPES for x in ("--run", str(out / n))],
               *[x for n in RECIPES for x in ("--label", LABELS[n])], "-o", str(out / "compare.png"))
    emit(result, str(out / "summary.json"))


if __name__ == "__main__":
    main()
