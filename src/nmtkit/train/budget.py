"""Budgets and stops: when a run has nothing left to do, and ``train.budget_schedule``'s planner.

A run ends at ``train.max_steps``, ``train.max_epochs``, ``train.max_minutes``, after
``train.patience`` validations without improvement (:func:`stalled`), or
(``train.budget_schedule``) at the last update of its budget plan
(:class:`~nmtkit.train.schedule.BudgetPlan`), or on Ctrl-C (:data:`INTERRUPTED`). Whatever
ends it, the loop ends it the same way (:meth:`~nmtkit.train.loop.Trainer._finish`: the last
validation, ``last.pt``, ``best.pt``, ``metrics.csv``). The planner
(:class:`BudgetPlanner`) times the updates, plans how many the remaining minutes allow and
revises the plan as the run goes; the schedule then follows the plan
(:func:`~nmtkit.train.schedule.budget_rate`).

The planner reads no clock of its own: the loop passes it the time (``time.perf_counter``,
its training clock), so that one clock times the whole run.
"""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..config import TrainConfig
from ..errors import UserError
from . import distributed
from .run_dir import Progress
from .schedule import BudgetPlan, Schedule, revision_interval

INTERRUPTED = "interrupted (Ctrl-C)"
"""The stop reason of a run that Ctrl-C (KeyboardInterrupt) stopped."""


def exhausted(t: TrainConfig, p: Progress, plan: BudgetPlan | None,
              out_of_time: bool) -> str | None:
    """The budget that leaves the run nothing to do at update ``p.step``, if any: the steps,
    the minutes (``out_of_time``), or the budget plan's last update. The one place of these
    conditions: before the first update of a session (:func:`already_ended`) and after each
    update (:func:`spent`) they read the same."""
    if p.step >= t.max_steps:
        return f"max_steps={t.max_steps}"
    if out_of_time:
        return f"max_minutes={t.max_minutes}"
    if plan is not None and p.step >= plan.steps:
        return f"the budget plan's {plan.steps} updates (max_minutes={t.max_minutes})"
    return None


def out_of_time(t: TrainConfig, elapsed_s: float) -> bool:
    """Whether ``train.max_minutes`` (0: none) are spent after ``elapsed_s`` of training."""
    return bool(t.max_minutes) and elapsed_s >= t.max_minutes * 60


def already_ended(t: TrainConfig, p: Progress, plan: BudgetPlan | None) -> str | None:
    """Why the run has nothing left to do under its current settings, before an update
    (None: it has): early stopping's patience, or a budget (:func:`exhausted`), so that
    resuming a run that ended, whatever ended it, with the same recipe trains nothing and
    reports how it ended; raising the limit that ended it continues the run (except a
    budget plan's end: see :func:`check_budget_resumable`)."""
    return stalled(t, p) or exhausted(t, p, plan, out_of_time(t, p.elapsed_s))


def validation_due(t: TrainConfig, p: Progress, plan: BudgetPlan | None) -> bool:
    """Whether update ``p.step`` is validated: every ``train.valid_every`` updates, or, under
    a budget plan that spaces validations (``train.budget_valid_share``), once its
    ``valid_every`` updates have passed since the last one. (Whatever ends the run validates
    its last update as well: :func:`~nmtkit.train.validate.due`.)"""
    if plan is not None and plan.valid_every:
        last = p.history[-1]["step"] if p.history else 0
        return p.step - last >= plan.valid_every
    return p.step % t.valid_every == 0


def stalled(t: TrainConfig, p: Progress) -> str | None:
    """Early stopping: ``train.patience`` validations in a row without improvement."""
    if t.patience and p.bad_validations >= t.patience:
        return f"no improvement in {t.patience} validations"
    return None


def spent(t: TrainConfig, p: Progress, elapsed_s: float, plan: BudgetPlan | None, world: int,
          device: torch.device) -> str | None:
    """After an update (before its validation, whose time is not counted): the budget that
    ends the run now, if any (:func:`exhausted` after ``elapsed_s`` of training). Under
    torchrun every rank stops at the same update (the minutes are agreed on: call it on
    every rank)."""
    late = out_of_time(t, elapsed_s)
    if world > 1:
        late = distributed.agree(late, device)
    return exhausted(t, p, plan, late)


def save_interrupted(p: Progress, saved_at: tuple[int, int, int] | None, save: Callable[[], None],
                     put_back: bool, run_dir: Path, log: logging.Logger) -> None:
    """Ctrl-C's end of a run: ``save()`` writes ``run_dir/last.pt`` for ``--resume`` while a
    further Ctrl-C waits (:func:`ctrl_c_waits`), unless the last save (its step, epoch and
    batch: ``saved_at``) was where the run stands (its validation's). Nothing with
    ``put_back``: an earlier run set aside by ``--overwrite`` comes back instead, this run
    having no checkpoint yet."""
    if put_back:
        log.warning("interrupted at step %d, before this run's first checkpoint", p.step)
        return
    if saved_at != (p.step, p.epoch, p.batch_in_epoch):
        with ctrl_c_waits(log):
            save()
    log.warning("interrupted at step %d: saved %s; continue with --resume", p.step,
                run_dir / "last.pt")


