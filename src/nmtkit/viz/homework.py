"""Figures of the homework's ideas (seed 003), drawn from nmtkit's own functions.

- :func:`temperature_figure`: one set of attention scores through
  :func:`nmtkit.models.attention.masked_softmax` at several temperatures.
- :func:`teacher_forcing_figure`: the teacher-forcing ratio per update, as
  :meth:`nmtkit.models.rnn.RNNSeq2Seq.set_train_step` sets it from a model config.

Each has a pure ``*_data`` companion that returns the numbers behind it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np
import torch
from matplotlib.figure import Figure

from ..config import ModelConfig
from ..models.attention import masked_softmax
from ..models.rnn import RNNSeq2Seq
from ._common import new_figure

# --- the softmax temperature -------------------------------------------------------------------

TEMPERATURES: tuple[float, ...] = (0.5, 1.0, 2.0)
EXAMPLE_SOURCE: tuple[str, ...] = ("<s>", "ein", "hund", "läuft", "im", "schnee", ".", "</s>",
                                   "<pad>", "<pad>")
"""The source positions of the example (the last two are padding, masked out)."""
EXAMPLE_SCORES: tuple[float, ...] = (-1.0, 0.5, 2.0, 1.2, -0.3, 0.8, -0.5, 0.0, 1.5, 1.5)
"""Attention scores of one decoder query over :data:`EXAMPLE_SOURCE` (the query is about to
write "dog"); the padding positions get scores too, which the mask must ignore."""


def temperature_data(scores: Sequence[float] = EXAMPLE_SCORES,
                     temperatures: Sequence[float] = TEMPERATURES,
                     mask: Sequence[bool] | None = None) -> dict[float, np.ndarray]:
    """temperature -> a = masked_softmax(scores, mask, temperature) (a row that sums to 1,
    exactly 0 where ``mask`` is False). The default mask hides the ``<pad>`` positions of
    :data:`EXAMPLE_SOURCE`."""
    if mask is None:
        mask = [tok != "<pad>" for tok in EXAMPLE_SOURCE][:len(scores)]
    s = torch.tensor(list(scores), dtype=torch.float64)
    m = torch.tensor(list(mask), dtype=torch.bool)
    return {float(t): masked_softmax(s, m, float(t)).numpy() for t in temperatures}


def _entropy(p: np.ndarray) -> float:
    q = p[p > 0]
    return float(-(q * np.log(q)).sum())


def temperature_figure(scores: Sequence[float] = EXAMPLE_SCORES,
                       temperatures: Sequence[float] = TEMPERATURES,
                       tokens: Sequence[str] = EXAMPLE_SOURCE) -> Figure:
    """Grouped bars: the attention weights of each source position under each temperature."""
    probs = temperature_data(scores, temperatures)
    fig = new_figure(9, 3.8, layout="constrained")
    ax = fig.add_subplot()
    x = np.arange(len(scores))
    width = 0.8 / len(probs)
    for k, (t, p) in enumerate(probs.items()):
        ax.bar(x + (k - (len(probs) - 1) / 2) * width, p, width,
               label=f"T = {t:g}: max {p.max():.2f}, entropy {_entropy(p):.2f} nats")
    ax.set_xticks(x)
    ax.set_xticklabels([f"{tok}\n{s:+.1f}" for tok, s in zip(tokens, scores, strict=False)])
    ax.set_xlabel("source position (and its score); <pad> is masked: weight exactly 0")
    ax.set_ylabel("attention weight a_j")
    ax.set_title("a = softmax(score / T): T < 1 sharpens, T > 1 flattens (masked_softmax)")
    ax.legend(fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    return fig


# --- the teacher-forcing schedule --------------------------------------------------------------

SEED_TEACHER_FORCING = ModelConfig(arch="rnn", teacher_forcing=0.5)
"""The homework's schedule: a constant ratio of 0.5."""
ANNEALED_TEACHER_FORCING = ModelConfig(arch="rnn", teacher_forcing=1.0, teacher_forcing_min=0.25,
                                       teacher_forcing_anneal_steps=20000)
"""An annealed schedule (scheduled sampling, Bengio et al. 2015): from always gold to 0.25."""


def teacher_forcing_data(cfg: ModelConfig, steps: int | None = None,
                         points: int = 201) -> tuple[np.ndarray, np.ndarray]:
    """(updates done, ratio): the teacher-forcing ratio that
    :meth:`RNNSeq2Seq.set_train_step` sets before each update, read from a tiny model built
    with ``cfg``'s schedule. ``steps`` defaults to 1.25 x the annealing length (or 10000)."""
    small = dataclasses.replace(cfg, arch="rnn", layers=1, enc_layers=0, dec_layers=0, emb_dim=4,
                                rnn_hidden=4, attention_dim=0, bidirectional=True, dropout=0.0,
                                tie_output=False, tie_all=False)
    model = RNNSeq2Seq(small, 8, 8)
    if steps is None:
        steps = int(cfg.teacher_forcing_anneal_steps * 1.25) or 10000
    x = np.unique(np.linspace(0, steps, points).round().astype(int))
    ratios = []
    for step in x:
        model.set_train_step(int(step))
        ratios.append(model.teacher_forcing_ratio)
    return x, np.array(ratios, dtype=float)


def teacher_forcing_label(cfg: ModelConfig) -> str:
    """``constant 0.5`` or ``1 -> 0.25 over 20000 updates``."""
    if not cfg.teacher_forcing_anneal_steps:
        return f"constant {cfg.teacher_forcing:g}"
    return (f"{cfg.teacher_forcing:g} -> {cfg.teacher_forcing_min:g} over "
            f"{cfg.teacher_forcing_anneal_steps} updates")


def teacher_forcing_figure(configs: dict[str, ModelConfig] | None = None,
                           steps: int | None = None) -> Figure:
    """The ratio against the update for each named config (default: the homework's constant
    0.5 and an annealed schedule)."""
    if configs is None:
        configs = {f"the homework's: {teacher_forcing_label(SEED_TEACHER_FORCING)}":
                   SEED_TEACHER_FORCING,
                   f"annealed: {teacher_forcing_label(ANNEALED_TEACHER_FORCING)}":
                   ANNEALED_TEACHER_FORCING}
    if steps is None:
        steps = max(int(c.teacher_forcing_anneal_steps * 1.25) for c in configs.values()) or 10000
    fig = new_figure(6.8, 3.8, layout="constrained")
    ax = fig.add_subplot()
    for label, cfg in configs.items():
        x, r = teacher_forcing_data(cfg, steps)
        ax.plot(x, r, label=label)
    ax.set_ylim(-0.03, 1.05)
    ax.set_xlabel("update (RNNSeq2Seq.set_train_step)")
    ax.set_ylabel("P(feed the gold previous token)")
    ax.set_title("Teacher forcing: else the model's own argmax is fed")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    return fig
