"""Micro-batching: concurrent translate requests become one model call.

Requests wait in an asyncio queue. A single worker task takes the first waiting request,
keeps collecting for at most ``max_wait_ms`` (or until ``max_batch`` sentences are waiting),
groups what it collected by decoding options (beam, max_length, target language, MBR), and
hands one translation per group to the :class:`~nmtkit.serve.scheduler.FairScheduler`, which
runs model calls in turns: a long call offers the model to the others before each search
step and each batch, so a short request is not held behind all of a long one. The worker
collects the next batch once the model has taken up the last one (its turn came): while the
model is busy, new requests pile up in the queue and form the next batch, so the batch size
grows with the load by itself.

A request may come with a :class:`~nmtkit.decode.deadline.Deadline` (the server makes one
from ``--timeout``). A request past it, or given up (its future cancelled: timeout, client
gone), is skipped before its batch runs; a batch that runs gets a deadline of its own, the
latest of its waiting requests' (moved earlier as requests are given up), cancelled as soon
as every one of them has been given up. The
search checks it between steps, so work that nobody waits for any more stops within one step
and the model goes on to the next call (:meth:`MicroBatcher.run` does the same for
one call).

The plain version, without batching, would be::

    async def submit(texts, beam, max_length):
        return await asyncio.to_thread(translate, texts, beam, max_length)
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from ..decode.deadline import Deadline, DeadlineExceeded
from .scheduler import Busy, FairScheduler, Job, PacedDeadline

log = logging.getLogger(__name__)

TranslateFn = Callable[..., list[str]]
"""(texts, beam, max_length) -> one translation per text, in order; a request that names a
target language (a multilingual model) adds it: (texts, beam, max_length, tgt_lang); one that
asks for minimum Bayes risk decoding adds the keyword ``mbr=N``; a batch of requests with
deadlines adds ``deadline=`` (a :class:`~nmtkit.decode.deadline.Deadline` to stop at, whose
checks are the scheduler's checkpoints: :class:`~nmtkit.serve.scheduler.PacedDeadline`)."""

Key = tuple[int, int | None, str | None, int | None]
"""A job's decoding options (beam, max_length, tgt_lang, mbr): jobs with equal keys are merged."""


def _settle(future: asyncio.Future[None]) -> None:
    """Mark ``future`` done (once)."""
    if not future.done():
        future.set_result(None)


class QueueFull(Busy):
    """More sentences are waiting than the server accepts; the client should retry later."""


@dataclass
class _Job:
    texts: list[str]
    key: Key
    future: asyncio.Future[list[str]]
    deadline: Deadline | None = None
    enqueued: float = field(default_factory=time.perf_counter)


@dataclass
class BatcherStats:
    requests: int = 0
    sentences: int = 0
    model_calls: int = 0
    largest_batch: int = 0
    dropped: int = 0  # requests whose client gave up (timeout) before their batch ran
    stopped: int = 0  # model calls stopped at their deadline or when every request gave up

    def as_dict(self) -> dict[str, int]:
        return dict(self.__dict__)


class MicroBatcher:
    """Merge concurrent :meth:`submit` calls into batched calls of ``translate_fn``.

    Every model call (translations and :meth:`run`) is a job of one
    :class:`~nmtkit.serve.scheduler.FairScheduler` (``scheduler``), so the model is never
    used by two threads at once and long calls take turns with short ones.
    """

    def __init__(self, translate_fn: TranslateFn, max_batch: int = 32, max_wait_ms: float = 5.0,
                 max_pending: int = 1024, scheduler: FairScheduler | None = None):
        if max_batch < 1:
            raise ValueError(f"max_batch must be >= 1, got {max_batch}")
        if max_wait_ms < 0:
            raise ValueError(f"max_wait_ms must be >= 0, got {max_wait_ms}")
        self.translate_fn = translate_fn
        self.max_batch = max_batch
        self.max_wait = max_wait_ms / 1000.0
        self.max_pending = max_pending
        self.scheduler = scheduler or FairScheduler()
        self.stats = BatcherStats()
        self._queue: asyncio.Queue[_Job] | None = None
        self._task: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._pending = 0  # sentences queued, not yet handed to the model
        self._deliveries: set[asyncio.Task[None]] = set()  # batches handed to the scheduler

    # --- lifecycle ---------------------------------------------------------------------------

    def _ensure_worker(self) -> asyncio.Queue[_Job]:
        """Start the worker on the running loop (again, if an earlier loop has gone)."""
        loop = asyncio.get_running_loop()
        if self._loop is not loop or self._task is None or self._task.done():
            self._loop = loop
            self._queue = asyncio.Queue()
            self._pending = 0
            self._task = loop.create_task(self._worker(self._queue), name="nmtkit-batcher")
        assert self._queue is not None
        return self._queue

    async def stop(self) -> None:
        """Stop the worker; batches under way are given up (their requests cancelled, their
        model calls stopped at their next checkpoint)."""
        tasks = [t for t in (self._task, *self._deliveries) if t is not None and not t.done()]
        for task in tasks:
            task.cancel()
        for task in tasks:
            try:
                await task
            except asyncio.CancelledError:
                pass
        self._task = None

    def close(self) -> None:
        """Nothing is left running between calls (each model call's thread ends with it); the
        batcher still works afterwards (e.g. when an app's lifespan is started again)."""

    # --- requests ------------------------------------------------------------------------------

    async def submit(self, texts: Sequence[str], beam: int, max_length: int | None = None,
                     tgt_lang: str | None = None, mbr: int | None = None, *,
                     deadline: Deadline | None = None) -> list[str]:
        """Translate ``texts`` together with whatever else is waiting; results in order
        (``tgt_lang``: the target language of a multilingual model, ``mbr``: MBR decoding's
        candidates; ``None``: not named). ``deadline``: the request's; past it the request
        is skipped, or its batch stopped once no request of it is left waiting
        (:class:`~nmtkit.decode.deadline.DeadlineExceeded`)."""
        queue = self._ensure_worker()
        if self._pending + len(texts) > self.max_pending:
            raise QueueFull(f"server busy: {self._pending} sentences already waiting "
                            f"(at most {self.max_pending})")
        future = asyncio.get_running_loop().create_future()
        self._pending += len(texts)
        self.stats.requests += 1
        await queue.put(_Job(list(texts), (beam, max_length, tgt_lang, mbr), future, deadline))
        result: list[str] = await future
        return result

    async def run(self, fn: Callable[..., Any], *args: Any, deadline: Deadline | None = None) -> Any:
        """Run ``fn(*args)`` as one model call (e.g. attention maps), outside any batch, in
        its turn (:mod:`nmtkit.serve.scheduler`).

        ``deadline``: passed on as ``fn(*args, deadline=...)`` (its checks are the
        scheduler's checkpoints), and cancelled when this call is (the request timed out or
        its client left), so that ``fn``'s search stops at its next step instead of holding
        the model for nobody."""
        if deadline is None:
            call = partial(fn, *args)
        else:
            call = partial(fn, *args, deadline=PacedDeadline(deadline, self.scheduler.checkpoint))
        job = self.scheduler.submit(call, deadline=deadline, name=getattr(fn, "__name__", "call"))
        try:
            return await asyncio.wrap_future(job.future)
        except asyncio.CancelledError:
            job.cancel()
            if deadline is not None:
                deadline.cancel()
            raise

    # --- the worker ----------------------------------------------------------------------------

    async def _collect(self, queue: asyncio.Queue[_Job]) -> list[_Job]:
        """The first waiting job, then whatever arrives within ``max_wait`` (up to max_batch)."""
        jobs = [await queue.get()]
        size = len(jobs[0].texts)
        deadline = time.perf_counter() + self.max_wait
        while size < self.max_batch:
            try:  # take what is already queued without waiting
                job = queue.get_nowait()
            except asyncio.QueueEmpty:
                left = deadline - time.perf_counter()
                if left <= 0:
                    break
                try:
                    job = await asyncio.wait_for(queue.get(), left)
                except TimeoutError:
                    break
            jobs.append(job)
            size += len(job.texts)
        return jobs

    async def _worker(self, queue: asyncio.Queue[_Job]) -> None:
        while True:
            jobs = await self._collect(queue)
            self._pending -= sum(len(j.texts) for j in jobs)
            groups: dict[Key, list[_Job]] = {}
            for job in jobs:
                groups.setdefault(job.key, []).append(job)
            taken_up = [self._dispatch(key, group) for key, waiting in groups.items()
                        if (group := self._still_wanted(waiting))]
            if taken_up:  # collect the next batch once the model has taken these up
                await asyncio.wait(taken_up)

    def _dispatch(self, key: Key, group: list[_Job]) -> asyncio.Future[None]:
        """Hand ``group``'s translation (one model call) to the scheduler; the answer goes to
        its requests when it is done. Returns a future done once the call has its first turn
        (or is over)."""
        beam, max_length, tgt_lang, mbr = key
        loop = asyncio.get_running_loop()
        texts = [t for job in group for t in job.texts]
        keywords: dict[str, Any] = {} if mbr is None else {"mbr": mbr}
        deadline = self._batch_deadline(group)
        if deadline is not None:
            keywords["deadline"] = PacedDeadline(deadline, self.scheduler.checkpoint)
        options = (beam, max_length) if tgt_lang is None else (beam, max_length, tgt_lang)
        taken_up: asyncio.Future[None] = loop.create_future()

        def started() -> None:  # (in the model call's thread)
            loop.call_soon_threadsafe(_settle, taken_up)

        def call() -> tuple[list[_Job], list[str]]:  # (in the model call's thread, in its turn)
            live = [job for job in group if not job.future.done()]  # not given up meanwhile
            return live, self.translate_fn([t for job in live for t in job.texts], *options,
                                           **keywords)

        try:
            model_call = self.scheduler.submit(call, deadline=deadline, on_start=started,
                                               name=f"batch-of-{len(texts)}")
        except Busy as e:
            for job in group:
                if not job.future.done():
                    job.future.set_exception(e)
            taken_up.set_result(None)
            return taken_up
        def given_up(_: object) -> None:  # every request done (given up): nobody waits
            if all(job.future.done() for job in group):
                model_call.cancel()

        for job in group:
            job.future.add_done_callback(given_up)
        delivery = loop.create_task(self._deliver(group, model_call, len(texts)))
        delivery.add_done_callback(lambda _: _settle(taken_up))
        self._deliveries.add(delivery)
        delivery.add_done_callback(self._deliveries.discard)
        return taken_up

    async def _deliver(self, group: list[_Job], model_call: Job, n_texts: int) -> None:
        """Wait for ``model_call`` and answer each request of ``group`` still waiting with its
        part (or the call's error)."""
        try:
            live, out = await asyncio.wrap_future(model_call.future)
        except asyncio.CancelledError:
            model_call.cancel()
            for job in group:
                if not job.future.done():
                    job.future.cancel()
            raise
        except Exception as e:  # noqa: BLE001 - handed to the waiting requests
            self._count(model_call, group, n_texts)
            if isinstance(e, DeadlineExceeded):  # nobody waits for it any more: not an error
                if model_call.ran:
                    self.stats.stopped += 1
                    log.info("a batch of %d sentences was stopped: %s", n_texts, e)
            else:
                log.error("translation of a batch of %d sentences failed", n_texts, exc_info=e)
            for job in group:
                if not job.future.done():
                    job.future.set_exception(e)
            return
        self._count(model_call, live, sum(len(job.texts) for job in live))
        self.stats.dropped += len(group) - len(live)  # given up before the call ran
        start = 0
        for job in live:
            part = out[start:start + len(job.texts)]
            start += len(job.texts)
            if not job.future.done():
                job.future.set_result(part)

    def _count(self, model_call: Job, group: list[_Job], n_texts: int) -> None:
        """Count a finished model call of ``group`` (``n_texts`` sentences): one the model ran
        (its sentences, its size), or one skipped at its turn (its requests, given up or past
        their deadline before it ran, are dropped)."""
        if model_call.ran:
            self.stats.model_calls += 1
            self.stats.sentences += n_texts
            self.stats.largest_batch = max(self.stats.largest_batch, n_texts)
        else:
            self.stats.dropped += len(group)

    def _still_wanted(self, jobs: list[_Job]) -> list[_Job]:
        """The jobs someone still waits for: a job given up (its future done: the client
        timed out or left) or past its deadline is dropped (the latter answered with
        :class:`~nmtkit.decode.deadline.DeadlineExceeded`)."""
        live = []
        for job in jobs:
            if not job.future.done() and job.deadline is not None and job.deadline.passed():
                job.future.set_exception(DeadlineExceeded("past its deadline before its batch ran"))
            if job.future.done():
                self.stats.dropped += 1
            else:
                live.append(job)
        return live

    @staticmethod
    def _batch_deadline(group: list[_Job]) -> Deadline | None:
        """The deadline of one model call for ``group`` (None when no job has one): the
        latest of the deadlines of the jobs still waiting (no job's answer is cut short),
        moved earlier as jobs are given up, and cancelled once every job's future is done
        (nobody waits for the call any more)."""
        if all(job.deadline is None for job in group):
            return None

        def latest(jobs: list[_Job]) -> float:
            return max(job.deadline.at if job.deadline is not None else math.inf for job in jobs)

        deadline = Deadline(latest(group))

        def given_up(_: object) -> None:
            waiting = [job for job in group if not job.future.done()]
            if waiting:
                deadline.at = latest(waiting)
            else:
                deadline.cancel()

        for job in group:
            job.future.add_done_callback(given_up)
        return deadline
