"""Word order beside the sinusoid: learned position embeddings and rotary position embedding.

Attention by itself is blind to order: permute the keys and values and the output is the
same. Vaswani et al. (2017) therefore add a fixed sinusoid table to the embeddings (Sec. 3.5,
:class:`nmtkit.models.transformer.PositionalEncoding`) and note that learned position
embeddings did about as well (Sec. 3.5; Table 3, row E). ``model.positional`` chooses:

``sinusoidal``
    the paper's fixed table, added to the scaled embeddings (the default).
``learned``
    :class:`LearnedPositionalEmbedding`: a trained table P of (max_positions, d_model) rows,
    added instead: x_m = sqrt(d_model) E[w_m] + P[m] (Gehring et al. 2017, "Convolutional
    Sequence to Sequence Learning", Sec. 3.1; BERT, Devlin et al. 2019, Sec. 3; fairseq's
    ``--encoder-learned-pos``). One table serves the encoder and the decoder, as the one
    sinusoid table does; positions beyond the table cannot be read (no extrapolation).
``rope``
    :class:`RotaryEmbedding` (Su et al. 2021, "RoFormer: Enhanced Transformer with Rotary
    Position Embedding"): nothing is added to the embeddings (:class:`EmbeddingDropout` keeps
    only their dropout); every *self*-attention rotates the query and the key of position m
    by the angles m theta_i (Eq. 34), so that their dot product depends on the embeddings and
    on the distance n - m alone (Eq. 16). Source attention is not rotated: a target position
    and a source position count in different sequences.

The rotation pairs dimensions (2i, 2i+1) of each head (d_k = d_model / heads), with
theta_i = 10000^(-2i / d_k), i = 0 .. d_k/2 - 1 (Eq. 15, counting i from 0)::

    R_m x = (x_0, x_1, x_2, x_3, ...) * (cos m0, cos m0, cos m1, cos m1, ...)
          + (-x_1, x_0, -x_3, x_2, ...) * (sin m0, sin m0, sin m1, sin m1, ...)   (Eq. 34)

(m0 standing for m theta_0). A rotation keeps lengths and R_m^T R_n = R_(n-m), hence
(R_m q) . (R_n k) = q^T R_(n-m) k: shifting both positions by s changes no score.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

ROPE_BASE = 10000.0
"""The base of RoPE's angles, theta_i = base^(-2i / d_k) (Su et al. 2021, Eq. 15)."""


def check_positions(offset: int, length: int, max_len: int) -> None:
    """Positions ``offset .. offset + length - 1`` must lie in the model's ``max_positions``."""
    if offset + length > max_len:
        raise ValueError(f"sequence of {offset + length} positions exceeds max_positions ({max_len})")


class LearnedPositionalEmbedding(nn.Module):
    """x + P[offset .. offset + time - 1], then dropout: a trained position table
    (Gehring et al. 2017, Sec. 3.1; Devlin et al. 2019, Sec. 3).

    ``table`` is an ``nn.Embedding`` of ``max_len`` rows (a row per position, no padding row);
    :meth:`nmtkit.models.transformer.Transformer.reset_parameters` draws it from N(0, d^-1/2),
    as fairseq does its learned positions.
    """

    def __init__(self, d_model: int, dropout: float, max_len: int = 1024):
        super().__init__()
        self.table = nn.Embedding(max_len, d_model)  # P: (max_len, d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: Tensor, offset: int = 0) -> Tensor:
        """x: (batch, time, d_model) scaled embeddings; positions offset..offset+time-1."""
        t = x.size(1)
        check_positions(offset, t, self.table.num_embeddings)
        positions = torch.arange(offset, offset + t, device=x.device)  # (time,)
        out: Tensor = self.dropout(x + self.table(positions))  # P[m] broadcast over the batch
        return out


