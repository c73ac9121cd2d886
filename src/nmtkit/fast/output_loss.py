"""The output projection and the label-smoothed loss in one pass over blocks of rows (CPU training).

The readable model computes every target position's scores over the whole vocabulary,
``generator(features)`` of shape (tokens, V), and :mod:`nmtkit.models.loss` turns them into
log-probabilities, the loss, and in the backward pass the gradient ``p - q``. For a
4096-token batch and V = 6198 that (tokens, V) tensor is 100 MB: every pass over it
(log-softmax, sums, exp, scaling) streams it through memory, and a GEMM whose output is
6198 columns wide runs well below this CPU's matmul rate (94 GFLOP/s in a micro-benchmark,
against about 130 at 6208 columns and 185 for the model's other products).

:func:`projected_label_smoothed_cross_entropy` computes the same numbers differently:

- the weight is padded with zero rows to a multiple of 16 output columns (the padded
  columns get a score of -inf, so they take no probability and no gradient);
- rows go through in blocks of about 16 MB of scores that stay in the cache: the block's
  scores, its loss terms (from each row's log-sum-exp) and its gradient ``p - q``, which is
  at once multiplied into the gradients of the features (``G W``) and of the weight
  (``G^T h``);
- so the forward pass already holds the gradients, and the backward pass only scales
  them by the incoming gradient of the loss (a scalar: the loss is a sum).

Where oneDNN is there, the full blocks' two products (scores and ``G W``) go through its
GEMM as the linear layers' do (:mod:`.linear`); the weight's gradient and the last,
shorter block stay with ``torch.mm``.

Measured on the peer benchmark's batch (4095 rows, d 256, V 6198, 2 threads): 254 ms
instead of 340 ms for the output layer and loss, forward and backward; 1.015x for whole
training steps (``benchmarks/fast_ab.py``). The trainer uses it for Transformers on a CPU
with ``train.fast`` (not with ``train.compile``, fp16 or R-Drop, which go through the
readable path); ``tests/test_fast_output_loss.py`` checks that the loss and every gradient
agree with the readable path. Under bfloat16 autocast (``train.amp: bf16`` on a CPU with
bfloat16 in hardware) the three products run in bfloat16 and the rest in float32
(:func:`_low_precision_forward`; ``tests/test_cpu_bf16.py``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, cast

import torch
from torch import Tensor, nn

from ..data.vocab import PAD
from ..models.loss import entropy, smoothed_cross_entropy
from . import onednn
from .linear import LOW_PRECISION_ROW_MULTIPLE, rows_padded
from .swap import original_class

BLOCK_ELEMENTS = 1 << 22
"""Scores per block (4M floats = 16 MB): 677 rows at V = 6198. Blocks of 512-1024 rows
were fastest at that V (256: slower GEMMs; 2048: out of cache)."""

COLUMN_MULTIPLE = 16
"""Output columns are padded to this multiple: widths like 6198 leave the GEMM kernels'
last column panel ragged (x1.4 slower at 6198 than at 6208)."""


def padded_width(v: int) -> int:
    """V rounded up to a multiple of :data:`COLUMN_MULTIPLE`."""
    return -(-v // COLUMN_MULTIPLE) * COLUMN_MULTIPLE


def _block_terms(scores: Tensor, v: int, tgt: Tensor, keep: Tensor, eps: float, pad: int,
                 want_grad: bool) -> tuple[Tensor | None, Tensor, Tensor]:
    """One block's scores (m, vp), the columns from ``v`` on padding, -> (the gradient of
    its loss with respect to the scores, p - q, float32 (m, vp) with 0 on the padded
    columns, or None without ``want_grad``; the block's loss sum; its NLL sum).

    The loss needs three numbers per row, not the (m, V) log-probabilities: with
    ``lse = log sum_j exp(s_j)``, ``log p_gold = s_gold - lse``, ``log p_pad = s_pad - lse``
    and ``sum_j log p_j = sum_j s_j - V lse``
    (:func:`~nmtkit.models.loss.smoothed_cross_entropy` turns them into the loss). So the
    scores are read once for their sum and their maximum, turned in place into
    ``exp(s - max)`` (the one exponential), read once more for its sum ``z``, and scaled into
    ``p - q = exp(s - max) / z - q``: seven passes over the block and no new (m, vp) tensor,
    where a log-softmax, its row sum and ``exp`` of it took eight, two of them exponentials,
    and a new block. In float32 (scores in bfloat16 are widened first)."""
    s = scores.float()  # (m, vp): the scores themselves where they are float32
    real = s[:, :v]  # (m, V)
    gold_s = real.gather(1, tgt.unsqueeze(1)).squeeze(1)  # (m,)
    pad_s = s[:, pad].clone()  # (m,): s is overwritten below
    sum_s = real.sum(dim=1) if eps > 0 else None  # (m,)
    s[:, v:] = -math.inf  # the padded columns take no probability
    if want_grad:
        mx = s.amax(dim=1, keepdim=True)  # (m, 1)
        # exp(s - max) in place; the clamp keeps exp out of its slow denormal path (terms
        # below e^-80 of the largest are < 2e-35 of it: nothing is lost)
        e = s.sub_(mx).clamp_(min=-80.0).exp_()  # (m, vp)
        e[:, v:] = 0.0  # the padded columns: no probability, no gradient
        z = e.sum(dim=1, keepdim=True)  # (m, 1)
        lse = (mx + z.log()).squeeze(1)  # (m,)
    else:
        lse = torch.logsumexp(s, dim=1)  # (m,)
    gold = gold_s - lse  # log p_gold
    cross = -gold if sum_s is None else smoothed_cross_entropy(gold, sum_s - v * lse,
                                                                pad_s - lse, v, eps)
    loss, nll = (cross * keep).sum(), (-gold * keep).sum()
    if not want_grad:
        return None, loss, nll
    w = keep.unsqueeze(1)  # (m, 1): 0 on padding rows
    if sum_s is not None:  # w (p - q): q is other on every real column but pad, 1 - eps on gold
        other = eps / (v - 2)
        grad = torch.addcmul(-w * other, e, w / z, out=e)  # w p - w other, over e
        grad[:, v:] = 0.0
        grad[:, pad] += keep * other
        grad.scatter_add_(1, tgt.unsqueeze(1), -w * (1.0 - eps - other))
    else:
        grad = e.mul_(w / z)  # w p, over e
        grad.scatter_add_(1, tgt.unsqueeze(1), -w)
    return grad, loss, nll


class ProjectedLabelSmoothedCE(torch.autograd.Function):
    """forward(features (n, d), weight (V, d), bias (V,) or None, target (n,), eps, pad,
    block) -> (loss_sum, nll_sum) of label-smoothed cross-entropy on ``features W^T + b``,
    with the gradients computed in the forward pass block by block (module docstring)."""

    @staticmethod
    def forward(ctx: Any, features: Tensor, weight: Tensor, bias: Tensor | None,  # noqa: D102
                target: Tensor, eps: float, pad: int, block: int,
                products: torch.dtype | None = None) -> tuple[Tensor, Tensor]:
        if products is not None:  # bfloat16 products, float32 for the rest (CPU autocast)
            with torch.autocast(features.device.type, enabled=False):
                return _low_precision_forward(ctx, features, weight, bias, target, eps, pad,
                                              block, products)
        n, d = features.shape
        v = weight.size(0)
        vp = padded_width(v)
        w = weight.new_zeros(vp, d)
        w[:v] = weight
        b = None
        if bias is not None:
            b = bias.new_zeros(vp)
            b[:v] = bias
        want_h, want_w, want_b = ctx.needs_input_grad[:3]
        grad_h = features.new_empty(n, d) if want_h else None
        grad_w = w.new_zeros(vp, d) if want_w else None
        grad_b = w.new_zeros(vp) if want_b and b is not None else None
        want_grad = not (grad_h is None and grad_w is None and grad_b is None)
        keepf = (target != pad).to(features.dtype)  # (n,): 0 on padding rows
        loss = features.new_zeros(())
        nll = features.new_zeros(())
        # Full blocks multiply by oneDNN where it is there (nmtkit.fast.linear: faster on some
        # CPUs); it builds a kernel per shape, so the ragged last block stays with torch.mm.
        by_onednn = onednn.trains_faster()
        scores_buf = None
        for start in range(0, n, block):
            h = features[start:start + block]  # (m, d)
            tgt, keep = target[start:start + block], keepf[start:start + block]
            full_block = by_onednn and h.size(0) == block
            if full_block:
                scores = onednn.linear(h, w, b)  # (m, vp)
            else:
                if scores_buf is None:
                    scores_buf = features.new_empty(min(block, n), vp)
                scores = scores_buf[:h.size(0)]  # (m, vp)
                if b is None:
                    torch.mm(h, w.t(), out=scores)
                else:
                    torch.addmm(b, h, w.t(), out=scores)
            grad, block_loss, block_nll = _block_terms(scores, v, tgt, keep, eps, pad, want_grad)
            loss, nll = loss + block_loss, nll + block_nll
            if grad is None:
                continue
            if grad_h is not None and full_block:
                grad_h[start:start + h.size(0)] = onednn.linear(grad, w.t(), None)  # (m, d)
            elif grad_h is not None:
                torch.mm(grad, w, out=grad_h[start:start + h.size(0)])  # (m, d)
            if grad_w is not None:
                grad_w.addmm_(grad.t(), h)  # (vp, d)
            if grad_b is not None:
                grad_b += grad.sum(dim=0)
        loss -= keepf.sum() * entropy(eps, v)
        ctx.grads = (grad_h, None if grad_w is None else grad_w[:v],
                     None if grad_b is None else grad_b[:v])
        return loss, nll

    @staticmethod
    def backward(ctx: Any, grad_loss: Tensor,  # noqa: D102
                 grad_nll: Tensor) -> tuple[Tensor | None, ...]:
        grads = tuple(None if g is None else g * grad_loss for g in ctx.grads)
        ctx.grads = None
        return (*grads, None, None, None, None, None)


def _low_precision_forward(ctx: Any, features: Tensor, weight: Tensor, bias: Tensor | None,
                           target: Tensor, eps: float, pad: int, block: int,
                           products: torch.dtype) -> tuple[Tensor, Tensor]:
    """:meth:`ProjectedLabelSmoothedCE.forward` with its three products in ``products``
    (bfloat16, as CPU autocast would run them), everything else in float32: the scores are
    widened for the loss (before the bias, where there is one), the gradients of the
    weight and bias are summed over the blocks in float32, and the features' gradient is
    returned in their own dtype. Blocks are a multiple of
    :data:`~.linear.LOW_PRECISION_ROW_MULTIPLE` rows and the last one is padded to it, so
    that oneDNN's cache of bf16 kernels, one per shape, holds them all (:mod:`.linear`)."""
    n, d = features.shape
    v = weight.size(0)
    vp = padded_width(v)
    # whole blocks a multiple of the padding too (512 rows instead of 677 at V = 6198)
    block = max(LOW_PRECISION_ROW_MULTIPLE, block - block % LOW_PRECISION_ROW_MULTIPLE)
    w = weight.new_zeros(vp, d, dtype=products)
    w[:v] = weight  # (vp, d), cast once
    hs = features.to(products)  # (n, d), cast once
    b = None
    if bias is not None:
        b = bias.new_zeros(vp, dtype=torch.float32)
        b[:v] = bias
    want_h, want_w, want_b = ctx.needs_input_grad[:3]
    grad_h = features.new_empty(n, d) if want_h else None
    grad_w = weight.new_zeros(vp, d, dtype=torch.float32) if want_w else None
    grad_b = weight.new_zeros(vp, dtype=torch.float32) if want_b and b is not None else None
    want_grad = not (grad_h is None and grad_w is None and grad_b is None)
    keepf = (target != pad).float()  # (n,): 0 on padding rows
    loss = keepf.new_zeros(())
    nll = keepf.new_zeros(())
    for start in range(0, n, block):
        # (m, d); the last block's rows padded: oneDNN keeps a kernel per product shape
        h = rows_padded(hs[start:start + block], LOW_PRECISION_ROW_MULTIPLE)
        m = min(block, n - start)
        tgt, keep = target[start:start + block], keepf[start:start + block]
        scores = torch.mm(h, w.t())[:m]  # (m, vp), in the products' dtype
        if b is not None:
            scores = scores.float().add_(b)
        grad, block_loss, block_nll = _block_terms(scores, v, tgt, keep, eps, pad, want_grad)
        loss, nll = loss + block_loss, nll + block_nll
        if grad is None:
            continue
        if grad_b is not None:
            grad_b += grad.sum(dim=0)
        g = rows_padded(grad.to(products), LOW_PRECISION_ROW_MULTIPLE)  # (rows of h, vp)
        if grad_h is not None:
            grad_h[start:start + m] = torch.mm(g, w)[:m]  # (m, d)
        if grad_w is not None:
            grad_w += torch.mm(g.t(), h)  # (vp, d), summed in float32
    loss -= keepf.sum() * entropy(eps, v)
    ctx.grads = (grad_h, None if grad_w is None else grad_w[:v].to(weight.dtype),
                 None if grad_b is None or bias is None else grad_b[:v].to(bias.dtype))
    return loss, nll


