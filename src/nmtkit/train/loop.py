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
continues exactly), and SIGINT handling (save, then exit cleanly).
"""

from __future__ import annotations

import csv
import io
import logging
import math
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm import tqdm

from .. import fast
from ..checkpoint import Bundle, load_checkpoint, save_checkpoint
from ..config import Config
from ..data.batching import ParallelIds
from ..data.corpora import Parallel
from ..data.mmap_ids import prepare_training_ids
from ..data.prepare import (
    Vocabularies,
    build_vocabularies,
    encode_parallel,
    load_split,
    pairs_of,
    vocab_from_state,
    vocab_state,
)
from ..evaluate import perplexity, score
from ..io import atomic_write_text
from ..models import build_model
from . import distributed
from .loss import label_smoothed_cross_entropy
from .schedule import Schedule, build_optimizer

log = logging.getLogger(__name__)

METRIC_FIELDS = ["step", "epoch", "train_loss", "train_ppl", "valid_loss", "valid_ppl",
                 "valid_bleu", "lr", "tgt_tokens", "elapsed_s"]


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

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def pick_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


class Trainer:
    """Builds data, model and optimizer from a :class:`Config` and runs the loop."""

    def __init__(self, cfg: Config, run_dir: str | Path, resume: bool = False,
                 overwrite: bool = False, on_validation: Callable[[Path], None] | None = None):
        """``on_validation(run_dir)``: called after each validation has written metrics.csv
        (the command line passes :func:`nmtkit.viz.curves.redraw_curves`)."""
        self.cfg, self.run_dir = cfg, Path(run_dir)
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
        ckpt = None
        if resume:
            last = self.run_dir / "last.pt"
            if not last.exists():
                raise FileNotFoundError(f"{last}: nothing to resume")
            ckpt = load_checkpoint(last)
            missing = [k for k in ("optimizer", "schedule", "progress", "rng") if k not in ckpt]
            if missing:
                raise ValueError(f"{last}: cannot resume: it holds weights only (no "
                                 f"{', '.join(missing)}; an averaged or exported checkpoint?)")
            self._check_resumable(ckpt)
        else:
            self._check_fresh(overwrite)
        self._seed(t.seed)
        # The data first: a corpus error leaves no run directory behind.
        if cfg.data.mmap:
            self.vocabs, self.train_ids = self._prepared_ids(ckpt)
            blank = None
        else:
            train_par = load_split(cfg.data, "train")  # read once: vocabulary and ids
            blank = train_par.skipped_empty
            self.vocabs = self._vocabularies(ckpt, train_par)
            self.train_ids = encode_parallel(cfg.data, train_par, self.vocabs, drop_long=True)
        if len(self.train_ids) == 0:
            raise TrainingError(self._no_pairs_message(blank))
        self.valid_text = load_split(cfg.data, "valid")
        self.valid_ids = encode_parallel(cfg.data, self.valid_text, self.vocabs, drop_long=False)
        log.info("train %d pairs, valid %d pairs", len(self.train_ids), len(self.valid_ids))
        self.run_dir.mkdir(parents=True, exist_ok=True)
        for stale in self.run_dir.glob(".*.tmp"):  # a write cut short by a kill: never renamed
            stale.unlink(missing_ok=True)
        if not resume and overwrite and self.rank == 0:
            for old in self._run_files():
                old.unlink(missing_ok=True)
        self.model = build_model(cfg.model, len(self.vocabs.src_vocab),
                                 len(self.vocabs.tgt_vocab)).to(self.device)
        if t.fast:  # speed-ups from outside the readable model (nmtkit.fast), same numbers
            fast.for_training(self.model, retain_memory=t.retain_freed_memory)
        # The training forward, compiled on request; checkpoints and decoding use self.model.
        self._compiled_logits = torch.compile(self.model.logits, dynamic=True) if t.compile else None
        self.optimizer = build_optimizer(self.model.parameters(), t)
        self.schedule = Schedule(self.optimizer, t, cfg.model.d_model)
        self.progress = Progress()
        if ckpt is not None:
            self.model.load_state_dict(ckpt["model"])
            self.optimizer.load_state_dict(ckpt["optimizer"])
            self.schedule.load_state_dict(ckpt["schedule"])
            self.progress = Progress(**ckpt["progress"])
            torch.set_rng_state(ckpt["rng"]["torch"])
            random.setstate(ckpt["rng"]["python"])
            if torch.cuda.is_available() and ckpt["rng"].get("cuda") is not None:
                torch.cuda.set_rng_state_all(ckpt["rng"]["cuda"])
            log.info("resumed from step %d (epoch %d, batch %d)", self.progress.step,
                     self.progress.epoch, self.progress.batch_in_epoch)
        n_params = sum(p.numel() for p in {id(p): p for p in self.model.parameters()}.values())
        log.info("model %s: %.2fM parameters on %s", cfg.model.arch, n_params / 1e6, self.device)
        self.n_params = n_params

    # --- set-up -------------------------------------------------------------------------------

    def _run_files(self) -> list[Path]:
        """What a run writes into its directory (and a fresh run would mix with)."""
        names = ["last.pt", "best.pt", "metrics.csv", "curves.png"]
        return [*(self.run_dir / n for n in names if (self.run_dir / n).exists()),
                *sorted(self.run_dir.glob("step_*.pt"))]

    def _check_fresh(self, overwrite: bool) -> None:
        """A new run never silently mixes with an earlier run's checkpoints and metrics."""
        if self.run_dir.exists() and not self.run_dir.is_dir():
            raise ValueError(f"{self.run_dir}: run directory is a file")
        if self.run_dir.is_dir() and not overwrite and self._run_files():
            raise ValueError(f"{self.run_dir}: holds an earlier run ({self._run_files()[0].name}); "
                             "continue it with --resume, or pass --overwrite to start afresh")

    def _no_pairs_message(self, blank: int | None) -> str:
        d = self.cfg.data
        if blank is None:
            why = f"pairs with an empty side or longer than data.max_len={d.max_len} are skipped"
        else:
            why = f"{blank} with an empty side, the rest longer than data.max_len={d.max_len}"
        return f"{d.corpus} split {d.train!r}: no training pairs left after filtering ({why})"

    def _check_resumable(self, ckpt: dict[str, Any]) -> None:
        stored = ckpt["config"]
        now = self.cfg.to_dict()
        for section in ("data", "model"):
            if stored[section] != now[section]:
                raise ValueError(f"{self.run_dir / 'last.pt'}: cannot resume: the {section} section "
                                 "of the config differs from the checkpoint's")

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
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "schedule": self.schedule.state_dict(),
            "progress": self.progress.to_dict(),
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

    def bundle(self) -> Bundle:
        v = self.vocabs
        return Bundle(self.cfg, self.model, v.src_tok, v.tgt_tok, v.src_vocab, v.tgt_vocab)

    def write_metrics(self) -> None:
        if self.rank != 0:
            return
        buf = io.StringIO()
        w = csv.DictWriter(buf, fieldnames=METRIC_FIELDS)
        w.writeheader()
        for row in self.progress.history:
            w.writerow({k: row.get(k, "") for k in METRIC_FIELDS})
        atomic_write_text(self.run_dir / "metrics.csv", buf.getvalue())

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
        """Validation loss and perplexity (teacher forcing), and greedy BLEU."""
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
            n = t.valid_max_sents or len(self.valid_text.src)
            # Packed weights for the decoding only (nmtkit.fast), unpacked before training goes on.
            with fast.inference(model, enabled=self.cfg.decode.fast):
                translator = self.bundle().translator(fast=False)
                hyps = translator.translate_lines(self.valid_text.src[:n], beam=1)
            out["valid_bleu"] = score(hyps, self.valid_text.tgt[:n])["bleu"]
        model.train(was_training)
        return out

    def _autocast(self) -> torch.autocast:
        if self.cfg.train.amp and self.device.type == "cuda":
            return torch.autocast("cuda", dtype=torch.bfloat16)
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
        """Train until a budget or early stopping ends the run; returns the last metrics."""
        t, p = self.cfg.train, self.progress
        model = self.model
        model.train()
        session_start = time.perf_counter()
        elapsed_before = p.elapsed_s
        window = {"loss": 0.0, "nll": 0.0, "tok": 0, "t0": time.perf_counter()}
        nonfinite = 0
        stop_reason = None
        last_metrics: dict[str, Any] = {}
        bar = tqdm(total=t.max_steps, initial=p.step, desc="train", unit="step",
                   dynamic_ncols=True, disable=None)

        def elapsed() -> float:
            return elapsed_before + time.perf_counter() - session_start

        if p.step >= t.max_steps:  # resuming a finished run: nothing left to do
            stop_reason = f"max_steps={t.max_steps}"
            last_metrics = dict(p.history[-1]) if p.history else {}
        try:
            while stop_reason is None:
                if t.max_epochs and p.epoch >= t.max_epochs:
                    stop_reason = f"max_epochs={t.max_epochs}"
                    break
                batches = self.train_ids.batches(t.max_tokens, t.seed, p.epoch,
                                                 rank=self.rank, world=self.world)
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
                    if p.step % t.log_every == 0:
                        dt = time.perf_counter() - window["t0"]
                        stats = {"loss": f"{window['loss'] / window['tok']:.3f}", "lr": f"{lr:.2e}",
                                 "tok_s": f"{window['tok'] / dt:.0f}"}
                        bar.set_postfix(stats)
                        if bar.disable:  # no terminal: the same numbers go to the log
                            log.info("step %d epoch %d loss %s lr %s tgt tok/s %s", p.step, p.epoch,
                                     stats["loss"], stats["lr"], stats["tok_s"])
                    out_of_time = bool(t.max_minutes) and elapsed() >= t.max_minutes * 60
                    if self.world > 1:  # every rank stops at the same step
                        out_of_time = distributed.agree(out_of_time, self.device)
                    if p.step % t.valid_every == 0 or p.step >= t.max_steps or out_of_time:
                        last_metrics = self._validation_round(window, lr, elapsed())
                        window = {"loss": 0.0, "nll": 0.0, "tok": 0, "t0": time.perf_counter()}
                        if t.patience and p.bad_validations >= t.patience:
                            stop_reason = f"no improvement in {t.patience} validations"
                    if stop_reason is None and p.step >= t.max_steps:
                        stop_reason = f"max_steps={t.max_steps}"
                    if stop_reason is None and out_of_time:
                        stop_reason = f"max_minutes={t.max_minutes}"
                    if stop_reason:
                        break
                if stop_reason is None:
                    p.epoch += 1
                    p.batch_in_epoch = 0
        except KeyboardInterrupt:
            p.elapsed_s = elapsed()
            self.save()
            log.warning("interrupted at step %d: saved %s; continue with --resume",
                        p.step, self.run_dir / "last.pt")
            bar.close()
            raise
        bar.close()
        p.elapsed_s = elapsed()
        if self.world > 1:
            log.info("ranks in sync: weight checksum %.6f", distributed.assert_in_sync(self.model))
        log.info("stopped: %s (step %d, epoch %d, %.1f min)", stop_reason, p.step, p.epoch,
                 p.elapsed_s / 60)
        return {**last_metrics, "step": p.step, "epoch": p.epoch, "stop_reason": stop_reason}

    def _update(self, group: list[np.ndarray]) -> tuple[float, float, int]:
        """Forward/backward over ``group`` batches and one optimizer step (unless non-finite)."""
        t = self.cfg.train
        batches = [self.train_ids.collate(idx) for idx in group]
        total = sum(b.n_tokens for b in batches)
        loss_sum, nll_sum = 0.0, 0.0
        for b in batches:
            b = b.to(self.device)
            with self._autocast():
                logits = (self._compiled_logits or self.model.logits)(b.src, b.src_mask, b.tgt_in)
            loss, nll, _ = label_smoothed_cross_entropy(logits, b.tgt_out, t.label_smoothing)
            # One process: normalise now. Several: sum, and divide by the global count below.
            scaled = loss / (total if self.world == 1 else 1.0)
            scaled.backward()  # type: ignore[no-untyped-call]  # Tensor.backward is unannotated in torch
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
        if not math.isfinite(loss_sum):
            self.optimizer.zero_grad(set_to_none=True)
            return loss_sum, nll_sum, total
        if t.clip_norm > 0:
            norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), t.clip_norm)
            if not torch.isfinite(norm):
                self.optimizer.zero_grad(set_to_none=True)
                return float("nan"), nll_sum, total
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return loss_sum, nll_sum, total

    def _validation_round(self, window: dict[str, Any], lr: float,
                          elapsed_s: float) -> dict[str, Any]:
        p = self.progress
        metrics = self.validate()
        self.schedule.validation(metrics["valid_loss"])
        tok = max(window["tok"], 1)
        row = {"step": p.step, "epoch": p.epoch, "train_loss": round(window["loss"] / tok, 4),
               "train_ppl": round(perplexity(window["nll"], tok), 3),
               "valid_loss": round(metrics["valid_loss"], 4),
               "valid_ppl": round(metrics["valid_ppl"], 3),
               "valid_bleu": metrics.get("valid_bleu", ""), "lr": f"{lr:.6g}",
               "tgt_tokens": p.tgt_tokens, "elapsed_s": round(elapsed_s, 1)}
        improved = self._improved(metrics)
        p.history.append(row)
        p.elapsed_s = elapsed_s
        self.save(best=improved)
        self.write_metrics()
        self.after_validation()
        log.info("step %d: valid loss %.4f ppl %.2f bleu %s%s", p.step, metrics["valid_loss"],
                 metrics["valid_ppl"], metrics.get("valid_bleu", "-"), " (best)" if improved else "")
        return row


def train(cfg: Config, run_dir: str | Path, resume: bool = False, overwrite: bool = False,
          on_validation: Callable[[Path], None] | None = None) -> dict[str, Any]:
    """Build a :class:`Trainer` and run it; under torchrun, leave the process group after."""
    try:
        return Trainer(cfg, run_dir, resume, overwrite, on_validation).run()
    finally:
        distributed.shutdown()