class EmbeddingDropout(nn.Module):
    """With RoPE nothing is added to the embeddings: only the dropout of Sec. 5.4 stays
    (and the ``max_positions`` check, as for the tables)."""

    def __init__(self, dropout: float, max_len: int = 1024):
        super().__init__()
        self.max_len = max_len
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: Tensor, offset: int = 0) -> Tensor:
        """x: (batch, time, d_model) -> the same, with dropout."""
        check_positions(offset, x.size(1), self.max_len)
        out: Tensor = self.dropout(x)
        return out


def shapes_only() -> bool:
    """True while a model is built on the ``meta`` device for its shapes alone (the bounds
    check of :mod:`nmtkit.checkpoint`, before any weight is allocated). The fixed tables
    then return empty ones of their shape: on ``meta`` their arithmetic would run as PyTorch's
    Python reference kernels, whose first call imports ``torch._dynamo`` (about a second of
    every command's start)."""
    return torch.get_default_device().type == "meta"


def rotary_angles(max_len: int, d_k: int, base: float = ROPE_BASE) -> tuple[Tensor, Tensor]:
    """Eq. 34's two angle vectors for every position m < ``max_len``:
    cos(m theta_i) and sin(m theta_i), each value twice (for dimensions 2i and 2i + 1).

    Returns (cos, sin), each (max_len, d_k), computed in float64 and stored as float32.
    """
    if shapes_only():
        return torch.empty(max_len, d_k), torch.empty(max_len, d_k)
    theta = base ** (-torch.arange(0, d_k, 2, dtype=torch.float64) / d_k)  # (d_k / 2,): theta_i
    m = torch.arange(max_len, dtype=torch.float64)  # (max_len,)
    angles = torch.outer(m, theta).repeat_interleave(2, dim=-1)  # (max_len, d_k): m th_0, m th_0, m th_1, ...
    return angles.cos().float(), angles.sin().float()


def rotate_pairs(x: Tensor) -> Tensor:
    """(x_0, x_1, x_2, x_3, ...) -> (-x_1, x_0, -x_3, x_2, ...) along the last axis: each pair
    turned by 90 degrees (the second vector of Eq. 34)."""
    pairs = x.reshape(*x.shape[:-1], -1, 2)  # (..., d_k / 2, 2)
    return torch.stack((-pairs[..., 1], pairs[..., 0]), dim=-1).flatten(-2)  # (..., d_k)


def apply_rotary(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """R_m x = x * cos(m theta) + rotate_pairs(x) * sin(m theta)   (Su et al. 2021, Eq. 34).

    x: (..., time, d_k); cos, sin: (time, d_k), row t holding the angles of x's position t.
    """
    return x * cos + rotate_pairs(x) * sin


class RotaryEmbedding(nn.Module):
    """Rotary position embedding of queries and keys (Su et al. 2021, Sec. 3.4, Eq. 34).

    One instance is shared by every self-attention of a model (the angles depend on d_k and
    the position only); ``cos`` and ``sin`` are non-persistent buffers, so a checkpoint holds
    no extra weight. Used by :meth:`nmtkit.models.attention.MultiHeadAttention.project_qkv`.
    """

    cos: Tensor  # (max_len, d_k)
    sin: Tensor  # (max_len, d_k)

    def __init__(self, d_k: int, max_len: int = 1024, base: float = ROPE_BASE):
        super().__init__()
        if d_k % 2:
            raise ValueError(f"rotary position embedding pairs dimensions: d_k ({d_k}) must be even")
        self.d_k, self.base = d_k, base
        cos, sin = rotary_angles(max_len, d_k, base)
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)

    def forward(self, x: Tensor, offset: int = 0) -> Tensor:
        """x: (batch, heads, time, d_k) queries or keys at positions offset..offset+time-1
        -> the same shape, each vector rotated by its position's angles."""
        t = x.size(-2)
        check_positions(offset, t, self.cos.size(0))
        cos = self.cos[offset:offset + t].to(x.dtype)  # (time, d_k), broadcast over batch, heads
        sin = self.sin[offset:offset + t].to(x.dtype)
        return apply_rotary(x, cos, sin)
