"""``nmtkit convert``: a checkpoint rewritten as a release checkpoint (safetensors), e.g. a
``best.pt`` written before nmtkit stored release checkpoints as safetensors."""

from __future__ import annotations

import argparse
import json

from .options import Subparsers, add_command

EXAMPLES = ("  nmtkit convert old/best.pt best.pt\n"
            "  nmtkit convert runs/NAME/best.pt runs/NAME/best.pt   # in place\n"
            "  nmtkit convert runs/NAME/last.pt release.pt   # the weights of a resume state")


def add_parser(sub: Subparsers[argparse.ArgumentParser]) -> None:
    cv = add_command(sub, "convert", run, examples=EXAMPLES,
                     help="rewrite a checkpoint as a release checkpoint (safetensors)")
    cv.add_argument("checkpoint", help="the checkpoint to read: an older release checkpoint "
                    "(torch.save's zip), a last.pt (its weights are kept, not the optimizer "
                    "state), or a release checkpoint")
    cv.add_argument("out", help="the release checkpoint to write; may be CHECKPOINT itself "
                    "(replaced only once the new file is complete)")


def run(a: argparse.Namespace) -> int:
    from ..checkpoint import convert_checkpoint

    print(json.dumps(convert_checkpoint(a.checkpoint, a.out)))
    return 0
