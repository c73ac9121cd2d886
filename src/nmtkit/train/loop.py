"""The training loop: one loop for every model of the :mod:`nmtkit.models.seq2seq` interface.

The plain loop, before accumulation, budgets, validation and checkpoints::

    for epoch in range(...):
        for batch in token_batches(train, max_tokens, seed, epoch):
            log_probs = model(batch.src, batch.src_mask, batch.tgt_in)
            loss = label_smoothed_loss(log_probs, batch.tgt_out, eps) / n_tokens
            loss.backward(); clip(); set_rate(noam(step)); optimizer.step(); zero_grad()

The real loop below adds gradient accumulation (``train.accum`` batches per update,
normalised by their total target tokens), skipped non-finite steps, validation (loss,
perplexity, greedy BLEU) every ``valid_every`` updates, early stopping, step/minute/epoch
budgets, atomic checkpoints with the data position and RNG state (so ``--resume``
continues exactly), SIGINT handling (save, then exit cleanly), and a lock on the run
directory (one run writes it at a time: :class:`RunDirLock`).
"""

from __future__ import annotations

import csv
import io
import logging
import math
import os
import random
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm import tqdm

from .. import fast
from ..checkpoint import Bundle, load_checkpoint, save_checkpoint
from ..config import Config, ConfigError, check_installed, check_trainable
from ..data.batching import Batch, ParallelIds, pad_mask
from ..data.corpora import Parallel
from ..data.fetch import CorpusError
from ..data.mmap_ids import prepare_training_ids
from ..data.multilingual import join, load_directed
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
    vocab_state,
)
from ..data.subword_sampling import SubwordSampler
from ..evaluate import perplexity, score
from ..fast import onednn
from ..fast.cuda_graphs import GraphedLoss
from ..io import atomic_write_text
from ..models import build_model
from ..models.loss import label_smoothed_cross_entropy, smoothed_loss_sums
from . import distributed, finetune
from .ema import WeightAverage
from .finetune import forgetting_report, score_splits, write_forgetting_report
from .regularize import rdrop_loss, word_dropout
from .run_dir import RunDirLock, check_run_dir_path
from .schedule import BudgetPlan, Schedule, build_optimizer, revision_interval
from .tensorboard import log_attention, log_samples

log = logging.getLogger(__name__)

METRIC_FIELDS = ["step", "epoch", "train_loss", "train_ppl", "valid_loss", "valid_ppl",
                 "valid_bleu", "lr", "tgt_tokens", "elapsed_s"]


def metric_fields(cfg: Config) -> list[str]:
    """The columns of ``metrics.csv``: :data:`METRIC_FIELDS`, with ``data.directions`` one
    ``bleu_<src>-<tgt>`` column per direction after ``valid_bleu`` (which is their mean)."""
    at = METRIC_FIELDS.index("valid_bleu") + 1
    per_direction = [f"bleu_{d}" for d in cfg.data.directions]
    return [*METRIC_FIELDS[:at], *per_direction, *METRIC_FIELDS[at:]]


LOSS_FIELDS = ["step", "epoch", "train_loss", "lr"]
"""Columns of ``losses.csv``: the training loss of each ``log_every`` window."""
SAMPLES_TXT = "samples.txt"


class TrainingError(RuntimeError):
    """Training cannot go on (e.g. repeated non-finite losses)."""


@dataclass
class Progress:
    """Everything about where training stands that a checkpoint must restore."""

    step: int = 0
    epoch: int = 0
    batch_in_epoch: int = 0  # batches of the current epoch already consumed
    tgt_tokens: int = 0
    elapsed_s: float = 0.0  # training wall time accumulated over all sessions
    best: float | None = None
    bad_validations: int = 0
    history: list[dict[str, Any]] = field(default_factory=list)
    parent: str | None = None  # --init-from: the checkpoint this run started from
    forgetting_before: dict[str, Any] = field(default_factory=dict)  # train.forgetting_splits
    train_log: list[list[float]] = field(default_factory=list)  # [step, epoch, loss, lr] per log_every

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def pick_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def effective_amp(amp: str, device: torch.device) -> str:
    """The mixed precision that ``train.amp`` gets on ``device``: as asked, except bf16 on a
    CPU without bfloat16 in hardware (:func:`nmtkit.fast.onednn.bf16_in_hardware`: Intel
    AMX, or AVX512-BF16 as on AMD Zen 4/5), where bf16 products are emulated, slower than
    float32: there "off" (logged)."""
    if amp == "bf16" and device.type == "cpu" and not onednn.bf16_in_hardware():
        log.info("train.amp=bf16: this CPU has no bfloat16 in hardware (AMX or AVX512-BF16); "
                 "training in float32")
        return "off"
    return amp


def check_start_flags(resume: bool, init_from: str | Path | None,
                      vocab_from: str | Path | None) -> None:
    """``--init-from``, ``--vocab-from`` and ``--resume`` each name where a run's weights or
    vocabularies come from: at most one of them (``--init-from`` already takes the parent's
    tokenizers and vocabularies; ``--resume`` takes the run's own from its ``last.pt``)."""
    if init_from is not None and vocab_from is not None:
        raise ConfigError("--init-from and --vocab-from cannot be combined (--init-from "
                          "already takes the parent's tokenizers and vocabularies)")
    for flag, path in (("--init-from", init_from), ("--vocab-from", vocab_from)):
        if path is not None and resume:
            raise ConfigError(f"{flag} and --resume cannot be combined: --resume continues the "
                              "run from its own last.pt (weights, tokenizers and vocabularies): "
                              f"drop {flag} to continue the run, or start a new run from {path} "
                              "(another --run-dir, or --overwrite)")


