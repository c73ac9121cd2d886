"""Everything the loop needs, built from the config: the device, the data (tokenizers,
vocabularies, token ids of the training and validation splits), the model, and the state
of a resumed run or of the checkpoint a fine-tuned one starts from.

The optimizer and schedule come from :mod:`nmtkit.train.schedule`; one update is
:class:`nmtkit.train.step.Updater`. The order the trainer calls these in matters: the
random generators are seeded before the data and the model draw from them, and the data
is read before the run directory is created (a corpus error leaves no directory behind).
"""

from __future__ import annotations

import logging
import random
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from .. import fast
from ..checkpoint import is_release, load_checkpoint
from ..config import Config, ConfigError, TrainConfig
from ..data.batching import ParallelIds
from ..data.corpora import Parallel
from ..data.fetch import CorpusError
from ..data.mmap_ids import prepare_training_ids
from ..data.multilingual import DirectedSplit, join, load_directed
from ..data.prepare import (
    Vocabularies,
    build_vocabularies,
    check_tags,
    encode_parallel,
    encode_training,
    extra_tags,
    load_training,
    pairs_of,
    vocab_from_state,
)
from ..data.subword_sampling import SubwordSampler
from ..errors import UserError
from ..models import build_model
from ..models.seq2seq import Seq2Seq
from . import distributed, finetune
from .budget import check_budget_resumable, replan_resumed_budget
from .ema import WeightAverage
from .run_dir import Progress, nothing_to_resume, restore_rng
from .schedule import Schedule, build_optimizer
from .start import Start
from .step import TrainingError

log = logging.getLogger(__name__)


def pick_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


@dataclass(frozen=True)
class Place:
    """Where this process trains: its rank among ``world`` processes (torchrun; else 0 of
    1) and its device."""

    rank: int
    world: int
    device: torch.device

    @property
    def main(self) -> bool:
        """Rank 0: the process that writes the run directory and speaks for all."""
        return self.rank == 0


def place(t: TrainConfig) -> Place:
    """This process's :class:`Place`: ``train.device`` (under torchrun, each rank's own GPU)
    and ``train.threads``; under torchrun the process group is joined and ranks other than 0
    log warnings only (rank 0 speaks for all)."""
    if t.threads:
        torch.set_num_threads(t.threads)
    rank, world, local_rank = distributed.world_info()
    device = pick_device(t.device)
    if device.type == "cuda" and world > 1:
        device = torch.device("cuda", local_rank)
    if world > 1:
        distributed.init(device)
        if rank != 0:
            logging.getLogger("nmtkit").setLevel(logging.WARNING)
    return Place(rank, world, device)


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


# --- where a run starts: fresh, resumed, or from another run's checkpoint --------------------


def read_start(cfg: Config, run_dir: Path, start: Start) -> dict[str, Any] | None:
    """The checkpoint where the run starts, checked against ``cfg``: the run's ``last.pt``
    (:func:`resume_checkpoint`), the checkpoint a fine-tune starts from or the one whose
    tokenizers and vocabularies are taken (:func:`~nmtkit.train.finetune.check_parent`,
    :func:`~nmtkit.train.finetune.check_vocab_source`); None from scratch."""
    if start.resumes:
        return resume_checkpoint(run_dir, cfg)
    if start.checkpoint is None:
        return None
    ckpt = load_checkpoint(start.checkpoint)
    if start.parent is not None:
        finetune.check_parent(ckpt["config"], cfg, start.checkpoint)
        log.info("fine-tuning %s: its weights, tokenizers and vocabularies", start.checkpoint)
    else:
        finetune.check_vocab_source(ckpt["config"], cfg, start.checkpoint)
        log.info("tokenizers and vocabularies of %s (fresh weights)", start.checkpoint)
    return ckpt


def stored_train_section(ckpt: dict[str, Any]) -> dict[str, Any]:
    """The train section of a checkpoint's config, every key the checkpoint lacks (written
    before it existed) read as its default of :class:`~nmtkit.config.TrainConfig`."""
    return {**asdict(TrainConfig()), **(ckpt["config"].get("train") or {})}


def resume_checkpoint(run_dir: Path, cfg: Config) -> dict[str, Any]:
    """``--resume``: the run's ``last.pt``, once it is known to hold a full training state
    that ``cfg`` can continue (:func:`check_resumable`)."""
    last = run_dir / "last.pt"
    if not last.exists():
        raise FileNotFoundError(nothing_to_resume(run_dir))
    ckpt = load_checkpoint(last)
    if is_release(ckpt):
        raise UserError(f"{last}: cannot resume: it is a release checkpoint without optimizer "
                         "state (as best.pt, step_*.pt and averages are); resume from the "
                         "last.pt that training wrote, or train on from these weights in a new "
                         f"run: --init-from {last} --run-dir NEW_DIR")
    check_resumable(ckpt, cfg, last)
    return ckpt


