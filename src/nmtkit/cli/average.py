"""``nmtkit average``: the weights of several checkpoints averaged into one."""

from __future__ import annotations

import argparse
import json

from ..io import refuse_overwriting_inputs
from .options import Subparsers, add_command, add_quiet_arg

EXAMPLES = "  nmtkit average --out runs/NAME/avg.pt runs/NAME/step_*.pt"


def add_parser(sub: Subparsers[argparse.ArgumentParser]) -> None:
    av = add_command(sub, "average", run, examples=EXAMPLES,
                     help="average the weights of checkpoints")
    av.add_argument("--out", required=True, metavar="CKPT", help="the averaged checkpoint to write")
    av.add_argument("checkpoints", nargs="+", help="checkpoints of one run (e.g. RUN/step_*.pt)")
    add_quiet_arg(av)


def run(a: argparse.Namespace) -> int:
    from ..train.average import average_checkpoints
    from .progress import progress_bar

    refuse_overwriting_inputs([a.out], a.checkpoints, "--out")
    with progress_bar(a.quiet, "average", unit="ckpt") as progress:
        average_checkpoints(a.checkpoints, a.out, progress=progress)
    print(json.dumps({"out": a.out, "averaged": a.checkpoints}))
    return 0
