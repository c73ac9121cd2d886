"""Regularisers for small corpora, beside dropout and label smoothing.

- **Word dropout** (``train.word_dropout``): each token of a training batch's source and
  decoder input is replaced by ``<unk>`` with probability p, so that the model cannot lean
  on any single word (Bowman et al. 2016, Sec. 3.2, for decoder inputs; Sennrich et al.
  2016's WMT systems drop whole source and target words). Special tokens and the tags of
  ``data.extra`` / ``data.directions`` are never dropped; the loss still predicts every
  gold token.
- **R-Drop** (``train.rdrop``, Liang et al., NeurIPS 2021): the batch goes through the model
  twice, with two dropout masks, and the two output distributions are pulled together by
  their symmetric KL divergence beside the usual loss of each (Eq. 3 of the paper)::

      L = (CE_1 + CE_2) / 2 + alpha / 4 * (KL(P_1 || P_2) + KL(P_2 || P_1))

  i.e. half the paper's ``CE_1 + CE_2 + alpha / 2 * (KL + KL)``, so that the loss stays on
  the scale of one pass and ``alpha`` means what it means in the paper (5 for its
  Transformer on IWSLT).
"""

from __future__ import annotations

import torch
from torch import Tensor

from ..data.vocab import PAD, UNK
from ..models.loss import label_smoothed_cross_entropy

N_SPECIALS = 4  # <pad> <unk> <s> </s>: ids 0-3, never dropped


def word_dropout(ids: Tensor, p: float, keep: Tensor | None = None) -> Tensor:
    """``ids`` (batch, T) with each ordinary token replaced by ``<unk>`` with probability
    ``p`` (drawn from torch's global generator, which checkpoints keep). Ids below 4 (the
    special tokens) and those in ``keep`` (1-D: tags) stay."""
    if p <= 0.0:
        return ids
    droppable = ids >= N_SPECIALS
    if keep is not None and keep.numel():
        droppable &= ~torch.isin(ids, keep)
    drop = (torch.rand(ids.shape, device=ids.device) < p) & droppable
    return ids.masked_fill(drop, UNK)


def symmetric_kl(logits_a: Tensor, logits_b: Tensor, target: Tensor, pad: int = PAD) -> Tensor:
    """KL(P_a || P_b) + KL(P_b || P_a) summed over the positions where ``target`` is not
    padding. logits: (..., V); target: (...). The two KLs together are
    sum_v (p_a - p_b) (log p_a - log p_b), one pass over the vocabulary."""
    v = logits_a.size(-1)
    keep = target.reshape(-1) != pad
    log_a = torch.log_softmax(logits_a.reshape(-1, v)[keep].float(), dim=-1)  # (n, V)
    log_b = torch.log_softmax(logits_b.reshape(-1, v)[keep].float(), dim=-1)
    return ((log_a.exp() - log_b.exp()) * (log_a - log_b)).sum()


def rdrop_loss(logits: Tensor, target: Tensor, eps: float, alpha: float) -> tuple[Tensor, Tensor]:
    """R-Drop's loss of a batch that went through the model twice, stacked: ``logits``
    (2B, T, V), the first B rows one pass and the last B the other; ``target`` (B, T).

    Returns (loss, nll), summed over the B copies' non-pad target tokens (both halved from
    the two passes, as described in the module docstring)."""
    both = torch.cat([target, target])  # (2B, T)
    loss, nll, _ = label_smoothed_cross_entropy(logits, both, eps)
    first, second = logits.chunk(2)  # (B, T, V) each
    return loss / 2 + alpha / 4 * symmetric_kl(first, second, target), nll / 2