def check_resumable(ckpt: dict[str, Any], cfg: Config, last: Path) -> None:
    """The data and model sections as the checkpoint's, and nothing that would make the
    stored state mean something else: the epoch's batches (``train.cuda_graphs`` inside an
    epoch), the optimizer's state, a budget plan that has ended
    (:func:`~nmtkit.train.budget.check_budget_resumable`)."""
    try:  # keys added since the checkpoint was written read as their defaults
        stored = Config.from_dict(ckpt["config"], str(last)).to_dict()
    except ConfigError:
        stored = {**ckpt["config"], "train": stored_train_section(ckpt)}
    now = cfg.to_dict()
    for section in ("data", "model"):
        shown = finetune.config_differences(section, stored[section], now[section],
                                            "the checkpoint")
        if shown:
            raise UserError(f"{last}: cannot resume: the {section} section of the config "
                             f"differs from the checkpoint's: {shown}")
    was, t = stored["train"], cfg.train
    check_budget_resumable(t, ckpt, was, last)
    graphs = was["cuda_graphs"]
    if graphs != t.cuda_graphs and ckpt["progress"].get("batch_in_epoch", 0):
        # the epoch's batches differ (fixed shapes or not): its position would point elsewhere
        raise UserError(f"{last}: cannot resume with train.cuda_graphs="
                         f"{str(t.cuda_graphs).lower()}: the run stopped inside "
                         f"an epoch batched with train.cuda_graphs={str(graphs).lower()} "
                         "(keep it until the epoch ends)")
    if was["optimizer"] != t.optimizer:
        raise UserError(f"{last}: cannot resume: train.optimizer is {t.optimizer}, "
                         f"the checkpoint's optimizer state is {was['optimizer']}'s (start a new "
                         "run, or --init-from the checkpoint)")


# --- the data --------------------------------------------------------------------------------


@dataclass
class TrainingData:
    """Tokenizers and vocabularies, the training ids, the validation split(s)."""

    vocabs: Vocabularies
    train_ids: ParallelIds
    sampler: SubwordSampler | None  # data.subword_alpha: one segmentation an epoch
    valid_sets: list[DirectedSplit]  # one per direction of data.directions (else one)
    valid_ids: ParallelIds  # every direction's, joined: the validation loss is over all

    @property
    def valid_text(self) -> Parallel:
        """The (first) validation split's text: what sample translations are drawn from."""
        return self.valid_sets[0].text

    def epoch_ids(self, epoch: int) -> ParallelIds:
        """The training ids of ``epoch``: with ``data.subword_alpha``, a segmentation of its
        own (the same on every rank), which :attr:`train_ids` then holds."""
        if self.sampler is not None:
            self.train_ids = self.sampler.ids(epoch)
        return self.train_ids


def load_data(cfg: Config, given: dict[str, Any] | None, fine_tuning: bool) -> TrainingData:
    """Read and encode the training and validation splits. ``given``: a checkpoint whose
    tokenizers and vocabularies to use (None: learnt from the training data);
    ``fine_tuning``: they come from another run (the share of ``<unk>`` is logged, a
    warning above ``finetune.UNK_WARNING``)."""
    sampler = None
    if cfg.data.mmap:
        # Memory-mapped training ids, built once. With several processes the first to take
        # the store's file lock builds them while the others wait on the lock (not on a
        # collective, which would time out during a long first build), then every rank maps
        # the same files.
        vocabs, train_ids = prepare_training_ids(
            cfg.data, vocab_from_state(given) if given is not None else None)
        blank = None
    else:
        train_par = load_training(cfg.data)  # read once: vocabulary and ids (+ data.extra)
        blank = train_par.skipped_empty
        # (given: the same segmentation and ids as before the interruption, or the parent's)
        vocabs = (vocab_from_state(given) if given is not None
                  else build_vocabularies(cfg.data, pairs_of(train_par)))
        check_tags(cfg.data, vocabs)
        train_ids = encode_training(cfg.data, train_par, vocabs)  # + data.directions
        if cfg.data.subword_alpha > 0:
            sampler = SubwordSampler(cfg.data, train_par, vocabs, cfg.train.seed)
    if len(train_ids) == 0:
        raise TrainingError(_no_pairs_message(cfg, blank))
    if fine_tuning:
        finetune.report_unknown_rates(train_ids, given or {})
    valid_sets = load_directed(cfg.data, cfg.data.valid)
    for vs in valid_sets:  # a validation of blank lines would choose best.pt by noise
        text = vs.text
        if not any(s.strip() and t.strip() for s, t in zip(text.src, text.tgt, strict=True)):
            raise CorpusError(f"{text.name}: the validation split (data.valid) has no pair "
                              f"with both sides non-blank ({len(text.src)} lines)")
    valid_ids = encode_parallel(cfg.data, join(valid_sets), vocabs, drop_long=False)
    log.info("train %d pairs, valid %d pairs", len(train_ids), len(valid_ids))
    return TrainingData(vocabs, train_ids, sampler, valid_sets, valid_ids)


