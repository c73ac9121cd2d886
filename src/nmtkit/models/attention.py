"""Attention: the pure function of Vaswani et al. (2017), Eq. 1, and multi-head attention (Sec. 3.2.2).

Masks are boolean and broadcastable to ``(batch, heads, queries, keys)``; ``True``
means "may attend". The readable :func:`scaled_dot_product_attention` returns the
probabilities too (for plots and tests); :class:`MultiHeadAttention` uses PyTorch's
fused kernel when the probabilities are not requested, and the readable path when
they are. Both compute the same function.

One exception: training on a CPU takes the readable path too. PyTorch's fused CPU kernel
(flash attention, blocked for long sequences) is slower forward and backward for
sentence-length inputs: 15-31 ms against 9-11 ms per call at 150 sentences x 27 tokens,
4 heads of 64 (guide, section 18); at inference it is as fast or faster, and kept.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from . import prepack
from .dropout import Dropout


def scaled_dot_product_attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    mask: Tensor | None = None,
    dropout: nn.Module | None = None,
) -> tuple[Tensor, Tensor]:
    """Attention(Q, K, V) = softmax(Q K^T / sqrt(d_k)) V   (Eq. 1).

    query: (..., q, d_k); key: (..., k, d_k); value: (..., k, d_v); mask broadcastable
    to (..., q, k). Returns the output (..., q, d_v) and the probabilities (..., q, k).
    A query row whose keys are all masked gets uniform weights over them.
    """
    d_k = query.size(-1)
    scores = torch.matmul(query, key.transpose(-2, -1)) / math.sqrt(d_k)  # (..., q, k)
    if mask is not None:
        scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
    probs = scores.softmax(dim=-1)
    if dropout is not None:
        probs = dropout(probs)
    return torch.matmul(probs, value), probs


class MultiHeadAttention(nn.Module):
    """MultiHead(Q, K, V) = Concat(head_1..head_h) W^O, head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V).

    The three input projections are stored as one ``(3 d_model, d_model)`` matrix
    (``in_proj``) so that self-attention is a single matmul; source attention uses
    its query rows and its key/value rows separately, and projects the encoder
    memory once per sentence (:meth:`project_kv`).
    """

    def __init__(self, d_model: int, heads: int, dropout: float = 0.0):
        super().__init__()
        if d_model % heads:
            raise ValueError(f"d_model ({d_model}) must be divisible by heads ({heads})")
        self.d_model, self.heads, self.d_k = d_model, heads, d_model // heads
        self.in_proj = nn.Linear(d_model, 3 * d_model)
        self.out_proj = nn.Linear(d_model, d_model)
        self.dropout_p = dropout
        self.dropout = Dropout(dropout)

    def reset_parameters(self) -> None:
        """Glorot-uniform per projection matrix (fan_avg of d_model x d_model), zero biases."""
        d = self.d_model
        for i in range(3):
            nn.init.xavier_uniform_(self.in_proj.weight[i * d:(i + 1) * d])
        nn.init.xavier_uniform_(self.out_proj.weight)
        nn.init.zeros_(self.in_proj.bias)
        nn.init.zeros_(self.out_proj.bias)

    def _split(self, x: Tensor) -> Tensor:
        b, t, _ = x.shape
        return x.view(b, t, self.heads, self.d_k).transpose(1, 2)  # (batch, heads, time, d_k)

    def packable(self) -> dict[str, tuple[Tensor, Tensor | None]]:
        """The products one decoding step makes (see :mod:`nmtkit.models.prepack`)."""
        d, w, b = self.d_model, self.in_proj.weight, self.in_proj.bias
        return {"qkv": (w, b), "q": (w[:d], b[:d]), "out": (self.out_proj.weight, self.out_proj.bias)}

    def project_q(self, x: Tensor) -> Tensor:
        d = self.d_model
        return self._split(prepack.linear(self, "q", x, self.in_proj.weight[:d], self.in_proj.bias[:d]))

    def project_kv(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """Keys and values of ``x`` (batch, time, d_model), each (batch, heads, time, d_k)."""
        d = self.d_model
        kv = F.linear(x, self.in_proj.weight[d:], self.in_proj.bias[d:])  # (batch, time, 2 d)
        k, v = kv.chunk(2, dim=-1)
        return self._split(k), self._split(v)

    def project_qkv(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        qkv = prepack.linear(self, "qkv", x, self.in_proj.weight, self.in_proj.bias)
        q, k, v = qkv.chunk(3, dim=-1)  # each (batch, time, d_model)
        return self._split(q), self._split(k), self._split(v)

    def attend(
        self,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        mask: Tensor | None = None,
        causal: bool = False,
        need_weights: bool = False,
    ) -> tuple[Tensor, Tensor | None]:
        """Attention over projected heads, then W^O. q: (batch, heads, q, d_k).

        ``mask``: bool, broadcastable to (batch, heads, q, k). ``causal``: mask future keys
        (used instead of a materialised subsequent mask). Returns (batch, q, d_model) and,
        if ``need_weights``, the probabilities (batch, heads, q, k).
        """
        if causal:
            tq, tk = q.size(-2), k.size(-2)
            future = torch.ones(tq, tk, dtype=torch.bool, device=q.device).tril(tk - tq)
            mask = future if mask is None else mask & future
        if need_weights or (q.device.type == "cpu" and q.requires_grad):  # see the module doc
            drop = self.dropout if self.training and self.dropout_p > 0 else None
            x, probs = scaled_dot_product_attention(q, k, v, mask, drop)
            probs = probs if need_weights else None
        else:
            x = F.scaled_dot_product_attention(
                q, k, v, attn_mask=mask, dropout_p=self.dropout_p if self.training else 0.0
            )
            probs = None
        b, _, t, _ = x.shape
        x = x.transpose(1, 2).reshape(b, t, self.d_model)  # (batch, time, heads * d_k)
        return prepack.linear(self, "out", x, self.out_proj.weight, self.out_proj.bias), probs

    def forward(
        self,
        query: Tensor,
        key: Tensor,
        value: Tensor,
        mask: Tensor | None = None,
        need_weights: bool = False,
    ) -> tuple[Tensor, Tensor | None]:
        """Full (non-incremental) attention. mask: (batch, 1 | q, k) bool."""
        if query is key and key is value:
            q, k, v = self.project_qkv(query)
        else:
            q = self.project_q(query)
            d = self.d_model
            k = self._split(F.linear(key, self.in_proj.weight[d:2 * d], self.in_proj.bias[d:2 * d]))
            v = self._split(F.linear(value, self.in_proj.weight[2 * d:], self.in_proj.bias[2 * d:]))
        if mask is not None:
            mask = mask.unsqueeze(1)  # same mask for every head: (batch, 1, q | 1, k)
        return self.attend(q, k, v, mask, need_weights=need_weights)


# --- Scores of the recurrent model (seed 003; Bahdanau et al. 2015; Luong et al. 2015) ----------
#
# One decoder query per step against all encoder states. The parts that depend only on
# the encoder states (W_h h for ``concat``, W^T h for ``general``) are projected once per
# sentence by the caller, so each function takes the projected "keys" and is pure.


def concat_scores(keys: Tensor, query: Tensor, v: Tensor) -> Tensor:
    """score(h, s) = v^T tanh(W [h; s]) = v^T tanh(W_h h + W_s s)  ("concat", additive).

    keys: (batch, S, a) = W_h h (+ bias); query: (batch, a) = W_s s_{t-1}; v: (a,).
    Returns the unnormalised scores (batch, S).
    """
    energy = torch.tanh(keys + query.unsqueeze(1))  # (batch, S, a)
    return energy.matmul(v)  # (batch, S)


def dot_scores(keys: Tensor, query: Tensor) -> Tensor:
    """score(h, s) = h^T s  ("dot"). keys: (batch, S, d); query: (batch, d) -> (batch, S)."""
    return torch.bmm(keys, query.unsqueeze(-1)).squeeze(-1)


def general_scores(memory: Tensor, query: Tensor, weight: Tensor) -> Tensor:
    """score(h, s) = h^T W s  ("general", bilinear).

    memory: (batch, S, d_h); query: (batch, d_s); weight: (d_h, d_s) -> (batch, S).
    Equal to ``dot_scores(memory, query @ weight.T)``; a model projects the keys
    ``memory @ weight`` once per sentence and calls :func:`dot_scores` instead.
    """
    return dot_scores(memory, query.matmul(weight.t()))


def masked_softmax(scores: Tensor, mask: Tensor | None = None, temperature: float = 1.0) -> Tensor:
    """a = softmax(scores / temperature) over the last axis, exactly 0 where ``mask`` is False.

    scores: (..., S); mask: bool broadcastable to scores, True at real source tokens.
    temperature 1 is the plain softmax; towards 0 it approaches a one-hot argmax, large
    values approach the uniform distribution over the unmasked positions.
    """
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    scores = scores / temperature
    if mask is not None:
        # The most negative finite value, not -inf: a row with no real token (never built by
        # nmtkit, but possible from a caller) gets uniform weights instead of NaN.
        scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
    return scores.softmax(dim=-1)


def attention_context(probs: Tensor, memory: Tensor) -> Tensor:
    """w_t = sum_j a_tj h_j. probs: (batch, S); memory: (batch, S, d) -> (batch, d)."""
    return torch.bmm(probs.unsqueeze(1), memory).squeeze(1)
