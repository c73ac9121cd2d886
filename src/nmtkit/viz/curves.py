"""Training curves from a run's ``metrics.csv`` (written by :class:`nmtkit.train.loop.Trainer`).

Four panels against the optimizer step: the training loss of every logged window
(``losses.csv``: the mean over ``train.log_every`` updates, the homework's per-batch panel),
training and validation loss per validation (label-smoothed, per target token), perplexity
(from the plain NLL) and validation BLEU (greedy). The trainer calls :func:`write_curves`
after every validation, so ``RUN_DIR/curves.png`` follows a long run.
"""

from __future__ import annotations

import csv
import logging
import math
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from ..errors import UserError
from ._common import new_figure, save_figure

CURVES_PNG = "curves.png"
LOSSES_CSV = "losses.csv"


def read_metrics(path: str | Path) -> dict[str, np.ndarray]:
    """``metrics.csv`` (or a run directory holding it) -> column name -> float array.

    Empty cells (e.g. BLEU when ``valid_bleu`` is off) become NaN.
    """
    path = Path(path)
    if path.is_dir():
        path = path / "metrics.csv"
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no metrics.csv (has the run validated yet?)")
    with path.open(newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        rows = list(reader)
        fields = reader.fieldnames or []
    if "step" not in fields:
        raise UserError(f"{path}: not an nmtkit metrics.csv (no 'step' column)")

    def num(value: str | None, line: int, name: str) -> float:
        if value is None or value.strip() == "":
            return math.nan
        try:
            return float(value)
        except ValueError:
            raise UserError(f"{path}:{line}: column {name!r}: not a number: {value!r}") from None

    return {name: np.array([num(r.get(name), i + 2, name) for i, r in enumerate(rows)], dtype=float)
            for name in fields}


def read_losses(run_dir: str | Path) -> dict[str, np.ndarray] | None:
    """``run_dir/losses.csv`` (the training loss per logged window) as :func:`read_metrics`
    gives columns, or None if the run has none (a run of an older nmtkit)."""
    path = Path(run_dir) / LOSSES_CSV
    return read_metrics(path) if path.is_file() else None


def curves_figure(metrics: dict[str, np.ndarray], title: str | None = None,
                  losses: dict[str, np.ndarray] | None = None) -> Figure:
    """Training loss per logged window (``losses``), loss, perplexity and BLEU against step;
    missing columns leave a panel empty."""
    fig = new_figure(17, 3.8, layout="constrained")
    ax_batch, ax_loss, ax_ppl, ax_bleu = fig.subplots(1, 4)
    step = metrics.get("step", np.array([]))
    if losses is not None and len(losses.get("step", [])):
        ax_batch.plot(losses["step"], losses["train_loss"], lw=0.8, color="C0")
    else:
        ax_batch.text(0.5, 0.5, "no per-step losses recorded", ha="center", va="center",
                      transform=ax_batch.transAxes, color="grey")
    ax_batch.set_title("Training loss per logged step")
    style: dict[str, Any] = {"marker": "o", "ms": 3} if len(step) < 30 else {}

    def draw(ax: Axes, column: str, label: str, **kw: Any) -> None:
        y = metrics.get(column)
        if y is not None and len(y) and not np.all(np.isnan(y)):
            ax.plot(step, y, label=label, **style, **kw)

    draw(ax_loss, "train_loss", "train")
    draw(ax_loss, "valid_loss", "validation")
    ax_loss.set_title("Loss (label-smoothed, per token)")
    draw(ax_ppl, "train_ppl", "train")
    draw(ax_ppl, "valid_ppl", "validation")
    ax_ppl.set_title("Perplexity")
    ppl = np.concatenate([metrics.get(c, np.array([])) for c in ("train_ppl", "valid_ppl")])
    ppl = ppl[np.isfinite(ppl)]
    if len(ppl) and ppl.max() / max(ppl.min(), 1e-9) > 20:
        ax_ppl.set_yscale("log")
    draw(ax_bleu, "valid_bleu", "validation (greedy)", color="C2")
    ax_bleu.set_title("BLEU")
    bleu = metrics.get("valid_bleu")
    if bleu is not None and len(bleu) and np.any(np.isfinite(bleu)):
        best = int(np.nanargmax(bleu))
        ax_bleu.plot([step[best]], [bleu[best]], "*", ms=11, color="C3", zorder=3,
                     label=f"best {bleu[best]:.2f} (step {int(step[best])})")
    else:
        ax_bleu.text(0.5, 0.5, "no BLEU recorded", ha="center", va="center",
                     transform=ax_bleu.transAxes, color="grey")
    for ax in (ax_batch, ax_loss, ax_ppl, ax_bleu):
        ax.set_xlabel("step")
        if len(step):
            ax.set_xlim(0, float(np.nanmax(step)) * 1.04)
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8)
    if title is None:
        title = _progress(metrics)
    if title:
        fig.suptitle(title)
    return fig


