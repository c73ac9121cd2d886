"""The Transformer's inference in numpy, from the weights of an nmtkit checkpoint.

The same computation as :class:`nmtkit.models.transformer.Transformer` in evaluation mode
(no dropout), for one source sentence at a time (no padding, so no source mask), with the
weights' names and shapes of its ``state_dict``:

- embeddings times sqrt(d_model), plus the sinusoidal table (Sec. 3.4, 3.5; the PyTorch
  model's own, :mod:`nmtkit.models.sinusoid`) or a learned one;
- each sub-layer inside a residual connection with layer norm, before it (``norm: pre``,
  then a final norm after each stack) or after the sum (``post``, the paper's Sec. 3.1);
- multi-head attention, softmax(Q K^T / sqrt(d_k)) V per head (Eq. 1), Q, K and V from one
  stacked projection ``in_proj`` (rows: W^Q, W^K, W^V), then W^O (``out_proj``);
- the position-wise FFN, max(0, x W_1 + b_1) W_2 + b_2 (Eq. 2);
- decoding one position at a time with the keys and values of the earlier positions
  cached (:class:`DecoderState`), the source's projected once (Sec. 3.2.3).

Arrays are float32; shapes are written ``(rows, ...)`` where rows are the hypotheses of one
sentence's beam.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from ..config import ModelConfig, dec_layers, enc_layers
from ..models.sinusoid import sinusoid_table


class UnsupportedModel(Exception):
    """A model this module does not run (the message says why); PyTorch does."""


def check_supported(cfg: ModelConfig) -> None:
    """:class:`UnsupportedModel` unless this module runs a model of ``cfg`` (the Transformer
    with sinusoidal or learned positions)."""
    if cfg.arch != "transformer":
        raise UnsupportedModel(f"architecture {cfg.arch!r}")
    if cfg.positional not in ("sinusoidal", "learned"):
        raise UnsupportedModel(f"positional {cfg.positional!r}")


def expected_shapes(cfg: ModelConfig, src_vocab: int, tgt_vocab: int) -> dict[str, tuple[int, ...]]:
    """The weights a Transformer of ``cfg`` has, by ``state_dict`` name, and their shapes."""
    d, ff = cfg.d_model, cfg.d_ff
    shapes: dict[str, tuple[int, ...]] = {"src_embed.lut.weight": (src_vocab, d),
                                          "tgt_embed.lut.weight": (tgt_vocab, d)}
    if cfg.positional == "learned":
        shapes["position.table.weight"] = (cfg.max_positions, d)

    def layer(prefix: str, attentions: tuple[str, ...]) -> None:
        for a in attentions:
            shapes.update({f"{prefix}.{a}.in_proj.weight": (3 * d, d),
                           f"{prefix}.{a}.in_proj.bias": (3 * d,),
                           f"{prefix}.{a}.out_proj.weight": (d, d),
                           f"{prefix}.{a}.out_proj.bias": (d,)})
        shapes.update({f"{prefix}.feed_forward.w_1.weight": (ff, d),
                       f"{prefix}.feed_forward.w_1.bias": (ff,),
                       f"{prefix}.feed_forward.w_2.weight": (d, ff),
                       f"{prefix}.feed_forward.w_2.bias": (d,)})
        for i in range(len(attentions) + 1):
            shapes.update({f"{prefix}.sublayer.{i}.norm.weight": (d,),
                           f"{prefix}.sublayer.{i}.norm.bias": (d,)})

    for i in range(enc_layers(cfg)):
        layer(f"encoder_layers.{i}", ("self_attn",))
    for i in range(dec_layers(cfg)):
        layer(f"decoder_layers.{i}", ("self_attn", "src_attn"))
    if cfg.norm == "pre":
        for stack in ("encoder_norm", "decoder_norm"):
            shapes.update({f"{stack}.weight": (d,), f"{stack}.bias": (d,)})
    shapes["generator.weight"] = (tgt_vocab, d)
    if cfg.output_bias:
        shapes["generator.bias"] = (tgt_vocab,)
    return shapes


def layer_norm(x: np.ndarray, weight: np.ndarray, bias: np.ndarray, eps: float) -> np.ndarray:
    """(x - mean) / sqrt(var + eps) * weight + bias over the last axis (biased variance)."""
    mean = x.mean(axis=-1, keepdims=True)
    var = np.square(x - mean).mean(axis=-1, keepdims=True)
    out: np.ndarray = (x - mean) / np.sqrt(var + eps) * weight + bias
    return out


def softmax(x: np.ndarray) -> np.ndarray:
    """Softmax over the last axis."""
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    out: np.ndarray = e / e.sum(axis=-1, keepdims=True)
    return out


def log_softmax(x: np.ndarray) -> np.ndarray:
    """log softmax over the last axis."""
    shifted = x - x.max(axis=-1, keepdims=True)
    out: np.ndarray = shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))
    return out


@dataclass
class Attention:
    """One multi-head attention's weights: W^Q, W^K, W^V stacked in ``in_proj`` (3d, d)."""

    in_w: np.ndarray
    in_b: np.ndarray
    out_w: np.ndarray
    out_b: np.ndarray
    heads: int

    def split(self, x: np.ndarray) -> np.ndarray:
        """(rows, t, d) -> (rows, heads, t, d_k)."""
        rows, t, d = x.shape
        return x.reshape(rows, t, self.heads, d // self.heads).transpose(0, 2, 1, 3)

    def project(self, x: np.ndarray, part: slice) -> np.ndarray:
        """x (rows, t, d) times the rows ``part`` of ``in_proj`` (Q: [0, d), K and V: [d, 3d))."""
        out: np.ndarray = x @ self.in_w[part].T + self.in_b[part]
        return out

    def attend(self, q: np.ndarray, k: np.ndarray, v: np.ndarray
               ) -> tuple[np.ndarray, np.ndarray]:
        """Eq. 1 on every head, then W^O. q: (rows, heads, tq, d_k); k, v: (rows | 1, heads,
        tk, d_k). Returns (rows, tq, d) and the probabilities (rows, heads, tq, tk)."""
        probs = softmax(q @ k.transpose(0, 1, 3, 2) / math.sqrt(q.shape[-1]))
        z = probs @ v  # (rows, heads, tq, d_k)
        rows, _, tq, _ = z.shape
        z = z.transpose(0, 2, 1, 3).reshape(rows, tq, -1)  # Concat(head_1..head_h): (rows, tq, d)
        return z @ self.out_w.T + self.out_b, probs


@dataclass
class Layer:
    """An encoder or decoder layer: its attentions, FFN and one layer norm per sub-layer."""

    attentions: list[Attention]
    w1: np.ndarray
    b1: np.ndarray
    w2: np.ndarray
    b2: np.ndarray
    norms: list[tuple[np.ndarray, np.ndarray]]

    def ffn(self, x: np.ndarray) -> np.ndarray:
        out: np.ndarray = np.maximum(x @ self.w1.T + self.b1, 0.0) @ self.w2.T + self.b2
        return out


@dataclass
class DecoderState:
    """The decoder's caches for one sentence: per layer the source's keys and values (one
    row, shared by every hypothesis) and the earlier positions' self-attention keys and
    values (rows, heads, t, d_k); ``pos``: the positions decoded so far."""

    src_kv: list[tuple[np.ndarray, np.ndarray]]
    self_kv: list[tuple[np.ndarray, np.ndarray]] = field(default_factory=list)
    pos: int = 0


class NumpyTransformer:
    """The encoder-decoder of :class:`nmtkit.models.transformer.Transformer`, evaluation
    mode, from its weights (``state``: ``state_dict`` name -> float32 array)."""

    def __init__(self, cfg: ModelConfig, state: dict[str, np.ndarray], src_vocab: int,
                 tgt_vocab: int) -> None:
        check_supported(cfg)
        want = expected_shapes(cfg, src_vocab, tgt_vocab)
        have = {k: tuple(v.shape) for k, v in state.items()}
        if have != want:
            wrong = sorted(set(have.items()) ^ set(want.items()))[:3]
            raise UnsupportedModel(f"weights other than the config's: {wrong}")
        if any(v.dtype != np.float32 for v in state.values()):
            raise UnsupportedModel("weights that are not float32")
        self.cfg, self.eps, self.pre = cfg, cfg.layer_norm_eps, cfg.norm == "pre"
        w = state
        self.src_embed, self.tgt_embed = w["src_embed.lut.weight"], w["tgt_embed.lut.weight"]
        self.scale = np.float32(math.sqrt(cfg.d_model))
        self.positions = (w["position.table.weight"] if cfg.positional == "learned"
                          else sinusoid_table(cfg.max_positions, cfg.d_model))

        def layer(prefix: str, attentions: tuple[str, ...]) -> Layer:
            return Layer([Attention(w[f"{prefix}.{a}.in_proj.weight"], w[f"{prefix}.{a}.in_proj.bias"],
                                    w[f"{prefix}.{a}.out_proj.weight"], w[f"{prefix}.{a}.out_proj.bias"],
                                    cfg.heads) for a in attentions],
                         w[f"{prefix}.feed_forward.w_1.weight"], w[f"{prefix}.feed_forward.w_1.bias"],
                         w[f"{prefix}.feed_forward.w_2.weight"], w[f"{prefix}.feed_forward.w_2.bias"],
                         [(w[f"{prefix}.sublayer.{i}.norm.weight"], w[f"{prefix}.sublayer.{i}.norm.bias"])
                          for i in range(len(attentions) + 1)])

        self.encoder = [layer(f"encoder_layers.{i}", ("self_attn",)) for i in range(enc_layers(cfg))]
        self.decoder = [layer(f"decoder_layers.{i}", ("self_attn", "src_attn"))
                        for i in range(dec_layers(cfg))]
        self.final_norms = ({s: (w[f"{s}.weight"], w[f"{s}.bias"]) for s in ("encoder_norm", "decoder_norm")}
                            if self.pre else {})
        self.gen_w, self.gen_b = w["generator.weight"], w.get("generator.bias")

    def _embed(self, table: np.ndarray, ids: np.ndarray, offset: int) -> np.ndarray:
        """(rows, t) ids -> (rows, t, d): scaled embeddings plus positions offset.. ."""
        t = ids.shape[1]
        if offset + t > self.positions.shape[0]:
            raise ValueError(f"sequence of {offset + t} positions exceeds max_positions "
                             f"({self.positions.shape[0]})")
        out: np.ndarray = table[ids] * self.scale + self.positions[offset:offset + t]
        return out

    def _sublayer(self, x: np.ndarray, norm: tuple[np.ndarray, np.ndarray],
                  f: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
        """Residual and layer norm around ``f``: pre x + f(LN(x)), post LN(x + f(x))."""
        if self.pre:
            out: np.ndarray = x + f(layer_norm(x, *norm, self.eps))
            return out
        return layer_norm(x + f(x), *norm, self.eps)

    def encode(self, src_ids: np.ndarray) -> np.ndarray:
        """(S,) source ids (``</s>`` last) -> memory (1, S, d)."""
        x = self._embed(self.src_embed, src_ids[None, :], 0)
        d = self.cfg.d_model
        for layer in self.encoder:
            att = layer.attentions[0]

            def self_attention(y: np.ndarray, att: Attention = att) -> np.ndarray:
                q, k, v = (att.split(att.project(y, part))
                           for part in (slice(0, d), slice(d, 2 * d), slice(2 * d, 3 * d)))
                return att.attend(q, k, v)[0]

            x = self._sublayer(x, layer.norms[0], self_attention)
            x = self._sublayer(x, layer.norms[1], layer.ffn)
        if self.pre:
            x = layer_norm(x, *self.final_norms["encoder_norm"], self.eps)
        return x

    def start(self, memory: np.ndarray) -> DecoderState:
        """Project the memory's keys and values for every decoder layer once."""
        d = self.cfg.d_model
        kv = []
        for layer in self.decoder:
            att = layer.attentions[1]
            kv.append((att.split(att.project(memory, slice(d, 2 * d))),
                       att.split(att.project(memory, slice(2 * d, 3 * d)))))
        return DecoderState(kv)

    def step(self, state: DecoderState, prev: np.ndarray, need_attention: bool = False
             ) -> tuple[np.ndarray, np.ndarray | None]:
        """One target position for each row: ``prev`` (rows,) ids -> log-probabilities
        (rows, V) and, with ``need_attention``, the last layer's source attention averaged
        over its heads (rows, S). Extends ``state``'s caches by the position."""
        d = self.cfg.d_model
        x = self._embed(self.tgt_embed, prev[:, None], state.pos)  # (rows, 1, d)
        new_kv: list[tuple[np.ndarray, np.ndarray]] = []
        src_probs: np.ndarray | None = None
        for i, (layer, (src_k, src_v)) in enumerate(zip(self.decoder, state.src_kv, strict=True)):
            sa, ca = layer.attentions

            def self_attention(y: np.ndarray, sa: Attention = sa, i: int = i) -> np.ndarray:
                q = sa.split(sa.project(y, slice(0, d)))
                k = sa.split(sa.project(y, slice(d, 2 * d)))
                v = sa.split(sa.project(y, slice(2 * d, 3 * d)))
                if state.self_kv:
                    k = np.concatenate([state.self_kv[i][0], k], axis=2)  # (rows, heads, t + 1, d_k)
                    v = np.concatenate([state.self_kv[i][1], v], axis=2)
                new_kv.append((k, v))
                return sa.attend(q, k, v)[0]

            def source_attention(y: np.ndarray, ca: Attention = ca, k: np.ndarray = src_k,
                                 v: np.ndarray = src_v) -> np.ndarray:
                nonlocal src_probs
                z, src_probs = ca.attend(ca.split(ca.project(y, slice(0, d))), k, v)
                return z

            x = self._sublayer(x, layer.norms[0], self_attention)
            x = self._sublayer(x, layer.norms[1], source_attention)
            x = self._sublayer(x, layer.norms[2], layer.ffn)
        if self.pre:
            x = layer_norm(x, *self.final_norms["decoder_norm"], self.eps)
        logits = x[:, 0] @ self.gen_w.T  # (rows, V)
        if self.gen_b is not None:
            logits = logits + self.gen_b
        state.self_kv, state.pos = new_kv, state.pos + 1
        attn = None
        if need_attention and src_probs is not None:
            attn = src_probs[:, :, 0].mean(axis=1)  # last layer, heads averaged: (rows, S)
        return log_softmax(logits.astype(np.float32)), attn

    @staticmethod
    def reorder(state: DecoderState, rows: np.ndarray) -> DecoderState:
        """Row i continues row ``rows[i]``: the self-attention caches gathered (the source's
        are shared by every row)."""
        state.self_kv = [(k[rows], v[rows]) for k, v in state.self_kv]
        return state
