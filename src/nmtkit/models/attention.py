"""Attention: the pure function of Vaswani et al. (2017), Eq. 1, and multi-head attention (Sec. 3.2.2).

Masks are boolean and broadcastable to ``(batch, heads, queries, keys)``; ``True``
means "may attend". :func:`scaled_dot_product_attention` is Eq. 1 written out and returns
the probabilities too (for figures and tests). :class:`MultiHeadAttention` calls it when
the probabilities are asked for, and PyTorch's fused ``F.scaled_dot_product_attention``
(the same function in one kernel) otherwise. Speed-only variants live in :mod:`nmtkit.fast`.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .positions import RotaryEmbedding


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

    ``in_proj`` holds W^Q, W^K and W^V of all heads stacked, rows ``[0, d)``, ``[d, 2d)``
    and ``[2d, 3d)`` of one ``(3 d_model, d_model)`` matrix, so that self-attention projects
    its input with one product (:meth:`project_qkv`); source attention projects the
    decoder's queries (:meth:`project_q`) and the encoder memory's keys and values
    (:meth:`project_kv`, once per sentence when decoding) separately. ``out_proj`` is W^O.
    Head i is slice ``[i d_k, (i + 1) d_k)`` of each projection (d_k = d_model / heads).

    ``rotary`` (a self-attention of a ``model.positional: rope`` model): :meth:`project_qkv`
    rotates each head's queries and keys by their positions (Su et al. 2021, Eq. 34).
    """

    def __init__(self, d_model: int, heads: int, dropout: float = 0.0,
                 rotary: RotaryEmbedding | None = None):
        super().__init__()
        if d_model % heads:
            raise ValueError(f"d_model ({d_model}) must be divisible by heads ({heads})")
        self.d_model, self.heads, self.d_k = d_model, heads, d_model // heads
        self.in_proj = nn.Linear(d_model, 3 * d_model)  # [W^Q; W^K; W^V]
        self.out_proj = nn.Linear(d_model, d_model)  # W^O
        self.dropout = nn.Dropout(dropout)  # on the attention probabilities
        self.rotary = rotary  # shared by the model's self-attentions; None: no rotation

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

    def project_qkv(self, x: Tensor, offset: int = 0) -> tuple[Tensor, Tensor, Tensor]:
        """Self-attention: Q, K and V of ``x`` (batch, time, d_model), each (batch, heads, time, d_k).

        With ``rotary``, Q and K come rotated for positions ``offset .. offset + time - 1``
        (``offset``: the positions already in a decoder's key cache).
        """
        q, k, v = self.in_proj(x).chunk(3, dim=-1)  # each (batch, time, d_model)
        q, k, v = self._split(q), self._split(k), self._split(v)
        if self.rotary is not None:
            q, k = self.rotary(q, offset), self.rotary(k, offset)
        return q, k, v

    def project_q(self, x: Tensor) -> Tensor:
        """Queries x W^Q: (batch, time, d_model) -> (batch, heads, time, d_k)."""
        d = self.d_model
        return self._split(F.linear(x, self.in_proj.weight[:d], self.in_proj.bias[:d]))

    def project_kv(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """Keys x W^K and values x W^V of ``x`` (batch, time, d_model), each (batch, heads, time, d_k)."""
        d = self.d_model
        kv = F.linear(x, self.in_proj.weight[d:], self.in_proj.bias[d:])  # (batch, time, 2 d)
        k, v = kv.chunk(2, dim=-1)
        return self._split(k), self._split(v)

    def heads_attention(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None,
                        need_attention: bool) -> tuple[Tensor, Tensor | None]:
        """Eq. 1 on every head at once: q (batch, heads, q, d_k) -> (batch, heads, q, d_k).

        With ``need_attention`` the written-out :func:`scaled_dot_product_attention` (which
        returns the probabilities); otherwise PyTorch's fused kernel of the same function.
        """
        if need_attention:
            return scaled_dot_product_attention(q, k, v, mask, self.dropout)
        p = self.dropout.p if self.training else 0.0
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p), None

    def attend(
        self,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        mask: Tensor | None = None,
        causal: bool = False,
        need_attention: bool = False,
    ) -> tuple[Tensor, Tensor | None]:
        """Attention over projected heads, then W^O. q: (batch, heads, q, d_k).

        ``mask``: bool, broadcastable to (batch, heads, q, k). ``causal``: mask future keys
        (used instead of a materialised subsequent mask). Returns (batch, q, d_model) and,
        if ``need_attention``, the probabilities (batch, heads, q, k).
        """
        if causal:
            tq, tk = q.size(-2), k.size(-2)
            future = torch.ones(tq, tk, dtype=torch.bool, device=q.device).tril(tk - tq)
            mask = future if mask is None else mask & future
        x, probs = self.heads_attention(q, k, v, mask, need_attention)
        b, _, t, _ = x.shape
        x = x.transpose(1, 2).reshape(b, t, self.d_model)  # Concat(head_1..head_h): (batch, time, d_model)
        return self.out_proj(x), probs

    def forward(
        self,
        query: Tensor,
        key: Tensor,
        value: Tensor,
        mask: Tensor | None = None,
        need_attention: bool = False,
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
        return self.attend(q, k, v, mask, need_attention=need_attention)


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
