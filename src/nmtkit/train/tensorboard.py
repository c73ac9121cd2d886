"""What ``train.tensorboard`` adds to TensorBoard at each validation besides the scalars:
the sample translations as text, and an attention image of the first validation sentence.

The scalars (loss, rate, tokens/s, validation metrics) are written by the trainer itself
(:meth:`nmtkit.train.loop.Trainer._tensorboard_scalars`); ``metrics.csv`` stays the record
that ``nmtkit plot curves`` reads.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

if TYPE_CHECKING:
    from ..checkpoint import Bundle

log = logging.getLogger(__name__)

SAMPLES_TAG = "valid/samples"
ATTENTION_TAG = "valid/attention"


def _cell(text: str) -> str:
    """One Markdown table cell: pipes escaped, line breaks flattened, never empty."""
    return text.replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ").strip() or " "


def samples_markdown(samples: Sequence[tuple[str, str, str]]) -> str:
    """(source, reference, hypothesis) triples as the Markdown table TensorBoard's text tab
    renders: one row per sentence."""
    rows = ["| # | source | reference | hypothesis |", "|---|---|---|---|"]
    rows += [f"| {i} | {_cell(s)} | {_cell(r)} | {_cell(h)} |"
             for i, (s, r, h) in enumerate(samples, start=1)]
    return "\n".join(rows)


def log_samples(writer: Any, samples: Sequence[tuple[str, str, str]], step: int) -> None:
    """The sample translations of :meth:`Trainer.write_samples` under :data:`SAMPLES_TAG`."""
    if samples:
        writer.add_text(SAMPLES_TAG, samples_markdown(samples), step)


def attention_image(bundle: Bundle, text: str, tgt_lang: str | None = None) -> torch.Tensor:
    """The source attention of ``text``'s greedy translation (into ``tgt_lang``: a model of
    ``data.directions``), last layer, averaged over heads (the map alignments read), as a
    (3, H, W) float image in [0, 1]: a labelled heatmap when matplotlib is installed (the
    ``viz`` extra), else the bare map in grey."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg

        from ..viz.attention import attention_figure, attention_for_text
    except ImportError:
        return _grey_map(bundle, text, tgt_lang)
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


def _grey_map(bundle: Bundle, text: str, tgt_lang: str | None = None) -> torch.Tensor:
    from ..decode.attention import sentence_attention

    att = sentence_attention(bundle.translator(mbr=0, rerank=0), text, model=bundle.model, beam=1,
                             need_attention=True, tgt_lang=tgt_lang)
    w = att.maps["decoder_src"][-1].mean(0)  # (T, S): last layer, heads averaged
    w = w / w.max().clamp_min(1e-9)
    return w.unsqueeze(0).expand(3, -1, -1).contiguous()  # (3, T, S)


def log_attention(writer: Any, bundle: Bundle, text: str, step: int,
                  tgt_lang: str | None = None) -> None:
    """:func:`attention_image` of ``text`` (into ``tgt_lang``) under :data:`ATTENTION_TAG`; a
    failure is only a warning (an image must never stop training)."""
    try:
        writer.add_image(ATTENTION_TAG, attention_image(bundle, text, tgt_lang), step)
    except Exception as e:  # noqa: BLE001
        log.warning("TensorBoard attention image not written: %s", e)
