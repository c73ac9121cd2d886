"""Greedy decoding and beam search in the size of an idea: one sentence, no batching.

These are the two searches of the guide (Vaswani et al. 2017, Sec. 6.1; The Annotated
Transformer's ``greedy_decode``), written over the model interface of
:mod:`nmtkit.models.seq2seq` (``encode``, ``start``, ``step``, ``reorder``) so that they run
any nmtkit model, Transformer or RNN. They make the same choices as the production
searches of :mod:`nmtkit.decode.search` (which decode whole batches, drop finished
sentences from the batch, and add prefixes, constraints, sampling and n-best lists):
``<pad>`` and ``<s>`` are never produced, the output is capped at ``max_len`` steps with
``</s>`` forced at the last one, and beam hypotheses are ranked by the length penalty of
Wu et al. (2016). ``tests/test_simple.py`` checks that both give the production tokens on
a trained model.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import Tensor

from ..data.vocab import BOS, EOS, PAD
from ..rules import length_penalty

if TYPE_CHECKING:
    from ..models.seq2seq import Seq2Seq


def _next_log_probs(model: Seq2Seq, state: object, prev: Tensor,
                    last: bool) -> tuple[Tensor, object]:
    """One decoder step for each prefix ending in ``prev`` (n,): log-probs (n, V) with
    ``<pad>`` and ``<s>`` ruled out, and only ``</s>`` allowed on the ``last`` step."""
    log_probs, state, _ = model.step(state, prev)
    log_probs[:, [PAD, BOS]] = float("-inf")
    if last:
        log_probs[:, torch.arange(log_probs.size(1)) != EOS] = float("-inf")
    return log_probs, state


@torch.no_grad()
def greedy_decode(model: Seq2Seq, src: Tensor, src_mask: Tensor, max_len: int) -> list[int]:
    """The most probable token at each step, for one sentence: src (1, S), src_mask (1, 1, S).
    Returns the output ids without ``<s>``/``</s>``; at most ``max_len`` steps."""
    state = model.start(model.encode(src, src_mask), src_mask)
    ys = [BOS]
    for t in range(max_len):
        log_probs, state = _next_log_probs(model, state, src.new_tensor(ys[-1:]), last=t == max_len - 1)
        token = int(log_probs.argmax(-1))
        if token == EOS:
            break
        ys.append(token)
    return ys[1:]


@torch.no_grad()
def beam_search(model: Seq2Seq, src: Tensor, src_mask: Tensor, max_len: int,
                beam: int = 4, alpha: float = 0.6) -> list[int]:
    """The ``beam`` best prefixes, each extended by its ``beam`` best tokens at every step,
    until every kept hypothesis has ended. Hypotheses (ended ones included) are ranked by
    log P(y) / ((5 + |y|) / 6) ** alpha, |y| counting ``</s>``. One sentence: src (1, S)."""
    def rank(h: tuple[list[int], Tensor, bool, int]) -> float:  # |y| = len(h[0]) - 1 (no <s>)
        return float(h[1] / length_penalty(torch.tensor(len(h[0]) - 1), alpha))

    state = model.start(model.encode(src, src_mask), src_mask)
    hyps = [([BOS], torch.tensor(0.0), False, 0)]  # (tokens, log P, ended, state row)
    for t in range(max_len):
        live = [h for h in hyps if not h[2]]
        if not live:
            break
        state = model.reorder(state, src.new_tensor([h[3] for h in live]))  # row i: live[i]
        log_probs, state = _next_log_probs(model, state, src.new_tensor([h[0][-1] for h in live]),
                                           last=t == max_len - 1)
        cands = [h for h in hyps if h[2]]  # an ended hypothesis keeps competing for its slot
        for row, (tokens, score, _, _) in enumerate(live):
            for lp, tok in zip(*log_probs[row].topk(beam), strict=True):
                if lp > float("-inf"):
                    cands.append((tokens + [int(tok)], score + lp, int(tok) == EOS, row))
        hyps = sorted(cands, key=rank, reverse=True)[:beam]
    return max((h for h in hyps if h[2]), key=rank)[0][1:-1]