class Trainer:
    """Builds data, model and optimizer from a :class:`Config` and runs the loop."""

    def __init__(self, cfg: Config, run_dir: str | Path, resume: bool = False,
                 overwrite: bool = False, on_validation: Callable[[Path], None] | None = None,
                 init_from: str | Path | None = None, vocab_from: str | Path | None = None):
        """``on_validation(run_dir)``: called after each validation has written metrics.csv
        (the command line passes :func:`nmtkit.viz.curves.redraw_curves`).

        ``init_from``: a checkpoint to fine-tune (see :mod:`nmtkit.train.finetune`): its
        weights, tokenizers and vocabularies, a fresh optimizer and schedule. ``vocab_from``:
        a checkpoint whose tokenizers and vocabularies only are used (fresh weights). Neither
        can be combined with the other, nor with ``resume`` (whose ``last.pt`` holds the
        run's own weights, tokenizers and vocabularies: the pair would name two starts).

        The run directory is locked (:class:`RunDirLock`, rank 0) from before the data is
        read until :meth:`run` ends."""
        check_trainable(cfg, f"config {cfg.name!r}")  # before the run directory is touched
        check_start_flags(resume, init_from, vocab_from)
        self.cfg, self.run_dir = cfg, Path(run_dir)
        check_run_dir_path(self.run_dir)
        self.on_validation = on_validation
        t = cfg.train
        if t.threads:
            torch.set_num_threads(t.threads)
        self.rank, self.world, local_rank = distributed.world_info()
        self.device = pick_device(t.device)
        if self.device.type == "cuda" and self.world > 1:
            self.device = torch.device("cuda", local_rank)
        if self.world > 1:
            distributed.init(self.device)
            if self.rank != 0:  # rank 0 speaks for all
                logging.getLogger("nmtkit").setLevel(logging.WARNING)
        self._lock = RunDirLock(self.run_dir) if self.rank == 0 else None
        try:
            self._set_up(resume, overwrite, init_from, vocab_from)
        except BaseException:
            self._unlock(failed_set_up=True)
            raise

    _lock: RunDirLock | None = None  # rank 0's lock on the run directory while it is in use

    def _unlock(self, failed_set_up: bool = False) -> None:
        """Let go of the run directory's lock (see :class:`RunDirLock`)."""
        lock, self._lock = self._lock, None
        if lock is not None:
            lock.release(failed_set_up)

    def _set_up(self, resume: bool, overwrite: bool, init_from: str | Path | None,
                vocab_from: str | Path | None) -> None:
        """:meth:`__init__`'s work once the run directory is locked: the checks of a fresh or
        resumed run, then data, model, optimizer (the checkpoint's state on ``resume``)."""
        cfg, t = self.cfg, self.cfg.train
        if self.rank == 0:
            self._warn_of_set_aside_runs()
        ckpt = None
        if resume:
            last = self.run_dir / "last.pt"
            if not last.exists():
                raise FileNotFoundError(self._nothing_to_resume(last))
            ckpt = load_checkpoint(last)
            missing = [k for k in ("optimizer", "schedule", "progress", "rng") if k not in ckpt]
            if missing:
                raise ValueError(f"{last}: cannot resume: it holds weights only (no "
                                 f"{', '.join(missing)}; an averaged or exported checkpoint?)")
            self._check_resumable(ckpt)
        else:
            self._check_fresh(overwrite)
        parent = vocab_source = None
        if init_from is not None:
            parent = load_checkpoint(init_from)
            finetune.check_parent(parent["config"], cfg, init_from)
            log.info("fine-tuning %s: its weights, tokenizers and vocabularies", init_from)
        if vocab_from is not None:
            vocab_source = load_checkpoint(vocab_from)
            finetune.check_vocab_source(vocab_source["config"], cfg, vocab_from)
            log.info("tokenizers and vocabularies of %s (fresh weights)", vocab_from)
        # Where tokenizers and vocabularies come from (None: learnt from the training data).
        given = next((c for c in (ckpt, parent, vocab_source) if c is not None), None)
        self._seed(t.seed)
        # The data first: a corpus error leaves no run directory behind (the lock's goes again).
        self.sampler: SubwordSampler | None = None  # data.subword_alpha: one segmentation an epoch
        if cfg.data.mmap:
            self.vocabs, self.train_ids = self._prepared_ids(given)
            blank = None
        else:
            train_par = load_training(cfg.data)  # read once: vocabulary and ids (+ data.extra)
            blank = train_par.skipped_empty
            self.vocabs = self._vocabularies(given, train_par)
            check_tags(cfg.data, self.vocabs)
            self.train_ids = encode_training(cfg.data, train_par, self.vocabs)  # + data.directions
            if cfg.data.subword_alpha > 0:
                self.sampler = SubwordSampler(cfg.data, train_par, self.vocabs, t.seed)
        if len(self.train_ids) == 0:
            raise TrainingError(self._no_pairs_message(blank))
        if parent is not None or vocab_source is not None:
            src_unk, tgt_unk = finetune.unknown_rates(self.train_ids)
            log.info("the training data under the given vocabularies: %.2f%% of source and "
                     "%.2f%% of target tokens are <unk>", 100 * src_unk, 100 * tgt_unk)
        # One entry per direction of data.directions (else one): loss over all, BLEU each.
        self.valid_sets = load_directed(cfg.data, cfg.data.valid)
        for vs in self.valid_sets:  # a validation of blank lines would choose best.pt by noise
            text = vs.text
            if not any(s.strip() and t.strip() for s, t in zip(text.src, text.tgt, strict=True)):
                raise CorpusError(f"{text.name}: the validation split (data.valid) has no pair "
                                  f"with both sides non-blank ({len(text.src)} lines)")
        self.valid_text = self.valid_sets[0].text
        self.valid_ids = encode_parallel(cfg.data, join(self.valid_sets), self.vocabs, drop_long=False)
        log.info("train %d pairs, valid %d pairs", len(self.train_ids), len(self.valid_ids))
        self.run_dir.mkdir(parents=True, exist_ok=True)
        # (A folder set aside by --overwrite, .overwritten.<random>, never matches: its random
        # part has no dot, so it cannot end in ".tmp".)
        for stale in self.run_dir.glob(".*.tmp"):  # a write cut short by a kill: never renamed
            stale.unlink(missing_ok=True)
        self.model = build_model(cfg.model, len(self.vocabs.src_vocab),
                                 len(self.vocabs.tgt_vocab)).to(self.device)
        tags = [self.vocabs.src_vocab.stoi[x] for x in sorted(extra_tags(cfg.data))
                if x in self.vocabs.src_vocab.stoi]  # train.word_dropout leaves them
        self._tag_ids = torch.tensor(tags, dtype=torch.long, device=self.device)
        if t.fast:  # speed-ups from outside the readable model (nmtkit.fast), same numbers
            fast.for_training(self.model, retain_memory=t.retain_freed_memory)
        self.amp = effective_amp(t.amp, self.device)  # train.amp where it runs faster
        if parent is not None:
            self.model.load_state_dict(parent["model"])
        if t.freeze:  # before the optimizer: frozen weights never get a gradient or a step
            n = finetune.freeze(self.model, t.freeze)
            log.info("frozen (%s): %.2fM weights", ", ".join(t.freeze), n / 1e6)
        # The training forward, compiled on request; checkpoints and decoding use self.model.
        self._compiled_logits = (torch.compile(self.model.logits, dynamic=True)
                                 if t.compile and not t.cuda_graphs else None)
        # A Transformer on a CPU: the output layer and the loss in blocks of rows, the same
        # numbers faster (nmtkit.fast.output_loss); None: the readable logits-then-loss path.
        self._blocked_loss = (fast.training_loss(self.model)
                              if t.fast and not t.compile and self.amp in ("off", "bf16")
                              else None)
        # train.cuda_graphs: forward + backward replayed per fixed batch shape (nmtkit.fast).
        self._graphs = self._graphed_loss() if t.cuda_graphs else None
        self.optimizer = build_optimizer(self.model.parameters(), t)
        self.schedule = Schedule(self.optimizer, t, cfg.model.d_model)
        # fp16: dynamic loss scaling (off for fp32 and bf16, whose range needs none).
        self.scaler = torch.amp.GradScaler(self.device.type, enabled=t.amp == "fp16")
        self.progress = Progress(parent=str(init_from) if parent is not None else None)
        if ckpt is not None:
            # With train.ema, "model" holds the average and "train_model" the weights trained.
            self.model.load_state_dict(ckpt.get("train_model", ckpt["model"]))
            self.optimizer.load_state_dict(ckpt["optimizer"])
            self.schedule.load_state_dict(ckpt["schedule"])
            self.progress = Progress(**ckpt["progress"])
            self._replan_resumed_budget(ckpt["config"].get("train", {}).get("max_minutes", 0.0))
            if ckpt.get("scaler"):  # (absent in older checkpoints and when fp16 was off)
                self.scaler.load_state_dict(ckpt["scaler"])
            torch.set_rng_state(ckpt["rng"]["torch"])
            random.setstate(ckpt["rng"]["python"])
            if torch.cuda.is_available() and ckpt["rng"].get("cuda") is not None:
                torch.cuda.set_rng_state_all(ckpt["rng"]["cuda"])
            log.info("resumed from step %d (epoch %d, batch %d)", self.progress.step,
                     self.progress.epoch, self.progress.batch_in_epoch)
        self.ema = WeightAverage(self.model, t.ema) if t.ema > 0 else None
        if self.ema is not None and ckpt is not None and "train_model" in ckpt:
            self.ema.load_state_dict(ckpt["model"])
        n_params = sum(p.numel() for p in {id(p): p for p in self.model.parameters()}.values())
        log.info("model %s: %.2fM parameters on %s", cfg.model.arch, n_params / 1e6, self.device)
        self.n_params = n_params
        if t.forgetting_splits and ckpt is None:  # the "before" of forgetting.json
            self.progress.forgetting_before = score_splits(self.bundle(), cfg.data,
                                                           t.forgetting_splits)
        # --overwrite: the earlier run moves aside as late as possible, once everything above
        # (data, model, optimizer) has been built; it is deleted at this run's first checkpoint.
        if not resume and overwrite and self.rank == 0:
            self._set_aside_earlier_run()
        with self._put_back_on_failure():
            self.tensorboard = self._tensorboard_writer(resume)

    # --- set-up -------------------------------------------------------------------------------

    def _run_files(self) -> list[Path]:
        """What a run writes into its directory (and a fresh run would mix with)."""
        names = ["last.pt", "best.pt", "metrics.csv", "curves.png", "forgetting.json", "losses.csv",
                 SAMPLES_TXT]
        return [*(self.run_dir / n for n in names if (self.run_dir / n).exists()),
                *sorted(self.run_dir.glob("step_*.pt")),
                *sorted(self.run_dir.glob("tensorboard/events.out.tfevents.*"))]

    def _check_fresh(self, overwrite: bool) -> None:
        """A new run never silently mixes with an earlier run's checkpoints and metrics. The
        way to continue the earlier run is named only where there is one: ``--resume`` reads
        ``last.pt``; without it, the newest ``step_*.pt`` can take its place (as
        :meth:`_nothing_to_resume` says)."""
        files = self._run_files() if self.run_dir.is_dir() and not overwrite else []
        if not files:
            return
        newest = self._newest_step_checkpoint()
        if (self.run_dir / "last.pt").exists():
            how = "continue it with --resume, or pass --overwrite to start afresh"
        elif newest is not None:
            how = (f"it has no last.pt: to continue it from {newest.name}, copy that to last.pt "
                   "and pass --resume; or pass --overwrite to start afresh")
        else:
            how = "pass --overwrite to start afresh, or choose another --run-dir"
        raise ValueError(f"{self.run_dir}: holds an earlier run ({files[0].name}); {how}")

    def _newest_step_checkpoint(self) -> Path | None:
        """The run's ``step_*.pt`` of the latest update (``train.keep_last``), if any."""
        steps = sorted(self.run_dir.glob("step_*.pt"))
        return steps[-1] if steps else None

    def _nothing_to_resume(self, last: Path) -> str:
        """``--resume`` without ``last.pt``: where a ``step_*.pt`` is left (the same full
        state as the ``last.pt`` of its update), how to resume from it."""
        newest = self._newest_step_checkpoint()
        if newest is None:
            return f"{last}: nothing to resume"
        return (f"{last}: nothing to resume, but {newest} is a checkpoint of this run: copy it "
                f"to {last} and --resume again to continue from its update")

    # --- --overwrite: the earlier run is set aside until this run's first checkpoint ----------

    _earlier: Path | None = None  # the folder holding the earlier run's files (rank 0), if any
    SET_ASIDE_PREFIX = ".overwritten."

    def _set_aside_earlier_run(self) -> None:
        """``--overwrite``: move the earlier run's files (:meth:`_run_files`) into a hidden
        folder ``<run>/.overwritten.<random>/`` (same file system: renames, no copies), so that
        this run starts in a clean directory yet, until it has a checkpoint of its own, the
        earlier run is not lost:

        - the first successful :meth:`save` of this run deletes the folder;
        - any exception before that (Ctrl-C included) out of the set-up's last step or out of
          :meth:`run` removes this run's files and moves the earlier ones back
          (:meth:`_put_back_earlier_run`);
        - a process killed hard (SIGKILL, power loss) in between leaves the earlier run in the
          folder. Nothing deletes it automatically: later runs in the directory (fresh,
          ``--overwrite`` or ``--resume``) ignore it (it is neither a run file nor a ``.*.tmp``
          leftover) and name it in a WARNING (:meth:`_warn_of_set_aside_runs`); moving its
          files back into the run directory recovers the earlier run.

        Rank 0 only: the other ranks never touch the run directory's files."""
        files = self._run_files()
        if not files:
            return
        aside = Path(tempfile.mkdtemp(prefix=self.SET_ASIDE_PREFIX, dir=self.run_dir))
        moved: list[Path] = []
        try:
            for old in files:
                rel = old.relative_to(self.run_dir)
                (aside / rel).parent.mkdir(parents=True, exist_ok=True)
                os.replace(old, aside / rel)
                moved.append(rel)
        except BaseException:  # half moved: move those back, the run stops here
            for rel in moved:
                os.replace(aside / rel, self.run_dir / rel)
            shutil.rmtree(aside, ignore_errors=True)
            raise
        self._earlier = aside
        log.info("--overwrite: the earlier run's %d files set aside in %s until this run's "
                 "first checkpoint", len(files), aside)

    def _drop_earlier_run(self) -> None:
        """This run has a checkpoint: the earlier run set aside by --overwrite is deleted."""
        aside, self._earlier = self._earlier, None
        if aside is None:
            return
        try:
            shutil.rmtree(aside)
        except OSError as e:  # this run goes on; the leftover is named by the next run's warning
            log.warning("could not delete the earlier run set aside in %s: %s", aside, e)
        else:
            log.info("first checkpoint saved: the earlier run (%s) deleted", aside.name)

    def _put_back_earlier_run(self) -> None:
        """This run failed before its first checkpoint: its files go, the earlier run's come
        back from where --overwrite set them aside. Never raises (the run's own exception is
        what the caller reports): a file that cannot be moved back stays in the folder, named
        in an ERROR."""
        aside, self._earlier = self._earlier, None
        if aside is None:
            return
        writer = getattr(self, "tensorboard", None)
        if writer is not None:  # (its events file is this run's: closed before it is removed)
            writer.close()
        try:
            for new in self._run_files():
                new.unlink(missing_ok=True)
            for old in sorted(f for f in aside.rglob("*") if not f.is_dir()):
                rel = old.relative_to(aside)
                (self.run_dir / rel).parent.mkdir(parents=True, exist_ok=True)
                os.replace(old, self.run_dir / rel)
            shutil.rmtree(aside)
        except OSError as e:
            log.error("could not put back the earlier run from %s (move its files back into %s "
                      "by hand): %s", aside, self.run_dir, e)
            return
        log.info("this run failed before its first checkpoint: the earlier run was put back "
                 "in %s", self.run_dir)

    @contextmanager
    def _put_back_on_failure(self) -> Iterator[None]:
        """Any exception out of the block (KeyboardInterrupt included) while an earlier run is
        set aside puts it back, then goes on."""
        try:
            yield
        except BaseException:
            self._put_back_earlier_run()
            raise

    def _warn_of_set_aside_runs(self) -> None:
        """A WARNING for each folder of an earlier run set aside by an --overwrite that was
        killed before its first checkpoint: left for the user to recover or delete."""
        if not self.run_dir.is_dir():
            return
        for aside in sorted(self.run_dir.glob(self.SET_ASIDE_PREFIX + "*")):
            if aside.is_dir():
                log.warning("%s holds an earlier run set aside by an --overwrite that stopped "
                            "before its first checkpoint (killed?): move its files back into %s "
                            "to recover it, or delete it", aside, self.run_dir)

    def _no_pairs_message(self, blank: int | None) -> str:
        d = self.cfg.data
        if blank is None:
            why = f"pairs with an empty side or longer than data.max_len={d.max_len} are skipped"
        else:
            why = f"{blank} with an empty side, the rest longer than data.max_len={d.max_len}"
        return f"{d.corpus} split {d.train!r}: no training pairs left after filtering ({why})"

    def _check_resumable(self, ckpt: dict[str, Any]) -> None:
        last = self.run_dir / "last.pt"
        try:  # keys added since the checkpoint was written read as their defaults
            stored = Config.from_dict(ckpt["config"], str(last)).to_dict()
        except ConfigError:
            stored = ckpt["config"]
        now = self.cfg.to_dict()
        for section in ("data", "model"):
            shown = finetune.config_differences(section, stored[section], now[section],
                                                "the checkpoint")
            if shown:
                raise ValueError(f"{last}: cannot resume: the {section} section of the config "
                                 f"differs from the checkpoint's: {shown}")
        self._check_budget_resumable(ckpt, stored.get("train", {}))
        graphs = stored.get("train", {}).get("cuda_graphs", False)
        if graphs != self.cfg.train.cuda_graphs and ckpt["progress"].get("batch_in_epoch", 0):
            # the epoch's batches differ (fixed shapes or not): its position would point elsewhere
            raise ValueError(f"{last}: cannot resume with train.cuda_graphs="
                             f"{str(self.cfg.train.cuda_graphs).lower()}: the run stopped inside "
                             f"an epoch batched with train.cuda_graphs={str(graphs).lower()} "
                             "(keep it until the epoch ends)")
        was = stored.get("train", {}).get("optimizer", "adam")
        if was != self.cfg.train.optimizer:
            raise ValueError(f"{last}: cannot resume: train.optimizer is {self.cfg.train.optimizer}, "
                             f"the checkpoint's optimizer state is {was}'s (start a new run, or "
                             "--init-from the checkpoint)")

    def _check_budget_resumable(self, ckpt: dict[str, Any], was: dict[str, Any]) -> None:
        """``train.budget_schedule``: a run that ended under its budget plan, at the plan's
        last update or on its time budget (where the plan had brought the rate down to, or
        nearly to, ``train.min_lr``), is not resumed with more room to train: a larger
        ``train.max_minutes``, or a larger ``train.max_steps`` where that capped the plan. A
        plan cannot be stretched past its end: a new one would throw the rate back up from
        its floor, a restart in all but name. The way to train on is a new run from the
        checkpoint with a schedule of its own (``--init-from``); the same recipe resumed only
        reports the run's end (:meth:`_already_ended`). A run interrupted inside its plan
        (Ctrl-C, a crash) is re-planned for the new budget instead
        (:meth:`_replan_resumed_budget`), as a validation revises a plan."""
        t, plan = self.cfg.train, (ckpt.get("schedule") or {}).get("budget_plan")
        was_minutes, was_steps = was.get("max_minutes", 0.0), was.get("max_steps", t.max_steps)
        step, elapsed_s = ckpt["progress"]["step"], ckpt["progress"]["elapsed_s"]
        spent = bool(was_minutes) and elapsed_s >= was_minutes * 60
        if not t.budget_schedule or not plan or (step < plan["steps"] and not spent):
            return
        more = []
        if t.max_minutes > was_minutes:
            more.append(f"train.max_minutes={t.max_minutes:g} (was {was_minutes:g})")
        if t.max_steps > was_steps and plan["steps"] >= was_steps:
            more.append(f"train.max_steps={t.max_steps} (was {was_steps})")
        if more:
            last = self.run_dir / "last.pt"
            how = "on its time budget" if spent else "at the last update of its budget plan"
            raise ValueError(f"{last}: cannot resume with {' and '.join(more)}: the run ended "
                             f"at update {step}, {how}, and the schedule that "
                             "train.budget_schedule fitted to that budget (its rate decaying to "
                             "train.min_lr) cannot be stretched past its end; to train on, start "
                             f"a new run from it with a schedule of its own: --init-from {last} "
                             "--run-dir NEW_DIR (or resume with the run's own settings to see "
                             "how it ended)")

    def _replan_resumed_budget(self, was_minutes: float) -> None:
        """``train.budget_schedule``, resumed inside its plan with another ``train.max_minutes``:
        the plan is revised at once for the time now left, from the time per update it had
        measured (as a validation revises it), rather than at the next validation: until
        then the old plan's rates would apply, and its end could stop the run first. With an
        unchanged budget the stored plan is followed as it is (resuming stays exact)."""
        t, p, plan = self.cfg.train, self.progress, self.schedule.plan
        if plan is None or t.max_minutes == was_minutes or p.step >= plan.steps:
            return
        remaining_s = t.max_minutes * 60 - p.elapsed_s
        if remaining_s <= 0:  # the time is up: the run ends before an update (_already_ended)
            return
        revised = self.schedule.make_plan(p.step, plan.step_s, remaining_s)
        log.info("train.max_minutes %g (was %g): %s", t.max_minutes, was_minutes,
                 revised.describe())

    def _tensorboard_writer(self, resume: bool) -> Any:
        """``train.tensorboard``: a SummaryWriter on ``<run>/tensorboard`` (rank 0). On resume,
        events the interrupted session wrote after its last checkpoint are purged."""
        if not self.cfg.train.tensorboard or self.rank != 0:
            return None
        check_installed(self.cfg, "train.tensorboard")
        from torch.utils.tensorboard import SummaryWriter

        return SummaryWriter(str(self.run_dir / "tensorboard"),
                             purge_step=self.progress.step + 1 if resume else None)

    def _tensorboard_scalars(self, values: dict[str, Any]) -> None:
        """Write numeric ``values`` at the current step (non-numbers, e.g. an empty BLEU, skipped)."""
        if self.tensorboard is None:
            return
        for tag, value in values.items():
            if isinstance(value, (int, float)) or (isinstance(value, str) and _is_number(value)):
                self.tensorboard.add_scalar(tag, float(value), self.progress.step)
        self.tensorboard.flush()

    def _tensorboard_validation(self, samples: list[tuple[str, str, str]]) -> None:
        """The sample translations as text, and the attention of the first validation
        sentence as an image (:mod:`nmtkit.train.tensorboard`; ``data.directions``: the first
        direction's sentence, translated into its target language)."""
        if self.tensorboard is None:
            return
        log_samples(self.tensorboard, samples, self.progress.step)
        if self.valid_text.src:
            was_training = self.model.training
            self.model.eval()
            try:
                # Packed weights for this decoding only, unpacked before training goes on (as
                # for the validation's translations): a fused optimizer's in-place update does
                # not bump the version counter that tells a stale pack from a fresh one.
                with fast.inference(self.model, enabled=self.cfg.decode.fast):
                    log_attention(self.tensorboard, self.bundle(), self.valid_text.src[0],
                                  self.progress.step, tgt_lang=self.valid_sets[0].tgt_lang)
            finally:
                self.model.train(was_training)
        self.tensorboard.flush()

    @staticmethod
    def _seed(seed: int) -> None:
        random.seed(seed)
        np.random.seed(seed % 2**32)
        torch.manual_seed(seed)

    def _vocabularies(self, ckpt: dict[str, Any] | None, train: Parallel) -> Vocabularies:
        if ckpt is not None:  # the same segmentation and ids as before the interruption
            return vocab_from_state(ckpt)
        return build_vocabularies(self.cfg.data, pairs_of(train))

    def _prepared_ids(self, ckpt: dict[str, Any] | None) -> tuple[Vocabularies, ParallelIds]:
        """``data.mmap``: memory-mapped training ids, built once. With several processes
        the first to take the store's file lock builds them while the others wait on the
        lock (not on a collective, which would time out during a long first build), then
        every rank maps the same files."""
        given = vocab_from_state(ckpt) if ckpt is not None else None
        return prepare_training_ids(self.cfg.data, given)

    # --- checkpoints --------------------------------------------------------------------------

    def payload(self) -> dict[str, Any]:
        return {
            "config": self.cfg.to_dict(),
            **vocab_state(self.vocabs),
            # train.ema: every reader (translate, evaluate, average, best.pt) gets the average.
            "model": self.model.state_dict() if self.ema is None else self.ema.state_dict(),
            **({"train_model": self.model.state_dict()} if self.ema is not None else {}),
            "optimizer": self.optimizer.state_dict(),
            "schedule": self.schedule.state_dict(),
            "progress": self.progress.to_dict(),
            "scaler": self.scaler.state_dict(),  # {} unless fp16
            "rng": {"torch": torch.get_rng_state(), "python": random.getstate(),
                    "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None},
        }

    def save(self, best: bool = False) -> None:
        if self.rank != 0:
            return
        payload = self.payload()
        save_checkpoint(self.run_dir / "last.pt", payload)
        if best:
            save_checkpoint(self.run_dir / "best.pt", payload)
        k = self.cfg.train.keep_last
        if k > 0:
            save_checkpoint(self.run_dir / f"step_{self.progress.step:08d}.pt", payload)
            steps = sorted(self.run_dir.glob("step_*.pt"))
            for old in steps[:-k]:
                old.unlink()
        self._drop_earlier_run()  # (after --overwrite) this run now has a checkpoint of its own

    def _averaged(self) -> AbstractContextManager[None]:
        """``train.ema``: the model holds the averaged weights inside the block."""
        return self.ema.applied() if self.ema is not None else nullcontext()

    def _end_session(self, finished: bool) -> None:
        """At the end of training (``finished``) the forgetting report's "after"; in any case,
        the TensorBoard events written out."""
        t, p = self.cfg.train, self.progress
        if finished and t.forgetting_splits and self.rank == 0:
            with self._averaged():
                after = score_splits(self.bundle(), self.cfg.data, t.forgetting_splits)
            report = forgetting_report(p.forgetting_before, after, p.parent, p.step)
            write_forgetting_report(self.run_dir / "forgetting.json", report)
            log.info("forgetting report: %s", self.run_dir / "forgetting.json")
        if self.tensorboard is not None:
            self.tensorboard.close()

    def bundle(self) -> Bundle:
        v = self.vocabs
        return Bundle(self.cfg, self.model, v.src_tok, v.tgt_tok, v.src_vocab, v.tgt_vocab)

    def write_metrics(self) -> None:
        if self.rank != 0:
            return
        buf = io.StringIO()
        fields = metric_fields(self.cfg)
        w = csv.DictWriter(buf, fieldnames=fields)
        w.writeheader()
        for row in self.progress.history:
            w.writerow({k: row.get(k, "") for k in fields})
        atomic_write_text(self.run_dir / "metrics.csv", buf.getvalue())
        buf = io.StringIO()
        csv.writer(buf).writerows([LOSS_FIELDS, *self.progress.train_log])
        atomic_write_text(self.run_dir / "losses.csv", buf.getvalue())

    _log_interval: tuple[float, int] = (0.0, 0)  # loss sum and target tokens since the last log

    def _note_loss(self, loss_sum: float, n_tok: int, lr: float) -> None:
        """The per-batch training loss panel of curves.png: every ``log_every`` updates, the
        mean loss per target token over them goes into ``progress.train_log`` (written to
        ``losses.csv`` beside metrics.csv, whose rows average a whole validation interval)."""
        total, tok = self._log_interval
        total, tok = total + loss_sum, tok + n_tok
        p = self.progress
        if p.step % self.cfg.train.log_every == 0:
            p.train_log.append([p.step, p.epoch, round(total / max(tok, 1), 4), float(f"{lr:.6g}")])
            total, tok = 0.0, 0
        self._log_interval = (total, tok)

    @torch.no_grad()
    def write_samples(self) -> list[tuple[str, str, str]]:
        """Every ``train.sample_every`` validations: the first ``train.samples`` validation
        sentences, greedy-translated, as (source, reference, hypothesis) into the log and
        appended to ``<run>/samples.txt`` under a step header. Returns them ([] when it is
        not the time, or on a rank other than 0)."""
        t, p = self.cfg.train, self.progress
        if self.rank != 0 or not t.sample_every or len(p.history) % t.sample_every:
            return []
        # data.directions: the first sentences of each direction, labelled with it
        shown = [(vs.name, vs.tgt_lang, vs.text.src[:t.samples], vs.text.tgt[:t.samples])
                 for vs in self.valid_sets]
        if not any(src for _, _, src, _ in shown):
            return []
        was_training = self.model.training
        self.model.eval()
        try:
            with fast.inference(self.model, enabled=self.cfg.decode.fast):
                translator = self.bundle().translator(fast=False, mbr=0, rerank=0)  # greedy, as said
                hyps = [translator.translate_lines(src, beam=1, tgt_lang=lang)
                        for _, lang, src, _ in shown]
        finally:
            self.model.train(was_training)
        samples: list[tuple[str, str, str]] = []
        body: list[str] = []
        for (name, _, src, ref), hs in zip(shown, hyps, strict=True):
            where = f" {name}" if name else ""
            for s, r, h in zip(src, ref, hs, strict=True):
                i = len(samples) + 1
                samples.append((s, r, h))
                body += [f"[{i}]{where} src: {s}", f"[{i}]{where} ref: {r}", f"[{i}]{where} hyp: {h}"]
        lines = [f"== step {p.step}, epoch {p.epoch}: {len(samples)} validation sentences, greedy ==",
                 *body]
        for line in lines:
            log.info("%s", line)
        path = self.run_dir / SAMPLES_TXT
        before = path.read_text(encoding="utf-8") if path.is_file() else ""
        atomic_write_text(path, before + "\n".join(lines) + "\n\n")
        return samples

    def after_validation(self) -> None:
        """Call ``on_validation(run_dir)`` (e.g. the CLI's curves.png redraw); a failing
        callback is a warning, never the end of training."""
        if self.rank != 0 or self.on_validation is None:
            return
        try:
            self.on_validation(self.run_dir)
        except Exception as e:  # noqa: BLE001 (a figure must never stop training)
            log.warning("after-validation callback failed: %s", e)

    # --- validation ---------------------------------------------------------------------------

    @torch.no_grad()
    def validate(self) -> dict[str, float]:
        """Validation loss and perplexity (teacher forcing), and greedy BLEU. With
        ``data.directions``: the loss over every direction, BLEU per direction
        (``bleu_<src>-<tgt>``) and ``valid_bleu`` their mean (what ``early_stop_metric``
        reads). A model trained on lowercased text (``data.lowercase``) writes no capitals:
        its BLEU is ``bleu_lc_tok`` (lowercased, tokenized), not cased sacreBLEU, so that
        ``best.pt`` is chosen for its words rather than for the case it never learnt."""
        model, t = self.model, self.cfg.train
        was_training = model.training
        model.eval()
        loss_sum, nll_sum, n_tok = 0.0, 0.0, 0
        for idx in self.valid_ids.batches(t.max_tokens, shuffle=False):
            b = self.valid_ids.collate(idx).to(self.device)
            with self._autocast():
                logits = model.logits(b.src, b.src_mask, b.tgt_in)
            loss, nll, n = label_smoothed_cross_entropy(logits, b.tgt_out, t.label_smoothing)
            loss_sum += float(loss)
            nll_sum += float(nll)
            n_tok += int(n)
        out = {"valid_loss": loss_sum / max(n_tok, 1), "valid_ppl": perplexity(nll_sum, n_tok)}
        if t.valid_bleu:
            bleus: dict[str | None, float] = {}
            metric = "bleu_lc_tok" if self.cfg.data.lowercase else "bleu"
            # Packed weights for the decoding only (nmtkit.fast), unpacked before training goes on.
            with fast.inference(model, enabled=self.cfg.decode.fast):
                translator = self.bundle().translator(fast=False, mbr=0, rerank=0)  # greedy: no MBR
                for vs in self.valid_sets:
                    n = t.valid_max_sents or len(vs.text.src)
                    hyps = translator.translate_lines(vs.text.src[:n], beam=1, tgt_lang=vs.tgt_lang)
                    bleus[vs.name] = score(hyps, vs.text.tgt[:n])[metric]
            out["valid_bleu"] = round(sum(bleus.values()) / len(bleus), 2)
            out.update({f"bleu_{name}": b for name, b in bleus.items() if name is not None})
        model.train(was_training)
        return out

    def _autocast(self) -> torch.autocast:
        """``train.amp`` as :func:`effective_amp` resolved it: fp16 on any device (a CPU runs
        it to test the code path), bf16 on CUDA and on CPUs with bfloat16 in hardware."""
        if self.amp == "fp16":
            return torch.autocast(self.device.type, dtype=torch.float16)
        if self.amp == "bf16":
            return torch.autocast(self.device.type, dtype=torch.bfloat16)
        return torch.autocast("cpu", enabled=False)

    def _improved(self, metrics: dict[str, float]) -> bool:
        t = self.cfg.train
        better: Callable[[float, float], bool]
        if t.early_stop_metric == "bleu" and "valid_bleu" in metrics:
            value, better = metrics["valid_bleu"], lambda a, b: a > b
        else:
            value, better = metrics["valid_loss"], lambda a, b: a < b
        p = self.progress
        if p.best is None or better(value, p.best):
            p.best, p.bad_validations = value, 0
            return True
        p.bad_validations += 1
        return False

    # --- the loop -----------------------------------------------------------------------------

    def run(self) -> dict[str, Any]:
        """Train until a budget or early stopping ends the run; returns the last metrics.
        After --overwrite, a failure before the first checkpoint puts the earlier run back
        (see :meth:`_set_aside_earlier_run`). The run directory's lock ends with it (and is
        taken again by a second call)."""
        if self._lock is None and self.rank == 0:
            self._lock = RunDirLock(self.run_dir)
        try:
            with self._put_back_on_failure():
                return self._train()
        finally:
            self._unlock()

    def _train(self) -> dict[str, Any]:
        """:meth:`run`'s loop."""
        t, p = self.cfg.train, self.progress
        model = self.model
        model.train()
        session_start = time.perf_counter()
        elapsed_before = p.elapsed_s
        window = {"loss": 0.0, "nll": 0.0, "tok": 0, "t0": time.perf_counter()}
        nonfinite = 0
        # train.budget_schedule: timed from this session's first update
        self._marks, self._valid_s, self._valid_n, self._logged_plan = [], 0.0, 0, None
        stop_reason = None
        last_metrics: dict[str, Any] = {}
        bar = tqdm(total=t.max_steps, initial=p.step, desc="train", unit="step",
                   dynamic_ncols=True, disable=None)

        def elapsed() -> float:
            return elapsed_before + time.perf_counter() - session_start

        stop_reason = self._already_ended()
        if stop_reason is not None:  # resuming a finished run: nothing left to do
            last_metrics = dict(p.history[-1]) if p.history else {}
        try:
            while stop_reason is None:
                if t.max_epochs and p.epoch >= t.max_epochs:
                    stop_reason = f"max_epochs={t.max_epochs}"
                    break
                if self.sampler is not None:  # this epoch's sampled segmentation (same on every rank)
                    self.train_ids = self.sampler.ids(p.epoch)
                batches = self.epoch_batches(p.epoch)
                if not batches:  # (never loop over epochs without a batch)
                    raise TrainingError(f"epoch {p.epoch} has no training batch on rank "
                                        f"{self.rank} of {self.world}")
                while p.batch_in_epoch < len(batches):
                    group = batches[p.batch_in_epoch:p.batch_in_epoch + t.accum]
                    lr = self.schedule.set_step(p.step + 1)
                    self.model.set_train_step(p.step)
                    loss_val, nll_val, n_tok = self._update(group)
                    # Counted once consumed: a Ctrl-C inside the update saves the position
                    # before it, so --resume repeats that update exactly.
                    p.batch_in_epoch += len(group)
                    if not math.isfinite(loss_val):
                        nonfinite += 1
                        log.warning("step %d: non-finite loss (%s); update skipped (%d in a row)",
                                    p.step + 1, loss_val, nonfinite)
                        if nonfinite >= t.max_nonfinite:
                            raise TrainingError(
                                f"{nonfinite} consecutive non-finite losses at step {p.step + 1}: "
                                "lower train.lr, raise train.warmup or set train.clip_norm")
                        continue
                    nonfinite = 0
                    p.step += 1
                    p.tgt_tokens += n_tok
                    window["loss"] += loss_val
                    window["nll"] += nll_val
                    window["tok"] += n_tok
                    bar.update(1)
                    self._note_loss(loss_val, n_tok, lr)
                    if t.budget_schedule:
                        self._probe_budget(elapsed())
                    if p.step % t.log_every == 0:
                        dt = time.perf_counter() - window["t0"]
                        stats = {"loss": f"{window['loss'] / window['tok']:.3f}", "lr": f"{lr:.2e}",
                                 "tok_s": f"{window['tok'] / dt:.0f}"}
                        if self.scaler.is_enabled():  # fp16
                            stats["scale"] = f"{self.scaler.get_scale():g}"
                        bar.set_postfix(stats)
                        if bar.disable:  # no terminal: the same numbers go to the log
                            log.info("step %d epoch %d loss %s lr %s tgt tok/s %s", p.step, p.epoch,
                                     stats["loss"], stats["lr"], stats["tok_s"])
                            if "scale" in stats:
                                log.info("step %d fp16 loss scale %s", p.step, stats["scale"])
                        self._tensorboard_scalars({
                            "train/loss": window["loss"] / window["tok"], "train/lr": lr,
                            "train/tokens_per_s": window["tok"] / dt,
                            **({"train/loss_scale": self.scaler.get_scale()}
                               if self.scaler.is_enabled() else {})})
                    out_of_time = bool(t.max_minutes) and elapsed() >= t.max_minutes * 60
                    if self.world > 1:  # every rank stops at the same step
                        out_of_time = distributed.agree(out_of_time, self.device)
                    plan = self.schedule.plan
                    plan_done = plan is not None and p.step >= plan.steps
                    if (p.step % t.valid_every == 0 or p.step >= t.max_steps or out_of_time
                            or plan_done):
                        last_metrics = self._validation_round(window, lr, elapsed())
                        window = {"loss": 0.0, "nll": 0.0, "tok": 0, "t0": time.perf_counter()}
                        if t.patience and p.bad_validations >= t.patience:
                            stop_reason = f"no improvement in {t.patience} validations"
                    if stop_reason is None and p.step >= t.max_steps:
                        stop_reason = f"max_steps={t.max_steps}"
                    if stop_reason is None and out_of_time:
                        stop_reason = f"max_minutes={t.max_minutes}"
                    if stop_reason is None and plan_done:
                        stop_reason = f"the budget plan's {p.step} updates (max_minutes={t.max_minutes})"
                    if stop_reason:
                        break
                if stop_reason is None:
                    p.epoch += 1
                    p.batch_in_epoch = 0
        except KeyboardInterrupt:
            p.elapsed_s = elapsed()
            if self._earlier is None:
                self.save()
                log.warning("interrupted at step %d: saved %s; continue with --resume",
                            p.step, self.run_dir / "last.pt")
            else:  # a checkpoint now would delete the earlier run for a few steps of this one
                log.warning("interrupted at step %d, before this run's first checkpoint", p.step)
            bar.close()
            self._end_session(finished=False)
            raise
        bar.close()
        p.elapsed_s = elapsed()
        if self.world > 1:
            log.info("ranks in sync: weight checksum %.6f", distributed.assert_in_sync(self.model))
        log.info("stopped: %s (step %d, epoch %d, %.1f min)", stop_reason, p.step, p.epoch,
                 p.elapsed_s / 60)
        self._end_session(finished=True)
        return {**last_metrics, "step": p.step, "epoch": p.epoch, "stop_reason": stop_reason}

    def _already_ended(self) -> str | None:
        """Why the run has nothing left to do under its current settings, before an update
        (None: it has). The loop's own stop conditions, so that resuming a run that ended,
        whatever ended it (``max_steps``, ``patience``, ``max_minutes``, its budget plan),
        with the same recipe trains nothing and reports how it ended; raising the limit
        that ended it continues the run (except a budget plan's end: see
        :meth:`_check_budget_resumable`)."""
        t, p, plan = self.cfg.train, self.progress, self.schedule.plan
        if p.step >= t.max_steps:
            return f"max_steps={t.max_steps}"
        if t.patience and p.bad_validations >= t.patience:
            return f"no improvement in {t.patience} validations"
        if t.max_minutes and p.elapsed_s >= t.max_minutes * 60:
            return f"max_minutes={t.max_minutes}"
        if plan is not None and p.step >= plan.steps:
            return f"the budget plan's {plan.steps} updates"
        return None

    # train.budget_schedule's timing, this session's only (a resumed run times itself anew):
    _marks: list[tuple[int, float]]  # (update, train clock) at the probe's start and each plan
    _valid_s = 0.0  # seconds spent validating (the train clock leaves them out)
    _valid_n = 0  # validations timed
    _logged_plan: BudgetPlan | None = None  # the latest plan logged at INFO

    def _train_clock(self) -> float:
        """Seconds of this session outside validations: what updates alone have cost."""
        return time.perf_counter() - self._valid_s

    def _probe_budget(self, elapsed_s: float) -> None:
        """``train.budget_schedule``, after each update: time the updates after this session's
        first one; once ``budget_probe_steps`` are timed, plan the rest of the budget (unless a
        plan exists: a resumed run's). Then revise the plan every
        :func:`~nmtkit.train.schedule.revision_interval` updates after the update it was made
        at: in its warmup, warmup included (the first updates may be far slower than the
        rest); after it, so that a machine that speeds up or slows down later (another job
        ending or starting beside the run) moves the plan's end with it. The updates at which
        it is revised follow from the stored plan alone, so a resumed run revises where the
        uninterrupted one did."""
        p, plan, t = self.progress, self.schedule.plan, self.cfg.train
        if not self._marks:
            self._marks = [(p.step, self._train_clock())]
        if plan is None:
            if p.step - self._marks[0][0] >= t.budget_probe_steps:
                self._plan_budget(elapsed_s)
        elif p.step < plan.steps and p.step - plan.made_at >= revision_interval(t, plan):
            self._plan_budget(elapsed_s, routine=True)

    def _plan_budget(self, elapsed_s: float, routine: bool = False) -> None:
        """Make or revise the budget plan for the time left. An update's time is that of the
        latest updates (since the newest plan at least a revision interval back, else since the
        probe started), validations left out, plus a validation's share (its mean time over
        ``valid_every`` updates). A resumed session that has not yet timed
        ``budget_probe_steps`` updates of its own keeps the stored plan's figures. ``routine``:
        an interval's revision (inside the plan's warmup it refits the warmup too; one close
        to the plan last logged goes to DEBUG only), not a validation's or the first plan.
        Every rank takes the first rank's figures, so that all follow one plan."""
        t, p, plan = self.cfg.train, self.progress, self.schedule.plan
        clock = self._train_clock()
        back = revision_interval(t, plan) if plan is not None else t.budget_probe_steps
        since = next((m for m in reversed(self._marks) if m[0] <= p.step - back), self._marks[0])
        timed = p.step - since[0]
        if plan is None and timed < 1:
            return
        valid_s = (self._valid_s / self._valid_n if self._valid_n
                   else plan.valid_s if plan is not None else 0.0)
        if plan is not None and timed < t.budget_probe_steps:  # resumed: too few updates timed
            step_s = plan.step_s
        else:
            step_s = (clock - since[1]) / timed + valid_s / t.valid_every
        remaining_s = t.max_minutes * 60 - elapsed_s
        if self.world > 1:
            step_s, remaining_s, valid_s = distributed.broadcast_floats(
                [step_s, remaining_s, valid_s], self.device)
        refit = routine and plan is not None and p.step < plan.warmup
        plan = self.schedule.make_plan(p.step, step_s, remaining_s, refit, valid_s)
        # Routine revisions come every few dozen updates: one close to the last plan logged
        # at INFO is logged at DEBUG only.
        shown = self._logged_plan
        quiet = routine and shown is not None and plan.close_to(shown)
        log.log(logging.DEBUG if quiet else logging.INFO, plan.describe())
        if not quiet:
            self._logged_plan = plan
        self._marks.append((p.step, clock))

    def epoch_batches(self, epoch: int) -> list[np.ndarray]:
        """This rank's batches of training epoch ``epoch`` (fixed shapes with train.cuda_graphs)."""
        t = self.cfg.train
        return self.train_ids.batches(t.max_tokens, t.seed, epoch, rank=self.rank,
                                      world=self.world, static=t.cuda_graphs)

    def _graphed_loss(self) -> GraphedLoss:
        """train.cuda_graphs: the training loss of a batch as :class:`GraphedLoss` replays it
        (captured on a GPU; on a CPU the same buffers and calls run eagerly)."""
        if self.world > 1:
            raise TrainingError("train.cuda_graphs runs in one process: unset it for torchrun")
        capture = self.device.type == "cuda"
        if not capture:
            log.warning("train.cuda_graphs: no CUDA device, so fixed batch shapes without graphs")
        eps = self.cfg.train.label_smoothing
        bf16 = self.cfg.train.amp == "bf16" and capture

        def loss(src: torch.Tensor, tgt_in: torch.Tensor,
                 tgt_out: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            return smoothed_loss_sums(self.model.logits(src, pad_mask(src), tgt_in), tgt_out, eps)

        def autocast() -> torch.autocast:  # no cast cache: a graph must not keep its casts
            return torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=bf16,
                                  cache_enabled=False)

        # train.compile: one compilation for symbolic shapes (the warm-up passes before each
        # capture run it), whose fused kernels every shape's graph then replays.
        loss_fn = torch.compile(loss, dynamic=True) if self.cfg.train.compile else loss
        return GraphedLoss(self.model, loss_fn, autocast, capture=capture)

    def _zero_grad(self) -> None:
        if self._graphs is not None:
            self._graphs.zero_grad()  # in place: the graphs hold the gradients' addresses
        else:
            self.optimizer.zero_grad(set_to_none=True)

    def _update(self, group: list[np.ndarray]) -> tuple[float, float, int]:
        """Forward/backward over ``group`` batches and one optimizer step (unless non-finite)."""
        if self._graphs is not None:
            return self._graphed_update(group)
        batches = [self.train_ids.collate(idx) for idx in group]
        total = sum(b.n_tokens for b in batches)
        loss_sum, nll_sum = 0.0, 0.0
        for b in batches:
            loss, nll = self._batch_loss(b.to(self.device))
            # One process: normalise now. Several: sum, and divide by the global count below.
            scaled = loss / (total if self.world == 1 else 1.0)
            # fp16: times the loss scale, so that small gradients do not underflow (a no-op else).
            self.scaler.scale(scaled).backward()  # type: ignore[no-untyped-call]  # unannotated in torch
            loss_sum += float(loss.detach())
            nll_sum += float(nll)
        if self.world > 1:
            params = [q for q in self.model.parameters() if q.grad is not None]
            global_total, global_loss = distributed.all_reduce_grads(params, [total, loss_sum])
            for q in params:
                assert q.grad is not None  # params holds the parameters with a gradient
                q.grad.div_(global_total)
            if not math.isfinite(global_loss):
                loss_sum = global_loss
        return self._step(loss_sum, nll_sum, total)

    def _graphed_update(self, group: list[np.ndarray]) -> tuple[float, float, int]:
        """:meth:`_update` with train.cuda_graphs: the same loss, normalised the same way,
        through fixed-shape batches replayed by ``self._graphs``; one host synchronisation
        (reading the loss) per update."""
        assert self._graphs is not None
        batches = [self.train_ids.collate(idx, static_tokens=self.cfg.train.max_tokens)
                   .to(self.device) for idx in group]
        total = sum(b.n_tokens for b in batches)
        self._graphs.prepare([(b.src, b.tgt_in, b.tgt_out) for b in batches])
        sums = torch.zeros(2, device=self.device)
        for b in batches:
            loss, nll = self._graphs.run(b.src, b.tgt_in, b.tgt_out, 1.0 / total)
            sums += torch.stack((loss.float(), nll.float()))
        loss_sum, nll_sum = sums.tolist()
        return self._step(loss_sum, nll_sum, total)

    def _step(self, loss_sum: float, nll_sum: float, total: int) -> tuple[float, float, int]:
        """The optimizer step on the accumulated gradients, skipped for a non-finite loss or
        gradient norm; gradients cleared after."""
        t = self.cfg.train
        if not math.isfinite(loss_sum):
            self._zero_grad()
            return loss_sum, nll_sum, total
        if self.scaler.is_enabled():
            out = self._scaled_step(loss_sum, nll_sum, total)
            if self.ema is not None:
                self.ema.update(self.progress.step + 1)
            return out
        if t.clip_norm > 0:
            norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), t.clip_norm)
            if not torch.isfinite(norm):
                self._zero_grad()
                return float("nan"), nll_sum, total
        self.optimizer.step()
        self._zero_grad()
        if self.ema is not None:
            self.ema.update(self.progress.step + 1)
        return loss_sum, nll_sum, total

    def _batch_loss(self, b: Batch) -> tuple[torch.Tensor, torch.Tensor]:
        """The training loss of one batch and its NLL, summed over its target tokens:
        label-smoothed cross-entropy, with ``train.word_dropout`` on the inputs and
        ``train.rdrop`` (two passes in one forward) where they are on."""
        t = self.cfg.train
        forward = self._compiled_logits or self.model.logits
        src = word_dropout(b.src, t.word_dropout, self._tag_ids)
        tgt_in = word_dropout(b.tgt_in, t.word_dropout)
        if t.rdrop:  # the batch twice, stacked: (2B, ...), one dropout mask each half
            src, tgt_in = torch.cat([src, src]), torch.cat([tgt_in, tgt_in])
            src_mask = torch.cat([b.src_mask, b.src_mask])
            with self._autocast():
                logits = forward(src, src_mask, tgt_in)  # (2B, T, V)
            return rdrop_loss(logits, b.tgt_out, t.label_smoothing, t.rdrop)
        if self._blocked_loss is not None:
            with self._autocast():
                loss, nll, _ = self._blocked_loss(src, b.src_mask, tgt_in, b.tgt_out,
                                                  t.label_smoothing)
            return loss, nll
        with self._autocast():
            logits = forward(src, b.src_mask, tgt_in)
        loss, nll, _ = label_smoothed_cross_entropy(logits, b.tgt_out, t.label_smoothing)
        return loss, nll

    def _scaled_step(self, loss_sum: float, nll_sum: float, total: int) -> tuple[float, float, int]:
        """fp16 (``train.amp: fp16``): the optimizer step through the loss scaler. Gradients that
        overflowed at this scale (inf/NaN while the loss is finite) skip the step and halve the
        scale; the step still counts, as in PyTorch's AMP recipe. After ``growth_interval``
        clean steps the scale doubles."""
        t = self.cfg.train
        self.scaler.unscale_(self.optimizer)  # true gradients, for clipping
        if t.clip_norm > 0:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), t.clip_norm)
        before = self.scaler.get_scale()
        self.scaler.step(self.optimizer)  # skipped if unscale_ found inf/NaN gradients
        self.scaler.update()
        self.optimizer.zero_grad(set_to_none=True)
        if self.scaler.get_scale() < before:
            log.info("step %d: fp16 gradients overflowed: update skipped, loss scale %g -> %g",
                     self.progress.step + 1, before, self.scaler.get_scale())
        return loss_sum, nll_sum, total

    def _validation_round(self, window: dict[str, Any], lr: float,
                          elapsed_s: float) -> dict[str, Any]:
        p, started = self.progress, time.perf_counter()
        with self._averaged():  # train.ema: the average is what is validated and kept
            metrics = self.validate()
        self.schedule.validation(metrics["valid_loss"])
        self._valid_s += time.perf_counter() - started  # (train.budget_schedule's clock)
        self._valid_n += 1
        plan = self.schedule.plan
        if self.cfg.train.budget_schedule and plan is not None and p.step < plan.steps:
            self._plan_budget(elapsed_s + time.perf_counter() - started)  # now knowing its cost
        tok = max(window["tok"], 1)
        row = {"step": p.step, "epoch": p.epoch, "train_loss": round(window["loss"] / tok, 4),
               "train_ppl": round(perplexity(window["nll"], tok), 3),
               "valid_loss": round(metrics["valid_loss"], 4),
               "valid_ppl": round(metrics["valid_ppl"], 3),
               "valid_bleu": metrics.get("valid_bleu", ""), "lr": f"{lr:.6g}",
               "tgt_tokens": p.tgt_tokens, "elapsed_s": round(elapsed_s, 1),
               **{k: v for k, v in metrics.items() if k.startswith("bleu_")}}  # per direction
        improved = self._improved(metrics)
        p.history.append(row)
        p.elapsed_s = elapsed_s
        self.save(best=improved)
        self.write_metrics()
        self._tensorboard_scalars({f"valid/{k.removeprefix('valid_')}": row[k]
                                   for k in row if k.startswith(("valid_", "bleu_"))})
        self.after_validation()
        per_direction = "".join(f" {k.removeprefix('bleu_')} {v}" for k, v in metrics.items()
                                if k.startswith("bleu_"))
        log.info("step %d: valid loss %.4f ppl %.2f bleu %s%s%s", p.step, metrics["valid_loss"],
                 metrics["valid_ppl"], metrics.get("valid_bleu", "-"),
                 f" (mean of{per_direction})" if per_direction else "", " (best)" if improved else "")
        self._tensorboard_validation(self.write_samples())
        return row


def train(cfg: Config, run_dir: str | Path, resume: bool = False, overwrite: bool = False,
          on_validation: Callable[[Path], None] | None = None,
          init_from: str | Path | None = None,
          vocab_from: str | Path | None = None) -> dict[str, Any]:
    """Build a :class:`Trainer` and run it; under torchrun, leave the process group after."""
    try:
        result = Trainer(cfg, run_dir, resume, overwrite, on_validation, init_from,
                         vocab_from).run()
    except BaseException:
        distributed.shutdown()
        raise
    distributed.shutdown(sync=True)
    return result
