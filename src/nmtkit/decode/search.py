"""Batched greedy and beam search over the model interface (``encode``/``start``/``step``/``reorder``).

Every search takes its options as one :class:`~nmtkit.config.DecodeConfig` (the defaults live
there only); per call it also takes ``need_attention`` (record the source attention of every
output step, as ``model.start(..., need_attention)``) and ``max_length`` (an absolute cap on
the output tokens, EOS not counted).

Both stop each sentence at EOS and cap its length at ``max_len_a * src_len + max_len_b``
(EOS is forced at the cap). Beam search keeps ``beam`` hypotheses per sentence as one
flat batch of ``batch * beam`` rows; a finished hypothesis keeps a frozen score and competes
for the ``beam`` slots with the live extensions (better-ranked extensions can push it out),
and hypotheses are ranked by the GNMT length-normalised score
(Wu et al. 2016): ``log P(y) / ((5 + |y|) / 6) ** length_penalty``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from ..config import DecodeConfig
from ..data.vocab import BOS, EOS, PAD

if TYPE_CHECKING:
    from ..models.seq2seq import Seq2Seq

NEVER = (PAD, BOS)  # ids a hypothesis may never produce


@dataclass
class Hypothesis:
    tokens: list[int]  # without BOS/EOS
    score: float  # length-normalised log-probability
    log_prob: float
    attention: Tensor | None = None  # (len(tokens) + 1, S): source attention per output step


def length_caps(src_mask: Tensor, max_len_a: float, max_len_b: int,
                max_length: int | None = None) -> Tensor:
    """(batch,) maximum number of output tokens (EOS included) per sentence:
    ``floor(max_len_a * S + max_len_b)``, at least 1.

    ``max_length`` (if given) is an absolute cap on the tokens before EOS, on top of that.
    """
    src_len = src_mask.reshape(src_mask.size(0), -1).sum(-1)  # (batch,)
    caps = (max_len_a * src_len.float() + max_len_b).floor().long().clamp(min=1)
    return caps if max_length is None else caps.clamp(max=max_length + 1)


def length_penalty(length: Tensor, length_penalty: float) -> Tensor:
    """GNMT length penalty lp(Y) = ((5 + |Y|) / 6) ** length_penalty (Wu et al. 2016, Sec. 7)."""
    return ((5.0 + length.float()) / 6.0) ** length_penalty


def search(model: Seq2Seq, src: Tensor, src_mask: Tensor, cfg: DecodeConfig, *,
           need_attention: bool = False, max_length: int | None = None) -> list[list[Hypothesis]]:
    """The ``cfg.n_best`` best hypotheses of each sentence: greedy search when ``cfg.beam``
    and ``cfg.n_best`` are 1 (the same result as a beam of one, faster), else beam search."""
    if cfg.beam == 1 and cfg.n_best == 1:
        return [[h] for h in greedy_search(model, src, src_mask, cfg, need_attention=need_attention,
                                           max_length=max_length)]
    return beam_search(model, src, src_mask, cfg, need_attention=need_attention,
                       max_length=max_length)


@torch.no_grad()
def greedy_search(model: Seq2Seq, src: Tensor, src_mask: Tensor, cfg: DecodeConfig, *,
                  need_attention: bool = False, max_length: int | None = None) -> list[Hypothesis]:
    """Most probable next token at every step, for a whole batch at once; a sentence that
    has ended leaves the batch, so later steps compute only the sentences still going.

    Reads ``cfg.max_len_a`` and ``cfg.max_len_b`` (the beam options are not used).
    """
    b, dev = src.size(0), src.device
    caps = length_caps(src_mask, cfg.max_len_a, cfg.max_len_b, max_length)  # (b,)
    state = model.start(model.encode(src, src_mask), src_mask, need_attention=need_attention)
    prev = torch.full((b,), BOS, dtype=torch.long, device=dev)
    alive = torch.arange(b, device=dev)  # input position of each row still decoding
    scores = torch.zeros(b, device=dev)
    steps: list[tuple[Tensor, Tensor, Tensor | None]] = []  # (rows' inputs, tokens, attention)
    for t in range(int(caps.max())):
        log_probs, state, attn = model.step(state, prev)
        log_probs[:, NEVER] = float("-inf")
        at_cap = (t + 1) >= caps
        if bool(at_cap.any()):
            log_probs[at_cap] = log_probs[at_cap].masked_fill(
                torch.arange(log_probs.size(1), device=dev) != EOS, float("-inf"))
        lp, tok = log_probs.max(dim=-1)
        scores.index_add_(0, alive, lp)
        steps.append((alive, tok, attn))
        going = tok != EOS
        if not bool(going.all()):
            if not bool(going.any()):
                break
            keep = going.nonzero().view(-1)
            alive, caps, tok = alive[keep], caps[keep], tok[keep]
            state = model.reorder(state, keep)
        prev = tok
    # Scatter each step's tokens back to input positions: (batch, steps), PAD once ended.
    ys = torch.full((b, len(steps)), PAD, dtype=torch.long, device=dev)
    attn_all = None
    for t, (rows, tok, attn) in enumerate(steps):
        ys[rows, t] = tok
        if attn is not None:
            if attn_all is None:
                attn_all = torch.zeros(b, len(steps), attn.size(-1), device=dev)
            attn_all[rows, t] = attn
    hyps = []
    for i, row in enumerate(ys.tolist()):
        n = row.index(EOS) if EOS in row else len(row)
        a = attn_all[i, : n + 1] if attn_all is not None else None
        hyps.append(Hypothesis(row[:n], float(scores[i]), float(scores[i]), a))
    return hyps


@torch.no_grad()
def beam_search(model: Seq2Seq, src: Tensor, src_mask: Tensor, cfg: DecodeConfig, *,
                need_attention: bool = False,
                max_length: int | None = None) -> list[list[Hypothesis]]:
    """Batched beam search of width ``cfg.beam``; returns the ``cfg.n_best`` hypotheses of
    each sentence, best first, ranked with ``cfg.length_penalty``.

    A sentence is searched until every hypothesis in its beam has ended, or, with
    ``cfg.early_stop``, until its ``n_best`` best-ranked hypotheses have (the slots are ranked
    by length-normalised score at every step), as OpenNMT-py does.

    Each step ranks only every row's ``beam`` best next tokens (dividing a row by its length
    penalty keeps that row's order, so a sentence's best ``beam`` extensions are among
    them), and a sentence whose hypotheses have all ended leaves the batch at once: the
    model then computes only the sentences still being searched.
    """
    b, k, dev = src.size(0), cfg.beam, src.device
    caps = length_caps(src_mask, cfg.max_len_a, cfg.max_len_b, max_length).repeat_interleave(k)  # (b*k,)
    memory = model.encode(src, src_mask)
    state = model.start(memory, src_mask, need_attention=need_attention)
    state = model.reorder(state, torch.arange(b, device=dev).repeat_interleave(k))
    alive = list(range(b))  # input position of each sentence still searched
    scores = torch.full((b, k), float("-inf"), device=dev)
    scores[:, 0] = 0.0  # only one live hypothesis at the start
    lengths = torch.zeros(b * k, dtype=torch.long, device=dev)  # tokens incl. EOS
    finished = torch.zeros(b * k, dtype=torch.bool, device=dev)
    tokens = torch.full((b * k, 0), PAD, dtype=torch.long, device=dev)
    attn_hist = None
    prev = torch.full((b * k,), BOS, dtype=torch.long, device=dev)
    results: list[list[Hypothesis]] = [[] for _ in range(b)]
    for t in range(int(caps.max())):
        n = len(alive)
        log_probs, state, attn = model.step(state, prev)  # (n*k, V)
        log_probs[:, NEVER] = float("-inf")
        top_lp, top_tok = log_probs.topk(min(k, log_probs.size(1)), dim=1)  # (n*k, kk)
        # At the cap a hypothesis may only end; a finished one continues with EOS at no cost.
        for rows_, value in ((((t + 1) >= caps) & ~finished, None), (finished, 0.0)):
            if bool(rows_.any()):
                top_lp[rows_] = float("-inf")
                top_lp[rows_, 0] = log_probs[rows_, EOS] if value is None else value
                top_tok[rows_, 0] = EOS
        kk = top_lp.size(1)
        cand = scores.view(n * k, 1) + top_lp  # (n*k, kk) raw scores
        cand_len = torch.where(finished, lengths, lengths + 1)  # (n*k,)
        norm = cand / length_penalty(cand_len, cfg.length_penalty).unsqueeze(1)
        _, pick = norm.view(n, k * kk).topk(k, dim=1)  # (n, k) the sentence's best extensions
        base = (torch.arange(n, device=dev) * k).unsqueeze(1)  # (n, 1) first row of a sentence
        rows = (base + pick // kk).view(-1)  # (n*k,) row each new hypothesis extends
        scores = cand.view(n, k * kk).gather(1, pick)
        tok = top_tok.view(n, k * kk).gather(1, pick).view(-1)
        was_finished = finished[rows]
        lengths = torch.where(was_finished, lengths[rows], lengths[rows] + 1)
        tok = tok.masked_fill(was_finished, PAD)
        finished = was_finished | (tok == EOS)
        tokens = torch.cat([tokens[rows], tok.unsqueeze(1)], dim=1)
        if attn is not None:
            step_attn = attn[rows].unsqueeze(1)  # (n*k, 1, S)
            attn_hist = step_attn if attn_hist is None else torch.cat([attn_hist[rows], step_attn], 1)
        # A sentence is done when none of its hypotheses can still change (ended or dead).
        settled = (finished | torch.isneginf(scores.view(-1))).view(n, k).all(dim=1)
        if cfg.early_stop:  # slots are sorted by normalised score: the first n_best lead
            settled |= finished.view(n, k)[:, :cfg.n_best].all(dim=1)
        if bool(settled.any()):
            for i in settled.nonzero().view(-1).tolist():
                part = slice(i * k, (i + 1) * k)
                results[alive[i]] = _best(scores[i], lengths[part], finished[part], tokens[part],
                                          None if attn_hist is None else attn_hist[part],
                                          cfg)
            if bool(settled.all()):
                break
            keep = (~settled).nonzero().view(-1)  # (n',)
            keep_rows = (keep.unsqueeze(1) * k + torch.arange(k, device=dev)).view(-1)  # (n'*k,)
            alive = [alive[i] for i in keep.tolist()]
            scores, caps, lengths = scores[keep], caps[keep_rows], lengths[keep_rows]
            finished, tokens, tok = finished[keep_rows], tokens[keep_rows], tok[keep_rows]
            attn_hist = None if attn_hist is None else attn_hist[keep_rows]
            state = model.reorder(state, rows[keep_rows])  # across sentences: sources too
        else:
            state = model.reorder(state, rows, same_source=True)  # rows stay in their sentence
        prev = tok
    return results


def _best(scores: Tensor, lengths: Tensor, finished: Tensor, tokens: Tensor,
          attn: Tensor | None, cfg: DecodeConfig) -> list[Hypothesis]:
    """The ``cfg.n_best`` hypotheses of one sentence's beam, by length-normalised score.

    scores, lengths, finished: (k,); tokens: (k, t); attn: (k, t, S) or None.
    """
    final = (scores / length_penalty(lengths, cfg.length_penalty)).masked_fill(~finished, float("-inf"))
    order = final.argsort(descending=True)[:cfg.n_best].tolist()
    tok_list = tokens.tolist()
    hyps = []
    for j in order:
        n = int(lengths[j]) - 1  # without EOS
        a = attn[j, : n + 1] if attn is not None else None
        hyps.append(Hypothesis(tok_list[j][:n], float(final[j]), float(scores[j]), a))
    return hyps
