"""``nmtkit prepare``: fetch and prepare a corpus recipe ahead of training."""

from __future__ import annotations

import argparse
import json

from ..config import PREPARED_CORPORA
from .options import Subparsers, add_command

EXAMPLES = "  nmtkit prepare iwslt14\n  nmtkit prepare wmt14 train valid"


def add_parser(sub: Subparsers[argparse.ArgumentParser]) -> None:
    pr = add_command(sub, "prepare", run, examples=EXAMPLES,
                     help="fetch and prepare a corpus recipe (IWSLT14, WMT14); training does it on "
                     "first use",
                     description="Downloads (sha256-checked, or from the NMTKIT_DATA mirror) and "
                     "prepares the named splits once into $NMTKIT_CACHE; prints the pair counts.")
    pr.add_argument("corpus", choices=sorted(PREPARED_CORPORA), help="the corpus recipe")
    pr.add_argument("splits", nargs="*", help="splits to prepare (default: all)")


def run(a: argparse.Namespace) -> int:
    from ..data.recipes import prepare, prepared_text_dir

    counts = prepare(a.corpus, a.splits or None)
    print(json.dumps({"prepared": str(prepared_text_dir(a.corpus)), "pairs": counts}))
    return 0
