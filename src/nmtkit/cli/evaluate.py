"""``nmtkit evaluate``: translate a test set and print its sacreBLEU scores as JSON: BLEU,
chrF and TER (an edit rate: lower is better), each with its signature, BLEU on lowercased
tokenized text (``bleu_lc_tok``), the length ratio, and on a Multi30k split the BLEU against
the official tokenized references (``bleu_official_tok``)."""

from __future__ import annotations

import argparse
import json

from ..io import refuse_overwriting_inputs, write_or_keep
from .decode_options import add_decode_args, model_files, translator_from_args
from .options import Subparsers, add_command
from .text import add_scored_text_args, scored_text, split_inputs

EXAMPLES = ("  nmtkit evaluate --model runs/NAME/best.pt --split test_2016_flickr\n"
            "  nmtkit evaluate --model runs/NAME/best.pt --src test.de --ref test.en --beam 4\n"
            "  nmtkit evaluate --model runs/DE_EN_DE/best.pt --split test_2016_flickr --tgt-lang de")


def add_parser(sub: Subparsers[argparse.ArgumentParser]) -> None:
    ev = add_command(sub, "evaluate", run, examples=EXAMPLES,
                     help="translate a test set and print sacreBLEU's BLEU, chrF and TER "
                     "(with signatures) as JSON",
                     description="Translate a test set and print one JSON object: sacreBLEU's "
                     "bleu, chrf and ter (translation edit rate: word edits per reference word "
                     "x 100, lower is better), each with its signature; bleu_lc_tok (BLEU on "
                     "lowercased tokenized text); length_ratio; n; and on a Multi30k split "
                     "bleu_official_tok (BLEU against the official tokenized references).")
    add_decode_args(ev)
    add_scored_text_args(ev, "corpus split name (e.g. test_2016_flickr)")
    ev.add_argument("-o", "--output", help="also write the hypotheses here")


def run(a: argparse.Namespace) -> int:
    from ..evaluate import score

    refuse_overwriting_inputs([a.output], [a.src, a.ref, *model_files(a)], "-o")
    bundle, tr = translator_from_args(a)
    src, ref, name, data, tgt_lang = scored_text(a, bundle, "evaluate")
    if a.split:
        refuse_overwriting_inputs([a.output], split_inputs(data, a.split), "-o")
    official = None  # the literature's number, official references: found (or warned) first
    if a.split and data.corpus == "multi30k":
        from ..evaluate import official_reference

        official = official_reference(a.split, data.tgt_lang)
    from .progress import progress_bar

    with progress_bar(a.quiet, "evaluate") as progress:
        hyps = tr.translate_lines(src, tgt_lang=tgt_lang, progress=progress)
    if a.output:
        write_or_keep(a.output, "".join(h + "\n" for h in hyps), "hypotheses")
    result = score(hyps, ref)
    if official is not None:
        from ..evaluate import multi30k_tok_bleu

        tok_bleu, tok_sig = multi30k_tok_bleu(hyps, a.split, data.tgt_lang, official)
        result["bleu_official_tok"] = tok_bleu
        result["signature"]["bleu_official_tok"] = tok_sig
    d = tr.decode_cfg
    result.update({"split": name, "beam": d.beam, "length_penalty": d.length_penalty,
                   "model": a.model[0] if len(a.model) == 1 else a.model})
    if d.mbr:  # how the output was chosen among the candidates, where not the beam's best
        result.update({"mbr": d.mbr, "mbr_utility": d.mbr_utility, "mbr_scale": d.mbr_scale})
    if d.rerank:
        result.update({"rerank": d.rerank, "reverse_weight": d.reverse_weight,
                       "reverse_model": a.reverse_model})
        if a.r2l_model:
            result.update({"r2l_weight": d.r2l_weight, "r2l_model": a.r2l_model})
    if bundle.cfg.data.directions:
        result.update({"src_lang": data.src_lang if a.split else a.src_lang, "tgt_lang": tgt_lang})
    print(json.dumps(result))
    return 0
