"""The training loop: one loop for every model of the :mod:`nmtkit.models.seq2seq` interface.

:meth:`Trainer.run` is The Annotated Transformer's ``run_epoch`` (written plainly as a
comment above the real loop), its steps named, each in a module of its own:

- :mod:`~nmtkit.train.start`: where the run starts, one value (:class:`Start`: scratch,
  ``--resume``, ``--init-from``, ``--vocab-from``; ``--overwrite``);
- :mod:`~nmtkit.train.setup`: data, model and the state the run starts from, built from
  the config;
- :mod:`~nmtkit.train.step`: one update, ``train.accum`` batches normalised by their total
  target tokens, with mixed precision and non-finite losses skipped;
- :mod:`~nmtkit.train.validate`: loss, perplexity, greedy BLEU and sample translations
  every ``valid_every`` updates; the best so far (``best.pt``, early stopping);
- :mod:`~nmtkit.train.run_dir`: atomic checkpoints with the data position and RNG state
  (so ``--resume`` continues exactly; Ctrl-C saves one), ``metrics.csv``, the lock on the
  run directory (one run writes it at a time), ``--overwrite``;
- :mod:`~nmtkit.train.budget`: budgets, the planner, Ctrl-C; every stop ends in :meth:`Trainer._finish`.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from ..checkpoint import Bundle
from ..config import Config, check_installed, check_trainable
from ..fast import onednn
from . import budget, distributed, finetune, setup, validate
from .progress import ProgressBar
from .run_dir import (
    LossLog,
    Progress,
    RunDirectory,
    append_samples,
    check_fresh,
    checkpoint_payload,
    prepare_run_dir,
    warn_of_set_aside_runs,
    write_metrics,
)
from .start import SCRATCH, Start
from .step import TrainingError, Updater, check_nonfinite, effective_amp
from .tensorboard import AttentionImage, TensorBoard
from .validate import Window

log = logging.getLogger(__name__)


@dataclass
class Session:
    """One call of :meth:`Trainer.run`: its clock, its progress bar, and the window of
    updates since the last validation (their losses: :class:`~.validate.Window`)."""

    elapsed_before: float  # training wall time of the sessions before this one
    started: float  # when this one began (time.perf_counter)
    bar: ProgressBar
    window: Window

    def elapsed(self) -> float:
        """Training wall time over all sessions."""
        return self.elapsed_before + time.perf_counter() - self.started


class Trainer:
    """Builds data, model and optimizer from a :class:`Config` and runs the loop.

    What it holds: ``cfg``; ``place`` (rank, world, device: :class:`.setup.Place`);
    ``directory`` (the run directory, its lock, an earlier run set aside, the last save:
    :class:`~.run_dir.RunDirectory`); ``data`` (tokenizers, vocabularies, training and
    validation ids: :class:`.setup.TrainingData`); ``model``; ``updater`` (one update: the
    optimizer, loss scaling, mixed precision, ``train.ema``'s average:
    :class:`~.step.Updater`); ``schedule``; ``progress``; and what reports the run:
    ``loss_log``, ``tensorboard``, ``on_validation``, the budget ``planner`` and the
    ``summary`` of how the last :meth:`run` ended."""

    tensorboard: TensorBoard | None = None  # train.tensorboard (rank 0)
    summary: dict[str, Any] | None = None  # how the last run() ended (Ctrl-C included)

    def __init__(self, cfg: Config, run_dir: str | Path, start: Start = SCRATCH, *,
                 on_validation: Callable[[Path], None] | None = None,
                 attention_image: AttentionImage | None = None):
        """``start``: where the run starts (:class:`~.start.Start`; from scratch by default);
        ``on_validation(run_dir)``: called after each validation has written metrics.csv;
        ``attention_image``: draws TensorBoard's attention image (None: a grey map). The
        command line passes :func:`nmtkit.viz.curves.redraw_curves` and
        :func:`nmtkit.viz.attention.attention_image`: figures live above training. The run
        directory is locked (rank 0) from before the data is read until :meth:`run` ends."""
        check_trainable(cfg, f"config {cfg.name!r}")  # before the run directory is touched
        self.cfg, self.on_validation = cfg, on_validation
        self.directory = RunDirectory(Path(run_dir))
        self.place = setup.place(cfg.train)
        if self.place.main:
            self.directory.hold()
        try:
            self._set_up(start, attention_image)
        except BaseException:
            self.directory.release(failed_set_up=True)
            raise

    def _set_up(self, start: Start, attention_image: AttentionImage | None) -> None:
        """:meth:`__init__`'s work once the run directory is locked: the start's checkpoint,
        the data, the model and its optimization."""
        cfg, t, path, device = self.cfg, self.cfg.train, self.directory.path, self.place.device
        if self.place.main:
            warn_of_set_aside_runs(path)
        if not start.resumes:
            check_fresh(path, start.overwrite)
        ckpt = setup.read_start(cfg, path, start)  # last.pt, a parent, a vocabulary's; or None
        setup.seed_everything(t.seed)
        # The data first: a corpus error leaves no run directory behind (the lock's goes again).
        self.data = setup.load_data(cfg, ckpt, fine_tuning=start.checkpoint is not None)
        prepare_run_dir(path)
        self.model = setup.build_training_model(cfg, self.data.vocabs, device,
                                                ckpt if start.parent is not None else None)
        self._set_up_optimization(start, ckpt)
        if t.forgetting_splits and not start.resumes:  # the "before" of forgetting.json
            self.progress.forgetting_before = finetune.score_splits(self.bundle(), cfg.data,
                                                                    t.forgetting_splits)
        # --overwrite: the earlier run moves aside as late as possible, once everything above
        # (data, model, optimizer) has been built; it is deleted at this run's first checkpoint.
        if start.overwrite and self.place.main:
            self.directory.set_aside_earlier()
        with self.directory.put_back_on_failure(self._close_tensorboard):
            if t.tensorboard and self.place.main:
                check_installed(cfg, "train.tensorboard")
                self.tensorboard = TensorBoard(path, self.progress.step + 1 if start.resumes
                                               else None, attention_image)

    def _set_up_optimization(self, start: Start, ckpt: dict[str, Any] | None) -> None:
        """The optimizer, schedule and updater; where the run stands (``progress``); a
        resumed run's state as ``last.pt`` left it."""
        cfg, t, device = self.cfg, self.cfg.train, self.place.device
        amp = effective_amp(t.amp, device)  # train.amp where it runs faster
        optimizer, self.schedule, scaler = setup.optimization(cfg, self.model, device)
        resumed = ckpt if start.resumes else None
        if resumed is not None:
            self.progress = setup.restore_training_state(resumed, self.model, optimizer,
                                                         self.schedule, scaler, t)
        else:  # (a fine-tune names its parent in forgetting.json)
            self.progress = Progress(parent=None if start.parent is None else str(start.parent))
        ema = setup.weight_average(t, self.model, resumed)  # train.ema (None: off)
        tags = setup.word_dropout_exempt(cfg, self.data.vocabs, device)
        self.updater = Updater(t, self.model, optimizer, scaler, ema, amp, device, self.place.world,
                               tags)
        self.loss_log = LossLog(t)
        log.info("model %s: %.2fM parameters on %s", cfg.model.arch,
                 setup.parameter_count(self.model) / 1e6, device)
        if device.type == "cpu":  # (what a time budget buys depends on it: README)
            log.info("host: %s; training in %s", onednn.describe_host(),
                     "bfloat16" if amp == "bf16" else "float32")

    # --- the loop -----------------------------------------------------------------------------

    def run(self) -> dict[str, Any]:
        """Train until a budget or early stopping ends the run; returns the last metrics. The
        run directory's lock ends with it (a second call takes it again)."""
        if self.place.main:
            self.directory.hold()
        try:
            with self.directory.put_back_on_failure(self._close_tensorboard):
                return self._train()
        finally:
            self.directory.release()

    def _train(self) -> dict[str, Any]:
        """:meth:`run`'s loop."""
        t, p, schedule = self.cfg.train, self.progress, self.schedule
        self.model.train()
        self.planner = budget.BudgetPlanner(t, p, schedule, self.place.world, self.place.device, log)
        began = time.perf_counter()
        s = Session(p.elapsed_s, began, ProgressBar(t, p.step), Window(schedule.rate(p.step), began))
        nonfinite = 0  # skipped updates in a row
        stop = budget.already_ended(t, p, schedule.plan)  # a finished run, resumed
        # The plain loop, before accumulation, budgets, checkpoints and resuming:
        #
        # for epoch in range(max_epochs):
        #     for batch in token_batches(train, max_tokens, seed, epoch):   # Sec. 5.1
        #         logits = model.logits(batch.src, batch.src_mask, batch.tgt_in)
        #         loss, nll, n_tokens = label_smoothed_cross_entropy(logits, batch.tgt_out, eps)
        #         (loss / n_tokens).backward()                               # Sec. 5.4
        #         schedule.set_step(step)                                    # Eq. 3
        #         optimizer.step()
        #         optimizer.zero_grad()
        #         if step % valid_every == 0:
        #             validate(model), save(model)
        # validate(model), save(model)                # whatever ended the loop
        updates = self._updates()
        try:
            while stop is None:
                group = next(updates, None)  # the batches of the next update
                if group is None:
                    stop = f"max_epochs={t.max_epochs}"
                    break
                lr = schedule.set_step(p.step + 1)
                self.model.set_train_step(p.step)
                loss, nll, n_tok = self._update(group)  # forward, loss, backward, optimizer step
                # Counted once consumed: a Ctrl-C inside the update saves the position
                # before it, so --resume repeats that update exactly.
                p.batch_in_epoch += len(group)
                if not math.isfinite(loss):  # the update was skipped
                    nonfinite += 1
                    check_nonfinite(nonfinite, p.step + 1, loss, t.max_nonfinite)
                    continue
                nonfinite = 0
                p.step += 1
                p.tgt_tokens += n_tok
                s.window.add(loss, nll, n_tok, lr)
                self._note_update(s, loss, n_tok, lr)  # bar, losses.csv, budget plan, log line
                spent = budget.spent(t, p, s.elapsed(), schedule.plan, self.place.world,
                                     self.place.device)  # (a validation's time is not counted)
                if budget.validation_due(t, p, schedule.plan):
                    self._validation_round(s.window, s.elapsed())  # + checkpoints, metrics
                    s.window = Window(lr, time.perf_counter())
                stop = budget.stalled(t, p) or spent
        except KeyboardInterrupt as interrupt:
            return self._finish(budget.INTERRUPTED, s, interrupt)
        return self._finish(stop, s)

    def _updates(self) -> Iterator[list[np.ndarray]]:
        """The batches of each update (``train.accum`` of them), epoch after epoch from where
        the run stands (``progress.epoch`` and ``batch_in_epoch``, which the loop advances
        as it consumes them), until ``train.max_epochs`` (0: no end)."""
        t, p = self.cfg.train, self.progress
        while not t.max_epochs or p.epoch < t.max_epochs:
            batches = self._epoch(p.epoch)
            while p.batch_in_epoch < len(batches):
                yield batches[p.batch_in_epoch:p.batch_in_epoch + t.accum]
            p.epoch += 1
            p.batch_in_epoch = 0

    def _finish(self, stop_reason: str, s: Session,
                interrupt: KeyboardInterrupt | None = None) -> dict[str, Any]:
        """Every stop ends the run here (a budget, early stopping, Ctrl-C): a validation of the
        update it stopped at where one is due (:func:`.validate.due`), which writes ``last.pt``,
        ``best.pt`` (where best), ``metrics.csv`` and curves.png; the summary (:attr:`summary`,
        returned). Ctrl-C (``interrupt``, raised again) validates ``interim`` (a second Ctrl-C
        skips it) and always writes ``last.pt`` (:func:`.budget.save_interrupted`)."""
        t, p, directory = self.cfg.train, self.progress, self.directory
        s.bar.close()
        p.elapsed_s = s.elapsed()
        try:  # (no checkpoint before the first of an --overwrite run stopped by Ctrl-C)
            if validate.due(p) and (interrupt is None or directory.earlier is None):
                if interrupt is not None:
                    log.warning("interrupted at step %d: validating it (Ctrl-C again skips that)", p.step)
                try:
                    self._validation_round(s.window, p.elapsed_s, interim=interrupt is not None)
                except KeyboardInterrupt as again:
                    log.warning("interrupted again: the validation of step %d skipped", p.step)
                    interrupt = interrupt or again
            self.summary = summary = {**(p.history[-1] if p.history else {}), "step": p.step,
                                      "epoch": p.epoch, "stop_reason": stop_reason if interrupt
                                      is None else budget.INTERRUPTED}
            if interrupt is not None:
                budget.save_interrupted(p, directory.saved_at, self.save,
                                        directory.earlier is not None, directory.path, log)
                raise interrupt
            p.elapsed_s = s.elapsed()
            if self.place.world > 1:
                log.info("ranks in sync: weight checksum %.6f", distributed.assert_in_sync(self.model))
            log.info("stopped: %s (step %d, epoch %d, %.1f min)", stop_reason, p.step, p.epoch,
                     p.elapsed_s / 60)
            if t.forgetting_splits and self.place.main:  # forgetting.json: the "after"
                with self._averaged():
                    finetune.report_forgetting(self.bundle(), self.cfg.data, t.forgetting_splits,
                                               p.forgetting_before, p.parent, p.step,
                                               directory.path / "forgetting.json")
        finally:
            self._close_tensorboard()  # (its events written out)
        return summary

    # --- the loop's steps ---------------------------------------------------------------------

    def _epoch(self, epoch: int) -> list[np.ndarray]:
        """The batches of ``epoch`` (with ``data.subword_alpha``, of its own segmentation,
        the same on every rank)."""
        self.data.epoch_ids(epoch)
        batches = self.epoch_batches(epoch)
        if not batches:  # (never loop over epochs without a batch)
            raise TrainingError(f"epoch {epoch} has no training batch on rank "
                                f"{self.place.rank} of {self.place.world}")
        return batches

    def epoch_batches(self, epoch: int) -> list[np.ndarray]:
        """This rank's batches of training epoch ``epoch`` (fixed shapes with train.cuda_graphs)."""
        t = self.cfg.train
        return self.data.train_ids.batches(t.max_tokens, t.seed, epoch, rank=self.place.rank,
                                           world=self.place.world, static=t.cuda_graphs)

    def _update(self, group: list[np.ndarray]) -> tuple[float, float, int]:
        """The next update, over the ``group`` batches (:meth:`.step.Updater.update`)."""
        return self.updater.update(self.data.train_ids, group, self.progress.step + 1)

    def _note_update(self, s: Session, loss: float, n_tok: int, lr: float) -> None:
        """An update counted: the bar, ``losses.csv``'s window, the budget planner's timing
        and, every ``log_every`` updates, loss, rate and tokens/s on the bar and in TensorBoard."""
        p, t = self.progress, self.cfg.train
        s.bar.update()
        self.loss_log.note(p, loss, n_tok, lr)
        if t.budget_schedule:
            self.planner.after_update(time.perf_counter(), s.elapsed())
        if p.step % t.log_every != 0:
            return
        window, scaler = s.window, self.updater.scaler
        loss_now, tokens_per_s = window.loss / window.tok, window.tok / (time.perf_counter() - window.t0)
        scale = scaler.get_scale() if scaler.is_enabled() else None  # fp16
        s.bar.show(p.step, p.epoch, loss_now, lr, tokens_per_s, scale)
        if self.tensorboard is not None:
            self.tensorboard.training(p.step, loss_now, lr, tokens_per_s, scale)

    def validate(self) -> dict[str, float]:
        """The model's validation scores now (:func:`.validate.validation_scores`)."""
        return validate.validation_scores(self.bundle(), self.data.valid_ids, self.data.valid_sets,
                                          self.place.device, self.updater.autocast)

    def _validation_round(self, window: Window, elapsed_s: float, interim: bool = False) -> None:
        """Validate, keep the best, save, write the metrics and samples. ``interim`` (Ctrl-C's): what
        last.pt keeps (history, best, schedule, budget plan, RNG) takes no notice of it."""
        p, t, started = self.progress, self.cfg.train, time.perf_counter()
        with self._averaged(), validate.rng_untouched() if interim else nullcontext():
            metrics = self.validate()  # (train.ema: the average is what is validated and kept)
        if interim:
            best = validate.beats(t, p.best, metrics)
        else:
            self.schedule.validation(metrics["valid_loss"])
            self.planner.after_validation(started, time.perf_counter(), elapsed_s)
            best = validate.improved(t, p, metrics)
        row = validate.metrics_row(p, window, metrics, elapsed_s)
        p.elapsed_s = elapsed_s
        if not interim:  # Ctrl-C's row is not in last.pt: a resumed run's are the straight run's
            p.history.append(row)
        self.save(best=best)
        if interim:  # (but in metrics.csv and the summary)
            p.history.append(row)
        if self.place.main:
            write_metrics(self.directory.path, self.cfg, p)
        self.after_validation()
        validate.log_validation(log, p.step, metrics, best)
        samples = self.write_samples()
        if self.tensorboard is not None:
            self.tensorboard.validation(p.step, row, samples, self.bundle(),
                                        self.data.valid_text.src, self.data.valid_sets[0].tgt_lang)

    def write_samples(self) -> list[tuple[str, str, str]]:
        """This validation's samples (:func:`.validate.sample_translations`; rank 0)."""
        if not self.place.main:
            return []
        return validate.sample_translations(self.bundle(), self.data.valid_sets, self.progress,
                                            partial(append_samples, self.directory.path))

    def after_validation(self) -> None:
        """``on_validation(run_dir)`` (e.g. the CLI's curves.png redraw; rank 0): :func:`.validate.notify`."""
        if self.place.main:
            validate.notify(self.on_validation, self.directory.path)

    # --- checkpoints ------------------------------------------------------------------------------

    def save(self, best: bool = False) -> None:
        """``last.pt`` (``best.pt``, ``step_*.pt``): :meth:`.run_dir.RunDirectory.save` (rank 0)."""
        if not self.place.main:
            return
        u = self.updater
        payload = checkpoint_payload(self.cfg, self.data.vocabs, self.model, u.ema, u.optimizer,
                                     self.schedule, u.scaler, self.progress)
        self.directory.save(payload, self.progress, best, self.cfg.train.keep_last)

    def bundle(self) -> Bundle:
        v = self.data.vocabs
        return Bundle(self.cfg, self.model, v.src_tok, v.tgt_tok, v.src_vocab, v.tgt_vocab)

    def _averaged(self) -> AbstractContextManager[None]:
        """``train.ema``: the model holds the averaged weights inside the block."""
        return self.updater.ema.applied() if self.updater.ema is not None else nullcontext()

    def _close_tensorboard(self) -> None:
        """Write out and close TensorBoard's events file (if any)."""
        if self.tensorboard is not None:
            self.tensorboard.close()


def train(cfg: Config, run_dir: str | Path, start: Start = SCRATCH, *,
          on_validation: Callable[[Path], None] | None = None,
          attention_image: AttentionImage | None = None) -> dict[str, Any]:
    """Build a :class:`Trainer` and run it; under torchrun, leave the process group after."""
    try:
        result = Trainer(cfg, run_dir, start, on_validation=on_validation,
                         attention_image=attention_image).run()
    except BaseException:
        distributed.shutdown()
        raise
    distributed.shutdown(sync=True)
    return result
