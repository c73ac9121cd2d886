"""Recurrent encoder-decoder with attention: the model of seed 003 (Bahdanau et al. 2015,
with the score functions of Luong et al. 2015).

Encoder: embedding + dropout + a multi-layer LSTM, optionally bidirectional, over the
source -> states H = (h_1 .. h_S), each the concatenation of the forward and backward state.
Per layer, the final forward and backward states are concatenated and projected,
s_0 = tanh(W_b [h_fwd; h_bwd]), to start the decoder (:class:`RNNEncoder`).

Decoder, one target position t (the seed's ``DecoderWithAttention``)::

    a_t = softmax(score(H, s_{t-1}) / temperature)   masked over source padding
    w_t = sum_j a_tj h_j                               the weighted source vector
    s_t = GRU([y_t; w_t], s_{t-1})                     y_t = embedded previous token
    P(y_{t+1} | ...) = softmax(f([y_t; w_t; s_t]))     f: the seed's prediction layer

``score`` is ``concat`` v^T tanh(W[h; s]), ``general`` h^T W s or ``dot`` h^T s
(:mod:`nmtkit.models.attention`); the query is the top decoder layer's state. Training may
feed the model's own previous argmax instead of the gold token with probability
1 - ``teacher_forcing`` (the seed's ratio 0.5), optionally annealed through
:meth:`RNNSeq2Seq.set_train_step`.

The model implements the :mod:`nmtkit.models.seq2seq` interface, so the training loop,
greedy/beam search, translation, averaging and attention figures work unchanged.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from ..config import ModelConfig, dec_layers, enc_layers
from ..data.batching import pad_mask
from ..data.vocab import PAD
from .attention import attention_context, concat_scores, dot_scores, masked_softmax
from .seq2seq import Seq2Seq


class RNNEncoder(nn.Module):
    """Embedding + dropout + (bi)LSTM; returns the states H and the decoder's initial state."""

    def __init__(self, cfg: ModelConfig, vocab: int):
        super().__init__()
        self.layers, self.dec_layers = enc_layers(cfg), dec_layers(cfg)
        self.dirs = 2 if cfg.bidirectional else 1
        self.hidden = cfg.rnn_hidden // self.dirs  # per direction
        self.embed = nn.Embedding(vocab, cfg.emb_dim)
        self.dropout = nn.Dropout(cfg.dropout)
        self.rnn = nn.LSTM(cfg.emb_dim, self.hidden, num_layers=self.layers, batch_first=True,
                           dropout=cfg.dropout if self.layers > 1 else 0.0,
                           bidirectional=cfg.bidirectional)
        # One bridge per decoder layer: [h_fwd; h_bwd] of an encoder layer -> s_0 of that layer.
        self.bridge = nn.ModuleList(nn.Linear(self.dirs * self.hidden, cfg.rnn_hidden)
                                    for _ in range(self.dec_layers))

    def source_layer(self, i: int) -> int:
        """Encoder layer whose final state starts decoder layer ``i``: aligned at the top, so
        equal depths pair layer by layer (the seed) and unequal ones still work."""
        return min(max(i + self.layers - self.dec_layers, 0), self.layers - 1)

    def forward(self, src: Tensor, src_mask: Tensor) -> tuple[Tensor, Tensor]:
        """src: (batch, S) ids; src_mask: (batch, 1, S) -> H (batch, S, rnn_hidden), zero at
        padding, and s_0 (dec_layers, batch, rnn_hidden)."""
        b, s = src.shape
        lengths = src_mask.reshape(b, s).sum(-1)  # (batch,)
        x = self.dropout(self.embed(src))  # (batch, S, emb)
        # Packing makes the backward direction start at each sentence's last real token and
        # the final states those of the real ends, whatever the padding.
        packed = pack_padded_sequence(x, lengths.cpu(), batch_first=True, enforce_sorted=False)
        out, (h_n, _) = self.rnn(packed)
        states, _ = pad_packed_sequence(out, batch_first=True, total_length=s)  # (b, S, dirs*h)
        final = h_n.view(self.layers, self.dirs, b, self.hidden)  # (layers, dirs, batch, h)
        final = final.permute(0, 2, 1, 3).reshape(self.layers, b, self.dirs * self.hidden)
        s0 = torch.stack([torch.tanh(bridge(final[self.source_layer(i)]))
                          for i, bridge in enumerate(self.bridge)])  # (dec_layers, batch, hidden)
        return states, s0


