"""Fair use of the model by concurrent requests: one job at a time, handed over in turns.

The server runs each model call (a micro-batch of plain requests, a detailed request, an
attention request) as a *job* in a thread of its own, but only the job that holds the *turn*
uses the model (the model is never used by two threads at once). A job offers the turn at
its *checkpoints*, :meth:`FairScheduler.checkpoint`: wherever the search checks its
deadline (:class:`PacedDeadline`), which nmtkit's own searches do before every step and the
CTranslate2 engine before every call (the server cuts its work into batches of a fraction of
a second for it, :meth:`~nmtkit.serve.limits.ServeLimits.batch_size`). Once it has held
the turn for :attr:`FairScheduler.quantum_s` and another job is waiting, it goes to the back
of the line and the first waiting job runs: round-robin. So a long request (64 long texts at
beam 10: minutes of search on a small CPU) no longer holds a one-word request behind all of
its batches: the short one waits for one step (or one CTranslate2 batch) of each job ahead
of it, then runs.

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
"""How long a job keeps the turn before it offers it to a waiting one (seconds): short
enough that a short request hardly notices the long ones, long enough that handing over
(a thread switch, microseconds) costs nothing."""
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
    """Runs :class:`Job` s one at a time, in turns (round-robin at their checkpoints).

    :meth:`submit` queues a job (in the caller's thread, so the order of submission is the
    order of the line) and starts its thread, which waits for the turn; :meth:`checkpoint`,
    called by a job's thread between its steps, hands the turn on when the job has held it
    for :attr:`quantum_s` and another is waiting.
    """

    def __init__(self, quantum_s: float = QUANTUM_S, max_jobs: int = MAX_JOBS,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if quantum_s < 0:
            raise ValueError(f"quantum_s must be >= 0, got {quantum_s}")
        self.quantum_s, self.max_jobs, self.clock = quantum_s, max_jobs, clock
        self.stats = SchedulerStats()
        self._cond = threading.Condition()
        self._line: deque[Job] = deque()  # waiting for the turn, in order
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
            self._line.append(job)
        threading.Thread(target=self._run, args=(job,), name=f"nmtkit-model-{name}",
                         daemon=True).start()
        return job

    def waiting(self) -> int:
        """Jobs waiting for the turn (not the one holding it)."""
        with self._cond:
            return len(self._line)

    # --- from a job's thread --------------------------------------------------------------

    def checkpoint(self) -> None:
        """Offer the turn: when the calling job has held it for more than :attr:`quantum_s`
        and another job waits, go to the back of the line and wait for the turn again. Then
        :class:`DeadlineExceeded` if the job is past its deadline or cancelled. Outside a
        job's thread (a direct call of the translator): nothing."""
        job: Job | None = getattr(self._local, "job", None)
        if job is None:
            return
        with self._cond:
            if self._holder is job and self._line and self.clock() - self._since > self.quantum_s:
                self.stats.handovers += 1
                self._holder = None
                self._line.append(job)
                self._cond.notify_all()
                self._await_turn(job)
        job.check()

    # --- inside ---------------------------------------------------------------------------

    def _await_turn(self, job: Job) -> None:
        """Wait (holding the condition's lock) until ``job`` is first in line and nobody holds
        the turn; then take it."""
        while self._holder is not None or self._line[0] is not job:
            self._cond.wait()
        self._line.popleft()
        self._holder, self._since = job, self.clock()
        job.turns += 1

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
                if self._holder is job:
                    self._holder = None
                elif job in self._line:  # (never: a job leaves the line when it gets the turn)
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
