"""Lexically constrained beam search: outputs that contain given target phrases (terminology).

Dynamic beam allocation (Post & Vilar 2018, "Fast Lexically Constrained Decoding with
Dynamic Beam Allocation for Neural Machine Translation"). Each hypothesis tracks which of
its sentence's phrases it has produced and how far it is into the one it is producing. At
every step a hypothesis may be extended by

- its ``beam`` most probable next tokens (as in plain beam search), and
- the token that advances its constraints: the next token of the phrase in progress, or
  else the first token of each phrase still to produce (so a phrase the model finds
  unlikely is still tried).

The candidates of a sentence are grouped into *banks* by how many constraint tokens they
have met, and the ``beam`` slots are dealt out across the banks in turn, best bank first
(the best candidate of every bank, then the second best of every bank, ...), so hypotheses
that have met more constraints are kept even when their score is lower. A hypothesis may
end (``</s>``) only once it has produced every phrase, except at the length cap, which is
raised to fit all the phrases (not past ``max_length``). The final output is the
best-ranked ended hypothesis that contains every phrase (the best ended one if none does,
which only the cap can cause); an
n-best list puts those with every phrase first, and may go on with hypotheses that lack
some (stopped by the cap) when fewer than ``n_best`` complete ones ended. Each hypothesis
says whether it has them all (``Hypothesis.constraints_met``). With a beam of
one the search takes a constraint's tokens as soon as it can.

A phrase started and then left (a different token) is unwound: it must be produced again
from its start. Each phrase is met once (a phrase wanted twice is listed twice).

This search does per-step Python work for each hypothesis (its constraint state), so it
runs only when a batch has constraints (at most
:data:`nmtkit.decode.limits.MAX_PHRASES` a sentence, wherever they come from); plain beam
search is untouched. The options are
``DecodeConfig``'s beam options; forced prefixes, per-token scores and attention work too.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from ..config import DecodeConfig
from ..data.vocab import EOS, PAD
from ..rules import NEVER, Hypothesis, best_first, length_penalty
from .beams import (
    Beams,
    Prefixes,
    beam_step,
    follow_beams,
    force_tokens,
    length_caps,
    prefix_table,
    start_beams,
)

if TYPE_CHECKING:
    from ..models.seq2seq import Seq2Seq
    from .deadline import Deadline

Constraints = Sequence[Sequence[Sequence[int]]]
"""Per sentence, the target phrases (lists of ids) its output must contain."""


@dataclass(frozen=True)
class Progress:
    """The constraint state of one hypothesis."""

    done: tuple[bool, ...]  # per phrase: produced
    phrase: int = -1  # the phrase in progress (-1: none)
    pos: int = 0  # its tokens produced so far

    def met(self, phrases: Sequence[Sequence[int]]) -> int:
        """Constraint tokens produced: the bank of the hypothesis."""
        return sum(len(p) for p, d in zip(phrases, self.done, strict=True) if d) + self.pos

    def complete(self) -> bool:
        return all(self.done)

    def wanted(self, phrases: Sequence[Sequence[int]]) -> list[int]:
        """The tokens that advance the constraints."""
        if self.phrase >= 0:
            return [phrases[self.phrase][self.pos]]
        return list(dict.fromkeys(p[0] for p, d in zip(phrases, self.done, strict=True) if not d))

    def advance(self, tok: int, phrases: Sequence[Sequence[int]]) -> Progress:
        """The state after producing ``tok``."""
        if self.phrase >= 0:
            p = phrases[self.phrase]
            if p[self.pos] == tok:
                if self.pos + 1 == len(p):
                    done = list(self.done)
                    done[self.phrase] = True
                    return Progress(tuple(done))
                return Progress(self.done, self.phrase, self.pos + 1)
            # left the phrase: unwind it, then see whether tok starts one
            return Progress(self.done).advance(tok, phrases)
        for c, (p, d) in enumerate(zip(phrases, self.done, strict=True)):
            if not d and p[0] == tok:
                return Progress(self.done, c, 0).advance(tok, phrases)
        return self


@torch.no_grad()
def constrained_beam_search(model: Seq2Seq, src: Tensor, src_mask: Tensor, cfg: DecodeConfig,
                            constraints: Constraints, *, need_attention: bool = False,
                            max_length: int | None = None, prefixes: Prefixes | None = None,
                            token_scores: bool = False,
                            deadline: Deadline | None = None) -> list[list[Hypothesis[Tensor]]]:
    """Beam search of width ``cfg.beam`` whose outputs contain every phrase of
    ``constraints[i]`` for sentence ``i`` (dynamic beam allocation, see the module); the
    ``cfg.n_best`` best of each sentence, ranked with ``cfg.length_penalty``, those that meet
    every constraint first. ``deadline``: checked before every step
    (:class:`~nmtkit.decode.deadline.DeadlineExceeded` once it has passed)."""
    b, k, dev = src.size(0), cfg.beam, src.device
    if len(constraints) != b:
        raise ValueError(f"{len(constraints)} constraint lists for a batch of {b} sentences")
    phrases = [[list(p) for p in cs if len(p) > 0] for cs in constraints]
    caps = length_caps(src_mask, cfg.max_len_a, cfg.max_len_b, max_length)  # (b,)
    need = torch.tensor([sum(len(p) for p in ps) for ps in phrases], device=dev)
    forced = prefix_table(prefixes, b, dev)  # (b, P) or None
    if forced is not None:
        need = need + (forced >= 0).sum(1)
    caps = torch.maximum(caps, need + 1)  # room for them and </s> ...
    if max_length is not None:  # ... within the absolute cap (e.g. the model's position table)
        caps = caps.clamp(max=max_length + 1)
    state, beams, prev = start_beams(model, src, src_mask, k, caps, forced,
                                     need_attention=need_attention, token_scores=token_scores)
    track = [Progress((False,) * len(phrases[i])) for i in range(b) for _ in range(k)]
    results: list[list[Hypothesis[Tensor]]] = [[] for _ in range(b)]
    for t in range(int(beams.caps.max())):
        if deadline is not None:
            deadline.check()
        n = len(beams.sentences)
        log_probs, state, attn = beam_step(model, state, prev, k, first=t == 0)  # (n*k, V)
        if beams.forced is not None:
            if t < beams.forced.size(1):
                force_tokens(log_probs, beams.forced[:, t])
            else:
                beams.forced = None
        log_probs[:, NEVER] = float("-inf")
        at_cap = ((t + 1) >= beams.caps) & ~beams.finished
        unmet = torch.tensor([not p.complete() for p in track], device=dev)
        log_probs[unmet & ~at_cap, EOS] = float("-inf")  # end only with every phrase produced
        sentence_phrases = [phrases[i] for i in beams.sentences]
        picks = dealt_picks(beams, log_probs, at_cap, track, sentence_phrases, cfg)
        rows = torch.tensor([p[0] for p in picks], dtype=torch.long, device=dev)  # (n*k,)
        was_finished = beams.finished[rows]
        fin_l = beams.finished.tolist()
        track = [track[r] if fin_l[r] else track[r].advance(w, sentence_phrases[j // k])
                 for j, (r, w, _, _) in enumerate(picks)]
        step_lp = None if beams.token_lps is None else torch.tensor(
            [p[3] for p in picks], device=dev).masked_fill(was_finished, 0.0).unsqueeze(1)
        tok = beams.extend(rows, torch.tensor([p[1] for p in picks], dtype=torch.long, device=dev),
                           torch.tensor([p[2] for p in picks], device=dev).view(n, k), step_lp,
                           None if attn is None else attn[rows].unsqueeze(1))  # (n*k, 1, S)
        settled = (beams.finished | torch.isneginf(beams.scores.view(-1))).view(n, k).all(dim=1)
        if bool(settled.any()):
            for i in settled.nonzero().view(-1).tolist():
                complete = torch.tensor([p.complete() for p in track[i * k:(i + 1) * k]], device=dev)
                results[beams.sentences[i]] = _best(beams.sentence(i), complete, cfg)
            if bool(settled.all()):
                break
            kept = beams.drop(settled)  # (n'*k,)
            track = [track[r] for r in kept.tolist()]
            tok = tok[kept]
            state = follow_beams(model, state, rows[kept], k, t == 0, same_source=False)
        else:
            state = follow_beams(model, state, rows, k, t == 0, same_source=True)
        prev = tok
    return results


def dealt_picks(beams: Beams, log_probs: Tensor, at_cap: Tensor, track: list[Progress],
                phrases: list[list[list[int]]], cfg: DecodeConfig) -> list[tuple[int, int, float, float]]:
    """One step of dynamic beam allocation: each sentence's ``k`` new hypotheses as (flat
    row extended, token, new raw score, the token's log-prob), in slot order.

    A hypothesis's candidates: its ``k`` most probable tokens and the tokens that advance
    its constraints (only ``</s>`` at its length cap; an ended one continues with PAD at no
    cost; one that cannot win has none). They are ranked by length-normalised score and
    dealt across the banks (:func:`_deal`). ``phrases``: each sentence's still searched;
    ``at_cap`` (n*k,): the live hypotheses at their length cap.
    """
    n, k = beams.scores.shape
    dev = log_probs.device
    top_lp, top_tok = log_probs.topk(min(k, log_probs.size(1)), dim=1)  # (n*k, kk)
    # (row, token, log-prob) candidates: the top tokens, plus the constraints' tokens
    extra = [(r, w) for r in range(n * k) for w in track[r].wanted(phrases[r // k])]
    extra_lp = (log_probs[torch.tensor([r for r, _ in extra], dtype=torch.long, device=dev),
                          torch.tensor([w for _, w in extra], dtype=torch.long, device=dev)].tolist()
                if extra else [])
    top_lp_l, top_tok_l = top_lp.tolist(), top_tok.tolist()
    cap_l, fin_l = at_cap.tolist(), beams.finished.tolist()
    eos_l = log_probs[:, EOS].tolist()
    score_l, len_l = beams.scores.view(-1).tolist(), beams.lengths.tolist()
    picks: list[tuple[int, int, float, float]] = []  # (row, token, new raw score, step lp)
    for i in range(n):
        cands: dict[tuple[int, int], float] = {}
        for r in range(i * k, (i + 1) * k):
            if math.isinf(score_l[r]):
                continue
            if fin_l[r]:  # an ended hypothesis continues at no cost
                cands[(r, PAD)] = 0.0
            elif cap_l[r]:  # at the cap a hypothesis may only end
                cands[(r, EOS)] = eos_l[r]
            else:
                for lp, w in zip(top_lp_l[r], top_tok_l[r], strict=True):
                    cands[(r, w)] = lp
        for (r, w), lp in zip(extra, extra_lp, strict=True):
            if i * k <= r < (i + 1) * k and not fin_l[r] and not cap_l[r] \
                    and not math.isinf(score_l[r]):
                cands[(r, w)] = lp
        ranked = []
        for (r, w), lp in cands.items():
            raw = score_l[r] + lp
            if math.isinf(raw):
                continue
            new_len = len_l[r] + (0 if fin_l[r] else 1)
            norm = raw / length_penalty(new_len, cfg.length_penalty)
            bank = track[r].met(phrases[i]) if fin_l[r] else \
                track[r].advance(w, phrases[i]).met(phrases[i])
            ranked.append((norm, bank, r, w, raw, lp))
        chosen = _deal(ranked, k)
        picks += [(r, w, raw, lp) for _, _, r, w, raw, lp in chosen]
        # fewer live candidates than slots: dead slots
        picks += [(i * k, PAD, float("-inf"), float("-inf"))] * (k - len(chosen))
    return picks


def _deal(ranked: list[tuple[float, int, int, int, float, float]],
          k: int) -> list[tuple[float, int, int, int, float, float]]:
    """Dynamic beam allocation: the ``k`` candidates dealt across banks (number of
    constraint tokens met) in turn: the best of every bank (most met first), then the second
    best of every bank, ... Each candidate is (normalised score, bank, row, token, raw, lp)."""
    banks: dict[int, list[tuple[float, int, int, int, float, float]]] = {}
    for c in sorted(ranked, key=lambda c: -c[0]):
        banks.setdefault(c[1], []).append(c)
    order = sorted(((rank, -bank, c) for bank, cs in banks.items() for rank, c in enumerate(cs)),
                   key=lambda x: (x[0], x[1]))
    chosen = [c for _, _, c in order[:k]]
    return sorted(chosen, key=lambda c: -c[0])  # slots ranked by score, as in beam search


def _best(beam: Beams, complete: Tensor, cfg: DecodeConfig) -> list[Hypothesis[Tensor]]:
    """The ``cfg.n_best`` ended hypotheses of one sentence's beam (:meth:`Beams.sentence`):
    those with every phrase (``complete`` (k,)) first, each group by length-normalised score."""
    scores, lengths, finished = beam.scores[0], beam.lengths, beam.finished
    attn, token_lps = beam.attention, beam.token_lps
    lp = length_penalty(lengths.float(), cfg.length_penalty)
    final = (scores / lp).masked_fill(~finished, float("-inf"))
    key = torch.where(complete & finished, final, final - 1e9)  # (k,) complete ones first
    order = [j for j in best_first(key.tolist(), key.numel()) if bool(finished[j])][:cfg.n_best]
    tok_list = beam.tokens.tolist()
    hyps = []
    for j in order:
        n = int(lengths[j]) - 1
        a = attn[j, : n + 1] if attn is not None else None
        tlp = token_lps[j, : n + 1].tolist() if token_lps is not None else None
        hyps.append(Hypothesis(tok_list[j][:n], float(final[j]), float(scores[j]), a, tlp,
                               constraints_met=bool(complete[j])))
    return hyps
