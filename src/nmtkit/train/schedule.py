"""Learning-rate schedules (Vaswani et al. 2017, Sec. 5.3, Eq. 3)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch

from ..config import TrainConfig


def noam_rate(step: int, d_model: int, factor: float, warmup: int) -> float:
    """lrate = factor * d_model^-0.5 * min(step^-0.5, step * warmup^-1.5)   (Eq. 3).

    Rises linearly for ``warmup`` steps, then decays as the inverse square root of the
    step; the peak is at ``step == warmup``. Step 0 is treated as step 1.
    """
    step = max(step, 1)
    rate: float = factor * d_model ** -0.5 * min(step ** -0.5, step * warmup ** -1.5)
    return rate


def build_optimizer(params: Iterable[torch.nn.Parameter], cfg: TrainConfig) -> torch.optim.Adam:
    """Adam with beta1 = 0.9, beta2 = 0.98, eps = 1e-9 (Sec. 5.3) unless configured otherwise."""
    # fused: one kernel per parameter group instead of ~10 elementwise passes per tensor.
    return torch.optim.Adam(params, lr=cfg.lr, betas=cfg.adam_betas, eps=cfg.adam_eps,
                            weight_decay=cfg.weight_decay, fused=True)


class Schedule:
    """Sets the optimizer's rate for each step; ``plateau`` lowers it on stalled validation loss."""

    def __init__(self, optimizer: torch.optim.Optimizer, cfg: TrainConfig, d_model: int):
        self.opt, self.cfg, self.d_model = optimizer, cfg, d_model
        self.plateau_scale = 1.0
        self.best_loss = float("inf")
        self.bad_validations = 0

    def rate(self, step: int) -> float:
        c = self.cfg
        if c.lr_schedule == "noam":
            return noam_rate(step, self.d_model, c.lr, c.warmup)
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
