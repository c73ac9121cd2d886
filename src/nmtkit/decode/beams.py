"""Beam bookkeeping shared by :func:`nmtkit.decode.search.beam_search` and
:func:`nmtkit.decode.constraints.constrained_beam_search`: a batch's length caps (the rule
of :func:`nmtkit.rules.output_cap`, as a tensor), forced prefixes, and the start, step and
reordering of a flat batch of ``batch * beam`` rows over the model interface. The rules
themselves (length cap, GNMT length penalty, ranking, the hypothesis record) are
:mod:`nmtkit.rules`, shared with the numpy and CTranslate2 engines.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from ..data.vocab import BOS, PAD
from ..rules import output_cap

if TYPE_CHECKING:
    from ..models.seq2seq import Seq2Seq

Prefixes = Sequence[Sequence[int]]
"""One list of target ids per sentence that its output must start with (may be empty)."""


def length_caps(src_mask: Tensor, max_len_a: float, max_len_b: int,
                max_length: int | None = None) -> Tensor:
    """(batch,) the most output tokens (EOS included) of each sentence, on ``src_mask``'s
    device: :func:`nmtkit.rules.output_cap` of its source length ``S`` (the mask's true
    entries: its tokens and EOS), at most ``max_length + 1`` when ``max_length`` is given."""
    src_len = src_mask.reshape(src_mask.size(0), -1).sum(-1).tolist()  # (batch,)
    return torch.tensor([output_cap(n, max_len_a, max_len_b, max_length) for n in src_len],
                        dtype=torch.long, device=src_mask.device)


def prefix_table(prefixes: Prefixes | None, batch: int, device: torch.device) -> Tensor | None:
    """(batch, P) the prefixes' ids, ``-1`` after each one's end; ``None`` when no sentence
    has a prefix (the search then does no prefix work at all)."""
    if prefixes is None:
        return None
    if len(prefixes) != batch:
        raise ValueError(f"{len(prefixes)} prefixes for a batch of {batch} sentences")
    width = max((len(p) for p in prefixes), default=0)
    if width == 0:
        return None
    table = torch.full((batch, width), -1, dtype=torch.long)
    for i, p in enumerate(prefixes):
        table[i, : len(p)] = torch.tensor(list(p), dtype=torch.long)
    return table.to(device)


def force_tokens(log_probs: Tensor, want: Tensor) -> None:
    """In place: a row with ``want >= 0`` keeps only the log-prob of token ``want``
    (every other token gets ``-inf``); a row with ``want == -1`` is left alone.

    log_probs: (rows, V); want: (rows,).
    """
    forced = want >= 0  # (rows,)
    idx = want.clamp(min=0).unsqueeze(1)  # (rows, 1)
    only = torch.full_like(log_probs, float("-inf")).scatter_(1, idx, log_probs.gather(1, idx))
    log_probs[forced] = only[forced]


def start_beams(model: Seq2Seq, src: Tensor, src_mask: Tensor, k: int, *, need_attention: bool,
                token_scores: bool) -> tuple[Any, Tensor, Tensor, Tensor, Tensor, Tensor | None, Tensor]:
    """The start of a beam search of width ``k`` over a batch of b sentences: the decoder
    state, and the empty hypotheses as flat (b*k) rows.

    Every hypothesis of a sentence starts as the same empty prefix, so the state keeps one
    row per sentence for the first step (:func:`beam_step` repeats that step's output k
    times, :func:`follow_beams` spreads the state to k rows per sentence after it): the
    first step costs one row per sentence instead of k.

    Returns (state with b rows, scores (b, k): 0 for the first hypothesis of each sentence
    and -inf for the others, lengths (b*k,) of 0, finished (b*k,) False, tokens (b*k, 0),
    per-token log-probabilities (b*k, 0) if ``token_scores`` else None, previous tokens (b,)
    BOS).
    """
    b, dev = src.size(0), src.device
    state = model.start(model.encode(src, src_mask), src_mask, need_attention=need_attention)
    scores = torch.full((b, k), float("-inf"), device=dev)
    scores[:, 0] = 0.0  # only one live hypothesis at the start
    lengths = torch.zeros(b * k, dtype=torch.long, device=dev)  # tokens incl. EOS
    finished = torch.zeros(b * k, dtype=torch.bool, device=dev)
    tokens = torch.full((b * k, 0), PAD, dtype=torch.long, device=dev)
    lp_hist = torch.zeros(b * k, 0, device=dev) if token_scores else None  # (b*k, t)
    prev = torch.full((b,), BOS, dtype=torch.long, device=dev)
    return state, scores, lengths, finished, tokens, lp_hist, prev


def beam_step(model: Seq2Seq, state: Any, prev: Tensor, k: int,
              first: bool) -> tuple[Tensor, Any, Tensor | None]:
    """``model.step`` for a beam of width ``k``: (log-probs (n*k, V), state, source attention
    (n*k, S) or None). On the ``first`` step the state has one row per sentence
    (:func:`start_beams`) and each row's output is repeated for the sentence's k slots."""
    log_probs, state, attn = model.step(state, prev)
    if first:
        log_probs = log_probs.repeat_interleave(k, 0)  # (b, V) -> (b*k, V)
        attn = None if attn is None else attn.repeat_interleave(k, 0)
    return log_probs, state, attn


def follow_beams(model: Seq2Seq, state: Any, rows: Tensor, k: int, first: bool,
                 same_source: bool) -> Any:
    """Reorder the state so that row ``i`` continues flat row ``rows[i]`` of the beams.

    After the ``first`` step the state still has one row per sentence (:func:`start_beams`):
    flat row r is then state row ``r // k``, and the sources spread to k rows per sentence.
    ``same_source``: as ``model.reorder`` (every row stays within its sentence's beam)."""
    if first:
        return model.reorder(state, rows // k)
    return model.reorder(state, rows, same_source=same_source)
