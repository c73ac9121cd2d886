"""Greedy and beam search over one sentence, in numpy: the algorithm of
:mod:`nmtkit.decode.search` for a batch of one (the same caps, ranking and ends), over a
:class:`~nmtkit.lite.transformer.NumpyTransformer`. The rules are :mod:`nmtkit.rules`, the
PyTorch search's own; only their arithmetic on arrays is here.

- The output is capped at :func:`~nmtkit.rules.output_cap` tokens, ``</s>`` included, and
  ``</s>`` is forced at the cap. :data:`~nmtkit.rules.NEVER` (``<pad>``, ``<s>``) are never
  produced.
- Beam search keeps ``beam`` hypotheses ranked by the GNMT length-normalised score
  ``log P(y) / lp(y)`` (:func:`~nmtkit.rules.length_penalty`); a finished
  hypothesis keeps its score and competes with the live extensions for the slots (it
  continues with ``</s>`` at no cost); each step ranks each live hypothesis's ``beam`` best
  tokens. The search ends when no hypothesis can change, or with ``early_stop`` when the
  ``n_best`` best-ranked slots have all ended.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ..config import DecodeConfig
from ..data.vocab import BOS, EOS, PAD
from ..rules import NEVER, Hypothesis, best_first, length_penalty, output_cap
from .transformer import NumpyTransformer


def _only_eos(log_probs: np.ndarray) -> np.ndarray:
    """Every row's log-probabilities with all but ``</s>`` at -inf (a hypothesis at its cap)."""
    out = np.full_like(log_probs, -np.inf)
    out[:, EOS] = log_probs[:, EOS]
    return out


def search(model: NumpyTransformer, src_ids: np.ndarray, cfg: DecodeConfig, *,
           max_length: int | None = None, token_scores: bool = False,
           need_attention: bool = False,
           check: Callable[[], None] | None = None) -> list[Hypothesis[np.ndarray]]:
    """The ``cfg.n_best`` best hypotheses of one sentence: greedy search when ``cfg.beam``
    and ``cfg.n_best`` are 1, else beam search (as :func:`nmtkit.decode.search.search`)."""
    if cfg.beam == 1 and cfg.n_best == 1:
        return [greedy_search(model, src_ids, cfg, max_length=max_length,
                              token_scores=token_scores, need_attention=need_attention,
                              check=check)]
    return beam_search(model, src_ids, cfg, max_length=max_length, token_scores=token_scores,
                       need_attention=need_attention, check=check)


def greedy_search(model: NumpyTransformer, src_ids: np.ndarray, cfg: DecodeConfig, *,
                  max_length: int | None = None, token_scores: bool = False,
                  need_attention: bool = False,
                  check: Callable[[], None] | None = None) -> Hypothesis[np.ndarray]:
    """The most probable token at every step until ``</s>`` or the cap. ``check`` is called
    before each step (a deadline)."""
    cap = output_cap(len(src_ids), cfg.max_len_a, cfg.max_len_b, max_length)
    state = model.start(model.encode(src_ids))
    prev = np.array([BOS])
    tokens: list[int] = []
    lps: list[float] = []
    rows: list[np.ndarray] = []  # the source attention of each step
    for t in range(cap):
        if check is not None:
            check()
        log_probs, attn = model.step(state, prev, need_attention)  # (1, V), (1, S)
        if attn is not None:
            rows.append(attn[0])
        log_probs[:, NEVER] = -np.inf
        if t + 1 >= cap:
            log_probs = _only_eos(log_probs)
        tok = int(log_probs[0].argmax())
        lps.append(float(log_probs[0, tok]))
        if tok == EOS:
            break
        tokens.append(tok)
        prev = np.array([tok])
    total = float(np.float32(sum(np.float32(v) for v in lps)))
    return Hypothesis(tokens, total, total, np.stack(rows) if need_attention else None,
                      lps if token_scores else None)


