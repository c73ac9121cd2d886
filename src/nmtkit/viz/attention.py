"""Attention maps of a trained model for one sentence: every kind, layer and head.

:func:`attention_for_text` translates a sentence with the checkpoint's own search, then
feeds the produced translation back through the model with teacher forcing
(``model.attention_maps``), which returns the probabilities of every attention sub-layer
(the computation is :mod:`nmtkit.decode.attention`, shared with the server):

- ``encoder``: encoder self-attention, (layers, heads, S, S);
- ``decoder_self``: masked decoder self-attention, (layers, heads, T, T);
- ``decoder_src``: decoder attention over the encoder output, (layers, heads, T, S).

S counts the source subwords plus ``</s>``; T the translation's subwords plus ``</s>``.
Decoder row t is the position that reads ``<s> y_1 .. y_t`` and predicts ``y_{t+1}``, so
decoder rows are labelled with the token predicted there and decoder self-attention
columns with the tokens read (``<s> y_1 .. y_n``). A model with a single attention (the
RNN of Bahdanau et al.) returns only ``decoder_src`` with one layer and one head; a model
without ``attention_maps`` falls back to the attention the search recorded. A model that
reads the source reversed gets its maps in reading order.
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import matplotlib
import numpy as np
import torch
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from ..decode.attention import KINDS, teacher_forced_maps
from ..decode.sentence_attention import sentence_attention
from ..decode.translator import Translator
from ..errors import UserError
from ..io import atomic_write_text
from ._common import new_figure, save_figure
from .html import attention_html
from .maps import KIND_TITLES, AttentionMaps

if TYPE_CHECKING:
    from ..checkpoint import Bundle
    from ..models.seq2seq import Seq2Seq

__all__ = ["KINDS", "AttentionMaps", "attention_figure", "attention_figures", "attention_for_text",
           "attention_image", "compute_attention", "write_attention"]


def compute_attention(model: Seq2Seq, src_ids: Sequence[int],
                      tgt_in_ids: Sequence[int]) -> dict[str, np.ndarray]:
    """Teacher-forced attention of one sentence pair: kind -> (layers, heads, queries, keys).

    ``src_ids``: source ids as the model reads them (with ``</s>``); ``tgt_in_ids``: ``<s>``
    then the target ids. Kinds the model does not have are left out
    (:func:`nmtkit.decode.attention.teacher_forced_maps`, as arrays).
    """
    return {kind: w.numpy() for kind, w in teacher_forced_maps(model, src_ids, tgt_in_ids).items()}


MAX_PLOT_TOKENS = 200
"""The longest source (in the model's tokens) whose attention is drawn: beyond it the
heatmaps' labels are unreadable and drawing every layer's and head's map takes minutes."""


def attention_for_text(bundle: Bundle, text: str, beam: int | None = None,
                       tgt_lang: str | None = None) -> AttentionMaps:
    """Translate ``text`` with ``bundle`` (a :class:`nmtkit.checkpoint.Bundle`; into
    ``tgt_lang`` for a model of ``data.directions``, whose source then starts with the
    ``<2xx>`` token) and collect all its attention maps for that translation, source in
    reading order. A source longer than :data:`MAX_PLOT_TOKENS` tokens is refused."""
    att = sentence_attention(Translator.from_bundle(bundle, rerank=0), text, model=bundle.model, beam=beam,
                             need_attention=True, tgt_lang=tgt_lang,
                             max_src_tokens=MAX_PLOT_TOKENS)
    hyp, tokens = att.translation, att.tokens
    search = hyp.attention.astype(np.float32) if hyp.attention is not None else None
    return AttentionMaps(
        source=text.strip(), translation=hyp.text, src_tokens=tokens["source"],
        tgt_in_tokens=tokens["target_in"], tgt_out_tokens=tokens["target"],
        maps={kind: w.numpy() for kind, w in att.maps.items()}, search_attention=search)


def attention_figure(att: AttentionMaps, kind: str, cmap: str = "viridis") -> Figure:
    """A grid of heatmaps for one kind: one row per layer, one column per head."""
    if kind not in att.maps:
        raise UserError(f"attention: no {kind!r} maps (have: {', '.join(att.maps)})")
    arr = att.maps[kind]
    n_layers, n_heads, n_rows, n_cols = arr.shape
    row_labels, col_labels = att.labels(kind)
    # Size each panel by its token count, but keep the whole grid within ~20 x 24 inches.
    cell = min(0.2, 18.0 / (n_heads * n_cols), 20.0 / (n_layers * n_rows))
    cell = max(cell, 0.05)
    font = max(4.0, min(8.0, cell * 42))
    char = 0.075 * font / 8  # inches per label character, roughly
    label_w = char * max(len(t) for t in row_labels) + 0.4
    label_h = char * max(len(t) for t in col_labels) + 0.3
    width = n_heads * (n_cols * cell + 0.12) + label_w + 1.3
    height = n_layers * (n_rows * cell + 0.12) + label_h + 0.9 + (0.2 if n_layers * n_heads > 1 else 0)
    fig = new_figure(max(width, 4.0), max(height, 3.0), layout="constrained")
    axes = fig.subplots(n_layers, n_heads, squeeze=False)
    vmax = float(arr.max()) if arr.size else 1.0
    colors = matplotlib.colormaps[cmap].with_extremes(bad="#ececec")
    hidden = np.triu(np.ones((n_rows, n_cols), dtype=bool), k=1) if att.causal(kind) else None
    im = None
    for li in range(n_layers):
        for hi in range(n_heads):
            ax = axes[li, hi]
            weights = np.ma.masked_array(arr[li, hi], hidden) if hidden is not None else arr[li, hi]
            im = ax.imshow(weights, cmap=colors, vmin=0.0, vmax=vmax, interpolation="nearest")
            ax.set_xticks(range(n_cols))
            ax.set_yticks(range(n_rows))
            ax.tick_params(length=0, labelsize=font)
            ax.set_yticklabels(row_labels if hi == 0 else [])
            ax.set_xticklabels(col_labels if li == n_layers - 1 else [], rotation=90)
            if n_layers * n_heads > 1:
                if li == 0:
                    ax.set_title(f"head {hi + 1}", fontsize=9)
                if hi == 0:
                    ax.set_ylabel(f"layer {li + 1}", fontsize=9)
    row_axis, col_axis = att.axis_names(kind)
    fig.supxlabel(col_axis, fontsize=9)
    if n_layers * n_heads == 1:
        axes[0, 0].set_ylabel(row_axis, fontsize=9)
    else:
        fig.supylabel(row_axis, fontsize=9)
    if im is not None:
        fig.colorbar(im, ax=axes, shrink=0.8 if n_layers > 1 else 1.0, aspect=30, label="weight")
    src = textwrap.shorten(att.source, 90, placeholder=" …")
    hyp = textwrap.shorten(att.translation, 90, placeholder=" …")
    fig.suptitle(f"{KIND_TITLES.get(kind, kind)}\n{src}  →  {hyp}", fontsize=10)
    return fig


def attention_figures(att: AttentionMaps) -> dict[str, Figure]:
    """One figure per kind the model has."""
    return {kind: attention_figure(att, kind) for kind in att.maps}


def attention_image(bundle: Bundle, text: str, tgt_lang: str | None = None) -> torch.Tensor:
    """The source attention of ``text``'s greedy translation (into ``tgt_lang``: a model of
    ``data.directions``), last layer, averaged over heads (the map alignments read), as a
    labelled heatmap in a (3, H, W) float image in [0, 1]: what ``nmtkit train`` passes to
    training for TensorBoard's ``valid/attention`` (:class:`nmtkit.train.tensorboard.TensorBoard`)."""
    att = attention_for_text(bundle, text, beam=1, tgt_lang=tgt_lang)
    kind = "decoder_src"
    last = att.maps[kind][-1:].mean(axis=1, keepdims=True)  # (1, 1, T, S)
    att.maps = {kind: last}
    fig = attention_figure(att, kind)
    canvas = FigureCanvasAgg(fig)  # the figure is Agg-bound already (viz._common.new_figure)
    canvas.draw()  # type: ignore[no-untyped-call]
    # (H, W, 4) uint8 pixels of the drawn figure
    rgba = torch.from_numpy(np.asarray(canvas.buffer_rgba()).copy())  # type: ignore[no-untyped-call]
    return rgba[..., :3].permute(2, 0, 1).float() / 255.0  # (3, H, W)


def write_attention(att: AttentionMaps, stem: str | Path, html: bool = False,
                    kinds: Sequence[str] | None = None, dpi: int = 100) -> list[Path]:
    """Write ``<stem>_<kind>.png`` per kind (and ``<stem>.html`` with ``html``)."""
    stem = Path(stem)
    written = []
    for kind in kinds or list(att.maps):
        if kind not in att.maps:
            continue
        written.append(save_figure(attention_figure(att, kind),
                                   stem.with_name(f"{stem.name}_{kind}.png"), dpi=dpi))
    if html:
        page = stem.with_name(stem.name + ".html")
        atomic_write_text(page, attention_html(att))
        written.append(page)
    return written
