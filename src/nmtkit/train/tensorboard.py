"""``train.tensorboard``: event files in ``<run>/tensorboard/`` (:class:`TensorBoard`).

Scalars (loss, rate, tokens/s every ``log_every`` updates; the validation metrics), and at
each validation the sample translations as text and an attention image of the first
validation sentence. ``metrics.csv`` stays the record that ``nmtkit plot curves`` reads.

The image is drawn by whatever the caller passes in (:data:`AttentionImage`): the command
line passes :func:`nmtkit.viz.attention.attention_image`, a labelled heatmap (figures live
above training, which never imports them); without one, :func:`grey_attention_image`, the
bare map.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from .. import fast
from ..decode.sentence_attention import sentence_attention
from ..decode.translator import Translator

if TYPE_CHECKING:
    from ..checkpoint import Bundle

log = logging.getLogger(__name__)

SAMPLES_TAG = "valid/samples"
ATTENTION_TAG = "valid/attention"

AttentionImage = Callable[["Bundle", str, "str | None"], torch.Tensor]
"""(bundle, source text, target language) -> the source attention of its greedy
translation as a (3, H, W) float image in [0, 1]."""


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
    """The sample translations of :func:`nmtkit.train.validate.sample_translations` under
    :data:`SAMPLES_TAG`."""
    if samples:
        writer.add_text(SAMPLES_TAG, samples_markdown(samples), step)


def grey_attention_image(bundle: Bundle, text: str, tgt_lang: str | None = None) -> torch.Tensor:
    """The source attention of ``text``'s greedy translation (into ``tgt_lang``: a model of
    ``data.directions``), last layer, averaged over heads, as a bare (3, T, S) grey map
    scaled to [0, 1]: the image when no drawing is passed in."""
    att = sentence_attention(Translator.from_bundle(bundle, mbr=0, rerank=0), text,
                             model=bundle.model, beam=1, need_attention=True, tgt_lang=tgt_lang)
    w = att.maps["decoder_src"][-1].mean(0)  # (T, S): last layer, heads averaged
    w = w / w.max().clamp_min(1e-9)
    return w.unsqueeze(0).expand(3, -1, -1).contiguous()  # (3, T, S)


def log_attention(writer: Any, bundle: Bundle, text: str, step: int, tgt_lang: str | None = None,
                  image: AttentionImage = grey_attention_image) -> None:
    """``image`` of ``text`` (into ``tgt_lang``) under :data:`ATTENTION_TAG`; a failure is
    only a warning (an image must never stop training)."""
    try:
        writer.add_image(ATTENTION_TAG, image(bundle, text, tgt_lang), step)
    except Exception as e:  # noqa: BLE001
        log.warning("TensorBoard attention image not written: %s", e)


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


class TensorBoard:
    """A SummaryWriter on ``<run>/tensorboard`` (needs the ``tensorboard`` extra)."""

    def __init__(self, run_dir: Path, purge_step: int | None,
                 attention_image: AttentionImage | None = None):
        """``purge_step``: on resume, events the interrupted session wrote from this step on
        are dropped (they were after its last checkpoint)."""
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(str(run_dir / "tensorboard"), purge_step=purge_step)
        self.attention_image = attention_image or grey_attention_image

    def scalars(self, values: dict[str, Any], step: int) -> None:
        """Write numeric ``values`` at ``step`` (non-numbers, e.g. an empty BLEU, skipped)."""
        for tag, value in values.items():
            if isinstance(value, (int, float)) or (isinstance(value, str) and _is_number(value)):
                self.writer.add_scalar(tag, float(value), step)
        self.writer.flush()

    def training(self, step: int, loss: float, lr: float, tokens_per_s: float,
                 loss_scale: float | None) -> None:
        """Every ``log_every`` updates: the loss over them, the rate, target tokens per
        second (and fp16's loss scale)."""
        self.scalars({"train/loss": loss, "train/lr": lr, "train/tokens_per_s": tokens_per_s,
                      **({"train/loss_scale": loss_scale} if loss_scale is not None else {})},
                     step)

    def validation(self, step: int, row: dict[str, Any], samples: list[tuple[str, str, str]],
                   bundle: Bundle, text: list[str], tgt_lang: str | None) -> None:
        """The validation's metrics (``row`` of metrics.csv: ``valid/loss``, ``valid/bleu``
        ...), the sample translations as text, and the attention of the first of ``text``
        (the validation sources; ``data.directions``: the first direction's, translated into
        its target language ``tgt_lang``) as an image."""
        self.scalars({f"valid/{k.removeprefix('valid_')}": row[k]
                      for k in row if k.startswith(("valid_", "bleu_"))}, step)
        log_samples(self.writer, samples, step)
        if text:
            model = bundle.model
            was_training = model.training
            model.eval()
            try:
                # Packed weights for this decoding only, unpacked before training goes on (as
                # for the validation's translations): a fused optimizer's in-place update does
                # not bump the version counter that tells a stale pack from a fresh one.
                with fast.inference(model, enabled=bundle.cfg.decode.fast):
                    log_attention(self.writer, bundle, text[0], step, tgt_lang=tgt_lang,
                                  image=self.attention_image)
            finally:
                model.train(was_training)
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()
