"""Optimizers and learning-rate schedules (Vaswani et al. 2017, Sec. 5.3, Eq. 3), and the
usual alternatives: AdamW, inverse square root and cosine decay; and a schedule fitted to a
wall-clock budget (``train.budget_schedule``).

Every schedule but ``plateau`` is a pure function of the step, so a resumed run (which
restarts at the stored step) gets the same rates; ``plateau``'s state and the budget plan
are in the checkpoint.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable
from dataclasses import asdict, dataclass
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


def budget_rate(step: int, peak: float, warmup: int, total: int, min_lr: float,
                ramp_from: int = 0, ramp_rate: float = 0.0) -> float:
    """Linear warmup to ``peak`` at step ``warmup``, then a straight line down to ``min_lr``
    at step ``total`` (and ``min_lr`` after it):

        lrate = r0 + (peak - r0) * (step - s0) / (warmup - s0)           (step <= warmup)
        lrate = min_lr + (peak - min_lr) * (total - step) / (total - warmup)  (after)

    The warmup rises from rate ``r0 = ramp_rate`` at step ``s0 = ramp_from`` (0 and 0.0: from
    nothing; a revised plan ramps on from the rate the run had when it was revised, so a
    longer warmup never throws the rate back down). The decay is that of "budgeted training"
    (Li, Yumer & Ramanan, ICLR 2020): when the number of updates is fixed in advance, a rate
    that reaches ~0 exactly at the last one does better than a schedule made for an
    open-ended run (Noam's or cosine's long tail), which a short run stops in the middle of,
    at a high rate. Step 0 is treated as step 1.
    """
    step = max(step, 1)
    if step <= warmup:
        if warmup <= ramp_from:  # (a warmup that ended where it was revised)
            return peak
        return ramp_rate + (peak - ramp_rate) * (step - ramp_from) / (warmup - ramp_from)
    t = min((step - warmup) / max(total - warmup, 1), 1.0)
    return min_lr + (peak - min_lr) * (1.0 - t)


@dataclass
class BudgetPlan:
    """How many updates a ``train.max_minutes`` budget allows, and the schedule fitted to it
    (:func:`budget_rate`). Made after ``train.budget_probe_steps`` timed updates (from their
    median time: a few slow first updates, a first run's one-time costs, do not set it),
    revised at each validation (whose cost the first plan cannot know) and every
    :func:`revision_interval` updates from the latest updates' time (a machine that speeds
    up or slows down moves the plan's end with it: a run that sped up 3.5x after a plan was
    fixed once stopped with 36% of its budget unused).

    The warmup is ``train.budget_warmup`` of the latest plan's updates for as long as the run
    has not passed it: a revision that finds more updates than the plan before lengthens the
    warmup (ramping on from the rate the run has, never back down), however early or late
    the first estimate ended its warmup. A first plan fooled by a slow start (226 updates
    planned where 1,800 were made, its warmup over after 23) so ends with the warmup of a
    plan made at the right speed. Kept in the checkpoint: a resumed run follows the stored
    plan, so its rates are the ones the uninterrupted run had, until its next revision with
    its own timing. Resumed with another ``train.max_minutes``, a plan still running is
    revised at once for the new budget; one that has ended is not stretched
    (:func:`nmtkit.train.budget.check_budget_resumable`)."""

    steps: int  # the update at which the rate reaches min_lr and the run stops
    warmup: int  # the update at which the warmup reaches the peak rate
    peak: float  # the rate at the end of the warmup: the configured schedule's peak
    step_s: float  # measured seconds per update, validations' share included
    made_at: int  # the update after which the plan was made or last revised
    revisions: int = 0
    valid_s: float = 0.0  # measured seconds of one validation (0 before the first one)
    ramp_from: int = 0  # the warmup rises from the rate ramp_rate at update ramp_from
    ramp_rate: float = 0.0
    valid_every: int = 0  # updates between validations (train.budget_valid_share; 0: train.valid_every)
    update_s: float = 0.0  # measured seconds per update, validations left out (0: older plans)

    def time_per_update(self) -> float:
        """Seconds an update, validations left out (older plans knew only ``step_s``)."""
        return self.update_s or self.step_s

    def close_to(self, other: BudgetPlan, within: float = 0.05) -> bool:
        """Neither the warmup nor the number of updates differs from ``other``'s by
        ``within`` of ``other``'s or more (the trainer logs such a revision at DEBUG only)."""
        return (abs(self.warmup - other.warmup) < within * other.warmup
                and abs(self.steps - other.steps) < within * other.steps)

    def describe(self) -> str:
        what = "budget plan" if not self.revisions else f"budget plan (revision {self.revisions})"
        every = f", validations every {self.valid_every} updates" if self.valid_every else ""
        return (f"{what}: {self.steps} updates ({self.step_s:.3f} s each, measured up to update "
                f"{self.made_at}), warmup {self.warmup}, peak rate {self.peak:.3g}, then a "
                f"linear decay to the last update{every}")