def _no_pairs_message(cfg: Config, blank: int | None) -> str:
    d = cfg.data
    if blank is None:
        why = f"pairs with an empty side or longer than data.max_len={d.max_len} are skipped"
    else:
        why = f"{blank} with an empty side, the rest longer than data.max_len={d.max_len}"
    return f"{d.corpus} split {d.train!r}: no training pairs left after filtering ({why})"


# --- the model and its training state ---------------------------------------------------------


def build_training_model(cfg: Config, vocabs: Vocabularies, device: torch.device,
                         parent: dict[str, Any] | None) -> Seq2Seq:
    """The model of ``cfg.model`` on ``device``, with :mod:`nmtkit.fast`'s training
    speed-ups when ``train.fast`` is on, the parent's weights (``--init-from``), and the
    groups of ``train.freeze`` frozen (before the optimizer: frozen weights never get a
    gradient or a step)."""
    t = cfg.train
    model = build_model(cfg.model, len(vocabs.src_vocab), len(vocabs.tgt_vocab)).to(device)
    if t.fast:  # speed-ups from outside the readable model (nmtkit.fast), same numbers
        fast.for_training(model, retain_memory=t.retain_freed_memory)
    if parent is not None:
        model.load_state_dict(parent["model"])
    if t.freeze:
        n = finetune.freeze(model, t.freeze)
        log.info("frozen (%s): %.2fM weights", ", ".join(t.freeze), n / 1e6)
    return model


def parameter_count(model: Seq2Seq) -> int:
    """The model's weights (a tied matrix counted once)."""
    return sum(p.numel() for p in {id(p): p for p in model.parameters()}.values())


def optimization(cfg: Config, model: Seq2Seq, device: torch.device
                 ) -> tuple[torch.optim.Optimizer, Schedule, torch.amp.GradScaler]:
    """The optimizer (``train.optimizer``), the rate schedule (``train.lr_schedule``: Eq. 3
    and the others of :mod:`nmtkit.train.schedule`) and, for fp16, the dynamic loss scaling
    (off for fp32 and bf16, whose range needs none)."""
    t = cfg.train
    optimizer = build_optimizer(model.parameters(), t)
    schedule = Schedule(optimizer, t, cfg.model.d_model)
    return optimizer, schedule, torch.amp.GradScaler(device.type, enabled=t.amp == "fp16")


def word_dropout_exempt(cfg: Config, vocabs: Vocabularies, device: torch.device) -> torch.Tensor:
    """The source ids ``train.word_dropout`` leaves: the tags of ``data.extra`` and
    ``data.directions``."""
    tags = [vocabs.src_vocab.stoi[x] for x in sorted(extra_tags(cfg.data))
            if x in vocabs.src_vocab.stoi]
    return torch.tensor(tags, dtype=torch.long, device=device)


def restore_training_state(ckpt: dict[str, Any], model: Seq2Seq, optimizer: torch.optim.Optimizer,
                           schedule: Schedule, scaler: torch.amp.GradScaler,
                           t: TrainConfig) -> Progress:
    """``--resume``: weights, optimizer, schedule, loss scale and random generators as the
    checkpoint left them, the budget plan revised for another ``train.max_minutes``
    (:func:`~nmtkit.train.budget.replan_resumed_budget`); returns its progress. With
    ``train.ema`` the checkpoint's ``model`` holds the average and ``train_model`` the
    weights trained (:func:`weight_average`)."""
    model.load_state_dict(ckpt.get("train_model", ckpt["model"]))
    optimizer.load_state_dict(ckpt["optimizer"])
    schedule.load_state_dict(ckpt["schedule"])
    progress = Progress(**ckpt["progress"])
    if ckpt.get("scaler"):  # (absent in older checkpoints and when fp16 was off)
        scaler.load_state_dict(ckpt["scaler"])
    restore_rng(ckpt["rng"])
    replan_resumed_budget(t, progress, schedule, stored_train_section(ckpt)["max_minutes"], log)
    log.info("resumed from step %d (epoch %d, batch %d)", progress.step, progress.epoch,
             progress.batch_in_epoch)
    return progress


def weight_average(t: TrainConfig, model: Seq2Seq,
                   resumed: dict[str, Any] | None) -> WeightAverage | None:
    """``train.ema``'s moving average of the weights (None: off), from the model's weights
    as they are now; a resumed run's as its ``last.pt`` kept it."""
    if t.ema <= 0:
        return None
    ema = WeightAverage(model, t.ema)
    if resumed is not None and "train_model" in resumed:
        ema.load_state_dict(resumed["model"])
    return ema
