"""Batched greedy and beam search over the model interface (``encode``/``start``/``step``/``reorder``).

Every search takes its options as one :class:`~nmtkit.config.DecodeConfig` (the defaults live
there only); per call it also takes ``need_attention`` (record the source attention of every
output step, as ``model.start(..., need_attention)``) and ``max_length`` (an absolute cap on
the output tokens, EOS not counted).

Both stop each sentence at EOS and cap its length at ``floor(max_len_a * src_len + max_len_b)``
(EOS is forced at the cap). The rules (the cap, the length penalty, the ranking) are
:mod:`nmtkit.rules`, which the numpy and CTranslate2 engines share. Beam search keeps
``beam`` hypotheses per sentence as one
flat batch of ``batch * beam`` rows; a finished hypothesis keeps a frozen score and competes
for the ``beam`` slots with the live extensions (better-ranked extensions can push it out),
and hypotheses are ranked by the GNMT length-normalised score
(Wu et al. 2016): ``log P(y) / ((5 + |y|) / 6) ** length_penalty``.

Options for what practitioners need, each free when unused (no per-step work):

- ``prefixes``: one list of target ids per sentence (empty: none) that the output must
  start with. At each step the rows whose prefix is not finished keep only the log-prob of
  their prefix token (the others are masked to ``-inf``), so one batch mixes sentences with
  and without prefixes and the scores include the prefix tokens' log-probs. A sentence's
  length cap is raised to fit its prefix and ``</s>``.
- ``token_scores``: every :class:`Hypothesis` carries ``token_log_probs``, the model's
  log-probability of each output token and of ``</s>`` (they sum to ``log_prob``).
- ``cfg.sampling``: :func:`sample_search` draws ``cfg.n_best`` outputs per sentence from
  the model's distribution (temperature, top-k, top-p), seeded with ``cfg.sampling_seed``.
- ``constraints``: target phrases each output must contain; :func:`search` hands such a
  batch to :func:`nmtkit.decode.constraints.constrained_beam_search`.
- ``deadline``: a :class:`~nmtkit.decode.deadline.Deadline` checked before every step: one
  that has passed (or was cancelled) stops the search with
  :class:`~nmtkit.decode.deadline.DeadlineExceeded` within one step (``nmtkit serve`` gives
  each request one, from ``--timeout``).

An ensemble (:class:`nmtkit.decode.ensemble.Ensemble`) is a model to these searches.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from ..config import DecodeConfig
from ..data.vocab import BOS, EOS, PAD
from ..errors import UserError
from ..rules import NEVER, Hypothesis, best_first, length_penalty
from .beams import (
    Beams,
    Prefixes,
    beam_step,
    force_tokens,
    length_caps,
    prefix_table,
    start_beams,
)
from .constraints import constrained_beam_search

if TYPE_CHECKING:
    from ..models.seq2seq import Seq2Seq
    from .deadline import Deadline


def sample_tokens(log_probs: Tensor, cfg: DecodeConfig,
                  generator: torch.Generator) -> tuple[Tensor, Tensor]:
    """Draw one token per row: (the model's log-prob of it, the token), both (rows,).

    The distribution drawn from is ``softmax(log_probs / T)`` (``T`` =
    ``cfg.sampling_temperature``), restricted to the ``cfg.sampling_top_k`` most probable
    tokens (0: all) and then to the smallest set of most probable tokens whose mass reaches
    ``cfg.sampling_top_p`` (nucleus sampling, Holtzman et al. 2020; 1.0: all), and to the
    tokens whose probability there is at least ``cfg.sampling_epsilon`` (epsilon sampling,
    Hewitt et al. 2022; the most probable token always stays; 0: all). The log-prob returned
    is the model's own (untempered, unrestricted), so a sample's score is its log-probability
    under the model.
    """
    logits = log_probs / cfg.sampling_temperature  # (rows, V)
    if cfg.sampling_epsilon > 0:
        probs = logits.softmax(dim=1)
        keep = (probs >= cfg.sampling_epsilon) | (probs == probs.amax(dim=1, keepdim=True))
        logits = logits.masked_fill(~keep, float("-inf"))
    if 0 < cfg.sampling_top_k < logits.size(1):
        kth = logits.topk(cfg.sampling_top_k, dim=1).values[:, -1:]  # (rows, 1)
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if cfg.sampling_top_p < 1.0:
        ranked, order = logits.sort(dim=1, descending=True)  # (rows, V)
        probs = ranked.softmax(dim=1)
        # Drop a token when the tokens ranked above it already reach top_p (the first stays).
        drop = (probs.cumsum(dim=1) - probs) >= cfg.sampling_top_p
        logits = logits.scatter(1, order, ranked.masked_fill(drop, float("-inf")))
    tok = torch.multinomial(logits.softmax(dim=1), 1, generator=generator).view(-1)  # (rows,)
    return log_probs.gather(1, tok.unsqueeze(1)).view(-1), tok


def search(model: Seq2Seq, src: Tensor, src_mask: Tensor, cfg: DecodeConfig, *,
           need_attention: bool = False, max_length: int | None = None,
           prefixes: Prefixes | None = None, token_scores: bool = False,
           constraints: Sequence[Sequence[Sequence[int]]] | None = None,
           deadline: Deadline | None = None) -> list[list[Hypothesis[Tensor]]]:
    """The ``cfg.n_best`` best hypotheses of each sentence: greedy search when ``cfg.beam``
    and ``cfg.n_best`` are 1 (the same result as a beam of one, faster), else beam search;
    with ``cfg.sampling``, ``cfg.n_best`` samples of each (:func:`sample_search`); with
    ``constraints`` (target phrases per sentence) that some sentence has,
    :func:`nmtkit.decode.constraints.constrained_beam_search`."""
    if constraints is not None and any(any(len(p) for p in cs) for cs in constraints):
        if cfg.sampling:
            raise UserError("constraints cannot be combined with sampling")
        return constrained_beam_search(model, src, src_mask, cfg, constraints,
                                       need_attention=need_attention, max_length=max_length,
                                       prefixes=prefixes, token_scores=token_scores,
                                       deadline=deadline)
    run = sample_search if cfg.sampling else beam_search
    if not cfg.sampling and cfg.beam == 1 and cfg.n_best == 1:
        return [[h] for h in greedy_search(model, src, src_mask, cfg, need_attention=need_attention,
                                           max_length=max_length, prefixes=prefixes,
                                           token_scores=token_scores, deadline=deadline)]
    return run(model, src, src_mask, cfg, need_attention=need_attention, max_length=max_length,
               prefixes=prefixes, token_scores=token_scores, deadline=deadline)


@torch.no_grad()
def sample_search(model: Seq2Seq, src: Tensor, src_mask: Tensor, cfg: DecodeConfig, *,
                  need_attention: bool = False, max_length: int | None = None,
                  prefixes: Prefixes | None = None, token_scores: bool = False,
                  deadline: Deadline | None = None) -> list[list[Hypothesis[Tensor]]]:
    """``cfg.n_best`` samples per sentence, in the order drawn (score = log-probability).

    Each sentence is repeated ``n_best`` times in one batch and decoded like greedy search,
    drawing each token with :func:`sample_tokens` from a ``torch.Generator`` seeded with
    ``cfg.sampling_seed``: the same input, batch and device give the same samples."""
    n = cfg.n_best
    generator = torch.Generator(device=src.device).manual_seed(cfg.sampling_seed)
    rows = torch.arange(src.size(0), device=src.device).repeat_interleave(n)  # (b*n,)
    pre = None if prefixes is None else [prefixes[i] for i in rows.tolist()]
    flat = greedy_search(model, src[rows], src_mask[rows], cfg, need_attention=need_attention,
                         max_length=max_length, prefixes=pre, token_scores=token_scores,
                         generator=generator, deadline=deadline)
    return [flat[i * n:(i + 1) * n] for i in range(src.size(0))]


@torch.no_grad()
def greedy_search(model: Seq2Seq, src: Tensor, src_mask: Tensor, cfg: DecodeConfig, *,
                  need_attention: bool = False, max_length: int | None = None,
                  prefixes: Prefixes | None = None, token_scores: bool = False,
                  generator: torch.Generator | None = None,
                  deadline: Deadline | None = None) -> list[Hypothesis[Tensor]]:
    """Most probable next token at every step, for a whole batch at once; a sentence that
    has ended leaves the batch, so later steps compute only the sentences still going.

    Reads ``cfg.max_len_a`` and ``cfg.max_len_b`` (the beam options are not used). With a
    ``generator`` each token is drawn (:func:`sample_tokens`) instead of taken greedily.
    """
    b, dev = src.size(0), src.device
    caps = length_caps(src_mask, cfg.max_len_a, cfg.max_len_b, max_length)  # (b,)
    forced = prefix_table(prefixes, b, dev)  # (b, P) or None
    if forced is not None:  # room for the whole prefix and </s>
        caps = torch.maximum(caps, (forced >= 0).sum(1) + 1)
    state = model.start(model.encode(src, src_mask), src_mask, need_attention=need_attention)
    prev = torch.full((b,), BOS, dtype=torch.long, device=dev)
    alive = torch.arange(b, device=dev)  # input position of each row still decoding
    scores = torch.zeros(b, device=dev)
    steps: list[tuple[Tensor, Tensor, Tensor | None, Tensor]] = []  # (rows, tokens, attn, lp)
    for t in range(int(caps.max())):
        if deadline is not None:
            deadline.check()
        log_probs, state, attn = model.step(state, prev)
        if forced is not None:
            if t < forced.size(1):
                force_tokens(log_probs, forced[alive, t])
            else:
                forced = None
        log_probs[:, NEVER] = float("-inf")
        at_cap = (t + 1) >= caps
        if bool(at_cap.any()):
            log_probs[at_cap] = log_probs[at_cap].masked_fill(
                torch.arange(log_probs.size(1), device=dev) != EOS, float("-inf"))
        if generator is None:
            lp, tok = log_probs.max(dim=-1)
        else:
            lp, tok = sample_tokens(log_probs, cfg, generator)
        scores.index_add_(0, alive, lp)
        steps.append((alive, tok, attn, lp))
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
    lps = torch.zeros(b, len(steps), device=dev) if token_scores else None
    attn_all = None
    for t, (rows, tok, attn, lp) in enumerate(steps):
        ys[rows, t] = tok
        if lps is not None:
            lps[rows, t] = lp
        if attn is not None:
            if attn_all is None:
                attn_all = torch.zeros(b, len(steps), attn.size(-1), device=dev)
            attn_all[rows, t] = attn
    lp_rows = lps.tolist() if lps is not None else None
    hyps = []
    for i, row in enumerate(ys.tolist()):
        n = row.index(EOS) if EOS in row else len(row)
        a = attn_all[i, : n + 1] if attn_all is not None else None
        tlp = lp_rows[i][: n + 1] if lp_rows is not None else None
        hyps.append(Hypothesis(row[:n], float(scores[i]), float(scores[i]), a, tlp))
    return hyps


@torch.no_grad()
def beam_search(model: Seq2Seq, src: Tensor, src_mask: Tensor, cfg: DecodeConfig, *,
                need_attention: bool = False, max_length: int | None = None,
                prefixes: Prefixes | None = None, token_scores: bool = False,
                deadline: Deadline | None = None) -> list[list[Hypothesis[Tensor]]]:
    """Batched beam search of width ``cfg.beam``; returns the ``cfg.n_best`` hypotheses of
    each sentence, best first, ranked with ``cfg.length_penalty``.

    A sentence is searched until every hypothesis in its beam has ended, or, with
    ``cfg.early_stop``, until its ``n_best`` best-ranked hypotheses have (the slots are ranked
    by length-normalised score at every step), as OpenNMT-py does.

    Each step ranks only every row's ``beam`` best next tokens (dividing a row by its length
    penalty keeps that row's order, so a sentence's best ``beam`` extensions are among
    them). The model computes only what can still change: a sentence whose hypotheses have
    all ended leaves the batch at once, and within a sentence a hypothesis that has ended
    (it continues with ``</s>`` at no cost) or cannot win (score ``-inf``) leaves the
    model's state: the state holds one row per *live* hypothesis, flat row ``live[j]``.
    """
    b, k, dev = src.size(0), cfg.beam, src.device
    caps = length_caps(src_mask, cfg.max_len_a, cfg.max_len_b, max_length)  # (b,)
    forced = prefix_table(prefixes, b, dev)  # (b, P) or None
    if forced is not None:  # room for the whole prefix and </s>; every hypothesis is forced
        caps = torch.maximum(caps, (forced >= 0).sum(1) + 1)
    state, beams, prev = start_beams(model, src, src_mask, k, caps, forced,
                                     need_attention=need_attention, token_scores=token_scores)
    live = torch.arange(b * k, device=dev)  # flat rows in the model's state (after the first step)
    results: list[list[Hypothesis[Tensor]]] = [[] for _ in range(b)]
    for t in range(int(beams.caps.max())):
        if deadline is not None:
            deadline.check()
        n, first = len(beams.sentences), t == 0
        log_probs, state, attn = beam_step(model, state, prev, k, first)  # (live, V)
        if beams.forced is not None:
            if t < beams.forced.size(1):
                force_tokens(log_probs, beams.forced[live, t])
            else:
                beams.forced = None
        log_probs[:, NEVER] = float("-inf")
        rows, tok, scores, step_lp = best_extensions(beams, log_probs, live, t, cfg)
        step_attn = None if attn is None else (  # (live, S) -> (n*k, 1, S), zeros where not computed
            attn.new_zeros(n * k, attn.size(-1)).index_copy_(0, live, attn)[rows].unsqueeze(1))
        tok = beams.extend(rows, tok, scores, step_lp, step_attn)
        # The state row of each flat row computed this step (the first step: its sentence's).
        state_row = torch.full((n * k,), -1, dtype=torch.long, device=dev)
        state_row[live] = live // k if first else torch.arange(live.numel(), device=dev)
        # A sentence is done when none of its hypotheses can still change (ended or dead).
        can_change = ~beams.finished & ~torch.isneginf(beams.scores.view(-1))  # (n*k,)
        settled = ~can_change.view(n, k).any(dim=1)
        if cfg.early_stop:  # slots are sorted by normalised score: the first n_best lead
            settled |= beams.finished.view(n, k)[:, :cfg.n_best].all(dim=1)
        some_settled = bool(settled.any())
        if some_settled:
            for i in settled.nonzero().view(-1).tolist():
                results[beams.sentences[i]] = _best(beams.sentence(i), cfg)
            if bool(settled.all()):
                break
            kept = beams.drop(settled)  # (n'*k,)
            tok, rows, can_change = tok[kept], rows[kept], can_change[kept]
        live = can_change.nonzero().view(-1)  # (live',) the hypotheses the model computes next
        # Rows keep their source sentence when no sentence left and each kept its number of
        # live hypotheses (state row i then belongs to the same sentence before and after).
        same_source = not first and not some_settled and bool(
            (can_change.view(n, k).sum(1) == (state_row >= 0).view(n, k).sum(1)).all())
        state = model.reorder(state, state_row[rows[live]], same_source=same_source)
        prev = tok[live]
    return results


def best_extensions(beams: Beams, log_probs: Tensor, live: Tensor, t: int,
                    cfg: DecodeConfig) -> tuple[Tensor, Tensor, Tensor, Tensor | None]:
    """One step's choice: the ``k`` best-ranked extensions of each sentence's beam, from
    the next-token log-probs ``log_probs`` (live, V) of the ``live`` rows.

    Each hypothesis's candidates: a live one's ``k`` most probable tokens (only ``</s>`` at
    its length cap); an ended one ``</s>`` again at no cost; one that cannot win none. They
    are ranked by length-normalised score. Returns, per new hypothesis (n*k, in slot order):
    the flat row it extends, its token, the new raw scores (n, k) and, with token scores,
    the token's log-probability (n*k, 1).
    """
    n, k = beams.scores.shape
    dev = log_probs.device
    live_lp, live_tok = log_probs.topk(min(k, log_probs.size(1)), dim=1)  # (live, kk)
    at_cap = (t + 1) >= beams.caps[live]  # a hypothesis at its cap may only end
    if bool(at_cap.any()):
        live_lp[at_cap] = float("-inf")
        live_lp[at_cap, 0] = log_probs[at_cap, EOS]
        live_tok[at_cap, 0] = EOS
    kk = live_lp.size(1)
    top_lp = torch.full((n * k, kk), float("-inf"), device=dev)
    top_tok = torch.full((n * k, kk), EOS, dtype=torch.long, device=dev)
    top_lp[beams.finished, 0] = 0.0
    top_lp[live], top_tok[live] = live_lp, live_tok
    cand = beams.scores.view(n * k, 1) + top_lp  # (n*k, kk) raw scores
    cand_len = torch.where(beams.finished, beams.lengths, beams.lengths + 1)  # (n*k,)
    norm = cand / length_penalty(cand_len.float(), cfg.length_penalty).unsqueeze(1)
    _, pick = norm.view(n, k * kk).topk(k, dim=1)  # (n, k) the sentence's best extensions
    base = (torch.arange(n, device=dev) * k).unsqueeze(1)  # (n, 1) first row of a sentence
    rows = (base + pick // kk).view(-1)  # (n*k,) row each new hypothesis extends
    scores = cand.view(n, k * kk).gather(1, pick)
    tok = top_tok.view(n, k * kk).gather(1, pick).view(-1)
    step_lp = None if beams.token_lps is None else (  # the chosen token's (0 after the end)
        top_lp.view(n, k * kk).gather(1, pick).view(-1, 1))  # (n*k, 1)
    return rows, tok, scores, step_lp


def _best(beam: Beams, cfg: DecodeConfig) -> list[Hypothesis[Tensor]]:
    """The ``cfg.n_best`` hypotheses of one sentence's beam (:meth:`Beams.sentence`), by
    length-normalised score."""
    scores, lengths, attn, token_lps = beam.scores[0], beam.lengths, beam.attention, beam.token_lps
    lp = length_penalty(lengths.float(), cfg.length_penalty)
    final = (scores / lp).masked_fill(~beam.finished, float("-inf"))
    order = best_first(final.tolist(), cfg.n_best)
    tok_list = beam.tokens.tolist()
    hyps = []
    for j in order:
        n = int(lengths[j]) - 1  # without EOS
        a = attn[j, : n + 1] if attn is not None else None
        tlp = token_lps[j, : n + 1].tolist() if token_lps is not None else None
        hyps.append(Hypothesis(tok_list[j][:n], float(final[j]), float(scores[j]), a, tlp))
    return hyps