class RNNAttention(nn.Module):
    """Attention of one decoder query over the encoder states (score selectable).

    :meth:`keys` projects what depends only on the source once per sentence; :meth:`forward`
    scores one query against the keys with the pure functions of :mod:`.attention`.
    """

    def __init__(self, kind: str, enc_dim: int, dec_dim: int, attn_dim: int, temperature: float):
        super().__init__()
        self.kind, self.temperature = kind, temperature
        if kind == "concat":  # W [h; s] = W_h h + W_s s (one bias, as one Linear on the concat)
            self.w_h = nn.Linear(enc_dim, attn_dim)
            self.w_s = nn.Linear(dec_dim, attn_dim, bias=False)
            self.v = nn.Parameter(torch.empty(attn_dim))
        elif kind == "general":
            self.weight = nn.Parameter(torch.empty(enc_dim, dec_dim))
        elif kind == "dot":
            if enc_dim != dec_dim:
                raise ValueError(f"dot attention needs equal sizes ({enc_dim} != {dec_dim})")
        else:
            raise ValueError(f"unknown attention {kind!r}")

    def keys(self, memory: Tensor) -> Tensor:
        """memory H (batch, S, enc) -> keys: W_h H (concat), H W (general) or H (dot)."""
        if self.kind == "concat":
            keys: Tensor = self.w_h(memory)  # (batch, S, attn_dim)
            return keys
        if self.kind == "general":
            return memory.matmul(self.weight)  # (batch, S, dec): h^T W
        return memory

    def forward(self, keys: Tensor, memory: Tensor, mask: Tensor,
                query: Tensor) -> tuple[Tensor, Tensor]:
        """query s_{t-1}: (batch, dec); mask: (batch, S) bool -> w_t (batch, enc), a_t (batch, S)."""
        if self.kind == "concat":
            scores = concat_scores(keys, self.w_s(query), self.v)
        else:  # general: (h^T W) s; dot: h^T s
            scores = dot_scores(keys, query)
        probs = masked_softmax(scores, mask, self.temperature)
        return attention_context(probs, memory), probs


@dataclass
class RNNMemory:
    """What :meth:`RNNSeq2Seq.encode` returns."""

    states: Tensor  # H: (batch, S, rnn_hidden)
    hidden: Tensor  # s_0: (dec_layers, batch, rnn_hidden)


@dataclass
class RNNState:
    """Decoder state for incremental decoding."""

    states: Tensor  # H: (batch, S, rnn_hidden)
    keys: Tensor  # attention keys of H: (batch, S, attn_dim | rnn_hidden)
    mask: Tensor  # (batch, S) bool, True at real source tokens
    hidden: Tensor  # s_{t-1}: (dec_layers, batch, rnn_hidden)
    need_attention: bool = False