@contextmanager
def ctrl_c_waits(log: logging.Logger) -> Iterator[None]:
    """Inside the block (the save of a run that Ctrl-C stopped) a further Ctrl-C (SIGINT)
    is noted in ``log`` and otherwise waits for the block to end. Only where Python's own
    handler takes SIGINT, in the main thread; elsewhere nothing changes."""
    if (threading.current_thread() is not threading.main_thread()
            or signal.getsignal(signal.SIGINT) is not signal.default_int_handler):
        yield
        return
    signal.signal(signal.SIGINT, lambda *_: log.warning("Ctrl-C: still writing last.pt"))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def check_budget_resumable(t: TrainConfig, ckpt: dict[str, Any], was: dict[str, Any],
                           last: Path) -> None:
    """``train.budget_schedule``: a run that ended under its budget plan, at the plan's
    last update or on its time budget (where the plan had brought the rate down to, or
    nearly to, ``train.min_lr``), is not resumed with more room to train: a larger
    ``train.max_minutes``, or a larger ``train.max_steps`` where that capped the plan. A
    plan cannot be stretched past its end: a new one would throw the rate back up from
    its floor, a restart in all but name. The way to train on is a new run from the
    checkpoint with a schedule of its own (``--init-from``); the same recipe resumed only
    reports the run's end (:func:`already_ended`). A run interrupted inside its plan
    (Ctrl-C, a crash) is re-planned for the new budget instead
    (:func:`replan_resumed_budget`), as a validation revises a plan. ``was``: the
    checkpoint's train section; ``last``: its path."""
    plan = (ckpt.get("schedule") or {}).get("budget_plan")
    was_minutes = was.get("max_minutes", TrainConfig.max_minutes)
    was_steps = was.get("max_steps", t.max_steps)  # (unknown: as now)
    step, elapsed_s = ckpt["progress"]["step"], ckpt["progress"]["elapsed_s"]
    spent = bool(was_minutes) and elapsed_s >= was_minutes * 60
    if not t.budget_schedule or not plan or (step < plan["steps"] and not spent):
        return
    more = []
    if t.max_minutes > was_minutes:
        more.append(f"train.max_minutes={t.max_minutes:g} (was {was_minutes:g})")
    if t.max_steps > was_steps and plan["steps"] >= was_steps:
        more.append(f"train.max_steps={t.max_steps} (was {was_steps})")
    if more:
        how = "on its time budget" if spent else "at the last update of its budget plan"
        raise UserError(f"{last}: cannot resume with {' and '.join(more)}: the run ended "
                         f"at update {step}, {how}, and the schedule that "
                         "train.budget_schedule fitted to that budget (its rate decaying to "
                         "train.min_lr) cannot be stretched past its end; to train on, start "
                         f"a new run from it with a schedule of its own: --init-from {last} "
                         "--run-dir NEW_DIR (or resume with the run's own settings to see "
                         "how it ended)")


def replan_resumed_budget(t: TrainConfig, p: Progress, schedule: Schedule, was_minutes: float,
                          log: logging.Logger) -> None:
    """``train.budget_schedule``, resumed inside its plan with another ``train.max_minutes``:
    the plan is revised at once for the time now left, from the time per update it had
    measured (as a validation revises it), rather than at the next validation: until
    then the old plan's rates would apply, and its end could stop the run first. With an
    unchanged budget the stored plan is followed as it is (resuming stays exact)."""
    plan = schedule.plan
    if plan is None or t.max_minutes == was_minutes or p.step >= plan.steps:
        return
    remaining_s = t.max_minutes * 60 - p.elapsed_s
    if remaining_s <= 0:  # the time is up: the run ends before an update (already_ended)
        return
    revised = schedule.make_plan(p.step, plan.time_per_update(), remaining_s)
    log.info("train.max_minutes %g (was %g): %s", t.max_minutes, was_minutes, revised.describe())


