"""``nmtkit train``: train a model from a YAML recipe, given by path or by the name of a
packaged recipe (``--list`` lists those); resume, fine-tune, overwrite."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from fnmatch import fnmatch
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import UserError
from ..io import refuse_overwriting_inputs
from .options import NO_FAST_HELP, Subparsers, add_command

if TYPE_CHECKING:
    from ..config import Config, DataConfig
    from ..config.tiers import TierPicker
    from ..train.start import Start
    from ..train.tensorboard import AttentionImage

EXAMPLES = ("  nmtkit train --list\n"
            "  nmtkit train copy_task\n"
            "  nmtkit train configs/copy_task.yaml\n"
            "  nmtkit train configs/multi30k_transformer_small.yaml --set train.max_minutes=60\n"
            "  nmtkit train configs/multi30k_transformer_small.yaml --resume\n"
            "  nmtkit train NEW.yaml --init-from runs/NAME/best.pt --report-splits val "
            "test_2016_flickr")


def add_parser(sub: Subparsers[argparse.ArgumentParser]) -> None:
    t = add_command(sub, "train", run, examples=EXAMPLES, help="train a model from a YAML recipe")
    t.add_argument("config", nargs="?", metavar="RECIPE",
                   help="a YAML recipe: a path, or the name of a packaged recipe (e.g. "
                   "multi30k_transformer_small; a file of that path wins)")
    t.add_argument("--list", action="store_true",
                   help="list the packaged recipes, each with what it is for, and exit")
    t.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE",
                   help="override a config value (repeatable)")
    t.add_argument("--run-dir", help="output directory (default runs/<config name>)")
    t.add_argument("--no-fast", action="store_true",
                   help=NO_FAST_HELP + "; sets train.fast and decode.fast")
    # Where the run starts: one choice (start_of), its contradictions refused as parsed.
    t.add_argument("--resume", action="store_true",
                   help="continue from RUN_DIR/last.pt (alone: not with --overwrite, "
                   "--init-from or --vocab-from)")
    t.add_argument("--overwrite", action="store_true",
                   help="start afresh in a RUN_DIR that holds an earlier run: its checkpoints "
                   "and metrics are moved aside to RUN_DIR/.overwritten.*/ and deleted once the "
                   "new run saves its first checkpoint (put back if the new run fails or is "
                   "interrupted before then)")
    t.add_argument("--init-from", metavar="CKPT",
                   help="fine-tune: start from this checkpoint's weights, tokenizers and "
                   "vocabularies (its model section must match), with a fresh optimizer and "
                   "schedule; see train.freeze")
    t.add_argument("--vocab-from", metavar="CKPT",
                   help="encode the corpus with this checkpoint's tokenizers and vocabularies "
                   "instead of learning new ones (fresh weights, any model section): e.g. a "
                   "distilled student that is to join its teachers' ensemble")
    t.add_argument("--report-splits", nargs="+", metavar="SPLIT",
                   help="score these splits (BLEU, chrF) before training and at its end into "
                   "RUN_DIR/forgetting.json (sets train.forgetting_splits); SRC-TGT:SPLIT "
                   "scores a split in another direction, e.g. de-en:test_2016_flickr")


def run(a: argparse.Namespace) -> int:
    from ..config import check_trainable, describe_recipes, load

    if a.list:
        print(describe_recipes())
        return 0
    if a.config is None:
        raise UserError("train needs a RECIPE: a YAML file or a packaged recipe's name "
                         "(nmtkit train --list shows them)")
    start = start_of(a)
    from ..train.distributed import world_info
    from ..train.loop import train

    sets = [*a.set, *(["train.fast=false", "decode.fast=false"] if a.no_fast else [])]
    if a.report_splits:
        sets.append(f"train.forgetting_splits={json.dumps(a.report_splits)}")
    cfg = load(a.config, sets, pick_tier=tier_picker(start, a.run_dir))
    check_trainable(cfg, a.config)
    run_dir = Path(a.run_dir) if a.run_dir else Path("runs") / cfg.name
    refuse_writing_over_inputs(a.config, start, cfg, run_dir)
    result = train(cfg, run_dir, start=start, on_validation=curves_callback(),
                   attention_image=attention_image_callback())
    if world_info()[0] == 0:  # under torchrun every rank returns the same summary: print it once
        print(json.dumps({"run_dir": str(run_dir), **result}))
    return 0


def tier_picker(start: Start, run_dir: str | None) -> TierPicker:
    """How a recipe's ``train.budget_tiers`` choose (:mod:`nmtkit.config.tiers`), called only
    for a recipe that has tiers: a run that resumes in a ``--run-dir`` keeps the recipe its
    ``last.pt`` was trained with; any other measures this host's matmul rate. (A ``last.pt``
    that cannot be read is left to the trainer, which checks the run directory's lock first
    and then says what is wrong with it.)"""
    from ..config.tiers import Tier, TierChoice, as_before, by_host_rate
    from ..errors import UserError
    from ..fast.host_rate import matmul_gflops

    def pick(tiers: tuple[Tier, ...], minutes: float) -> TierChoice:
        last = Path(run_dir) / "last.pt" if run_dir else None
        if start.resumes and last is not None and last.is_file():
            from ..checkpoint import load_checkpoint

            try:
                name = str(load_checkpoint(last)["config"].get("name", ""))
            except UserError:
                pass
            else:
                return as_before(name)(tiers, minutes)
        return by_host_rate(matmul_gflops)(tiers, minutes)
    return pick


def start_of(a: argparse.Namespace) -> Start:
    """The one start that ``--resume``, ``--init-from``, ``--vocab-from`` and ``--overwrite``
    ask for (:class:`~nmtkit.train.start.Start`). Flags that ask for two are refused here,
    before the recipe or any data is read, naming both."""
    from ..train.start import Start

    named = [(flag, path) for flag, path in (("--init-from", a.init_from),
                                             ("--vocab-from", a.vocab_from)) if path is not None]
    if len(named) == 2:
        raise UserError("--init-from and --vocab-from cannot be combined (--init-from "
                        "already takes the parent's tokenizers and vocabularies)")
    if a.resume and named:
        flag, path = named[0]
        raise UserError(f"{flag} and --resume cannot be combined: --resume continues the run "
                        "from its own last.pt (weights, tokenizers and vocabularies): drop "
                        f"{flag} to continue the run, or start a new run from {path} (another "
                        "--run-dir, or --overwrite)")
    if a.resume and a.overwrite:
        raise UserError("--resume and --overwrite cannot be combined: --resume continues the "
                        "run in RUN_DIR from its last.pt, --overwrite starts a new one there "
                        "(the earlier run set aside): drop one of them")
    if a.resume:
        return Start.resume()
    if a.init_from is not None:
        return Start.fine_tune(a.init_from, overwrite=a.overwrite)
    if a.vocab_from is not None:
        return Start.vocabulary_from(a.vocab_from, overwrite=a.overwrite)
    return Start.scratch(overwrite=a.overwrite)


def refuse_writing_over_inputs(recipe: str, start: Start, cfg: Config, run_dir: Path) -> None:
    """No file the run writes into ``run_dir`` (or, with ``--overwrite``, sets aside and
    deletes) is one it reads: the recipe, the start's checkpoint (``--init-from
    RUN/best.pt --overwrite`` would delete the parent), the corpus files named by path."""
    from ..train.run_dir import RUN_FILE_NAMES, RunDirLock

    inputs = [recipe, start.checkpoint, *data_files(cfg.data)]
    # step_<N>.pt of any N: one at each validation, the oldest deleted (train.keep_last)
    steps = [run_dir / Path(i).name for i in inputs if i and fnmatch(Path(i).name, "step_*.pt")]
    outputs = [*(run_dir / n for n in (*RUN_FILE_NAMES, RunDirLock.NAME)), *steps]
    refuse_overwriting_inputs(outputs, inputs, "--run-dir")


def data_files(data: DataConfig) -> list[str]:
    """The corpus files a recipe names by path (``parallel``, ``tsv``, ``data.extra``), plain
    and gzipped; a corpus fetched into the cache (``multi30k`` ...) is none of the user's."""
    langs = (data.src_lang, data.tgt_lang)
    splits = [s for s in (data.train, data.valid, data.test) if s]
    prefixes = [e.path for e in data.extra] + (splits if data.corpus == "parallel" else [])
    files = [f"{p}.{lang}{gz}" for p in prefixes for lang in langs for gz in ("", ".gz")]
    if data.corpus == "tsv":
        files += [data.tsv_file] if data.tsv_split else splits
    return files


def curves_callback() -> Callable[[str | Path], None] | None:
    """``curves.png`` redrawn after each validation when matplotlib is installed, else None."""
    try:  # matplotlib: an optional dependency
        from ..viz.curves import redraw_curves
    except ImportError:
        return None
    return redraw_curves


def attention_image_callback() -> AttentionImage | None:
    """TensorBoard's attention image (``train.tensorboard``) drawn as a labelled heatmap when
    matplotlib is installed, else None (training draws a bare grey map)."""
    try:  # matplotlib: an optional dependency
        from ..viz.attention import attention_image
    except ImportError:
        return None
    return attention_image
