"""One update: forward and backward over ``train.accum`` batches, the optimizer step.

The gradient of an update is that of the label-smoothed loss (Vaswani et al. 2017,
Sec. 5.4) summed over its batches and divided by their target tokens, so that
accumulating k batches is one step on a k times larger batch (Sec. 5.1's 25,000 target
tokens per batch on a machine that holds fewer). Around that:

- mixed precision (``train.amp``): bf16 autocast where it is faster; fp16 with a dynamic
  loss scale (:meth:`Updater._scaled_step`);
- a non-finite loss or gradient norm skips the step (the loop counts them:
  ``train.max_nonfinite`` in a row end the run with :class:`TrainingError`);
- the loss itself through the fastest path that computes the same numbers: the readable
  ``model.logits`` then :func:`~nmtkit.models.loss.label_smoothed_cross_entropy`, or
  compiled (``train.compile``), or the output layer and loss in blocks of rows on a CPU
  (:mod:`nmtkit.fast.output_loss`), or replayed from CUDA graphs (``train.cuda_graphs``);
- ``train.word_dropout`` and ``train.rdrop`` (:mod:`nmtkit.train.regularize`);
- under torchrun, gradients summed over the processes and divided by the global count;
- ``train.ema``: the moving average updated after each step.
"""

from __future__ import annotations

import logging
import math

import numpy as np
import torch

from .. import fast
from ..config import TrainConfig
from ..data.batching import Batch, ParallelIds, pad_mask
from ..errors import UserError
from ..fast import onednn
from ..fast.cuda_graphs import GraphedLoss
from ..models.loss import label_smoothed_cross_entropy, smoothed_loss_sums
from ..models.seq2seq import Seq2Seq
from . import distributed
from .ema import WeightAverage
from .regularize import rdrop_loss, word_dropout

log = logging.getLogger(__name__)


class TrainingError(UserError, RuntimeError):
    """Training cannot go on (e.g. repeated non-finite losses)."""


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


def check_nonfinite(in_a_row: int, step: int, loss: float, limit: int) -> None:
    """Update ``step`` was skipped for a non-finite ``loss``, the ``in_a_row``-th in a row:
    a warning; ``train.max_nonfinite`` (``limit``) in a row end the run."""
    log.warning("step %d: non-finite loss (%s); update skipped (%d in a row)", step, loss,
                in_a_row)
    if in_a_row >= limit:
        raise TrainingError(f"{in_a_row} consecutive non-finite losses at step {step}: "
                            "lower train.lr, raise train.warmup or set train.clip_norm")


