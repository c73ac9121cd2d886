"""Beam bookkeeping shared by :func:`nmtkit.decode.search.beam_search` and
:func:`nmtkit.decode.constraints.constrained_beam_search`: a batch's length caps (the rule
of :func:`nmtkit.rules.output_cap`, as a tensor), forced prefixes, and the start, step and
reordering of a flat batch of ``batch * beam`` rows over the model interface. The rules
themselves (length cap, GNMT length penalty, ranking, the hypothesis record) are
:mod:`nmtkit.rules`, shared with the numpy and CTranslate2 engines.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from ..data.vocab import BOS, EOS, PAD
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


@dataclass
class Beams:
    """The hypotheses of the sentences still searched: ``k`` flat rows per sentence, sentence
    ``i``'s rows ``i*k .. i*k+k-1`` (n sentences, n*k rows). A search extends them every
    step (:meth:`extend`) and drops the sentences it has settled (:meth:`drop`)."""

    sentences: list[int]
    """(n,) the input position of each sentence still searched."""
    scores: Tensor
    """(n, k) each hypothesis's raw log-probability (-inf: an empty slot)."""
    lengths: Tensor
    """(n*k,) its tokens, ``</s>`` included."""
    finished: Tensor
    """(n*k,) whether it has ended (it then continues with PAD at no cost)."""
    tokens: Tensor
    """(n*k, t) its tokens so far (PAD after its end)."""
    token_lps: Tensor | None
    """(n*k, t) the log-probability of each token (0 after the end), with ``token_scores``."""
    attention: Tensor | None
    """(n*k, t, S) the source attention of each step, with ``need_attention``."""
    caps: Tensor
    """(n*k,) the most tokens each may have, ``</s>`` included."""
    forced: Tensor | None
    """(n*k, P) the forced prefix of its sentence (-1 after its end), or None."""

    def extend(self, rows: Tensor, tok: Tensor, scores: Tensor, step_lp: Tensor | None,
               step_attn: Tensor | None) -> Tensor:
        """Hypothesis j of the new beams continues flat row ``rows[j]`` with token ``tok[j]``
        (an ended one with PAD, its length kept), its raw score ``scores`` (n, k), the
        token's log-probability ``step_lp`` (n*k, 1) and attention ``step_attn``
        (n*k, 1, S), both already in the new order. Returns the tokens, PAD where ended."""
        was_finished = self.finished[rows]
        self.scores = scores
        self.lengths = torch.where(was_finished, self.lengths[rows], self.lengths[rows] + 1)
        tok = tok.masked_fill(was_finished, PAD)
        self.finished = was_finished | (tok == EOS)
        self.tokens = torch.cat([self.tokens[rows], tok.unsqueeze(1)], dim=1)
        if self.token_lps is not None and step_lp is not None:
            self.token_lps = torch.cat([self.token_lps[rows], step_lp], dim=1)
        if step_attn is not None:
            self.attention = (step_attn if self.attention is None
                              else torch.cat([self.attention[rows], step_attn], 1))
        return tok

    def drop(self, settled: Tensor) -> Tensor:
        """Keep only the sentences not ``settled`` (n,); returns the flat rows kept (n'*k,),
        for the search to select its own per-row values with."""
        k = self.scores.size(1)
        keep = (~settled).nonzero().view(-1)  # (n',)
        rows = (keep.unsqueeze(1) * k + torch.arange(k, device=keep.device)).view(-1)  # (n'*k,)
        self.sentences = [self.sentences[i] for i in keep.tolist()]
        self.scores, self.caps, self.lengths = self.scores[keep], self.caps[rows], self.lengths[rows]
        self.finished, self.tokens = self.finished[rows], self.tokens[rows]
        self.token_lps = None if self.token_lps is None else self.token_lps[rows]
        self.attention = None if self.attention is None else self.attention[rows]
        self.forced = None if self.forced is None else self.forced[rows]  # shared by a sentence's rows
        return rows

    def sentence(self, i: int) -> Beams:
        """The k hypotheses of sentence ``i`` (of those still searched) alone."""
        k = self.scores.size(1)
        part = slice(i * k, (i + 1) * k)
        return Beams([self.sentences[i]], self.scores[i:i + 1], self.lengths[part],
                     self.finished[part], self.tokens[part],
                     None if self.token_lps is None else self.token_lps[part],
                     None if self.attention is None else self.attention[part],
                     self.caps[part], None if self.forced is None else self.forced[part])


def start_beams(model: Seq2Seq, src: Tensor, src_mask: Tensor, k: int, caps: Tensor,
                forced: Tensor | None, *, need_attention: bool,
                token_scores: bool) -> tuple[Any, Beams, Tensor]:
    """The start of a beam search of width ``k`` over a batch of b sentences: the decoder
    state, the empty hypotheses as flat (b*k) rows, and the first input tokens.

    Every hypothesis of a sentence starts as the same empty prefix, so the state keeps one
    row per sentence for the first step (:func:`beam_step` repeats that step's output k
    times, :func:`follow_beams` spreads the state to k rows per sentence after it): the
    first step costs one row per sentence instead of k. ``caps`` (b,) and ``forced``
    (b, P) or None are each sentence's; its k rows share them.

    Returns (state with b rows, the beams: scores 0 for the first hypothesis of each
    sentence and -inf for the others, no tokens yet; previous tokens (b,) BOS).
    """
    b, dev = src.size(0), src.device
    state = model.start(model.encode(src, src_mask), src_mask, need_attention=need_attention)
    scores = torch.full((b, k), float("-inf"), device=dev)
    scores[:, 0] = 0.0  # only one live hypothesis at the start
    beams = Beams(
        sentences=list(range(b)), scores=scores,
        lengths=torch.zeros(b * k, dtype=torch.long, device=dev),
        finished=torch.zeros(b * k, dtype=torch.bool, device=dev),
        tokens=torch.full((b * k, 0), PAD, dtype=torch.long, device=dev),
        token_lps=torch.zeros(b * k, 0, device=dev) if token_scores else None, attention=None,
        caps=caps.repeat_interleave(k),
        forced=None if forced is None else forced.repeat_interleave(k, 0))
    prev = torch.full((b,), BOS, dtype=torch.long, device=dev)
    return state, beams, prev


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