def projected_label_smoothed_cross_entropy(
    features: Tensor, weight: Tensor, bias: Tensor | None, target: Tensor, eps: float,
    pad: int = PAD,
) -> tuple[Tensor, Tensor, int]:
    """``label_smoothed_cross_entropy(F.linear(features, weight, bias), target, eps)`` in
    blocks: features (..., d), target (...) -> (loss_sum, nll_sum (detached), n_tokens)."""
    d, v = features.size(-1), weight.size(0)
    tgt = target.reshape(-1)
    block = max(1, BLOCK_ELEMENTS // padded_width(v))
    device = features.device.type
    # Under autocast (train.amp: bf16 on a CPU with bf16 in hardware) the products in its dtype.
    products = torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else None
    loss: Tensor
    nll: Tensor
    loss, nll = ProjectedLabelSmoothedCE.apply(  # type: ignore[no-untyped-call]  # unannotated in torch
        features.reshape(-1, d), weight, bias, tgt, eps, pad, block, products)
    return loss, nll.detach(), int((tgt != pad).sum())


TrainingLoss = Callable[[Tensor, Tensor, Tensor, Tensor, float], tuple[Tensor, Tensor, int]]


def training_loss(model: nn.Module) -> TrainingLoss | None:
    """The blocked output layer and loss for ``model``, or None where it does not apply:
    models without ``features`` (the RNN) or a linear ``generator``, and models off the CPU.

    The returned function takes (src, src_mask, tgt_in, tgt_out, eps) like the trainer's
    loss of ``model.logits``, and returns (loss_sum, nll_sum, n_tokens).
    """
    p = next(model.parameters(), None)
    generator = getattr(model, "generator", None)
    if (getattr(model, "features", None) is None or generator is None
            or original_class(generator) is not nn.Linear  # (the fast subclasses compute the same)
            or p is None or p.device.type != "cpu"):
        return None

    def loss(src: Tensor, src_mask: Tensor, tgt_in: Tensor, tgt_out: Tensor,
             eps: float) -> tuple[Tensor, Tensor, int]:
        generator = cast(nn.Linear, model.generator)
        features = cast(Callable[..., Tensor], model.features)
        return projected_label_smoothed_cross_entropy(
            features(src, src_mask, tgt_in), generator.weight, generator.bias, tgt_out, eps)

    return loss