class Updater:
    """One update of ``model`` (:meth:`update`), with the loss path chosen once from the
    config: compiled forward, blocked output loss, CUDA graphs, or the readable one."""

    def __init__(self, t: TrainConfig, model: Seq2Seq, optimizer: torch.optim.Optimizer,
                 scaler: torch.amp.GradScaler, ema: WeightAverage | None, amp: str,
                 device: torch.device, world: int, tag_ids: torch.Tensor):
        """``amp``: ``train.amp`` as :func:`effective_amp` resolved it; ``tag_ids``: source
        ids that ``train.word_dropout`` leaves (language and back-translation tags)."""
        self.t, self.model, self.optimizer, self.scaler, self.ema = t, model, optimizer, scaler, ema
        self.amp, self.device, self.world, self.tag_ids = amp, device, world, tag_ids
        # The training forward, compiled on request; checkpoints and decoding use the model.
        self.compiled_logits = (torch.compile(model.logits, dynamic=True)
                                if t.compile and not t.cuda_graphs else None)
        # A Transformer on a CPU: the output layer and the loss in blocks of rows, the same
        # numbers faster (nmtkit.fast.output_loss); None: the readable logits-then-loss path.
        self.blocked_loss = (fast.training_loss(model)
                             if t.fast and not t.compile and amp in ("off", "bf16") else None)
        # train.cuda_graphs: forward + backward replayed per fixed batch shape (nmtkit.fast).
        self.graphs = self._graphed_loss() if t.cuda_graphs else None

    def autocast(self) -> torch.autocast:
        """``train.amp`` as :func:`effective_amp` resolved it: fp16 on any device (a CPU runs
        it to test the code path), bf16 on CUDA and on CPUs with bfloat16 in hardware."""
        if self.amp == "fp16":
            return torch.autocast(self.device.type, dtype=torch.float16)
        if self.amp == "bf16":
            return torch.autocast(self.device.type, dtype=torch.bfloat16)
        return torch.autocast("cpu", enabled=False)

    def update(self, train_ids: ParallelIds, group: list[np.ndarray],
               step: int) -> tuple[float, float, int]:
        """Forward/backward over the ``group`` batches of ``train_ids`` and one optimizer step
        (unless non-finite) as update ``step`` (from 1). Returns (loss sum, NLL sum, target
        tokens); a non-finite loss sum means the step was skipped."""
        if self.graphs is not None:
            return self._graphed_update(train_ids, group, step)
        batches = [train_ids.collate(idx) for idx in group]
        total = sum(b.n_tokens for b in batches)
        loss_sum, nll_sum = 0.0, 0.0
        for b in batches:
            loss, nll = self.batch_loss(b.to(self.device))
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
        return self._step(loss_sum, nll_sum, total, step)

    def batch_loss(self, b: Batch) -> tuple[torch.Tensor, torch.Tensor]:
        """The training loss of one batch and its NLL, summed over its target tokens:
        label-smoothed cross-entropy, with ``train.word_dropout`` on the inputs and
        ``train.rdrop`` (two passes in one forward) where they are on."""
        t = self.t
        forward = self.compiled_logits or self.model.logits
        src = word_dropout(b.src, t.word_dropout, self.tag_ids)
        tgt_in = word_dropout(b.tgt_in, t.word_dropout)
        if t.rdrop:  # the batch twice, stacked: (2B, ...), one dropout mask each half
            src, tgt_in = torch.cat([src, src]), torch.cat([tgt_in, tgt_in])
            src_mask = torch.cat([b.src_mask, b.src_mask])
            with self.autocast():
                logits = forward(src, src_mask, tgt_in)  # (2B, T, V)
            return rdrop_loss(logits, b.tgt_out, t.label_smoothing, t.rdrop)
        if self.blocked_loss is not None:
            with self.autocast():
                loss, nll, _ = self.blocked_loss(src, b.src_mask, tgt_in, b.tgt_out,
                                                 t.label_smoothing)
            return loss, nll
        with self.autocast():
            logits = forward(src, b.src_mask, tgt_in)
        loss, nll, _ = label_smoothed_cross_entropy(logits, b.tgt_out, t.label_smoothing)
        return loss, nll

    def _step(self, loss_sum: float, nll_sum: float, total: int,
              step: int) -> tuple[float, float, int]:
        """The optimizer step on the accumulated gradients, skipped for a non-finite loss or
        gradient norm; gradients cleared after."""
        t = self.t
        if not math.isfinite(loss_sum):
            self._zero_grad()
            return loss_sum, nll_sum, total
        if self.scaler.is_enabled():
            out = self._scaled_step(loss_sum, nll_sum, total, step)
            if self.ema is not None:
                self.ema.update(step)
            return out
        if t.clip_norm > 0:
            norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), t.clip_norm)
            if not torch.isfinite(norm):
                self._zero_grad()
                return float("nan"), nll_sum, total
        self.optimizer.step()
        self._zero_grad()
        if self.ema is not None:
            self.ema.update(step)
        return loss_sum, nll_sum, total

    def _scaled_step(self, loss_sum: float, nll_sum: float, total: int,
                     step: int) -> tuple[float, float, int]:
        """fp16 (``train.amp: fp16``): the optimizer step through the loss scaler. Gradients that
        overflowed at this scale (inf/NaN while the loss is finite) skip the step and halve the
        scale; the step still counts, as in PyTorch's AMP recipe. After ``growth_interval``
        clean steps the scale doubles."""
        t = self.t
        self.scaler.unscale_(self.optimizer)  # true gradients, for clipping
        if t.clip_norm > 0:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), t.clip_norm)
        before = self.scaler.get_scale()
        self.scaler.step(self.optimizer)  # skipped if unscale_ found inf/NaN gradients
        self.scaler.update()
        self.optimizer.zero_grad(set_to_none=True)
        if self.scaler.get_scale() < before:
            log.info("step %d: fp16 gradients overflowed: update skipped, loss scale %g -> %g",
                     step, before, self.scaler.get_scale())
        return loss_sum, nll_sum, total

    def _zero_grad(self) -> None:
        if self.graphs is not None:
            self.graphs.zero_grad()  # in place: the graphs hold the gradients' addresses
        else:
            self.optimizer.zero_grad(set_to_none=True)

    # --- train.cuda_graphs --------------------------------------------------------------------

    def _graphed_loss(self) -> GraphedLoss:
        """The training loss of a batch as :class:`GraphedLoss` replays it (captured on a GPU;
        on a CPU the same buffers and calls run eagerly)."""
        if self.world > 1:
            raise TrainingError("train.cuda_graphs runs in one process: unset it for torchrun")
        capture = self.device.type == "cuda"
        if not capture:
            log.warning("train.cuda_graphs: no CUDA device, so fixed batch shapes without graphs")
        eps, model = self.t.label_smoothing, self.model
        bf16 = self.t.amp == "bf16" and capture

        def loss(src: torch.Tensor, tgt_in: torch.Tensor,
                 tgt_out: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            return smoothed_loss_sums(model.logits(src, pad_mask(src), tgt_in), tgt_out, eps)

        def autocast() -> torch.autocast:  # no cast cache: a graph must not keep its casts
            return torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=bf16,
                                  cache_enabled=False)

        # train.compile: one compilation for symbolic shapes (the warm-up passes before each
        # capture run it), whose fused kernels every shape's graph then replays.
        loss_fn = torch.compile(loss, dynamic=True) if self.t.compile else loss
        return GraphedLoss(model, loss_fn, autocast, capture=capture)

    def _graphed_update(self, train_ids: ParallelIds, group: list[np.ndarray],
                        step: int) -> tuple[float, float, int]:
        """:meth:`update` with train.cuda_graphs: the same loss, normalised the same way,
        through fixed-shape batches replayed by :attr:`graphs`; one host synchronisation
        (reading the loss) per update."""
        assert self.graphs is not None
        batches = [train_ids.collate(idx, static_tokens=self.t.max_tokens).to(self.device)
                   for idx in group]
        total = sum(b.n_tokens for b in batches)
        self.graphs.prepare([(b.src, b.tgt_in, b.tgt_out) for b in batches])
        sums = torch.zeros(2, device=self.device)
        for b in batches:
            loss, nll = self.graphs.run(b.src, b.tgt_in, b.tgt_out, 1.0 / total)
            sums += torch.stack((loss.float(), nll.float()))
        loss_sum, nll_sum = sums.tolist()
        return self._step(loss_sum, nll_sum, total, step)