def validation_interval(cfg: TrainConfig, update_s: float, valid_s: float) -> int:
    """Updates between two validations: ``train.valid_every``, or more where a validation
    (``valid_s`` seconds, measured) would otherwise take over ``train.budget_valid_share`` of
    the time (``update_s`` seconds an update, validations left out). A greedy pass over the
    validation set costs as much as 40-50 small updates on a CPU: validating every 200 of
    them took 15-18% of a 10-minute budget."""
    share = cfg.budget_valid_share
    if not share or valid_s <= 0.0:
        return cfg.valid_every
    return max(cfg.valid_every, math.ceil(valid_s / (share * max(update_s, 1e-9))))


def plan_budget(cfg: TrainConfig, d_model: int, step: int, update_s: float, remaining_s: float,
                previous: BudgetPlan | None = None, rate_now: float = 0.0,
                valid_s: float | None = None) -> BudgetPlan:
    """The plan for a run at update ``step`` with ``remaining_s`` seconds left and updates
    taking ``update_s`` seconds (validations left out), each validation ``valid_s`` seconds
    (the previous plan's if not given; 0 before one was timed) every
    :func:`validation_interval` updates: the time of a last validation and
    ``budget_reserve`` of the rest are left unplanned. The warmup is ``budget_warmup`` of the
    updates (at most the configured ``warmup``), rising from ``rate_now`` (the rate at
    ``step``) where the run has not reached it yet; otherwise the previous plan's stays (see
    :class:`BudgetPlan`). The peak is the configured schedule's."""
    if valid_s is None:
        valid_s = previous.valid_s if previous is not None else 0.0
    every = validation_interval(cfg, update_s, valid_s)
    step_s = update_s + valid_s / every
    more = int(max(remaining_s - valid_s, 0.0) * (1.0 - cfg.budget_reserve) / max(step_s, 1e-9))
    steps = min(max(step + more, step + 1), cfg.max_steps)
    target = min(max(round(cfg.budget_warmup * steps), 1), max(cfg.warmup, 1), steps)
    if previous is None or (target > step and target != previous.warmup):
        warmup, ramp_from, ramp_rate = max(target, step), step, rate_now
    else:  # past the warmup, or inside one that a shorter plan would have ended already
        warmup, ramp_from, ramp_rate = previous.warmup, previous.ramp_from, previous.ramp_rate
    return BudgetPlan(
        steps=max(steps, warmup), warmup=warmup,
        peak=peak_rate(cfg, d_model) if previous is None else previous.peak,
        step_s=step_s, made_at=step, revisions=0 if previous is None else previous.revisions + 1,
        valid_s=valid_s, ramp_from=ramp_from, ramp_rate=ramp_rate,
        valid_every=every if cfg.budget_valid_share and valid_s > 0 else 0, update_s=update_s)


