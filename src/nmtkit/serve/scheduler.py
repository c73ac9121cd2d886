"""Fair use of the model by concurrent requests: one job at a time, handed over in turns.

The server runs each model call (a micro-batch of plain requests, a detailed request, an
attention request) as a *job* in a thread of its own, but only the job that holds the *turn*
uses the model (the model is never used by two threads at once). A job offers the turn at
its *checkpoints*, :meth:`FairScheduler.checkpoint`: wherever the search checks its
deadline (:class:`PacedDeadline`), which nmtkit's own searches do before every step and the
CTranslate2 engine before every call (the server cuts its work into batches of a fraction of
a second for it, :meth:`~nmtkit.serve.limits.ServeLimits.batch_size`).

Who gets the turn: the waiting job that has had the least model time (a job's *served*
seconds), once the holder has had :attr:`FairScheduler.quantum_s` more than it. A new job
starts :attr:`FairScheduler.grace_s` behind the least-served job under way (at 0 at most),
so a short request runs to its end at once (a one-word request needs a few hundredths of a
second) and a long one that arrives behind another long one shares the model with it after
that lead, instead of holding it until it has caught up. Equal jobs take turns, a quantum at
a time: round-robin by time, not by steps (a step of a 64-text beam-10 batch takes 100 times
one of a one-word request). So a long request no longer holds a one-word request behind all
of its batches: the short one waits for the step (or the CTranslate2 batch) under way, then
runs.

Deadlines: a job whose deadline has passed, or was cancelled (its client left), when the turn
comes to it is not run (:class:`~nmtkit.decode.deadline.DeadlineExceeded`, and it hands the
turn on at once); a paused job past its deadline stops at its next checkpoint. A job that
fails hands the turn on as any other does: the others go on.

The clock is injected (tests drive the quantum with a fake one); no web framework, no PyTorch.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, InvalidStateError
from dataclasses import dataclass, field
from typing import Any

from ..decode.deadline import Deadline, DeadlineExceeded

log = logging.getLogger(__name__)

QUANTUM_S = 0.05
"""How much more model time than a waiting job a job may have before it hands the turn to
it (seconds): short enough that jobs of equal standing share the model finely, long enough
that handing over (a thread switch, microseconds) costs nothing."""
GRACE_S = 2.0
"""How far behind the least-served job under way a new job starts (seconds of model time):
the lead a new request gets, all a short one needs."""
MAX_JOBS = 256
"""Jobs (threads) admitted at once; more get :class:`Busy` (the server's 503)."""


class Busy(RuntimeError):
    """More jobs are waiting than the scheduler admits; the client should retry later."""


@dataclass(eq=False)
class Job:
    """One model call: ``fn()`` run in a thread of its own while it holds the turn; its
    result (or exception) in :attr:`future`."""

    fn: Callable[[], Any]
    deadline: Deadline | None = None
    on_start: Callable[[], None] | None = None
    """Called (in the job's thread) when the turn first comes to it, or when it is skipped."""
    name: str = "job"
    future: Future[Any] = field(default_factory=Future)
    cancelled: bool = False
    started: bool = False
    ran: bool = False
    """Whether ``fn`` was called (a job skipped at its turn never is)."""
    turns: int = 0
    """How many times the turn came to it."""
    served: float = 0.0
    """Its model time (seconds of the scheduler's clock), counted from its start value
    (:attr:`FairScheduler.grace_s` behind the least-served job under way when it came)."""

    def __post_init__(self) -> None:  # its future cancelled (asyncio's wrapper was): the job too
        self.future.add_done_callback(lambda f: None if not f.cancelled() else self.cancel())

    def cancel(self) -> None:
        """Nobody waits for the result any more: the job is skipped when its turn comes (a
        running one stops at its next checkpoint)."""
        self.cancelled = True

    def settle(self, result: Any = None, error: BaseException | None = None) -> None:
        """Give the job's future its result or ``error``, unless it was cancelled."""
        try:
            if error is not None:
                self.future.set_exception(error)
            else:
                self.future.set_result(result)
        except InvalidStateError:  # cancelled meanwhile: nobody waits
            pass

    def check(self) -> None:
        """:class:`DeadlineExceeded` if the job should not go on (cancelled, or past its
        deadline)."""
        if self.cancelled:
            raise DeadlineExceeded("cancelled: its request was given up")
        if self.deadline is not None:
            self.deadline.check()


@dataclass
class SchedulerStats:
    jobs: int = 0
    handovers: int = 0  # turns handed to a waiting job at a checkpoint
    skipped: int = 0  # jobs past their deadline (or cancelled) before they ran
    failed: int = 0  # jobs that ended in an error (a deadline's included)

    def as_dict(self) -> dict[str, int]:
        return dict(self.__dict__)


class FairScheduler:
    """Runs :class:`Job` s one at a time, in turns: the least-served first (see the module).

    :meth:`submit` queues a job (in the caller's thread, so the order of submission breaks
    ties) and starts its thread, which waits until the turn is handed to it;
    :meth:`checkpoint`, called by a job's thread between its steps, hands the turn to the
    least-served waiting job once the caller has had :attr:`quantum_s` more model time.
    """

    def __init__(self, quantum_s: float = QUANTUM_S, max_jobs: int = MAX_JOBS,
                 clock: Callable[[], float] = time.monotonic, grace_s: float = GRACE_S) -> None:
        if quantum_s < 0 or grace_s < 0:
            raise ValueError(f"quantum_s and grace_s must be >= 0, got {quantum_s}, {grace_s}")
        self.quantum_s, self.max_jobs, self.clock = quantum_s, max_jobs, clock
        self.grace_s = grace_s
        self.stats = SchedulerStats()
        self._cond = threading.Condition()
        self._line: deque[Job] = deque()  # waiting for the turn, in order of arrival
        self._holder: Job | None = None
        self._since = 0.0  # clock() when the holder got the turn
        self._live = 0  # submitted, not finished
        self._local = threading.local()

    # --- from the server ------------------------------------------------------------------

    def submit(self, fn: Callable[[], Any], *, deadline: Deadline | None = None,
               on_start: Callable[[], None] | None = None, name: str = "job") -> Job:
        """Queue ``fn()`` behind the jobs already waiting; :class:`Busy` when
        :attr:`max_jobs` are already live."""
        job = Job(fn, deadline, on_start, name)
        with self._cond:
            if self._live >= self.max_jobs:
                raise Busy(f"server busy: {self._live} model calls already under way "
                           f"(at most {self.max_jobs})")
            self._live += 1
            self.stats.jobs += 1
            under_way = [j.served for j in self._line]
            if self._holder is not None:
                self._account()
                under_way.append(self._holder.served)
            job.served = max(0.0, min(under_way, default=0.0) - self.grace_s)
            self._line.append(job)
            if self._holder is None:
                self._hand_to(job)
        try:
            threading.Thread(target=self._run, args=(job,), name=f"nmtkit-model-{name}",
                             daemon=True).start()
        except RuntimeError as e:  # no thread to be had: the job leaves (and the turn with it)
            with self._cond:
                self._leave(job)
            raise Busy(f"server busy: no thread for another model call ({e})") from None
        return job

    def waiting(self) -> int:
        """Jobs waiting for the turn (not the one holding it)."""
        with self._cond:
            return len(self._line)

    # --- from a job's thread --------------------------------------------------------------

    def checkpoint(self) -> None:
        """Offer the turn: when a waiting job has had less model time than the calling job
        by more than :attr:`quantum_s`, hand the turn to the least-served one and wait for
        it to come back. Then :class:`DeadlineExceeded` if the job is past its deadline or
        cancelled. Outside a job's thread (a direct call of the translator): nothing."""
        job: Job | None = getattr(self._local, "job", None)
        if job is None:
            return
        with self._cond:
            if self._holder is job and self._line:
                self._account()
                first = self._least_served()
                if first.served + self.quantum_s < job.served:
                    self.stats.handovers += 1
                    self._line.append(job)
                    self._hand_to(first)
                    self._await_turn(job)
        job.check()

    # --- inside ---------------------------------------------------------------------------

    def _account(self) -> None:
        """Add the holder's model time since it was last counted to its :attr:`Job.served`
        (holding the lock)."""
        assert self._holder is not None
        now = self.clock()
        self._holder.served += now - self._since
        self._since = now

    def _least_served(self) -> Job:
        """The waiting job with the least model time (the earliest of equals)."""
        return min(self._line, key=lambda j: j.served)

    def _hand_to(self, job: Job) -> None:
        """Give ``job`` (waiting) the turn (holding the lock)."""
        self._line.remove(job)
        self._holder, self._since = job, self.clock()
        job.turns += 1
        self._cond.notify_all()

    def _await_turn(self, job: Job) -> None:
        """Wait (holding the condition's lock) until the turn is handed to ``job``."""
        while self._holder is not job:
            self._cond.wait()

    def _run(self, job: Job) -> None:
        self._local.job = job
        try:
            with self._cond:
                self._await_turn(job)
            job.started = True
            if job.on_start is not None:
                job.on_start()
            try:
                job.check()
            except DeadlineExceeded:
                self.stats.skipped += 1
                raise
            job.ran = True
            result = job.fn()
        except BaseException as e:  # noqa: BLE001 - handed to whoever waits for the job
            self.stats.failed += 1
            if not isinstance(e, DeadlineExceeded):
                log.debug("model call %s failed", job.name, exc_info=True)
            job.settle(error=e)
        else:
            job.settle(result)
        finally:
            self._local.job = None
            with self._cond:
                self._leave(job)

    def _leave(self, job: Job) -> None:
        """``job`` is over: the turn, if it holds it, to the least-served waiting job
        (holding the lock)."""
        if self._holder is job:
            self._account()
            self._holder = None
            if self._line:
                self._hand_to(self._least_served())
        elif job in self._line:  # (a job whose thread did not start)
            self._line.remove(job)
        self._live -= 1
        self._cond.notify_all()


class PacedDeadline(Deadline):
    """A request's :class:`~nmtkit.decode.deadline.Deadline` whose check (before every step
    of nmtkit's searches) is also a :meth:`FairScheduler.checkpoint`: ``inner``'s time and
    cancel flag (moved and set by the server as requests are given up), ``pause`` called
    first."""

    __slots__ = ("inner", "pause")

    def __init__(self, inner: Deadline, pause: Callable[[], None]) -> None:  # (no super: at is inner's)
        self.inner, self.pause = inner, pause

    @property
    def at(self) -> float:
        return self.inner.at

    @at.setter
    def at(self, value: float) -> None:
        self.inner.at = value

    @property
    def cancelled(self) -> bool:
        return self.inner.cancelled

    @cancelled.setter
    def cancelled(self, value: bool) -> None:
        self.inner.cancelled = value

    def cancel(self) -> None:
        self.inner.cancel()

    def passed(self) -> bool:
        return self.inner.passed()

    def left(self) -> float:
        return self.inner.left()

    def check(self) -> None:
        self.pause()
        self.inner.check()
