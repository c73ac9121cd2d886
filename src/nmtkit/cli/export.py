"""``nmtkit export``: a Transformer checkpoint converted for another inference engine."""

from __future__ import annotations

import argparse
import json

from ..io import refuse_overwriting_inputs
from .options import Subparsers, add_command

EXAMPLES = ("  nmtkit export --format ctranslate2 --model runs/NAME/best.pt --out ct2 "
            "--quantization int8")


def add_parser(sub: Subparsers[argparse.ArgumentParser]) -> None:
    ex = add_command(sub, "export", run, examples=EXAMPLES,
                     help="convert a Transformer checkpoint for another inference engine "
                     "(needs [export])",
                     description="ctranslate2: a CTranslate2 model directory (weights, "
                     "vocabularies, tokenizer model, nmtkit.json, README.txt), written "
                     "atomically; serve it with ctranslate2.Translator or "
                     "nmtkit.export.ctranslate2_engine.CTranslate2Translator.")
    ex.add_argument("--format", required=True, choices=["ctranslate2"], help="the target engine")
    ex.add_argument("--model", required=True, metavar="CKPT", help="checkpoint (.pt)")
    ex.add_argument("--out", required=True, metavar="DIR", help="output directory")
    ex.add_argument("--quantization", default="float32",
                    choices=["float32", "int8", "int8_float32", "int8_float16", "int8_bfloat16",
                             "int16", "float16", "bfloat16"],
                    help="weight type (default float32; int8 for fast CPU inference)")
    ex.add_argument("--force", action="store_true",
                    help="replace DIR if it holds an earlier export (only the files an export "
                    "writes, or nothing); any other directory, a file or a link is refused")


def run(a: argparse.Namespace) -> int:
    refuse_overwriting_inputs([a.out], [a.model], "--out", whole_directory=True)
    try:  # ctranslate2: an optional dependency
        from ..export.ctranslate2 import export_ctranslate2
    except ImportError as e:
        raise SystemExit(f"nmtkit: error: exporting to CTranslate2 needs the 'export' extra "
                         f"(pip install 'nmtkit[export]'): {e}") from None
    out = export_ctranslate2(a.model, a.out, quantization=a.quantization, force=a.force)
    print(json.dumps({"format": a.format, "out": str(out), "quantization": a.quantization,
                      "files": sorted(p.name for p in out.iterdir())}))
    return 0
