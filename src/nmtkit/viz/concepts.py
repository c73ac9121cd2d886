"""Figures of the paper's building blocks, drawn from nmtkit's own functions.

Each figure has a pure ``*_data`` function that returns the numbers behind it (tests
check those) and a ``*_figure`` function that draws them:

- :func:`mask_figure`: :func:`nmtkit.models.seq2seq.subsequent_mask` (Sec. 3.2.3).
- :func:`positional_figure`: :func:`nmtkit.models.transformer.sinusoid_table` (Sec. 3.5).
- :func:`lr_schedule_figure`: :func:`nmtkit.train.schedule.noam_rate` (Eq. 3).
- :func:`label_smoothing_figure`: :func:`nmtkit.models.loss.smoothed_distribution` and
  :func:`nmtkit.models.loss.label_smoothed_loss` (Sec. 5.4).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from matplotlib.figure import Figure

from ..models.loss import label_smoothed_loss, smoothed_distribution
from ..models.seq2seq import subsequent_mask
from ..models.transformer import sinusoid_table
from ..train.schedule import noam_rate
from ._common import new_figure

# --- the subsequent mask -----------------------------------------------------------------------


def mask_data(size: int = 20) -> np.ndarray:
    """(size, size) bool: row i (a query position) may attend to column j iff j <= i."""
    return subsequent_mask(size)[0].numpy()


def mask_figure(size: int = 20) -> Figure:
    m = mask_data(size)
    fig = new_figure(4.6, 4.2)
    ax = fig.add_subplot()
    ax.imshow(m, cmap="viridis", vmin=0, vmax=1)
    ax.set_title("Subsequent mask: yellow = may attend")
    ax.set_xlabel("key position (attended to)")
    ax.set_ylabel("query position (attending)")
    ticks = range(0, size, max(1, size // 10))
    ax.set_xticks(list(ticks))
    ax.set_yticks(list(ticks))
    return fig


# --- positional encoding -----------------------------------------------------------------------


def positional_data(max_len: int = 100, d_model: int = 20) -> np.ndarray:
    """(max_len, d_model) sinusoidal table: PE(pos, 2i) = sin(pos / 10000^(2i/d)),
    PE(pos, 2i+1) = cos(pos / 10000^(2i/d))."""
    return sinusoid_table(max_len, d_model).numpy()


def positional_figure(max_len: int = 100, d_model: int = 20, dims: Sequence[int] = (4, 5, 6, 7),
                      heatmap_d_model: int = 128) -> Figure:
    """Left: PE curves of a few dimensions over positions. Right: the whole table as a heatmap."""
    pe = positional_data(max_len, d_model)
    heat = positional_data(max_len, heatmap_d_model)
    fig = new_figure(11, 4.0, layout="constrained")
    left, right = fig.subplots(1, 2, width_ratios=[1.1, 1])
    for d in dims:
        kind = "sin" if d % 2 == 0 else "cos"
        left.plot(np.arange(max_len), pe[:, d], label=f"dim {d} ({kind})")
    left.set_title(f"Positional encoding, d_model={d_model}")
    left.set_xlabel("position")
    left.set_ylabel("value")
    left.legend(loc="lower center", fontsize=8, ncols=len(dims))
    left.set_ylim(-1.4, 1.1)
    im = right.imshow(heat, aspect="auto", cmap="RdBu_r", vmin=-1, vmax=1, interpolation="nearest")
    right.set_title(f"The whole table, d_model={heatmap_d_model}")
    right.set_xlabel("dimension (even = sin, odd = cos)")
    right.set_ylabel("position")
    fig.colorbar(im, ax=right, shrink=0.9)
    return fig


# --- the Noam learning-rate schedule -----------------------------------------------------------

LR_SETTINGS: tuple[tuple[int, int], ...] = ((512, 4000), (512, 8000), (256, 4000))
"""(d_model, warmup) pairs drawn by default, as in the seed notebook."""


def lr_schedule_data(settings: Sequence[tuple[int, int]] = LR_SETTINGS, steps: int = 20000,
                     factor: float = 1.0) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Steps 1..steps and, per ``(d_model, warmup)``, the rate :func:`noam_rate` gives each step."""
    x = np.arange(1, steps + 1)
    curves = {f"d_model={d}, warmup={w}": np.array([noam_rate(int(s), d, factor, w) for s in x])
              for d, w in settings}
    return x, curves


