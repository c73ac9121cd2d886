"""``nmtkit tune``: choose the decoding options (beam size, length penalty, MBR, reranking
weights) on a validation split; test splits are refused."""

from __future__ import annotations

import argparse
import json
import sys

from ..config import (
    MAX_LENGTH_PENALTY,
    TUNE_BEAMS,
    TUNE_LENGTH_PENALTIES,
    TUNE_METRICS,
    TUNE_R2L_WEIGHTS,
    TUNE_REVERSE_WEIGHTS,
)
from ..errors import UserError
from ..io import refuse_overwriting_inputs, write_or_keep
from .decode_options import (
    add_model_args,
    add_r2l_model_arg,
    add_reverse_model_arg,
    model_files,
    translator_from_args,
)
from .options import Subparsers, add_command, finite_float
from .text import add_scored_text_args, scored_text, split_inputs

EXAMPLES = ("  nmtkit tune --model runs/NAME/best.pt\n"
            "  nmtkit tune --model runs/A/best.pt --model runs/B/best.pt --beam 4 5 8 "
            "--length-penalty 0.6 1.0 -o tune.json\n"
            "  nmtkit tune --model runs/EN_DE/best.pt --reverse-model runs/DE_EN/best.pt "
            "--rerank 0 20\n"
            "  nmtkit evaluate --model runs/NAME/best.pt --split test_2016_flickr --beam 5 "
            "--length-penalty 1.0")


def add_parser(sub: Subparsers[argparse.ArgumentParser]) -> None:
    """The grids (``--beam K K ...``, ...) are lists of values to try, not decoding flags:
    they have destinations of their own (``beams``, ...)."""
    tu = add_command(sub, "tune", run, examples=EXAMPLES,
                     help="choose beam size and length penalty on the validation split "
                     "(sacreBLEU's BLEU, chrF and TER of every setting, JSON lines, then the "
                     "best)")
    add_model_args(tu)
    add_scored_text_args(tu, "a validation split (default: the checkpoint's data.valid); test "
                         "splits are refused")
    tu.add_argument("--beam", dest="beams", type=int, nargs="+", default=list(TUNE_BEAMS),
                    metavar="K", help=f"beam sizes to try (default {' '.join(map(str, TUNE_BEAMS))}; "
                    "1 = greedy, tried once)")
    tu.add_argument("--length-penalty", dest="length_penalties", type=finite_float, nargs="+",
                    default=list(TUNE_LENGTH_PENALTIES), metavar="ALPHA",
                    help=f"length penalties to try with each beam, each in "
                    f"[0, {MAX_LENGTH_PENALTY:g}] (default "
                    f"{' '.join(map(str, TUNE_LENGTH_PENALTIES))})")
    tu.add_argument("--mbr", dest="mbrs", type=int, nargs="+", default=[0], metavar="N",
                    help="minimum Bayes risk decoding over N candidates to try with each beam "
                    "above 1 and penalty (default 0 = off; e.g. --mbr 0 20; see translate "
                    "--mbr)")
    add_reverse_model_arg(tu)
    tu.add_argument("--rerank", dest="reranks", type=int, nargs="+", default=[0], metavar="N",
                    help="reranking of N candidates with --reverse-model to try with each beam "
                    "above 1 and penalty (default 0 = off; e.g. --rerank 0 10; see translate "
                    "--rerank); each --mbr size below N is also tried among the reranking's best")
    tu.add_argument("--reverse-weight", dest="reverse_weights", type=finite_float, nargs="+",
                    default=list(TUNE_REVERSE_WEIGHTS), metavar="W",
                    help="reranking: the reverse model's weights to try (one search for them all)")
    add_r2l_model_arg(tu)
    tu.add_argument("--r2l-weight", dest="r2l_weights", type=finite_float, nargs="+",
                    default=list(TUNE_R2L_WEIGHTS), metavar="V",
                    help="reranking with --r2l-model: its weights to try, each with every "
                    "--reverse-weight (one search for them all)")
    tu.add_argument("--metric", choices=TUNE_METRICS, default="bleu",
                    help="the score that chooses (default bleu: cased sacreBLEU; bleu_lc_tok for "
                    "a model trained on lowercased text, data.lowercase; ter, an edit rate, "
                    "chooses the lowest)")
    tu.add_argument("-o", "--output", help="also write every trial and the best as JSON here")


def run(a: argparse.Namespace) -> int:
    from ..decode.tune import Trial, at_the_edge, best_trial, grid, tune_search
    from .progress import progress_bar

    def refuse_a_test_split(valid: str, test: str) -> None:
        if a.split and (a.split == test or a.split.startswith("test")):
            raise UserError(f"--split {a.split} is a test set: choose decoding options on "
                             f"{valid}, never on a test set")

    refuse_a_test_split("the validation split", "test")  # before loading the models
    grid(a.beams, a.length_penalties, a.mbrs, a.reranks)  # the grid's ranges, too
    refuse_overwriting_inputs([a.output], [a.src, a.ref, *model_files(a)], "-o")
    bundle, tr = translator_from_args(a, tuning=True)
    if a.split is None and not (a.src or a.ref):
        a.split = bundle.cfg.data.valid
    refuse_a_test_split(f"the validation split ({bundle.cfg.data.valid})", bundle.cfg.data.test)
    if bundle.cfg.data.lowercase and a.metric == "bleu":
        print("nmtkit tune: the model was trained on lowercased text (data.lowercase), and "
              "cased BLEU counts every capital of the references against it: consider "
              "--metric bleu_lc_tok", file=sys.stderr)
    src, ref, name, data, tgt_lang = scored_text(a, bundle, "tune")
    if a.split:
        refuse_overwriting_inputs([a.output], split_inputs(data, a.split), "-o")

    def report(t: Trial) -> None:
        print(json.dumps({"split": name, **t.as_dict()}), flush=True)

    if any(a.reranks) and not (a.reverse_model or a.r2l_model):
        raise UserError("--rerank scores candidates with a model of the reverse direction: "
                         "give one (--reverse-model), or a right-to-left model (--r2l-model)")
    with progress_bar(a.quiet, "tune") as progress:
        trials = tune_search(tr, src, ref, a.beams, a.length_penalties, tgt_lang=tgt_lang,
                             on_trial=report, mbr=a.mbrs, rerank=a.reranks,
                             reverse_weights=a.reverse_weights if a.reverse_model else [0.0],
                             r2l_weights=a.r2l_weights if a.r2l_model else [0.0],
                             progress=progress)
    best = best_trial(trials, a.metric)
    edge = at_the_edge(best, a.length_penalties)
    if edge:  # the optimum may lie beyond the grid
        print(f"nmtkit tune: the best length penalty is the {edge} tried "
              f"({best.length_penalty:g}): try values {'above' if edge == 'largest' else 'below'} "
              "it too", file=sys.stderr)
    summary = {"split": name, "model": a.model[0] if len(a.model) == 1 else a.model,
               "metric": a.metric, "best": best.as_dict(), "flags": best.flags(), "edge": edge,
               "trials": [t.as_dict() for t in trials]}
    print(json.dumps({"split": name, "metric": a.metric, "best": best.as_dict(),
                      "flags": best.flags(), "edge": edge}))
    if a.output:
        write_or_keep(a.output, json.dumps(summary, indent=1) + "\n", "results")
    return 0