class RNNSeq2Seq(Seq2Seq):
    """Bidirectional LSTM encoder, GRU decoder with attention; the seq2seq interface."""

    def __init__(self, cfg: ModelConfig, src_vocab_size: int, tgt_vocab_size: int):
        super().__init__()
        self.cfg = cfg
        self.src_vocab_size, self.tgt_vocab_size = src_vocab_size, tgt_vocab_size
        e, h, n_dec = cfg.emb_dim, cfg.rnn_hidden, dec_layers(cfg)
        self.encoder = RNNEncoder(cfg, src_vocab_size)
        self.attention = RNNAttention(cfg.attention, h, h, cfg.attention_dim or h,
                                      cfg.attention_temperature)
        self.tgt_embed = nn.Embedding(tgt_vocab_size, e)
        self.dropout = nn.Dropout(cfg.dropout)
        self.decoder_rnn = nn.GRU(e + h, h, num_layers=n_dec, batch_first=True,
                                  dropout=cfg.dropout if n_dec > 1 else 0.0)
        # f(y_t, w_t, s_t): one linear to the vocabulary (the seed), or, to share the target
        # embedding with the output layer, a linear to emb_dim first (Press & Wolf 2017).
        pred_in = e + 2 * h
        self.pre_output = nn.Linear(pred_in, e, bias=False) if cfg.tie_output else None
        self.generator = nn.Linear(e if cfg.tie_output else pred_in, tgt_vocab_size,
                                   bias=cfg.output_bias)
        self.teacher_forcing_ratio = cfg.teacher_forcing
        self.reset_parameters()

    # --- parameters ----------------------------------------------------------------------------

    def reset_parameters(self) -> None:
        """``init: uniform``: every parameter U(-init_range, init_range) (the seed's init_weights).

        ``init: glorot``: Xavier-uniform for every matrix (per gate block in the LSTM/GRU),
        zero biases except the LSTM forget gate (1; Jozefowicz et al. 2015), embeddings
        N(0, emb_dim^-1/2) with a zero padding row.
        """
        if self.cfg.init == "uniform":
            for p in self.parameters():
                nn.init.uniform_(p, -self.cfg.init_range, self.cfg.init_range)
        else:
            for m in self.modules():
                if isinstance(m, nn.Linear):
                    if not (m is self.generator and self.cfg.tie_output):  # else the embedding
                        nn.init.xavier_uniform_(m.weight)
                    if m.bias is not None:
                        nn.init.zeros_(m.bias)
                elif isinstance(m, nn.Embedding):
                    nn.init.normal_(m.weight, 0.0, self.cfg.emb_dim ** -0.5)
                    with torch.no_grad():
                        m.weight[PAD].zero_()
                elif isinstance(m, (nn.LSTM, nn.GRU)):
                    gates = 4 if isinstance(m, nn.LSTM) else 3
                    for name, p in m.named_parameters():
                        if name.startswith("weight"):
                            for block in p.detach().chunk(gates, dim=0):
                                nn.init.xavier_uniform_(block)
                        else:
                            nn.init.zeros_(p)
                            if gates == 4 and name.startswith("bias_ih"):
                                nn.init.ones_(p.detach()[m.hidden_size:2 * m.hidden_size])
            a = self.attention
            if a.kind == "concat":
                bound = math.sqrt(6.0 / (1 + a.v.numel()))  # v^T as a (1, attn_dim) matrix
                nn.init.uniform_(a.v, -bound, bound)
            elif a.kind == "general":
                nn.init.xavier_uniform_(a.weight)
        self.tie_weights()

    def tie_weights(self) -> None:
        """Share the target embedding with the output layer, and the source embedding too when
        the vocabulary is joint (Press & Wolf 2017)."""
        if self.cfg.tie_output:
            self.generator.weight = self.tgt_embed.weight
        if self.cfg.tie_all:
            if self.src_vocab_size != self.tgt_vocab_size:
                raise ValueError("tie_all needs one joint vocabulary "
                                 f"({self.src_vocab_size} != {self.tgt_vocab_size})")
            self.encoder.embed.weight = self.tgt_embed.weight

    def num_parameters(self) -> int:
        return sum(p.numel() for p in {id(p): p for p in self.parameters()}.values())

    # --- training hooks ------------------------------------------------------------------------

    def set_train_step(self, step: int) -> None:
        """Called by the trainer before each update with the number of updates done so far:
        anneals the teacher-forcing ratio linearly from ``teacher_forcing`` to
        ``teacher_forcing_min`` over ``teacher_forcing_anneal_steps`` updates."""
        c = self.cfg
        if c.teacher_forcing_anneal_steps > 0:
            frac = min(step / c.teacher_forcing_anneal_steps, 1.0)
            self.teacher_forcing_ratio = (c.teacher_forcing
                                          + frac * (c.teacher_forcing_min - c.teacher_forcing))

    # --- decoder -------------------------------------------------------------------------------

    def _decode_step(self, state: RNNState, prev: Tensor) -> tuple[Tensor, Tensor]:
        """One position: prev (batch,) -> prediction input [y_t; w_t; s_t] (batch, e + 2h) and
        a_t (batch, S); updates ``state.hidden`` to s_t."""
        y = self.dropout(self.tgt_embed(prev))  # (batch, emb)
        w, a = self.attention(state.keys, state.states, state.mask, state.hidden[-1])
        out, state.hidden = self.decoder_rnn(torch.cat([y, w], dim=-1).unsqueeze(1),
                                             state.hidden)  # out: (batch, 1, hidden)
        return torch.cat([y, self.dropout(torch.cat([w, out[:, 0]], dim=-1))], dim=-1), a

    def _predict(self, pred_in: Tensor) -> Tensor:
        """f([y; w; s]) -> unnormalised scores over the target vocabulary."""
        if self.pre_output is not None:
            pred_in = self.pre_output(pred_in)
        scores: Tensor = self.generator(pred_in)
        return scores

    def _teacher_forced(self, src: Tensor, src_mask: Tensor, tgt_in: Tensor,
                        ratio: float) -> tuple[Tensor, list[Tensor]]:
        """Logits (batch, T, V) and the attention a_t of each position (each (batch, S)).

        With ``ratio < 1`` each sentence's input at t > 0 is the gold token with probability
        ``ratio`` and the model's argmax at t - 1 otherwise (drawn from torch's RNG, so runs
        and resumed runs repeat exactly); with ``ratio == 1`` no random number is drawn.
        """
        state = self.start(self.encode(src, src_mask), src_mask)
        b, t_len = tgt_in.shape
        preds: list[Tensor] = []
        attns: list[Tensor] = []
        logits: list[Tensor] = []
        prev = tgt_in[:, 0]
        for t in range(t_len):
            if t > 0:
                prev = tgt_in[:, t]
                if ratio < 1.0:
                    gold = torch.rand(b, device=tgt_in.device) < ratio
                    prev = torch.where(gold, prev, logits[-1].argmax(-1))
            pred_in, a = self._decode_step(state, prev)
            attns.append(a)
            if ratio < 1.0:  # the next input may need this position's argmax
                logits.append(self._predict(pred_in))
            else:
                preds.append(pred_in)
        if ratio < 1.0:
            return torch.stack(logits, dim=1), attns
        return self._predict(torch.stack(preds, dim=1)), attns  # one matmul for all positions

    # --- the seq2seq interface -----------------------------------------------------------------

    def encode(self, src: Tensor, src_mask: Tensor) -> RNNMemory:
        """src: (batch, S); src_mask: (batch, 1, S) -> H and the decoder's initial state."""
        states, hidden = self.encoder(src, src_mask)
        return RNNMemory(states, hidden)

    def logits(self, src: Tensor, src_mask: Tensor, tgt_in: Tensor,
               tgt_mask: Tensor | None = None) -> Tensor:
        """(batch, T, V) scores. ``tgt_mask`` is ignored: a recurrent decoder never sees later
        positions, and padding at the end of a target cannot change earlier positions.
        Teacher forcing uses the configured ratio only in training mode (gold inputs in eval)."""
        ratio = self.teacher_forcing_ratio if self.training else 1.0
        return self._teacher_forced(src, src_mask, tgt_in, ratio)[0]

    def forward(self, src: Tensor, src_mask: Tensor, tgt_in: Tensor,
                tgt_mask: Tensor | None = None) -> Tensor:
        """(batch, T, V) log-probabilities of the next token."""
        return F.log_softmax(self.logits(src, src_mask, tgt_in, tgt_mask), dim=-1)

    def start(self, memory: RNNMemory, src_mask: Tensor, need_attention: bool = False) -> RNNState:
        """Project the attention keys of H once; s_0 from the encoder."""
        mask = src_mask.reshape(src_mask.size(0), -1)  # (batch, S)
        return RNNState(memory.states, self.attention.keys(memory.states), mask,
                        memory.hidden, need_attention)

    def step(self, state: RNNState, prev_tokens: Tensor) -> tuple[Tensor, RNNState, Tensor | None]:
        """prev_tokens (batch,) -> log-probs (batch, V), state with s_t, a_t (batch, S) if the
        state was started with ``need_attention`` (else None)."""
        pred_in, a = self._decode_step(state, prev_tokens)
        log_probs = F.log_softmax(self._predict(pred_in), dim=-1)
        return log_probs, state, a if state.need_attention else None

    def reorder(self, state: RNNState, index: Tensor, same_source: bool = False) -> RNNState:
        """Select batch rows ``index`` of every tensor of the state (beam search).

        ``same_source``: rows keep their source sentence (see the Transformer's ``reorder``),
        so the encoder states, their projected keys and the mask are not gathered.
        """
        if not same_source:
            state.states = state.states.index_select(0, index)
            state.keys = state.keys.index_select(0, index)
            state.mask = state.mask.index_select(0, index)
        state.hidden = state.hidden.index_select(1, index)
        return state

    def attention_maps(self, src: Tensor, tgt_in: Tensor) -> dict[str, list[Tensor]]:
        """Source attention for one teacher-forced pass with gold inputs:
        {"decoder_src": [(batch, 1, T, S)]} (one layer, one head)."""
        src_mask = pad_mask(src)
        _, attns = self._teacher_forced(src, src_mask, tgt_in, 1.0)
        return {"decoder_src": [torch.stack(attns, dim=1).unsqueeze(1)]}


def build_rnn(cfg: ModelConfig, src_vocab_size: int, tgt_vocab_size: int) -> RNNSeq2Seq:
    """Hyperparameters -> model."""
    return RNNSeq2Seq(cfg, src_vocab_size, tgt_vocab_size)
