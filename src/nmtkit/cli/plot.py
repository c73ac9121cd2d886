"""``nmtkit plot``: the figures of the guide (the paper's concepts, a recipe's architecture,
a run's curves, a checkpoint's attention)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from ..io import refuse_overwriting_inputs
from .options import Subparsers, add_command, device

EXAMPLES = ("  nmtkit plot all --out figures\n"
            "  nmtkit plot architecture --config configs/multi30k_transformer_base.yaml -o arch.png\n"
            "  nmtkit plot curves --run runs/NAME\n"
            "  nmtkit plot compare --run runs/rnn --run runs/transformer --label RNN --label "
            "Transformer\n"
            '  nmtkit plot attention --model runs/NAME/best.pt --text "Ein Hund läuft." --html')

FIGURES = ["mask", "positional", "lr-schedule", "label-smoothing", "architecture", "temperature",
           "teacher-forcing", "curves", "compare", "attention", "all"]


def dpi(text: str) -> int:
    value = int(text)
    if not 10 <= value <= 1200:  # a figure of a few inches at 1e5 dpi is gigapixels
        raise argparse.ArgumentTypeError(f"dpi must be in 10..1200, got {value}")
    return value


def add_parser(sub: Subparsers[argparse.ArgumentParser]) -> None:
    pl = add_command(sub, "plot", run, examples=EXAMPLES,
                     help="draw the figures of the guide (needs [viz])",
                     description="mask | positional | lr-schedule | label-smoothing: concepts of "
                     "the paper; architecture: the model diagram (Figure 1, or the RNN's with "
                     "--arch rnn) with a recipe's numbers (--config); temperature | "
                     "teacher-forcing: the homework's softmax temperature and teacher-forcing "
                     "schedule; curves: a run's metrics.csv; compare: the validation curves of "
                     "several runs; attention: every attention map of a checkpoint for one "
                     "sentence; all: every figure that the given options allow.")
    pl.add_argument("figure", choices=FIGURES, help="which figure")
    where = pl.add_mutually_exclusive_group()
    where.add_argument("--out", metavar="DIR", help="output directory (default: current directory)")
    where.add_argument("-o", "--output", metavar="FILE",
                       help="output file of one figure (attention: the stem of STEM_<kind>.png)")
    pl.add_argument("--run", metavar="DIR", action="append",
                    help="run directory (or its metrics.csv), for curves; repeat for compare")
    pl.add_argument("--label", action="append", metavar="NAME",
                    help="compare: the name of each --run, in order (default: directory names)")
    pl.add_argument("--model", metavar="CKPT", help="checkpoint, for attention")
    pl.add_argument("--text", help="source sentence to translate, for attention")
    pl.add_argument("--beam", type=int, default=None, help="beam size for that translation")
    pl.add_argument("--tgt-lang", metavar="LANG",
                    help="attention: the language to translate into, for a model of several "
                    "directions (data.directions; needed when it has several)")
    pl.add_argument("--html", action="store_true",
                    help="attention: also write a self-contained interactive HTML page")
    pl.add_argument("--config", metavar="RECIPE",
                    help="YAML recipe (a path or a packaged recipe's name) whose model section "
                    "architecture and teacher-forcing draw")
    pl.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE",
                    help="override a value of --config (repeatable)")
    pl.add_argument("--arch", choices=["transformer", "rnn"],
                    help="architecture: which diagram (default: the recipe's, else transformer)")
    pl.add_argument("--device", type=device, default="cpu", help="torch device for attention")
    pl.add_argument("--dpi", type=dpi, default=100, help="resolution of the PNG files (10-1200)")


def run(a: argparse.Namespace) -> int:
    try:  # matplotlib: an optional dependency
        from ..viz.commands import plot
    except ImportError as e:
        raise SystemExit(f"nmtkit: error: figures need the 'viz' extra "
                         f"(pip install 'nmtkit[viz]'): {e}") from None
    runs = a.run or []
    if len(runs) > 1 and a.figure != "compare":
        raise SystemExit(f"nmtkit: error: plot {a.figure} takes one --run (several: plot compare)")
    if a.label and a.figure != "compare":
        raise SystemExit("nmtkit: error: --label names the runs of plot compare")
    read = [f for r in runs for f in ([r] if Path(r).is_file()
                                      else [Path(r) / "metrics.csv", Path(r) / "losses.csv"])]
    refuse_overwriting_inputs([a.output], [*read, a.model, a.config], "-o")
    written = plot(a.figure, out_dir=a.out, output=a.output, run=runs[0] if runs else None,
                   model=a.model, text=a.text, beam=a.beam, html=a.html, device=a.device,
                   dpi=a.dpi, config=a.config, overrides=a.set, arch=a.arch, runs=runs,
                   labels=a.label or None, tgt_lang=a.tgt_lang)
    print(json.dumps({"figure": a.figure, "written": [str(w) for w in written]}))
    return 0
