"""``nmtkit backtranslate``: synthetic training pairs from monolingual target-language text
and a model of the reverse direction (Sennrich et al. 2016)."""

from __future__ import annotations

import argparse
import json

from ..io import refuse_overwriting_inputs
from .decode_options import add_decode_args, model_files, translator_from_args
from .options import Subparsers, add_command
from .text import read_input

EXAMPLES = ("  nmtkit backtranslate --model runs/EN_DE/best.pt -i mono.en -o synth --beam 5\n"
            "  nmtkit backtranslate --model runs/EN_DE/best.pt -i mono.en -o synth "
            "--sampling --seed 1\n"
            "  nmtkit backtranslate --model runs/DE_EN_DE/best.pt --tgt-lang de -i mono.en "
            "-o synth\n"
            "  nmtkit train de_en.yaml --set 'data.extra=[{path: synth, weight: 1, tag: \"<bt>\"}]'")


def add_parser(sub: Subparsers[argparse.ArgumentParser]) -> None:
    bt = add_command(sub, "backtranslate", run, examples=EXAMPLES,
                     help="synthetic training pairs from monolingual target-language text and a "
                     "reverse-direction model",
                     description="Translates a monolingual file of the target language with a "
                     "model trained in the reverse direction (target -> source) and writes the "
                     "synthetic pairs, line-aligned and atomically, as PREFIX.<src_lang> (the "
                     "translations) and PREFIX.<tgt_lang> (the input lines); the languages come "
                     "from the model's config (a model of several directions: the one that "
                     "--tgt-lang asks for), blank lines are dropped. Train on them beside the "
                     "real data with data.extra: [{path: PREFIX, weight: W, tag: \"<bt>\"}].")
    add_decode_args(bt)
    bt.add_argument("-i", "--input", required=True,
                    help="monolingual target-language text, one sentence a line ('-' = stdin)")
    bt.add_argument("-o", "--output", required=True, metavar="PREFIX",
                    help="output prefix: writes PREFIX.<src_lang> and PREFIX.<tgt_lang>")
    bt.add_argument("--tgt-lang", metavar="LANG",
                    help="a model of several directions (data.directions): the language to "
                    "translate into, the forward source language (needed when it has several)")
    bt.add_argument("--src-lang", metavar="LANG",
                    help="a model of several directions: the language of the input (needed "
                    "when several of its directions go into --tgt-lang)")


def run(a: argparse.Namespace) -> int:
    from ..data.directions import evaluation_direction
    from ..train.backtranslate import backtranslate, synthetic_files
    from .progress import progress_bar

    bundle, tr = translator_from_args(a)
    # The direction the model is asked for (a model of data.directions: --tgt-lang, and
    # --src-lang where several go into it): its languages name the two files.
    reverse, direction = evaluation_direction(bundle.cfg.data, a.src_lang, a.tgt_lang)
    refuse_overwriting_inputs(synthetic_files(reverse, a.output),
                              [a.input, *model_files(a)], "-o PREFIX")
    tgt_lang = direction.tgt if bundle.cfg.data.directions else a.tgt_lang
    lines = read_input(a.input)
    with progress_bar(a.quiet, "backtranslate") as progress:
        result = backtranslate(tr, reverse, lines, a.output, tgt_lang=tgt_lang,
                               progress=progress)
    print(json.dumps({"src": str(result.src_file), "tgt": str(result.tgt_file),
                      "pairs": result.pairs, "dropped_empty": result.dropped_empty,
                      "empty_translations": result.empty_translations,
                      "beam": None if tr.decode_cfg.sampling else tr.decode_cfg.beam,
                      "sampling": tr.decode_cfg.sampling}))
    return 0
