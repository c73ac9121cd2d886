"""Shared helpers: figures without pyplot, written atomically as PNG.

Figures are built with :class:`matplotlib.figure.Figure` directly and rendered by the Agg
canvas, never through ``pyplot``: no GUI backend is touched, no global figure list grows
during a long training run, and a notebook still shows a returned figure inline.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from ..io import atomic_write_bytes

DPI = 100


def new_figure(width: float, height: float, **kwargs: Any) -> Figure:
    """A figure bound to the Agg canvas (size in inches)."""
    fig = Figure(figsize=(width, height), **kwargs)
    FigureCanvasAgg(fig)
    return fig


def save_figure(fig: Figure, path: str | Path, dpi: int = DPI) -> Path:
    """Render ``fig`` to PNG at ``path`` (parent folders created; atomic replace)."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi, bbox_inches="tight", pad_inches=0.1,
                facecolor="white")
    path = Path(path)
    atomic_write_bytes(path, buf.getvalue())
    return path
