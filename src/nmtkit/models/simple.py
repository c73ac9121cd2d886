"""The guide's models in the size of an idea: multi-head attention, one encoder and one
decoder layer of the Transformer, and one step of the recurrent decoder with attention.

Each function takes a real nmtkit module and uses its weights, so that it computes exactly
what the module computes, without the module's plumbing (key/value caches, rotary
positions, fused kernels, probabilities kept for figures, keys projected once per sentence).
They run in evaluation mode (no dropout). ``tests/test_docs_guide_ideas.py`` checks that
each gives the production module's numbers on random inputs.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from .attention import MultiHeadAttention, scaled_dot_product_attention
from .rnn import RNNAttention, RNNSeq2Seq
from .transformer import DecoderLayer, EncoderLayer


def multi_head_attention(attn: MultiHeadAttention, query: Tensor, key: Tensor, value: Tensor,
                         mask: Tensor | None = None) -> Tensor:
    """Concat(head_1 .. head_h) W^O, head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V).

    query (batch, q, d_model); key and value (batch, k, d_model); mask (batch, 1 | q, k),
    True where attention may look. Returns (batch, q, d_model).
    """
    h, d_k = attn.heads, attn.d_k
    w_q, w_k, w_v = attn.in_proj.weight.chunk(3)  # each (d_model, d_model): all heads' W^Q...
    b_q, b_k, b_v = attn.in_proj.bias.chunk(3)

    def split(x: Tensor) -> Tensor:  # (batch, time, d_model) -> (batch, h, time, d_k)
        return x.view(x.size(0), x.size(1), h, d_k).transpose(1, 2)

    q = split(F.linear(query, w_q, b_q))  # head i is columns i*d_k .. (i+1)*d_k - 1
    k = split(F.linear(key, w_k, b_k))
    v = split(F.linear(value, w_v, b_v))
    heads = [scaled_dot_product_attention(q[:, i], k[:, i], v[:, i], mask)[0]  # Eq. 1 per head
             for i in range(h)]  # h tensors of (batch, q, d_k)
    concat = torch.cat(heads, dim=-1)  # (batch, q, h * d_k = d_model)
    out: Tensor = attn.out_proj(concat)  # W^O
    return out


def encoder_layer(layer: EncoderLayer, x: Tensor, mask: Tensor) -> Tensor:
    """Self-attention, then the feed-forward network, each inside a residual connection
    with layer norm (``layer.sublayer``). x: (batch, S, d_model); mask: (batch, 1, S)."""
    x = layer.sublayer[0](x, lambda y: multi_head_attention(layer.self_attn, y, y, y, mask))
    out: Tensor = layer.sublayer[1](x, layer.feed_forward)
    return out


def decoder_layer(layer: DecoderLayer, x: Tensor, memory: Tensor, src_mask: Tensor,
                  tgt_mask: Tensor) -> Tensor:
    """Masked self-attention over the target prefix, attention over the encoder's memory,
    then the feed-forward network. x: (batch, T, d_model); memory: (batch, S, d_model);
    src_mask: (batch, 1, S); tgt_mask: (batch, T, T)."""
    x = layer.sublayer[0](x, lambda y: multi_head_attention(layer.self_attn, y, y, y, tgt_mask))
    x = layer.sublayer[1](x, lambda y: multi_head_attention(layer.src_attn, y, memory, memory,
                                                            src_mask))
    out: Tensor = layer.sublayer[2](x, layer.feed_forward)
    return out


def concat_attention(attn: RNNAttention, memory: Tensor, mask: Tensor,
                     query: Tensor) -> tuple[Tensor, Tensor]:
    """The homework's attention for one decoder step: scores, tempered softmax, context.

    memory H (batch, S, d_h); mask (batch, S), True at real source tokens; query s_{t-1}
    (batch, d_s). Returns w_t (batch, d_h) and a_t (batch, S).
    """
    energy = torch.tanh(attn.w_h(memory) + attn.w_s(query).unsqueeze(1))  # W_h h_j + W_s s
    scores = energy @ attn.v  # e_tj = v^T tanh(...): (batch, S)
    scores = scores.masked_fill(~mask, float("-inf"))  # padding gets weight 0
    weights = torch.softmax(scores / attn.temperature, dim=-1)  # a_t
    context = (weights.unsqueeze(-1) * memory).sum(dim=1)  # w_t = sum_j a_tj h_j
    return context, weights


def rnn_decoder_step(model: RNNSeq2Seq, prev: Tensor, hidden: Tensor, memory: Tensor,
                     mask: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """One position of the decoder with attention (an untied output layer, as the homework's).

    prev (batch,): the previous token; hidden s_{t-1} (layers, batch, d_s); memory H and
    mask as in :func:`concat_attention`. Returns the scores of the next token (batch, V),
    s_t and a_t.
    """
    y = model.tgt_embed(prev)  # y_t: (batch, emb)
    w, a = concat_attention(model.attention, memory, mask, hidden[-1])  # query: top layer
    out, hidden = model.decoder_rnn(torch.cat([y, w], dim=-1).unsqueeze(1), hidden)  # s_t
    s = out[:, 0]  # the top layer's s_t: (batch, d_s)
    logits: Tensor = model.generator(torch.cat([y, w, s], dim=-1))  # f([y_t; w_t; s_t])
    return logits, hidden, a