def _top(values: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The ``k`` largest of each row, largest first: (values, indices), both (rows, k)."""
    idx = np.argpartition(-values, k - 1, axis=1)[:, :k] if k < values.shape[1] else \
        np.tile(np.arange(values.shape[1]), (values.shape[0], 1))
    part = np.take_along_axis(values, idx, axis=1)
    order = np.argsort(-part, axis=1, kind="stable")
    return np.take_along_axis(part, order, axis=1), np.take_along_axis(idx, order, axis=1)


def beam_search(model: NumpyTransformer, src_ids: np.ndarray, cfg: DecodeConfig, *,
                max_length: int | None = None, token_scores: bool = False,
                need_attention: bool = False,
                check: Callable[[], None] | None = None) -> list[Hypothesis[np.ndarray]]:
    """The ``cfg.n_best`` best hypotheses of a beam of ``cfg.beam``, best first.

    The model's state holds one row per live hypothesis (the first step one row, the
    empty prefix every slot starts from)."""
    k = cfg.beam
    cap = output_cap(len(src_ids), cfg.max_len_a, cfg.max_len_b, max_length)
    state = model.start(model.encode(src_ids))
    scores = np.full(k, -np.inf, dtype=np.float32)
    scores[0] = 0.0  # one live hypothesis at the start
    lengths = np.zeros(k, dtype=np.int64)  # tokens incl. </s>
    finished = np.zeros(k, dtype=bool)
    tokens = np.zeros((k, 0), dtype=np.int64)
    lp_hist = np.zeros((k, 0), dtype=np.float32)
    attn_hist = np.zeros((k, 0, len(src_ids)), dtype=np.float32)  # (k, t, S) with need_attention
    live = np.arange(k)  # the slots whose rows the state holds (after the first step)
    prev = np.array([BOS])
    for t in range(cap):
        if check is not None:
            check()
        first = t == 0
        log_probs, attn = model.step(state, prev, need_attention)  # (rows, V), (rows, S)
        if first:
            log_probs = np.repeat(log_probs, k, axis=0)  # (1, V) -> (k, V)
            attn = None if attn is None else np.repeat(attn, k, axis=0)
        log_probs[:, NEVER] = -np.inf
        kk = min(k, log_probs.shape[1])
        live_lp, live_tok = _top(log_probs, kk)  # (live, kk)
        if t + 1 >= cap:  # at the cap a hypothesis may only end
            live_lp = np.full_like(live_lp, -np.inf)
            live_lp[:, 0] = log_probs[:, EOS]
            live_tok[:, 0] = EOS
        # every slot's candidates: a live one's top tokens, an ended one </s> at no cost
        top_lp = np.full((k, kk), -np.inf, dtype=np.float32)
        top_tok = np.full((k, kk), EOS, dtype=np.int64)
        top_lp[finished, 0] = 0.0
        top_lp[live], top_tok[live] = live_lp, live_tok
        cand = scores[:, None] + top_lp  # (k, kk) raw scores
        cand_len = np.where(finished, lengths, lengths + 1)  # (k,)
        norm = cand / length_penalty(cand_len.astype(np.float32), cfg.length_penalty)[:, None]
        pick = _top(norm.reshape(1, -1), k)[1][0]  # (k,) the best extensions
        rows = pick // kk  # the slot each new hypothesis extends
        scores = cand.reshape(-1)[pick]
        tok = top_tok.reshape(-1)[pick]
        was_finished = finished[rows]
        lengths = np.where(was_finished, lengths[rows], lengths[rows] + 1)
        tok = np.where(was_finished, PAD, tok)
        finished = was_finished | (tok == EOS)
        tokens = np.concatenate([tokens[rows], tok[:, None]], axis=1)
        lp_hist = np.concatenate([lp_hist[rows], top_lp.reshape(-1)[pick][:, None]], axis=1)
        if attn is not None:  # the slots not computed this step (ended) get zeros
            step_attn = np.zeros((k, attn.shape[1]), dtype=np.float32)
            step_attn[live] = attn
            attn_hist = np.concatenate([attn_hist[rows], step_attn[rows][:, None]], axis=1)
        # the state row of each slot computed this step (the first step: the one row)
        state_row = np.full(k, -1)
        state_row[live] = 0 if first else np.arange(live.size)
        can_change = ~finished & ~np.isneginf(scores)
        settled = not can_change.any()
        if cfg.early_stop:  # slots are sorted by normalised score: the first n_best lead
            settled = settled or bool(finished[:cfg.n_best].all())
        if settled:
            break
        live = np.flatnonzero(can_change)
        state = model.reorder(state, state_row[rows[live]])
        prev = tok[live]
    return _best(scores, lengths, finished, tokens, lp_hist, attn_hist if need_attention else None,
                 cfg, token_scores)


def _best(scores: np.ndarray, lengths: np.ndarray, finished: np.ndarray, tokens: np.ndarray,
          lp_hist: np.ndarray, attn_hist: np.ndarray | None, cfg: DecodeConfig,
          token_scores: bool) -> list[Hypothesis[np.ndarray]]:
    """The ``cfg.n_best`` ended hypotheses of the beam, by length-normalised score."""
    lp = length_penalty(lengths.astype(np.float32), cfg.length_penalty)
    final = np.where(finished, scores / lp, -np.inf)
    out = []
    for j in best_first(final.tolist(), cfg.n_best):
        n = int(lengths[j]) - 1  # without </s>
        out.append(Hypothesis([int(x) for x in tokens[j, :n]], float(final[j]), float(scores[j]),
                              None if attn_hist is None else attn_hist[j, :n + 1],
                              [float(x) for x in lp_hist[j, :n + 1]] if token_scores else None))
    return out
