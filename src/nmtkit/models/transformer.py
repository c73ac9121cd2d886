"""The Transformer of Vaswani et al. (2017), "Attention Is All You Need".

Components are named after the paper: :class:`Embeddings` (Sec. 3.4),
:class:`PositionalEncoding` (Sec. 3.5), :class:`PositionwiseFeedForward` (Sec. 3.3),
:class:`SublayerConnection` (Sec. 3.1, residual + layer norm, post- or pre-norm),
:class:`EncoderLayer`/:class:`DecoderLayer` (Fig. 1), and :func:`build_transformer`,
the one function from hyperparameters to a model. Learned positions and rotary embeddings
(``model.positional``) are in :mod:`nmtkit.models.positions`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, cast

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..config import ModelConfig, dec_layers, enc_layers
from ..data.batching import pad_mask
from ..data.vocab import PAD
from .attention import MultiHeadAttention
from .positions import EmbeddingDropout, LearnedPositionalEmbedding, RotaryEmbedding, shapes_only
from .seq2seq import Seq2Seq
from .sinusoid import sinusoid_table as numpy_sinusoid_table


class Embeddings(nn.Module):
    """Token embeddings multiplied by sqrt(d_model) (Sec. 3.4)."""

    def __init__(self, vocab: int, d_model: int):
        super().__init__()
        self.lut = nn.Embedding(vocab, d_model)
        self.scale = math.sqrt(d_model)

    def forward(self, ids: Tensor) -> Tensor:
        emb: Tensor = self.lut(ids)
        return emb * self.scale


def sinusoid_table(max_len: int, d_model: int) -> Tensor:
    """PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(pos / 10000^(2i/d)) (Sec. 3.5):
    :func:`nmtkit.models.sinusoid.sinusoid_table` (the numpy forward pass's too) as a tensor.

    Returns (max_len, d_model).
    """
    if shapes_only():
        return torch.empty(max_len, d_model)
    return torch.from_numpy(numpy_sinusoid_table(max_len, d_model))


class PositionalEncoding(nn.Module):
    """Adds the fixed sinusoidal table, then dropout (Sec. 3.5, 5.4)."""

    pe: Tensor  # (max_len, d_model), a non-persistent buffer

    def __init__(self, d_model: int, dropout: float, max_len: int = 1024):
        super().__init__()
        self.register_buffer("pe", sinusoid_table(max_len, d_model), persistent=False)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: Tensor, offset: int = 0) -> Tensor:
        """x: (batch, time, d_model); positions offset..offset+time-1."""
        t = x.size(1)
        if offset + t > self.pe.size(0):
            raise ValueError(f"sequence of {offset + t} positions exceeds max_positions "
                             f"({self.pe.size(0)})")
        out: Tensor = self.dropout(x + self.pe[offset:offset + t])
        return out


class PositionwiseFeedForward(nn.Module):
    """FFN(x) = max(0, x W1 + b1) W2 + b2 (Eq. 2)."""

    def __init__(self, d_model: int, d_ff: int, dropout: float = 0.0):
        super().__init__()
        self.w_1 = nn.Linear(d_model, d_ff)
        self.w_2 = nn.Linear(d_ff, d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: Tensor) -> Tensor:
        """x: (batch, time, d_model) -> (batch, time, d_model); dropout on the hidden ReLU."""
        out: Tensor = self.w_2(self.dropout(F.relu(self.w_1(x))))
        return out


class SublayerConnection(nn.Module):
    """Residual connection with layer norm around one sub-layer (Sec. 3.1, dropout Sec. 5.4).

    ``post`` (the paper): LayerNorm(x + Dropout(Sublayer(x))).
    ``pre`` (The Annotated Transformer, and most later work): x + Dropout(Sublayer(LayerNorm(x))).
    """

    def __init__(self, d_model: int, dropout: float, norm: str, eps: float):
        super().__init__()
        self.norm = nn.LayerNorm(d_model, eps=eps)
        self.dropout = nn.Dropout(dropout)
        self.pre = norm == "pre"

    def forward(self, x: Tensor, sublayer: Callable[[Tensor], Tensor]) -> Tensor:
        out: Tensor
        if self.pre:
            out = x + self.dropout(sublayer(self.norm(x)))
        else:
            out = self.norm(x + self.dropout(sublayer(x)))
        return out


class EncoderLayer(nn.Module):
    """Self-attention then FFN, each wrapped in a :class:`SublayerConnection` (Fig. 1, left).

    ``rotary``: the model's RoPE, which the self-attention applies (``model.positional: rope``).
    """

    def __init__(self, cfg: ModelConfig, rotary: RotaryEmbedding | None = None):
        super().__init__()
        self.self_attn = MultiHeadAttention(cfg.d_model, cfg.heads, cfg.attention_dropout, rotary)
        self.feed_forward = PositionwiseFeedForward(cfg.d_model, cfg.d_ff, cfg.relu_dropout)
        self.sublayer = nn.ModuleList(
            SublayerConnection(cfg.d_model, cfg.dropout, cfg.norm, cfg.layer_norm_eps)
            for _ in range(2))

    def forward(self, x: Tensor, mask: Tensor,
                need_attention: bool = False) -> tuple[Tensor, Tensor | None]:
        """x: (batch, S, d); mask: (batch, 1, S). Returns x and self-attention (or None)."""
        weights: list[Tensor | None] = []

        def attn(y: Tensor) -> Tensor:
            out: tuple[Tensor, Tensor | None] = self.self_attn(y, y, y, mask, need_attention)
            weights.append(out[1])
            return out[0]

        x = self.sublayer[0](x, attn)
        return self.sublayer[1](x, self.feed_forward), weights[0]


class DecoderLayer(nn.Module):
    """Masked self-attention, source attention, FFN (Fig. 1, right).

    ``rotary``: the model's RoPE, applied by the self-attention only (not the source attention).
    """

    def __init__(self, cfg: ModelConfig, rotary: RotaryEmbedding | None = None):
        super().__init__()
        self.self_attn = MultiHeadAttention(cfg.d_model, cfg.heads, cfg.attention_dropout, rotary)
        self.src_attn = MultiHeadAttention(cfg.d_model, cfg.heads, cfg.attention_dropout)
        self.feed_forward = PositionwiseFeedForward(cfg.d_model, cfg.d_ff, cfg.relu_dropout)
        self.sublayer = nn.ModuleList(
            SublayerConnection(cfg.d_model, cfg.dropout, cfg.norm, cfg.layer_norm_eps)
            for _ in range(3))

    def forward(
        self,
        x: Tensor,
        src_kv: tuple[Tensor, Tensor],
        src_mask: Tensor,
        tgt_mask: Tensor | None,
        self_kv: tuple[Tensor, Tensor] | None = None,
        need_attention: bool = False,
    ) -> tuple[Tensor, tuple[Tensor, Tensor], tuple[Tensor | None, Tensor | None]]:
        """x: (batch, T, d); src_kv: projected memory keys/values (batch, heads, S, d_k);
        src_mask: (batch, 1, S); tgt_mask: (batch, T, T) or None for causal.

        ``self_kv``: cached keys/values of earlier positions for incremental decoding
        (then x holds only the new positions). Returns x, the new self keys/values and
        the (self, source) attention probabilities (None unless ``need_attention``).
        """
        sa, ca = self.self_attn, self.src_attn
        out: dict[str, Any] = {}

        def self_block(y: Tensor) -> Tensor:
            past = 0 if self_kv is None else self_kv[0].size(2)  # positions already cached
            q, k, v = sa.project_qkv(y, offset=past)  # RoPE: the cache holds rotated keys
            if self_kv is not None:
                k = torch.cat([self_kv[0], k], dim=2)  # (batch, heads, t_past + T, d_k)
                v = torch.cat([self_kv[1], v], dim=2)
            out["kv"] = (k, v)
            mask = None if tgt_mask is None else tgt_mask.unsqueeze(1)
            z, out["self"] = sa.attend(q, k, v, mask, causal=tgt_mask is None and q.size(2) > 1,
                                       need_attention=need_attention)
            return z

        def src_block(y: Tensor) -> Tensor:
            z, out["src"] = ca.attend(ca.project_q(y), *src_kv, src_mask.unsqueeze(1),
                                      need_attention=need_attention)
            return z

        x = self.sublayer[0](x, self_block)
        x = self.sublayer[1](x, src_block)
        x = self.sublayer[2](x, self.feed_forward)
        return x, out["kv"], (out["self"], out["src"])


@dataclass
class TransformerState:
    """Decoder state for incremental decoding: the KV caches (Sec. 3.2.3)."""

    src_mask: Tensor  # (batch, 1, S)
    src_kv: list[tuple[Tensor, Tensor]]  # per layer, each (batch, heads, S, d_k)
    self_kv: list[tuple[Tensor, Tensor]] | None = None  # per layer, (batch, heads, t, d_k)
    pos: int = 0
    need_attention: bool = False
    extras: dict[str, Any] = field(default_factory=dict)


class Transformer(Seq2Seq):
    """Encoder-decoder Transformer implementing the :mod:`nmtkit.models.seq2seq` interface."""

    def __init__(self, cfg: ModelConfig, src_vocab_size: int, tgt_vocab_size: int):
        super().__init__()
        self.cfg = cfg
        self.src_vocab_size, self.tgt_vocab_size = src_vocab_size, tgt_vocab_size
        d = cfg.d_model
        self.src_embed = Embeddings(src_vocab_size, d)
        self.tgt_embed = Embeddings(tgt_vocab_size, d)
        self.position = embedding_positions(cfg)
        # RoPE: one table of angles, shared by every self-attention (Su et al. 2021, Eq. 34).
        rotary = RotaryEmbedding(d // cfg.heads, cfg.max_positions) if cfg.positional == "rope" else None
        self.encoder_layers = nn.ModuleList(EncoderLayer(cfg, rotary) for _ in range(enc_layers(cfg)))
        self.decoder_layers = nn.ModuleList(DecoderLayer(cfg, rotary) for _ in range(dec_layers(cfg)))
        # Pre-norm stacks end with a layer norm (their last residual sum is un-normalised).
        self.encoder_norm = nn.LayerNorm(d, eps=cfg.layer_norm_eps) if cfg.norm == "pre" else None
        self.decoder_norm = nn.LayerNorm(d, eps=cfg.layer_norm_eps) if cfg.norm == "pre" else None
        self.generator = nn.Linear(d, tgt_vocab_size, bias=cfg.output_bias)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Glorot / fan_avg uniform for every projection matrix, as in the reference code.

        Embeddings get N(0, d^-1/2) (so that after the sqrt(d) scaling they have unit
        variance, and a tied output layer starts with sensible logits), padding row zero;
        a learned position table the same, without a padding row (fairseq's initialisation).
        """
        in_attention = self._mha_linears()
        for m in self.modules():
            if isinstance(m, MultiHeadAttention):
                m.reset_parameters()
            elif m is self.generator:
                if m.bias is not None:
                    nn.init.zeros_(m.bias)
                if not self.cfg.tie_output:
                    nn.init.xavier_uniform_(m.weight)
            elif isinstance(m, nn.Linear) and m not in in_attention:
                nn.init.xavier_uniform_(m.weight)
                nn.init.zeros_(m.bias)
            elif isinstance(m, nn.Embedding):
                nn.init.normal_(m.weight, 0.0, self.cfg.d_model ** -0.5)
                if not (isinstance(self.position, LearnedPositionalEmbedding) and m is self.position.table):
                    with torch.no_grad():
                        m.weight[PAD].zero_()
        self.tie_weights()

    def _mha_linears(self) -> set[nn.Module]:
        return {lin for m in self.modules() if isinstance(m, MultiHeadAttention)
                for lin in (m.in_proj, m.out_proj)}

    def tie_weights(self) -> None:
        """Share the target embedding with the pre-softmax projection, and the source embedding
        too when the vocabulary is joint (Sec. 3.4; Press & Wolf 2017)."""
        if self.cfg.tie_output:
            self.generator.weight = self.tgt_embed.lut.weight
        if self.cfg.tie_all:
            if self.src_vocab_size != self.tgt_vocab_size:
                raise ValueError("tie_all needs one joint vocabulary "
                                 f"({self.src_vocab_size} != {self.tgt_vocab_size})")
            self.src_embed.lut.weight = self.tgt_embed.lut.weight

    # --- the seq2seq interface -------------------------------------------------------------

    def encode(self, src: Tensor, src_mask: Tensor, need_attention: bool = False) -> Any:
        """src: (batch, S); src_mask: (batch, 1, S) -> memory (batch, S, d).

        With ``need_attention`` returns (memory, [per-layer (batch, heads, S, S)]).
        """
        x = self.position(self.src_embed(src))
        weights: list[Tensor | None] = []
        for layer in self.encoder_layers:
            x, w = layer(x, src_mask, need_attention)
            weights.append(w)
        if self.encoder_norm is not None:
            x = self.encoder_norm(x)
        return (x, weights) if need_attention else x

    def _src_kv(self, memory: Tensor) -> list[tuple[Tensor, Tensor]]:
        return [cast(DecoderLayer, layer).src_attn.project_kv(memory) for layer in self.decoder_layers]

    def decode(
        self,
        memory: Tensor,
        src_mask: Tensor,
        tgt_in: Tensor,
        tgt_mask: Tensor | None = None,
        need_attention: bool = False,
    ) -> Any:
        """Teacher-forced decoder: -> hidden states (batch, T, d) [, per-layer attention]."""
        x = self.position(self.tgt_embed(tgt_in))
        weights: list[tuple[Tensor | None, Tensor | None]] = []
        for layer, kv in zip(self.decoder_layers, self._src_kv(memory), strict=True):
            x, _, w = layer(x, kv, src_mask, tgt_mask, None, need_attention)
            weights.append(w)
        if self.decoder_norm is not None:
            x = self.decoder_norm(x)
        return (x, weights) if need_attention else x

    def features(self, src: Tensor, src_mask: Tensor, tgt_in: Tensor,
                 tgt_mask: Tensor | None = None) -> Tensor:
        """Teacher forcing: the decoder's output (batch, T, d), the generator's input."""
        x: Tensor = self.decode(self.encode(src, src_mask), src_mask, tgt_in, tgt_mask)
        return x

    def logits(self, src: Tensor, src_mask: Tensor, tgt_in: Tensor,
               tgt_mask: Tensor | None = None) -> Tensor:
        """Teacher forcing: (batch, T, V) unnormalised scores (the training loss fuses the softmax)."""
        scores: Tensor = self.generator(self.features(src, src_mask, tgt_in, tgt_mask))
        return scores

    def forward(self, src: Tensor, src_mask: Tensor, tgt_in: Tensor,
                tgt_mask: Tensor | None = None) -> Tensor:
        """Teacher forcing: (batch, T, V) log-probabilities of the next token."""
        return F.log_softmax(self.logits(src, src_mask, tgt_in, tgt_mask), dim=-1)

    def start(self, memory: Tensor, src_mask: Tensor,
              need_attention: bool = False) -> TransformerState:
        """Project the memory's keys/values for every decoder layer once."""
        return TransformerState(src_mask=src_mask, src_kv=self._src_kv(memory),
                                need_attention=need_attention)

    def step(self, state: TransformerState,
             prev_tokens: Tensor) -> tuple[Tensor, TransformerState, Tensor | None]:
        """One target position with the KV cache: prev_tokens (batch,) -> log-probs (batch, V)."""
        x = self.position(self.tgt_embed(prev_tokens.unsqueeze(1)), offset=state.pos)  # (b, 1, d)
        new_kv: list[tuple[Tensor, Tensor]] = []
        attn: Tensor | None = None
        caches: list[tuple[Tensor, Tensor]] | list[None] = state.self_kv or [None] * len(self.decoder_layers)
        for layer, src_kv, cache in zip(self.decoder_layers, state.src_kv, caches, strict=True):
            x, kv, (_, src_w) = layer(x, src_kv, state.src_mask, None, cache,
                                      need_attention=state.need_attention)
            new_kv.append(kv)
            attn = src_w
        if self.decoder_norm is not None:
            x = self.decoder_norm(x)
        log_probs = F.log_softmax(self.generator(x[:, 0]), dim=-1)  # (batch, V)
        state.self_kv, state.pos = new_kv, state.pos + 1
        if attn is not None:
            attn = attn[:, :, 0].mean(dim=1)  # last layer, averaged over heads: (batch, S)
        return log_probs, state, attn

    def reorder(self, state: TransformerState, index: Tensor,
                same_source: bool = False) -> TransformerState:
        """Select batch rows ``index`` of every cached tensor (beam search).

        ``same_source``: the caller promises that row ``index[i]`` has the same source
        sentence as row ``i`` (beam search moving hypotheses within one sentence's beam),
        so the source keys/values and mask stay as they are: only the self-attention cache
        is gathered.
        """
        def sel(kv: tuple[Tensor, Tensor]) -> tuple[Tensor, Tensor]:
            return (kv[0].index_select(0, index), kv[1].index_select(0, index))

        if not same_source:
            state.src_mask = state.src_mask.index_select(0, index)
            state.src_kv = [sel(kv) for kv in state.src_kv]
        if state.self_kv is not None:
            state.self_kv = [sel(kv) for kv in state.self_kv]
        return state

    def attention_maps(self, src: Tensor, tgt_in: Tensor) -> dict[str, list[Tensor]]:
        """All attention probabilities for one teacher-forced pass (for figures and serving):
        {"encoder": [(b, h, S, S)], "decoder_self": [(b, h, T, T)], "decoder_src": [(b, h, T, S)]}."""
        src_mask = pad_mask(src)
        memory, enc_w = self.encode(src, src_mask, need_attention=True)
        _, dec_w = self.decode(memory, src_mask, tgt_in, None, need_attention=True)
        return {"encoder": enc_w, "decoder_self": [w[0] for w in dec_w],
                "decoder_src": [w[1] for w in dec_w]}

    def num_parameters(self) -> int:
        return sum(p.numel() for p in {id(p): p for p in self.parameters()}.values())


def embedding_positions(
    cfg: ModelConfig,
) -> PositionalEncoding | LearnedPositionalEmbedding | EmbeddingDropout:
    """What ``model.positional`` adds to the scaled embeddings, dropout included: the sinusoid
    (Sec. 3.5), a learned table, or (RoPE, whose positions enter in the attention) nothing."""
    if cfg.positional == "learned":
        return LearnedPositionalEmbedding(cfg.d_model, cfg.dropout, cfg.max_positions)
    if cfg.positional == "rope":
        return EmbeddingDropout(cfg.dropout, cfg.max_positions)
    return PositionalEncoding(cfg.d_model, cfg.dropout, cfg.max_positions)


def build_transformer(cfg: ModelConfig, src_vocab_size: int, tgt_vocab_size: int) -> Transformer:
    """Hyperparameters -> model."""
    return Transformer(cfg, src_vocab_size, tgt_vocab_size)
