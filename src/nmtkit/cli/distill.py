"""``nmtkit distill``: sequence-level knowledge distillation (Kim & Rush 2016), the teacher's
translations of its training sources as a student's data."""

from __future__ import annotations

import argparse
import json

from .decode_options import add_decode_args, model_files, translator_from_args
from .options import Subparsers, add_command

EXAMPLES = ("  nmtkit distill --model runs/A/best.pt --model runs/B/best.pt --beam 5 -o distilled\n"
            "  nmtkit train student.yaml --set 'data.extra=[{path: distilled, weight: 1, tag: \"\"}]'")


def add_parser(sub: Subparsers[argparse.ArgumentParser]) -> None:
    ds = add_command(sub, "distill", run, examples=EXAMPLES,
                     help="sequence-level knowledge distillation: the teacher's translations of "
                     "the training sources",
                     description="Translates the source side of the teacher's training split "
                     "(or --split) with the teacher (one model, or an ensemble of several "
                     "--model) and writes the pairs, line-aligned and atomically, as "
                     "PREFIX.<src_lang> (the sources) and PREFIX.<tgt_lang> (the translations), "
                     "for a student trained on them (Kim & Rush 2016): beside the real data "
                     "with data.extra: [{path: PREFIX, weight: W, tag: \"\"}], or as its "
                     "training data with data.corpus: parallel, data.train: PREFIX.")
    add_decode_args(ds)
    ds.add_argument("-o", "--output", required=True, metavar="PREFIX",
                    help="output prefix: writes PREFIX.<src_lang> and PREFIX.<tgt_lang>")
    ds.add_argument("--split", help="the split to translate (default: the teacher's data.train)")


def run(a: argparse.Namespace) -> int:
    from ..train.distill import distill
    from .progress import progress_bar

    bundle, tr = translator_from_args(a)
    with progress_bar(a.quiet, "distill") as progress:
        result = distill(tr, bundle.cfg.data, a.output, split=a.split, models=model_files(a),
                         progress=progress)
    print(json.dumps({"src": str(result.src_file), "tgt": str(result.tgt_file),
                      "pairs": result.pairs, "empty_translations": result.empty_translations,
                      "beam": tr.decode_cfg.beam, "models": a.model}))
    return 0