def revision_interval(cfg: TrainConfig, plan: BudgetPlan) -> int:
    """Updates from one routine revision of ``plan`` to the next: ``budget_probe_steps``
    while the run is in the plan's warmup (made at an update before it), after it
    ``budget_revise_every`` of the planned updates (never fewer than ``budget_probe_steps``):
    a few dozen revisions in all, each timed over the updates since the one before."""
    if plan.made_at < plan.warmup:
        return cfg.budget_probe_steps
    return max(cfg.budget_probe_steps, math.ceil(cfg.budget_revise_every * plan.steps))


def peak_rate(cfg: TrainConfig, d_model: int) -> float:
    """The highest rate of the configured schedule: Noam's at step ``warmup`` (Eq. 3), else
    ``lr`` (the peak of ``inverse_sqrt`` and ``cosine``)."""
    if cfg.lr_schedule == "noam":
        return noam_rate(cfg.warmup, d_model, cfg.lr, cfg.warmup)
    return cfg.lr


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
    on stalled validation loss. With ``train.budget_schedule`` the rate follows
    :func:`budget_rate` once :attr:`plan` is made (:meth:`make_plan`); before that, the
    configured schedule's linear warmup."""

    def __init__(self, optimizer: torch.optim.Optimizer, cfg: TrainConfig, d_model: int):
        self.opt, self.cfg, self.d_model = optimizer, cfg, d_model
        self.plan: BudgetPlan | None = None
        self.plateau_scale = 1.0
        self.best_loss = float("inf")
        self.bad_validations = 0
        if (cfg.lr_schedule == "cosine" and not cfg.cosine_steps and not cfg.budget_schedule
                and (cfg.max_epochs or cfg.max_minutes)):
            log.warning("lr_schedule cosine decays over train.max_steps=%d steps, but "
                        "max_epochs/max_minutes may end the run sooner, at a higher rate: set "
                        "train.cosine_steps to the run's length", cfg.max_steps)

    def rate(self, step: int) -> float:
        c = self.cfg
        if c.budget_schedule:
            if self.plan is None:  # probing: the configured warmup's ramp
                return peak_rate(c, self.d_model) * min(max(step, 1) / max(c.warmup, 1), 1.0)
            p = self.plan
            return budget_rate(step, p.peak, p.warmup, p.steps, c.min_lr, p.ramp_from,
                               p.ramp_rate)
        if c.lr_schedule == "noam":
            return noam_rate(step, self.d_model, c.lr, c.warmup)
        if c.lr_schedule == "inverse_sqrt":
            return inverse_sqrt_rate(step, c.lr, c.warmup)
        if c.lr_schedule == "cosine":
            return cosine_rate(step, c.lr, c.warmup, c.cosine_steps or c.max_steps, c.min_lr)
        return c.lr * self.plateau_scale

    def make_plan(self, step: int, update_s: float, remaining_s: float,
                  valid_s: float | None = None) -> BudgetPlan:
        """Fit the schedule to the budget, or revise the plan (see :func:`plan_budget`),
        the warmup ramping on from the rate of update ``step``."""
        self.plan = plan_budget(self.cfg, self.d_model, step, update_s, remaining_s, self.plan,
                                self.rate(step), valid_s)
        return self.plan

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
                "bad_validations": self.bad_validations,
                "budget_plan": asdict(self.plan) if self.plan is not None else None}

    def load_state_dict(self, d: dict[str, Any]) -> None:
        self.plateau_scale = d["plateau_scale"]
        self.best_loss = d["best_loss"]
        self.bad_validations = d["bad_validations"]
        plan = d.get("budget_plan")  # (absent in older checkpoints)
        # A run resumed with train.budget_schedule turned off follows the configured schedule:
        # the stored plan neither sets its rates nor ends it (nor is it saved again).
        self.plan = BudgetPlan(**plan) if plan and self.cfg.budget_schedule else None
