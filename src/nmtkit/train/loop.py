"""The training loop: one loop for every model of the :mod:`nmtkit.models.seq2seq` interface.

:meth:`Trainer.run` is The Annotated Transformer's ``run_epoch`` (written plainly as a
comment above the real loop), its steps named, each in a module of its own:

- :mod:`~nmtkit.train.setup`: data, model and where the run starts (fresh, ``--resume``,
  ``--init-from``), built from the config;
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
from contextlib import AbstractContextManager, contextmanager, nullcontext
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from ..checkpoint import Bundle
from ..config import Config, check_installed, check_trainable
from ..fast import onednn
from . import budget, distributed, finetune, setup, validate
from .ema import WeightAverage
from .progress import ProgressBar
from .run_dir import (
    EarlierRun,
    LossLog,
    Progress,
    RunDirLock,
    append_samples,
    check_fresh,
    check_run_dir_path,
    checkpoint_payload,
    prepare_run_dir,
    save_checkpoints,
    warn_of_set_aside_runs,
    write_metrics,
)
from .step import TrainingError, Updater, check_nonfinite, effective_amp
from .tensorboard import AttentionImage, TensorBoard
from .validate import Window

log = logging.getLogger(__name__)


class Trainer:
    """Builds data, model and optimizer from a :class:`Config` and runs the loop."""

    _lock: RunDirLock | None = None  # rank 0's lock on the run directory while it is in use
    earlier: EarlierRun | None = None  # --overwrite: the earlier run, until the first checkpoint
    tensorboard: TensorBoard | None = None  # train.tensorboard (rank 0)
    saved_at: tuple[int, int, int] | None = None  # (step, epoch, batch) of the last save
    summary: dict[str, Any] | None = None  # how the last run() ended (Ctrl-C included)

    def __init__(self, cfg: Config, run_dir: str | Path, resume: bool = False,
                 overwrite: bool = False, on_validation: Callable[[Path], None] | None = None,
                 init_from: str | Path | None = None, vocab_from: str | Path | None = None,
                 attention_image: AttentionImage | None = None):
        """``on_validation(run_dir)``: called after each validation has written metrics.csv;
        ``attention_image``: draws TensorBoard's attention image (None: a grey map). The
        command line passes :func:`nmtkit.viz.curves.redraw_curves` and
        :func:`nmtkit.viz.attention.attention_image`: figures live above training.
        ``init_from``: a checkpoint to fine-tune (:mod:`nmtkit.train.finetune`: its weights,
        tokenizers and vocabularies; a fresh optimizer and schedule); ``vocab_from``: one
        whose tokenizers and vocabularies only are used (:func:`~.setup.check_start_flags`).
        The run directory is locked (:class:`RunDirLock`, rank 0) from before the data is
        read until :meth:`run` ends."""
        check_trainable(cfg, f"config {cfg.name!r}")  # before the run directory is touched
        setup.check_start_flags(resume, init_from, vocab_from)
        self.cfg, self.run_dir = cfg, Path(run_dir)
        check_run_dir_path(self.run_dir)
        self.on_validation, self.attention_image = on_validation, attention_image
        self.rank, self.world, self.device = setup.place(cfg.train)
        self._lock = RunDirLock(self.run_dir) if self.rank == 0 else None
        try:
            self._set_up(resume, overwrite, init_from, vocab_from)
        except BaseException:
            self._unlock(failed_set_up=True)
            raise

    def _unlock(self, failed_set_up: bool = False) -> None:
        """Let go of the run directory's lock (see :class:`RunDirLock`)."""
        lock, self._lock = self._lock, None
        if lock is not None:
            lock.release(failed_set_up)

    def _set_up(self, resume: bool, overwrite: bool, init_from: str | Path | None,
                vocab_from: str | Path | None) -> None:
        """:meth:`__init__`'s work once the run directory is locked."""
        cfg, t = self.cfg, self.cfg.train
        if self.rank == 0:
            warn_of_set_aside_runs(self.run_dir)
        ckpt = setup.resume_checkpoint(self.run_dir, cfg) if resume else None
        if ckpt is None:
            check_fresh(self.run_dir, overwrite)
        parent, vocab_source = setup.start_checkpoints(cfg, init_from, vocab_from)
        # Where tokenizers and vocabularies come from (None: learnt from the training data).
        given = next((c for c in (ckpt, parent, vocab_source) if c is not None), None)
        setup.seed_everything(t.seed)
        # The data first: a corpus error leaves no run directory behind (the lock's goes again).
        data = setup.load_data(cfg, given, fine_tuning=parent is not None or vocab_source is not None)
        self.vocabs, self.train_ids, self.sampler = data.vocabs, data.train_ids, data.sampler
        self.valid_sets, self.valid_ids = data.valid_sets, data.valid_ids
        self.valid_text = self.valid_sets[0].text
        prepare_run_dir(self.run_dir)
        self.model = setup.build_training_model(cfg, self.vocabs, self.device, parent)
        self.amp = effective_amp(t.amp, self.device)  # train.amp where it runs faster
        self.optimizer, self.schedule, self.scaler = setup.optimization(cfg, self.model, self.device)
        self.progress = Progress(parent=str(init_from) if parent is not None else None)
        if ckpt is not None:
            self.progress = setup.restore_training_state(ckpt, self.model, self.optimizer,
                                                         self.schedule, self.scaler)
            budget.replan_resumed_budget(t, self.progress, self.schedule,
                                         setup.stored_train_section(ckpt)["max_minutes"], log)
            log.info("resumed from step %d (epoch %d, batch %d)", self.progress.step,
                     self.progress.epoch, self.progress.batch_in_epoch)
        self.ema = WeightAverage(self.model, t.ema) if t.ema > 0 else None
        if self.ema is not None and ckpt is not None and "train_model" in ckpt:
            self.ema.load_state_dict(ckpt["model"])
        tags = setup.word_dropout_exempt(cfg, self.vocabs, self.device)
        self.updater = Updater(t, self.model, self.optimizer, self.scaler, self.ema, self.amp,
                               self.device, self.world, tags)
        self.loss_log = LossLog(t)
        self.n_params = sum(p.numel() for p in {id(p): p for p in self.model.parameters()}.values())
        log.info("model %s: %.2fM parameters on %s", cfg.model.arch, self.n_params / 1e6,
                 self.device)
        if self.device.type == "cpu":  # (what a time budget buys depends on it: README)
            log.info("host: %s; training in %s", onednn.describe_host(),
                     "bfloat16" if self.amp == "bf16" else "float32")
        if t.forgetting_splits and ckpt is None:  # the "before" of forgetting.json
            self.progress.forgetting_before = finetune.score_splits(self.bundle(), cfg.data,
                                                                    t.forgetting_splits)
        # --overwrite: the earlier run moves aside as late as possible, once everything above
        # (data, model, optimizer) has been built; it is deleted at this run's first checkpoint.
        if not resume and overwrite and self.rank == 0:
            self.earlier = EarlierRun.set_aside(self.run_dir)
        with self._put_back_on_failure():
            if t.tensorboard and self.rank == 0:
                check_installed(cfg, "train.tensorboard")
                self.tensorboard = TensorBoard(self.run_dir, self.progress.step + 1 if resume
                                               else None, self.attention_image)

    # --- the loop -----------------------------------------------------------------------------

    def run(self) -> dict[str, Any]:
        """Train until a budget or early stopping ends the run; returns the last metrics. The
        run directory's lock ends with it (a second call takes it again)."""
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
        self.model.train()
        session_start, elapsed_before = time.perf_counter(), p.elapsed_s

        def elapsed() -> float:  # training wall time over all sessions
            return elapsed_before + time.perf_counter() - session_start

        window, nonfinite = Window(self.schedule.rate(p.step), time.perf_counter()), 0
        self.planner = budget.BudgetPlanner(t, p, self.schedule, self.world, self.device, log)
        bar = ProgressBar(t, p.step)
        stop_reason = budget.already_ended(t, p, self.schedule.plan)  # a finished run resumed
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
        try:
            while stop_reason is None:
                if t.max_epochs and p.epoch >= t.max_epochs:
                    stop_reason = f"max_epochs={t.max_epochs}"
                    break
                batches = self._epoch(p.epoch)
                while p.batch_in_epoch < len(batches):
                    group = batches[p.batch_in_epoch:p.batch_in_epoch + t.accum]
                    lr = self.schedule.set_step(p.step + 1)
                    self.model.set_train_step(p.step)
                    loss_val, nll_val, n_tok = self._update(group)
                    # Counted once consumed: a Ctrl-C inside the update saves the position
                    # before it, so --resume repeats that update exactly.
                    p.batch_in_epoch += len(group)
                    if not math.isfinite(loss_val):  # the update was skipped
                        nonfinite += 1
                        check_nonfinite(nonfinite, p.step + 1, loss_val, t.max_nonfinite)
                        continue
                    nonfinite = 0
                    p.step += 1
                    p.tgt_tokens += n_tok
                    window.add(loss_val, nll_val, n_tok, lr)
                    bar.update()
                    self.loss_log.note(p, loss_val, n_tok, lr)
                    if t.budget_schedule:
                        self.planner.after_update(time.perf_counter(), elapsed())
                    if p.step % t.log_every == 0:
                        self._log_progress(bar, window, lr)
                    spent = budget.spent(t, p, elapsed(), self.schedule.plan, self.world, self.device)
                    if budget.validation_due(t, p, self.schedule.plan):
                        self._validation_round(window, elapsed())
                        window = Window(lr, time.perf_counter())
                    stop_reason = budget.stalled(t, p) or spent
                    if stop_reason:
                        break
                if stop_reason is None:
                    p.epoch += 1
                    p.batch_in_epoch = 0
        except KeyboardInterrupt as interrupt:
            return self._finish(budget.INTERRUPTED, window, elapsed, bar, interrupt)
        return self._finish(stop_reason, window, elapsed, bar)

    def _finish(self, stop_reason: str, window: Window, elapsed: Callable[[], float],
                bar: ProgressBar, interrupt: KeyboardInterrupt | None = None) -> dict[str, Any]:
        """Every stop ends the run here (a budget, early stopping, Ctrl-C): a validation of the
        update it stopped at where one is due (:func:`.validate.due`), which writes ``last.pt``,
        ``best.pt`` (where best), ``metrics.csv`` and curves.png; the summary (:attr:`summary`,
        returned). Ctrl-C (``interrupt``, raised again) validates ``interim`` (a second Ctrl-C
        skips it) and always writes ``last.pt`` (:func:`.budget.save_interrupted`)."""
        t, p = self.cfg.train, self.progress
        bar.close()
        p.elapsed_s = elapsed()
        try:  # (no checkpoint before the first of an --overwrite run stopped by Ctrl-C)
            if validate.due(p) and (interrupt is None or self.earlier is None):
                if interrupt is not None:
                    log.warning("interrupted at step %d: validating it (Ctrl-C again skips that)", p.step)
                try:
                    self._validation_round(window, p.elapsed_s, interim=interrupt is not None)
                except KeyboardInterrupt as again:
                    log.warning("interrupted again: the validation of step %d skipped", p.step)
                    interrupt = interrupt or again
            self.summary = summary = {**(p.history[-1] if p.history else {}), "step": p.step,
                                      "epoch": p.epoch, "stop_reason": stop_reason if interrupt
                                      is None else budget.INTERRUPTED}
            if interrupt is not None:
                budget.save_interrupted(p, self.saved_at, self.save, self.earlier is not None,
                                        self.run_dir, log)
                raise interrupt
            p.elapsed_s = elapsed()
            if self.world > 1:
                log.info("ranks in sync: weight checksum %.6f", distributed.assert_in_sync(self.model))
            log.info("stopped: %s (step %d, epoch %d, %.1f min)", stop_reason, p.step, p.epoch,
                     p.elapsed_s / 60)
            if t.forgetting_splits and self.rank == 0:  # forgetting.json: the "after"
                with self._averaged():
                    finetune.report_forgetting(self.bundle(), self.cfg.data, t.forgetting_splits,
                                               p.forgetting_before, p.parent, p.step,
                                               self.run_dir / "forgetting.json")
        finally:
            if self.tensorboard is not None:  # (its events written out)
                self.tensorboard.close()
        return summary

    # --- the loop's steps ---------------------------------------------------------------------

    def _epoch(self, epoch: int) -> list[np.ndarray]:
        """The batches of ``epoch`` (with ``data.subword_alpha``, of its own segmentation,
        the same on every rank)."""
        if self.sampler is not None:
            self.train_ids = self.sampler.ids(epoch)
        batches = self.epoch_batches(epoch)
        if not batches:  # (never loop over epochs without a batch)
            raise TrainingError(f"epoch {epoch} has no training batch on rank "
                                f"{self.rank} of {self.world}")
        return batches

    def epoch_batches(self, epoch: int) -> list[np.ndarray]:
        """This rank's batches of training epoch ``epoch`` (fixed shapes with train.cuda_graphs)."""
        t = self.cfg.train
        return self.train_ids.batches(t.max_tokens, t.seed, epoch, rank=self.rank,
                                      world=self.world, static=t.cuda_graphs)

    def _update(self, group: list[np.ndarray]) -> tuple[float, float, int]:
        """The next update, over the ``group`` batches (:meth:`.step.Updater.update`)."""
        return self.updater.update(self.train_ids, group, self.progress.step + 1)

    def _log_progress(self, bar: ProgressBar, window: Window, lr: float) -> None:
        """Every ``log_every`` updates: loss, rate and tokens/s on the bar and in TensorBoard."""
        p, dt = self.progress, time.perf_counter() - window.t0
        loss, tokens_per_s = window.loss / window.tok, window.tok / dt
        scale = self.scaler.get_scale() if self.scaler.is_enabled() else None  # fp16
        bar.show(p.step, p.epoch, loss, lr, tokens_per_s, scale)
        if self.tensorboard is not None:
            self.tensorboard.training(p.step, loss, lr, tokens_per_s, scale)

    def validate(self) -> dict[str, float]:
        """The model's validation scores now (:func:`.validate.validation_scores`)."""
        return validate.validation_scores(self.bundle(), self.valid_ids, self.valid_sets,
                                          self.device, self.updater.autocast)

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
        if self.rank == 0:
            write_metrics(self.run_dir, self.cfg, p)
        self.after_validation()
        validate.log_validation(log, p.step, metrics, best)
        samples = self.write_samples()
        if self.tensorboard is not None:
            self.tensorboard.validation(p.step, row, samples, self.bundle(), self.valid_text.src,
                                        self.valid_sets[0].tgt_lang)

    def write_samples(self) -> list[tuple[str, str, str]]:
        """This validation's samples (:func:`.validate.sample_translations`; rank 0)."""
        if self.rank != 0:
            return []
        return validate.sample_translations(self.bundle(), self.valid_sets, self.progress,
                                            partial(append_samples, self.run_dir))

    def after_validation(self) -> None:
        """``on_validation(run_dir)`` (e.g. the CLI's curves.png redraw; rank 0): :func:`.validate.notify`."""
        if self.rank == 0:
            validate.notify(self.on_validation, self.run_dir)

    # --- checkpoints ------------------------------------------------------------------------------

    def save(self, best: bool = False) -> None:
        """``last.pt`` (``best.pt``, ``step_*.pt``): :func:`.run_dir.save_checkpoints`."""
        if self.rank != 0:
            return
        p = self.progress
        payload = checkpoint_payload(self.cfg, self.vocabs, self.model, self.ema, self.optimizer,
                                     self.schedule, self.scaler, p)
        save_checkpoints(self.run_dir, payload, p.step, best, self.cfg.train.keep_last)
        self.saved_at = (p.step, p.epoch, p.batch_in_epoch)
        earlier, self.earlier = self.earlier, None  # (--overwrite) this run has a checkpoint now
        if earlier is not None:
            earlier.drop()

    def bundle(self) -> Bundle:
        v = self.vocabs
        return Bundle(self.cfg, self.model, v.src_tok, v.tgt_tok, v.src_vocab, v.tgt_vocab)

    def _averaged(self) -> AbstractContextManager[None]:
        """``train.ema``: the model holds the averaged weights inside the block."""
        return self.ema.applied() if self.ema is not None else nullcontext()

    @contextmanager
    def _put_back_on_failure(self) -> Iterator[None]:
        """Any exception out of the block (KeyboardInterrupt included) while an earlier run is
        set aside puts it back (:meth:`EarlierRun.put_back`), then goes on."""
        try:
            yield
        except BaseException:
            earlier, self.earlier = self.earlier, None
            if earlier is not None:
                if self.tensorboard is not None:  # (its events file is this run's: closed first)
                    self.tensorboard.close()
                earlier.put_back()
            raise


def train(cfg: Config, run_dir: str | Path, resume: bool = False, overwrite: bool = False,
          on_validation: Callable[[Path], None] | None = None,
          init_from: str | Path | None = None, vocab_from: str | Path | None = None,
          attention_image: AttentionImage | None = None) -> dict[str, Any]:
    """Build a :class:`Trainer` and run it; under torchrun, leave the process group after."""
    try:
        result = Trainer(cfg, run_dir, resume, overwrite, on_validation, init_from,
                         vocab_from, attention_image).run()
    except BaseException:
        distributed.shutdown()
        raise
    distributed.shutdown(sync=True)
    return result
