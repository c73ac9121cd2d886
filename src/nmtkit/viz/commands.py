"""What ``nmtkit plot FIGURE`` does: pick the figure, draw it, write the files."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from matplotlib.figure import Figure

from . import concepts
from ._common import save_figure

CONCEPTS: dict[str, tuple[str, Callable[[], Figure]]] = {
    "mask": ("mask.png", concepts.mask_figure),
    "positional": ("positional.png", concepts.positional_figure),
    "lr-schedule": ("lr_schedule.png", concepts.lr_schedule_figure),
    "label-smoothing": ("label_smoothing.png", concepts.label_smoothing_figure),
}
"""Figures that need no model or run: name -> (default file name, builder)."""

FIGURES = (*CONCEPTS, "curves", "attention", "all")


def plot(figure: str, out_dir: str | Path | None = None, output: str | Path | None = None,
         run: str | Path | None = None, model: str | Path | None = None, text: str | None = None,
         beam: int | None = None, html: bool = False, device: str = "cpu",
         dpi: int = 100) -> list[Path]:
    """Write one figure (or ``all``) and return the paths written.

    ``output`` names the file of a single figure (for ``attention``: the stem of
    ``<stem>_<kind>.png`` and ``<stem>.html``); otherwise files go to ``out_dir`` (default:
    the current directory) under their default names. ``all`` writes every figure that
    needs no model, plus ``curves`` with ``run`` and ``attention`` with ``model``.
    """
    if figure not in FIGURES:
        raise ValueError(f"plot: unknown figure {figure!r} (choose from {', '.join(FIGURES)})")
    if output is not None and figure == "all":
        raise ValueError("plot all writes several files: give --out DIR, not -o FILE")
    out = Path(out_dir) if out_dir is not None else Path(".")
    if figure == "curves" and run is None:
        raise ValueError("plot curves needs --run RUN_DIR (a directory with metrics.csv)")
    if figure == "attention" and (model is None or not text):
        raise ValueError('plot attention needs --model CKPT and --text "source sentence"')
    if figure == "all" and model is not None and not text:
        raise ValueError('plot all --model CKPT also needs --text "source sentence"')
    written: list[Path] = []
    for name, (filename, build) in CONCEPTS.items():
        if figure in (name, "all"):
            written.append(save_figure(build(), output or out / filename, dpi=dpi))
    if figure == "curves" or (figure == "all" and run is not None):
        from .curves import write_curves

        assert run is not None  # checked above
        run_path = Path(run)
        run_dir = run_path.parent if run_path.is_file() else run_path
        written.append(write_curves(run_dir, output or out / "curves.png", dpi=dpi))
    if figure == "attention" or (figure == "all" and model is not None):
        from ..checkpoint import load_bundle
        from .attention import attention_for_text, write_attention

        assert model is not None and text is not None  # checked above
        att = attention_for_text(load_bundle(model, device), text, beam)
        stem = Path(output).with_suffix("") if output else out / "attention"
        written += write_attention(att, stem, html=html, dpi=dpi)
    return written