def _progress(metrics: dict[str, np.ndarray]) -> str:
    step, epoch = metrics.get("step"), metrics.get("epoch")
    if step is None or not len(step):
        return "no validation yet"
    text = f"after step {int(step[-1])}"
    if epoch is not None and np.isfinite(epoch[-1]):
        text += f", epoch {int(epoch[-1])}"
    return text


def write_curves(run_dir: str | Path, out: str | Path | None = None, dpi: int = 100) -> Path:
    """Draw ``run_dir/metrics.csv`` into ``out`` (default ``run_dir/curves.png``)."""
    run_dir = Path(run_dir)
    metrics = read_metrics(run_dir)
    fig = curves_figure(metrics, title=f"{run_dir.resolve().name}: {_progress(metrics)}",
                        losses=read_losses(run_dir))
    return save_figure(fig, out or run_dir / CURVES_PNG, dpi=dpi)


def redraw_curves(run_dir: str | Path) -> None:
    """Training callback: redraw ``curves.png`` after a validation, so a long run can be
    watched; a failed plot is only a warning."""
    try:
        write_curves(run_dir)
    except Exception as e:  # noqa: BLE001 (a figure must never stop training)
        logging.getLogger(__name__).warning("curves.png not written: %s", e)


COMPARE_PNG = "compare.png"


def compare_figure(runs: list[tuple[str, dict[str, np.ndarray]]],
                   title: str | None = None) -> Figure:
    """Several runs side by side (e.g. the RNN of seed 003 against the Transformer): validation
    loss and greedy validation BLEU against the optimizer step, and BLEU against the target
    tokens trained on and against wall-clock minutes, since one step of two models holds a
    different amount of work."""
    fig = new_figure(17, 3.8, layout="constrained")
    ax_loss, ax_bleu, ax_tokens, ax_time = fig.subplots(1, 4)
    for i, (label, m) in enumerate(runs):
        step = m.get("step", np.array([]))
        style: dict[str, Any] = {"color": f"C{i}", "label": label}
        if len(step) < 30:
            style.update(marker="o", ms=3)
        for ax, x_col, y_col in ((ax_loss, "step", "valid_loss"), (ax_bleu, "step", "valid_bleu"),
                                 (ax_tokens, "tgt_tokens", "valid_bleu"),
                                 (ax_time, "elapsed_s", "valid_bleu")):
            x, y = m.get(x_col), m.get(y_col)
            if x is None or y is None or not len(y) or np.all(np.isnan(y)):
                continue
            if x_col == "tgt_tokens":
                x = x / 1e6
            elif x_col == "elapsed_s":
                x = x / 60
            ax.plot(x, y, **style)
    ax_loss.set_title("Validation loss (label-smoothed)")
    ax_bleu.set_title("Validation BLEU (greedy)")
    ax_tokens.set_title("BLEU by training tokens")
    ax_time.set_title("BLEU by wall-clock time")
    for ax, xlabel in ((ax_loss, "step"), (ax_bleu, "step"),
                       (ax_tokens, "target tokens (millions)"), (ax_time, "minutes")):
        ax.set_xlabel(xlabel)
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8)
    if title:
        fig.suptitle(title)
    return fig


def write_comparison(run_dirs: list[str | Path], out: str | Path,
                     labels: list[str] | None = None, dpi: int = 100) -> Path:
    """Draw the ``metrics.csv`` of each run directory into one :func:`compare_figure`;
    ``labels`` default to the directories' names."""
    if len(run_dirs) < 2:
        raise UserError("plot compare needs at least two --run directories")
    if labels and len(labels) != len(run_dirs):
        raise UserError(f"plot compare: {len(labels)} --label for {len(run_dirs)} --run")
    names = labels or [Path(d).resolve().name for d in run_dirs]
    runs = [(name, read_metrics(d)) for name, d in zip(names, run_dirs, strict=True)]
    return save_figure(compare_figure(runs, title=" vs ".join(names)), out, dpi=dpi)
