"""One training step and one epoch in the size of an idea (The Annotated Transformer's
``run_epoch``; Vaswani et al. 2017, Sec. 5).

A step is teacher forcing (the whole target prefix in one forward pass), the
label-smoothed loss of :mod:`nmtkit.models.loss` per target token (Sec. 5.4), its gradient,
optional clipping, the rate of the step (Eq. 3, any function of the step) and the optimizer
update. :class:`nmtkit.train.loop.Trainer` runs the same update (``tests/test_simple.py``
checks the loss and every gradient against it) and adds what a real run needs: gradient
accumulation, mixed precision, the fused loss, skipped non-finite steps, budgets,
validation, checkpoints that resume exactly, and several processes.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

import torch

from ..data.batching import Batch
from ..models.loss import label_smoothed_loss
from ..models.seq2seq import Seq2Seq

log = logging.getLogger(__name__)


def train_step(model: Seq2Seq, batch: Batch, optimizer: torch.optim.Optimizer, lr: float,
               label_smoothing: float = 0.1, clip_norm: float = 0.0) -> float:
    """One update on one batch at rate ``lr``; returns the loss per target token (KL(q || p)
    with q the smoothed target). The gradients it applied stay in ``p.grad``."""
    model.train()
    optimizer.zero_grad()
    log_probs = model(batch.src, batch.src_mask, batch.tgt_in)  # (B, T, V): every position at once
    loss, _, n_tokens = label_smoothed_loss(log_probs, batch.tgt_out, label_smoothing)
    torch.autograd.backward(loss / n_tokens)  # gradients of the mean over the target tokens
    if clip_norm > 0:
        torch.nn.utils.clip_grad_norm_(model.parameters(), clip_norm)
    for group in optimizer.param_groups:
        group["lr"] = lr
    optimizer.step()
    return float(loss.detach()) / int(n_tokens)


def run_epoch(model: Seq2Seq, batches: Iterable[Batch], optimizer: torch.optim.Optimizer,
              rate: Callable[[int], float], step: int = 0, label_smoothing: float = 0.1,
              clip_norm: float = 0.0, log_every: int = 50) -> tuple[float, int]:
    """One pass over ``batches``, one update each at ``rate(update number)`` (counted from 1).
    ``step`` is the number of updates made before. Returns (the loss per target token over
    the epoch, the number of updates made so far)."""
    total_loss, total_tokens = 0.0, 0
    for batch in batches:
        step += 1
        loss = train_step(model, batch, optimizer, rate(step), label_smoothing, clip_norm)
        total_loss += loss * batch.n_tokens
        total_tokens += batch.n_tokens
        if step % log_every == 0:
            log.info("step %d loss %.3f lr %.2e", step, loss, rate(step))
    return total_loss / max(total_tokens, 1), step
