"""Label-smoothed loss (Szegedy et al. 2016; Vaswani et al. 2017, Sec. 5.4).

The smoothed target distribution q puts ``1 - eps`` on the gold token, 0 on padding,
and spreads ``eps`` evenly over the other ``V - 2`` tokens. The loss is KL(q || p)
summed over non-pad positions. It is computed from the gold log-probability and the
row sum of log-probabilities, never materialising q (a (tokens, V) tensor).
"""

from __future__ import annotations

import math

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


def label_smoothed_loss(
    log_probs: Tensor, target: Tensor, eps: float, pad: int = PAD
) -> tuple[Tensor, Tensor, Tensor]:
    """log_probs: (..., V); target: (...). Returns (loss, nll, n_tokens), each summed.

    loss = sum_t KL(q_t || p_t) = sum_t [-sum_v q_tv log p_tv] - H(q_t), where
    -sum_v q_v log p_v = -(1-eps) log p_gold - eps/(V-2) (sum_v log p_v - log p_gold - log p_pad).
    ``nll`` is the plain negative log-likelihood of the gold tokens (for perplexity).
    """
    v = log_probs.size(-1)
    lp = log_probs.reshape(-1, v)
    tgt = target.reshape(-1)
    keep = tgt != pad
    lp, tgt = lp[keep], tgt[keep]  # (n, V), (n,): only real tokens
    gold = lp.gather(1, tgt.unsqueeze(1)).squeeze(1)
    nll = -gold.sum()
    n = tgt.numel()
    if eps == 0.0:
        return nll, nll.detach(), torch.tensor(n)
    other = eps / (v - 2)
    rest = lp.sum(dim=1) - gold - lp[:, pad]
    cross = -(1.0 - eps) * gold - other * rest
    # Entropy of q (a constant): makes the value the KL divergence, 0 at p = q.
    entropy = -((1.0 - eps) * math.log(1.0 - eps) + eps * math.log(other))
    loss = cross.sum() - n * entropy
    return loss, nll.detach(), torch.tensor(n)
