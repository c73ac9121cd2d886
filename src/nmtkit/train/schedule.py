"""Optimizers and learning-rate schedules (Vaswani et al. 2017, Sec. 5.3, Eq. 3), and the
usual alternatives: AdamW, inverse square root and cosine decay.

Every schedule but ``plateau`` is a pure function of the step, so a resumed run (which
restarts at the stored step) gets the same rates; ``plateau``'s state is in the checkpoint.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable
from typing import Any

import torch

from ..config import TrainConfig

log = logging.getLogger(__name__)


def noam_rate(step: int, d_model: int, factor: float, warmup: int) -> float:
    """lrate = factor * d_model^-0.5 * min(step^-0.5, step * warmup^-1.5)   (Eq. 3).

    Rises linearly for ``warmup`` steps, then decays as the inverse square root of the
    step; the peak is at ``step == warmup``. Step 0 is treated as step 1.
    """
    step = max(step, 1)
    rate: float = factor * d_model ** -0.5 * min(step ** -0.5, step * warmup ** -1.5)
    return rate


def inverse_sqrt_rate(step: int, lr: float, warmup: int) -> float:
    """lrate = lr * min(step / warmup, sqrt(warmup / step)): fairseq's ``inverse_sqrt``.

    Eq. 3's shape with the peak rate ``lr`` given directly (at ``step == warmup``) instead of
    derived from d_model: a linear rise from 0, then the inverse-square-root decay.
    Step 0 is treated as step 1.
    """
    step = max(step, 1)
    return lr * min(step / warmup, math.sqrt(warmup / step))


def cosine_rate(step: int, lr: float, warmup: int, horizon: int, min_lr: float) -> float:
    """Linear warmup to ``lr`` over ``warmup`` steps, then one half cosine down to ``min_lr``:

        lrate = min_lr + (lr - min_lr) * (1 + cos(pi * t)) / 2,  t = (step - warmup) / (horizon - warmup)

    (SGDR, Loshchilov & Hutter 2017, Eq. 5, a single cycle without restarts); ``min_lr``
    from ``horizon`` on. Step 0 is treated as step 1.
    """
    step = max(step, 1)
    if step < warmup:
        return lr * step / warmup
    t = min((step - warmup) / (horizon - warmup), 1.0)
    return min_lr + 0.5 * (lr - min_lr) * (1.0 + math.cos(math.pi * t))


def decay_groups(params: Iterable[torch.nn.Parameter],
                 weight_decay: float) -> list[dict[str, Any]]:
    """AdamW's parameter groups: matrices and embedding tables (2-D and more) decay; the 1-D
    parameters (biases, LayerNorm gains and shifts, the RNN attention's score vector v) do
    not, as in BERT and nanoGPT: pulling a gain or an offset towards 0 does not make the
    function simpler. Empty groups are left out."""
    params = list(params)
    groups = [{"params": [p for p in params if p.ndim >= 2], "weight_decay": weight_decay},
              {"params": [p for p in params if p.ndim < 2], "weight_decay": 0.0}]
    return [g for g in groups if g["params"]]


def build_optimizer(params: Iterable[torch.nn.Parameter], cfg: TrainConfig) -> torch.optim.Optimizer:
    """``adam``: Adam with beta1 = 0.9, beta2 = 0.98, eps = 1e-9 (Sec. 5.3) unless configured
    otherwise, ``weight_decay`` as L2 on every weight. ``adamw``: the same moments with
    decoupled weight decay (Loshchilov & Hutter 2019, Algorithm 2: w -= lr * wd * w beside
    the Adam step) on the groups of :func:`decay_groups`."""
    # fused: one kernel per parameter group instead of ~10 elementwise passes per tensor.
    if cfg.optimizer == "adamw":
        return torch.optim.AdamW(decay_groups(params, cfg.weight_decay), lr=cfg.lr,
                                 betas=cfg.adam_betas, eps=cfg.adam_eps,
                                 weight_decay=cfg.weight_decay, fused=True)
    return torch.optim.Adam(params, lr=cfg.lr, betas=cfg.adam_betas, eps=cfg.adam_eps,
                            weight_decay=cfg.weight_decay, fused=True)


class Schedule:
    """Sets the optimizer's rate for each step (``train.lr_schedule``); ``plateau`` lowers it
    on stalled validation loss."""

    def __init__(self, optimizer: torch.optim.Optimizer, cfg: TrainConfig, d_model: int):
        self.opt, self.cfg, self.d_model = optimizer, cfg, d_model
        self.plateau_scale = 1.0
        self.best_loss = float("inf")
        self.bad_validations = 0
        if cfg.lr_schedule == "cosine" and not cfg.cosine_steps and (cfg.max_epochs or cfg.max_minutes):
            log.warning("lr_schedule cosine decays over train.max_steps=%d steps, but "
                        "max_epochs/max_minutes may end the run sooner, at a higher rate: set "
                        "train.cosine_steps to the run's length", cfg.max_steps)

    def rate(self, step: int) -> float:
        c = self.cfg
        if c.lr_schedule == "noam":
            return noam_rate(step, self.d_model, c.lr, c.warmup)
        if c.lr_schedule == "inverse_sqrt":
            return inverse_sqrt_rate(step, c.lr, c.warmup)
        if c.lr_schedule == "cosine":
            return cosine_rate(step, c.lr, c.warmup, c.cosine_steps or c.max_steps, c.min_lr)
        return c.lr * self.plateau_scale

    def set_step(self, step: int) -> float:
        """Set the rate used for optimizer step number ``step`` (1-based)."""
        lr = self.rate(step)
        for g in self.opt.param_groups:
            g["lr"] = lr
        return lr

    def validation(self, loss: float, factor: float | None = None,
                   patience: int | None = None) -> None:
        """ReduceLROnPlateau on validation loss (used by the ``plateau`` schedule).

        After more than ``patience`` validations in a row without a new lowest loss the
        rate is multiplied by ``factor`` (``train.plateau_patience`` / ``plateau_factor``).
        """
        if self.cfg.lr_schedule != "plateau":
            return
        factor = self.cfg.plateau_factor if factor is None else factor
        patience = self.cfg.plateau_patience if patience is None else patience
        if loss < self.best_loss:
            self.best_loss, self.bad_validations = loss, 0
        else:
            self.bad_validations += 1
            if self.bad_validations > patience:
                self.plateau_scale *= factor
                self.bad_validations = 0

    def state_dict(self) -> dict[str, Any]:
        return {"plateau_scale": self.plateau_scale, "best_loss": self.best_loss,
                "bad_validations": self.bad_validations}

    def load_state_dict(self, d: dict[str, Any]) -> None:
        self.plateau_scale = d["plateau_scale"]
        self.best_loss = d["best_loss"]
        self.bad_validations = d["bad_validations"]
