"""Batched greedy and beam search over the model interface (``encode``/``start``/``step``/``reorder``).

Both stop each sentence at EOS and cap its length at ``max_len_a * src_len + max_len_b``
(EOS is forced at the cap). Beam search keeps ``beam`` hypotheses per sentence as one
flat batch of ``batch * beam`` rows; finished hypotheses stay in their slot with a frozen
score, and hypotheses are ranked by the GNMT length-normalised score
(Wu et al. 2016): ``log P(y) / ((5 + |y|) / 6) ** alpha``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from ..data.vocab import BOS, EOS, PAD

NEVER = (PAD, BOS)  # ids a hypothesis may never produce


@dataclass
class Hypothesis:
    tokens: list[int]  # without BOS/EOS
    score: float  # length-normalised log-probability
    log_prob: float
    attention: Tensor | None = None  # (len(tokens) + 1, S): source attention per output step


def length_caps(src_mask: Tensor, a: float, b: int, max_len: int | None = None) -> Tensor:
    """(batch,) maximum number of output tokens (EOS included) per sentence.

    ``max_len`` (if given) is an absolute cap on the tokens before EOS, on top of ``a * S + b``.
    """
    src_len = src_mask.reshape(src_mask.size(0), -1).sum(-1)
    caps = (a * src_len.float() + b).floor().long().clamp(min=1)
    return caps if max_len is None else caps.clamp(max=max_len + 1)


def length_penalty(length: Tensor, alpha: float) -> Tensor:
    """GNMT length penalty lp(Y) = ((5 + |Y|) / 6) ** alpha."""
    return ((5.0 + length.float()) / 6.0) ** alpha


@torch.no_grad()
def greedy_search(model, src: Tensor, src_mask: Tensor, max_len_a: float = 1.2,
                  max_len_b: int = 10, need_attention: bool = False,
                  max_len: int | None = None) -> list[Hypothesis]:
    """Most probable next token at every step, for a whole batch at once."""
    b = src.size(0)
    caps = length_caps(src_mask, max_len_a, max_len_b, max_len)
    state = model.start(model.encode(src, src_mask), src_mask, need_attention=need_attention)
    prev = torch.full((b,), BOS, dtype=torch.long, device=src.device)
    done = torch.zeros(b, dtype=torch.bool, device=src.device)
    out, scores, attns = [], torch.zeros(b, device=src.device), []
    for t in range(int(caps.max())):
        log_probs, state, attn = model.step(state, prev)
        log_probs[:, NEVER] = float("-inf")
        at_cap = (t + 1) >= caps
        log_probs[at_cap] = log_probs[at_cap].masked_fill(
            torch.arange(log_probs.size(1), device=src.device) != EOS, float("-inf"))
        lp, tok = log_probs.max(dim=-1)
        tok = tok.masked_fill(done, PAD)
        scores += lp.masked_fill(done, 0.0)
        out.append(tok)
        if attn is not None:
            attns.append(attn)
        done |= tok == EOS
        if bool(done.all()):
            break
        prev = tok
    ys = torch.stack(out, dim=1).tolist()  # (batch, steps)
    attn_all = torch.stack(attns, dim=1) if attns else None  # (batch, steps, S)
    hyps = []
    for i, row in enumerate(ys):
        n = row.index(EOS) if EOS in row else len(row)
        a = attn_all[i, : n + 1] if attn_all is not None else None
        hyps.append(Hypothesis(row[:n], float(scores[i]), float(scores[i]), a))
    return hyps


@torch.no_grad()
def beam_search(model, src: Tensor, src_mask: Tensor, beam: int = 5, alpha: float = 0.6,
                max_len_a: float = 1.2, max_len_b: int = 10, n_best: int = 1,
                need_attention: bool = False, max_len: int | None = None) -> list[list[Hypothesis]]:
    """Batched beam search; returns the ``n_best`` hypotheses of each sentence, best first."""
    b, k, dev = src.size(0), beam, src.device
    caps = length_caps(src_mask, max_len_a, max_len_b, max_len).repeat_interleave(k)  # (b*k,)
    memory = model.encode(src, src_mask)
    state = model.start(memory, src_mask, need_attention=need_attention)
    state = model.reorder(state, torch.arange(b, device=dev).repeat_interleave(k))
    scores = torch.full((b, k), float("-inf"), device=dev)
    scores[:, 0] = 0.0  # only one live hypothesis at the start
    lengths = torch.zeros(b * k, dtype=torch.long, device=dev)  # tokens incl. EOS
    finished = torch.zeros(b * k, dtype=torch.bool, device=dev)
    tokens = torch.full((b * k, 0), PAD, dtype=torch.long, device=dev)
    attn_hist = None
    prev = torch.full((b * k,), BOS, dtype=torch.long, device=dev)
    base = (torch.arange(b, device=dev) * k).unsqueeze(1)  # (b, 1) row offset of each sentence
    for t in range(int(caps.max())):
        log_probs, state, attn = model.step(state, prev)  # (b*k, V)
        log_probs[:, NEVER] = float("-inf")
        v = log_probs.size(1)
        not_eos = torch.arange(v, device=dev) != EOS
        # At the cap only EOS; a finished hypothesis continues with EOS at no cost.
        log_probs = log_probs.masked_fill(((t + 1) >= caps).unsqueeze(1) & not_eos, float("-inf"))
        log_probs = torch.where(finished.unsqueeze(1),
                                torch.where(not_eos, float("-inf"), 0.0), log_probs)
        cand = scores.view(b * k, 1) + log_probs  # (b*k, V) raw scores
        cand_len = torch.where(finished, lengths, lengths + 1)  # (b*k,): the same for every token
        norm = cand / length_penalty(cand_len, alpha).unsqueeze(1)
        # Keep finished hypotheses once only (their EOS column), other columns are -inf already.
        top_norm, top_idx = norm.view(b, k * v).topk(k, dim=1)  # (b, k)
        origin = top_idx // v  # beam slot the candidate extends
        tok = top_idx % v
        rows = (base + origin).view(-1)  # (b*k,) flat row in the previous beam
        scores = cand.view(b, k * v).gather(1, top_idx)
        was_finished = finished[rows]
        lengths = torch.where(was_finished, lengths[rows], lengths[rows] + 1)
        tok = tok.view(-1).masked_fill(was_finished, PAD)
        finished = was_finished | (tok == EOS)
        tokens = torch.cat([tokens[rows], tok.unsqueeze(1)], dim=1)
        if attn is not None:
            step_attn = attn[rows].unsqueeze(1)  # (b*k, 1, S)
            attn_hist = step_attn if attn_hist is None else torch.cat([attn_hist[rows], step_attn], 1)
        state = model.reorder(state, rows, same_source=True)  # rows stay in their sentence
        prev = tok
        if bool(finished.all()):
            break
        del top_norm
    final = scores.view(-1) / length_penalty(lengths, alpha)
    final = final.masked_fill(~finished, float("-inf")).view(b, k)
    # Unfinished hypotheses (cap reached without EOS cannot happen: EOS is forced at the cap).
    order = final.argsort(dim=1, descending=True)
    tok_list = tokens.tolist()
    results = []
    for i in range(b):
        hyps = []
        for j in order[i, :n_best].tolist():
            r = i * k + j
            n = int(lengths[r]) - 1  # without EOS
            a = attn_hist[r, : n + 1] if attn_hist is not None else None
            hyps.append(Hypothesis(tok_list[r][:n], float(final[i, j]), float(scores[i, j]), a))
        results.append(hyps)
    return results
