"""Label-smoothed loss (Szegedy et al. 2016; Vaswani et al. 2017, Sec. 5.4).

The smoothed target distribution q puts ``1 - eps`` on the gold token, 0 on padding,
and spreads ``eps`` evenly over the other ``V - 2`` tokens (as The Annotated Transformer
does). The loss is KL(q || p) summed over non-pad positions.

q is never materialised: the forward pass needs only the gold log-probability and the
row sum of log-probabilities, and the backward pass turns the saved log-probabilities
into the gradient ``p - q`` in place. On a CPU, every fresh (tokens, V) tensor costs
tens of milliseconds of page faults, so :class:`LabelSmoothedCrossEntropy` allocates
exactly one: the log-softmax.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor

from ..data.vocab import PAD


def smoothed_distribution(target: Tensor, vocab_size: int, eps: float, pad: int = PAD) -> Tensor:
    """The explicit (tokens, V) target distribution q: for tests and figures only."""
    q = torch.full((target.numel(), vocab_size), eps / (vocab_size - 2))
    q.scatter_(1, target.reshape(-1, 1), 1.0 - eps)
    q[:, pad] = 0.0
    q[target.reshape(-1) == pad] = 0.0
    return q


def entropy(eps: float, v: int) -> float:
    """H(q) for one non-pad position: a constant that makes the loss a KL divergence."""
    if eps == 0.0:
        return 0.0
    other = eps / (v - 2)
    return -((1.0 - eps) * math.log(1.0 - eps) + eps * math.log(other))


def row_terms(lp: Tensor, tgt: Tensor, eps: float, pad: int) -> tuple[Tensor, Tensor]:
    """Per-row cross-entropy with q, and NLL. lp: (n, V); tgt: (n,)."""
    gold = lp.gather(1, tgt.unsqueeze(1)).squeeze(1)  # (n,)
    if eps == 0.0:
        return -gold, -gold
    return smoothed_cross_entropy(gold, lp.sum(dim=1), lp[:, pad], lp.size(1), eps), -gold


def smoothed_cross_entropy(gold: Tensor, total: Tensor, pad_lp: Tensor, v: int,
                           eps: float) -> Tensor:
    """Per-row cross-entropy with q from three log-probabilities of each row: the gold
    token's, their sum over the vocabulary, and the pad token's; each (n,). eps > 0."""
    other = eps / (v - 2)
    # -sum_v q_v log p_v = -(1-eps) log p_gold - other * (sum_v log p_v - log p_gold - log p_pad)
    return -(1.0 - eps) * gold - other * (total - gold - pad_lp)


def label_smoothed_loss(
    log_probs: Tensor, target: Tensor, eps: float, pad: int = PAD
) -> tuple[Tensor, Tensor, Tensor]:
    """Reference form on log-probabilities. log_probs: (..., V); target: (...).

    Returns (loss, nll, n_tokens), each summed over non-pad positions; loss = sum KL(q || p).
    """
    v = log_probs.size(-1)
    lp, tgt = log_probs.reshape(-1, v), target.reshape(-1)
    keep = tgt != pad
    cross, nll = row_terms(lp[keep], tgt[keep], eps, pad)
    n = int(keep.sum())
    return cross.sum() - n * entropy(eps, v), nll.sum().detach(), torch.tensor(n)


class LabelSmoothedCrossEntropy(torch.autograd.Function):
    """Fused log-softmax + label-smoothed KL on logits, with an in-place backward.

    forward(logits (n, V), target (n,), eps, pad) -> (loss_sum, nll_sum). The gradient with
    respect to the logits of one row is w * (p - q), written over the saved log-probs.
    """

    @staticmethod
    def forward(ctx: Any, logits: Tensor, target: Tensor, eps: float,  # noqa: D102
                pad: int) -> tuple[Tensor, Tensor]:
        lp = torch.log_softmax(logits.float(), dim=-1)
        keep = target != pad
        cross, nll = row_terms(lp, target, eps, pad)
        keepf = keep.to(lp.dtype)
        n = keepf.sum()
        loss = (cross * keepf).sum() - n * entropy(eps, lp.size(1))
        ctx.save_for_backward(lp, target, keepf)
        ctx.eps, ctx.pad, ctx.in_dtype = eps, pad, logits.dtype
        return loss, (nll * keepf).sum()

    @staticmethod
    def backward(ctx: Any, grad_loss: Tensor,  # noqa: D102
                 grad_nll: Tensor) -> tuple[Tensor, None, None, None]:
        lp, target, keepf = ctx.saved_tensors
        w = keepf * grad_loss  # (n,): 0 on padding rows
        grad = smoothed_gradient_(lp, target, w, ctx.eps, ctx.pad)
        return grad.to(ctx.in_dtype), None, None, None


def smoothed_gradient_(lp: Tensor, target: Tensor, w: Tensor, eps: float, pad: int) -> Tensor:
    """The gradient of the smoothed loss with respect to the logits, w * (p - q), written over
    the log-probabilities ``lp`` (n, V) and returned. target, w: (n,); w is 0 on padding rows.
    """
    v = lp.size(1)
    other = eps / (v - 2) if eps > 0 else 0.0
    w = w.unsqueeze(1)  # (n, 1)
    # p, reusing the buffer. The clamp keeps exp out of its slow underflow path
    # (log-probs below -80 are < 2e-35 as probabilities: nothing is lost).
    grad = lp.clamp_(min=-80.0).exp_()
    grad.mul_(w)
    if other:
        grad.sub_(w * other)
        grad[:, pad] += w.squeeze(1) * other  # q is 0 on the pad column
    grad.scatter_add_(1, target.unsqueeze(1), -w * (1.0 - eps - other))
    return grad


def smoothed_loss_sums(logits: Tensor, target: Tensor, eps: float,
                       pad: int = PAD) -> tuple[Tensor, Tensor]:
    """(loss_sum, nll_sum (detached)) from logits (..., V) and targets (...), as tensors: no
    host synchronisation (what a CUDA graph may hold)."""
    v = logits.size(-1)
    loss: Tensor
    nll: Tensor
    loss, nll = LabelSmoothedCrossEntropy.apply(  # type: ignore[no-untyped-call]  # unannotated in torch
        logits.reshape(-1, v), target.reshape(-1), eps, pad)
    return loss, nll.detach()


def label_smoothed_cross_entropy(
    logits: Tensor, target: Tensor, eps: float, pad: int = PAD
) -> tuple[Tensor, Tensor, int]:
    """Training loss from logits: (loss_sum, nll_sum (detached), n_tokens)."""
    loss, nll = smoothed_loss_sums(logits, target, eps, pad)
    return loss, nll, int((target != pad).sum())