class BudgetPlanner:
    """``train.budget_schedule``'s timing of one session (a resumed run times itself anew),
    and the plans made from it. ``log``: where plans are reported (the loop's logger); the
    plans themselves are kept as data in ``progress.plans`` (:meth:`record`), which the run
    directory's ``budget_plans.json`` and the benchmarks read."""

    def __init__(self, t: TrainConfig, p: Progress, schedule: Schedule, world: int,
                 device: torch.device, log: logging.Logger):
        self.t, self.p, self.schedule, self.world, self.device, self.log = (
            t, p, schedule, world, device, log)
        self.marks: list[tuple[int, float]] = []  # (update, train clock) at the probe's start and each plan
        self.probe: list[float] = []  # the train clock after each of the probe's updates
        self.valid_s = 0.0  # seconds spent validating (the train clock leaves them out)
        self.valid_n = 0  # validations timed
        self.logged: BudgetPlan | None = None  # the latest plan logged at INFO

    def _train_clock(self, now: float) -> float:
        """Seconds of this session outside validations: what updates alone have cost."""
        return now - self.valid_s

    def after_update(self, now: float, elapsed_s: float) -> None:
        """After each update: time the updates after this session's first one; once
        ``budget_probe_steps`` are timed, plan the rest of the budget (unless a plan exists:
        a resumed run's). Then revise the plan every
        :func:`~nmtkit.train.schedule.revision_interval` updates after the update it was made
        at: in its warmup, warmup included (the first updates may be far slower than the
        rest); after it, so that a machine that speeds up or slows down later (another job
        ending or starting beside the run) moves the plan's end with it. The updates at which
        it is revised follow from the stored plan alone, so a resumed run revises where the
        uninterrupted one did."""
        p, plan, t = self.p, self.schedule.plan, self.t
        if not self.marks:
            self.marks = [(p.step, self._train_clock(now))]
        if plan is None:
            self.probe.append(self._train_clock(now))
            if p.step - self.marks[0][0] >= t.budget_probe_steps:
                self.plan(now, elapsed_s)
        elif p.step < plan.steps and p.step - plan.made_at >= revision_interval(t, plan):
            self.plan(now, elapsed_s, routine=True)

    def after_validation(self, started: float, now: float, elapsed_s: float) -> None:
        """A validation ran from ``started`` to ``now`` (after ``elapsed_s`` of training): the
        train clock leaves its time out, and a plan still running is revised now that a
        validation's cost is known."""
        self.valid_s += now - started
        self.valid_n += 1
        plan = self.schedule.plan
        if self.t.budget_schedule and plan is not None and self.p.step < plan.steps:
            self.plan(now, elapsed_s + now - started)

    def _update_s(self, clock: float) -> float:
        """Seconds an update, validations left out: the median of the probe's updates for
        the first plan (a first run's one-time costs, a busy moment, slow a few of them
        several-fold: their mean once planned 226 updates where 1,800 were made); later
        the mean over the latest updates (since the newest plan at least a revision
        interval back), which is what the rest of the budget buys."""
        t, p, plan = self.t, self.p, self.schedule.plan
        if plan is None:
            times = np.diff(np.array(self.probe))  # (the first update of the session: untimed)
            return float(np.median(times)) if len(times) else 0.0
        back = revision_interval(t, plan)
        since = next((m for m in reversed(self.marks) if m[0] <= p.step - back), self.marks[0])
        return (clock - since[1]) / max(p.step - since[0], 1)

    def plan(self, now: float, elapsed_s: float, routine: bool = False) -> None:
        """Make or revise the budget plan for the time left (:func:`_update_s` an update,
        plus the share of a validation: its mean time, over the interval between two). A
        resumed session that has not yet timed ``budget_probe_steps`` updates of its own
        keeps the stored plan's figures. ``routine``: an interval's revision (one close to
        the plan last logged goes to DEBUG only), not a validation's or the first plan.
        Every rank takes the first rank's figures, so that all follow one plan."""
        t, p, plan = self.t, self.p, self.schedule.plan
        clock = self._train_clock(now)
        if plan is None and len(self.probe) < 2:
            return
        valid_s = (self.valid_s / self.valid_n if self.valid_n
                   else plan.valid_s if plan is not None else 0.0)
        timed = p.step - self.marks[0][0]
        if plan is not None and timed < t.budget_probe_steps:  # resumed: too few updates timed
            update_s = plan.time_per_update()
        else:
            update_s = self._update_s(clock)
        remaining_s = t.max_minutes * 60 - elapsed_s
        if self.world > 1:
            update_s, remaining_s, valid_s = distributed.broadcast_floats(
                [update_s, remaining_s, valid_s], self.device)
        plan = self.schedule.make_plan(p.step, update_s, remaining_s, valid_s)
        # Routine revisions come every few dozen updates: one close to the last plan logged
        # at INFO is logged at DEBUG only.
        quiet = routine and self.logged is not None and plan.close_to(self.logged)
        self.log.log(logging.DEBUG if quiet else logging.INFO, plan.describe())
        if not quiet:
            self.logged = plan
        self.record(plan, elapsed_s)
        self.marks.append((p.step, clock))

    def record(self, plan: BudgetPlan, elapsed_s: float) -> None:
        """Keep ``plan`` in ``progress.plans`` (with the training time it was made at): the
        data behind the log lines, saved in checkpoints and in ``budget_plans.json``."""
        self.p.plans.append({**asdict(plan), "elapsed_s": round(elapsed_s, 3)})