def lr_schedule_figure(settings: Sequence[tuple[int, int]] = LR_SETTINGS, steps: int = 20000,
                       factor: float = 1.0) -> Figure:
    x, curves = lr_schedule_data(settings, steps, factor)
    fig = new_figure(6.4, 3.8)
    ax = fig.add_subplot()
    for (label, y), (_, warmup) in zip(curves.items(), settings, strict=True):
        (line,) = ax.plot(x, y, label=label)
        ax.plot([warmup], [y[warmup - 1]], "o", color=line.get_color(), ms=4)
    ax.set_title(f"Noam schedule (factor {factor:g}): linear warmup, then step^-0.5")
    ax.set_xlabel("step")
    ax.set_ylabel("learning rate (x 1e-3)")
    ax.yaxis.set_major_formatter(lambda v, _: f"{v * 1e3:g}")
    ax.legend()
    ax.grid(alpha=0.3)
    return fig


# --- label smoothing ---------------------------------------------------------------------------


def smoothing_distribution_data(vocab_size: int = 5, eps: float = 0.4,
                                targets: Sequence[int] = (2, 1, 0, 3, 3)) -> np.ndarray:
    """(len(targets), vocab_size) smoothed target rows: 1-eps on the gold token, eps spread
    over the other non-pad tokens, 0 on the pad column (id 0) and on pad targets."""
    return smoothed_distribution(torch.tensor(list(targets)), vocab_size, eps).numpy()


def smoothing_penalty_data(eps: float = 0.1, vocab_size: int = 5, points: int = 200,
                           gold: int = 1) -> dict[str, np.ndarray]:
    """Loss of one prediction as the model grows confident in the gold token.

    The model gives the gold token probability c, from uniform (1 / (V - 1)) to 0.999, and
    splits 1 - c evenly over the other non-pad tokens. Returns c, the label-smoothed loss
    (KL(q || p), :func:`label_smoothed_loss`) and the plain NLL (eps = 0) at each c.
    """
    others = vocab_size - 2
    c = torch.linspace(1.0 / (others + 1), 0.999, points, dtype=torch.float64)
    p = ((1.0 - c) / others).unsqueeze(1).repeat(1, vocab_size)  # (points, V)
    p[:, gold] = c
    lp = p.log()
    lp[:, 0] = 0.0  # the pad column (id 0) is ignored by the loss; any finite value will do
    target = torch.full((1,), gold)
    smoothed = [float(label_smoothed_loss(row.unsqueeze(0), target, eps)[0]) for row in lp]
    nll = [float(label_smoothed_loss(row.unsqueeze(0), target, 0.0)[0]) for row in lp]
    return {"confidence": c.numpy(), "smoothed": np.array(smoothed), "nll": np.array(nll)}


def label_smoothing_figure(vocab_size: int = 5, eps: float = 0.4,
                           targets: Sequence[int] = (2, 1, 0, 3, 3),
                           penalty_eps: float = 0.1) -> Figure:
    """Left: the smoothed target distribution for a few targets. Right: the penalty curve."""
    q = smoothing_distribution_data(vocab_size, eps, targets)
    pen = smoothing_penalty_data(penalty_eps, vocab_size)
    fig = new_figure(11, 3.9, layout="constrained")
    left, right = fig.subplots(1, 2, width_ratios=[1, 1.25])
    im = left.imshow(q, cmap="viridis", vmin=0, vmax=1)
    for (i, j), v in np.ndenumerate(q):
        left.text(j, i, f"{v:.2f}", ha="center", va="center", fontsize=8,
                  color="black" if v > 0.5 else "white")
    left.set_xticks(range(vocab_size))
    left.set_xticklabels(["0 pad"] + [str(v) for v in range(1, vocab_size)])
    left.set_yticks(range(len(targets)))
    left.set_yticklabels([f"gold {t}" + (" (pad)" if t == 0 else "") for t in targets])
    left.set_xlabel("vocabulary id")
    left.set_title(f"Smoothed targets q, eps={eps:g}, V={vocab_size}")
    fig.colorbar(im, ax=left, shrink=0.9)
    c = pen["confidence"]
    right.plot(c, pen["smoothed"], label=f"label-smoothed loss, eps={penalty_eps:g}")
    right.plot(c, pen["nll"], "--", color="grey", label="plain NLL (eps=0)")
    right.axvline(1 - penalty_eps, color="C3", lw=0.8, ls=":")
    right.text(1 - penalty_eps, right.get_ylim()[1] * 0.95, f"minimum at 1-eps = {1 - penalty_eps:g} ",
               color="C3", fontsize=8, ha="right", va="top")
    right.set_xlabel("model's probability of the gold token")
    right.set_ylabel("loss of one token")
    right.set_title("Over-confidence is penalised")
    right.legend(fontsize=8)
    right.grid(alpha=0.3)
    return fig
