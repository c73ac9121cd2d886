"""Figures: every picture of the seed notebooks, drawn from nmtkit's own code.

Each ``*_figure`` function returns a :class:`matplotlib.figure.Figure` (shown inline by a
notebook; saved with :func:`save_figure`), and each has a pure ``*_data`` companion that
returns the numbers behind it. Needs the ``viz`` extra (matplotlib).

>>> from nmtkit import viz
>>> viz.save_figure(viz.lr_schedule_figure(), "lr.png")  # doctest: +SKIP
"""

from ._common import save_figure
from .attention import (
    KINDS,
    AttentionMaps,
    attention_figure,
    attention_figures,
    attention_for_text,
    compute_attention,
    write_attention,
)
from .concepts import (
    label_smoothing_figure,
    lr_schedule_data,
    lr_schedule_figure,
    mask_data,
    mask_figure,
    positional_data,
    positional_figure,
    smoothing_distribution_data,
    smoothing_penalty_data,
)
from .curves import curves_figure, read_metrics, write_curves
from .html import attention_html

__all__ = [
    "KINDS", "AttentionMaps", "attention_figure", "attention_figures", "attention_for_text",
    "attention_html", "compute_attention", "curves_figure", "label_smoothing_figure",
    "lr_schedule_data", "lr_schedule_figure", "mask_data", "mask_figure", "positional_data",
    "positional_figure", "read_metrics", "save_figure", "smoothing_distribution_data",
    "smoothing_penalty_data", "write_attention", "write_curves",
]
