"""The fair scheduler of ``nmtkit serve`` (issue 74 item 6), on fake work with a fake clock:
jobs take turns at their checkpoints (the least-served first, once the holder has had a
quantum more; a new job a grace behind the least-served), a job past its deadline or given
up is not run, a failing job does not stop the others; the deadline whose checks are the
checkpoints; CTranslate2's batch size."""

import threading
import time

import pytest

from nmtkit.decode.deadline import Deadline, DeadlineExceeded
from nmtkit.serve.limits import ServeLimits
from nmtkit.serve.scheduler import Busy, FairScheduler, PacedDeadline


class FakeClock:
    """A clock that moves only when the fake work says so (no timing in these tests)."""

    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now

    def advance(self, seconds):
        self.now += seconds


def batches(scheduler, clock, name, n, order, gate=None, fail_at=None, gate_at=0):
    """Fake work: ``n`` batches of one second each, a checkpoint before each (as a search
    checks its deadline before each step), each recorded in ``order``; batch ``gate_at``
    waits for ``gate``; batch ``fail_at`` raises."""
    def work():
        for i in range(n):
            scheduler.checkpoint()
            if i == fail_at:
                raise ValueError(f"{name} failed")
            order.append(f"{name}{i}")
            if i == gate_at and gate is not None:
                assert gate.wait(10)
            clock.advance(1.0)
        return name

    return work


def started_event():
    event = threading.Event()
    return event, event.set


def test_jobs_take_turns_by_model_time_after_the_quantum():
    """A long job (A) holds the turn; B (3 batches) and C (1 batch) arrive while it runs.
    From A's next checkpoint on the least-served runs once the holder has had 0.5 s (the
    quantum) more than it: C, the short one, is done after one batch of A and one of B, not
    after all of A's; then A and B take turns by the time each has had."""
    clock, order = FakeClock(), []
    s = FairScheduler(quantum_s=0.5, clock=clock)
    gate = threading.Event()
    a_started, on_start = started_event()
    a = s.submit(batches(s, clock, "A", 4, order, gate), on_start=on_start)
    assert a_started.wait(10)
    b = s.submit(batches(s, clock, "B", 3, order))
    c = s.submit(batches(s, clock, "C", 1, order))
    gate.set()
    assert [j.future.result(10) for j in (a, b, c)] == ["A", "B", "C"]
    assert order == ["A0", "B0", "C0", "A1", "B1", "B2", "A2", "A3"]
    assert s.stats.handovers == 3 and s.stats.failed == 0
    assert (a.turns, b.turns, c.turns) == (3, 2, 1)
    assert (a.served, b.served, c.served) == (4.0, 3.0, 1.0)


def test_a_new_job_starts_a_grace_behind_and_then_shares():
    """B (4 batches) arrives when A has had 5 s of model time: it starts 2 s (the grace)
    behind, so it runs 3 batches before A gets the model back, then they alternate."""
    clock, order = FakeClock(), []
    s = FairScheduler(quantum_s=0.5, clock=clock, grace_s=2.0)
    gate = threading.Event()
    a = s.submit(batches(s, clock, "A", 8, order, gate, gate_at=4))
    while "A4" not in order:
        time.sleep(0.01)
    b = s.submit(batches(s, clock, "B", 4, order))
    assert b.served == 2.0  # A's 4 s (A4 under way: not counted yet) less the grace
    gate.set()
    a.future.result(10), b.future.result(10)
    assert order == ["A0", "A1", "A2", "A3", "A4", "B0", "B1", "B2", "B3", "A5", "A6", "A7"]


def test_a_job_keeps_the_turn_within_its_quantum_and_when_nobody_waits():
    """Batches shorter than the quantum do not hand the turn over; nor does a job alone."""
    clock, order = FakeClock(), []
    s = FairScheduler(quantum_s=2.5, clock=clock)  # three 1-s batches fit, the fourth not
    gate = threading.Event()
    a_started, on_start = started_event()
    a = s.submit(batches(s, clock, "A", 5, order, gate), on_start=on_start)
    assert a_started.wait(10)
    b = s.submit(batches(s, clock, "B", 1, order))
    gate.set()
    a.future.result(10), b.future.result(10)
    assert order == ["A0", "A1", "A2", "B0", "A3", "A4"]
    alone = FairScheduler(quantum_s=0.0, clock=clock)
    order.clear()
    assert alone.submit(batches(alone, clock, "D", 3, order)).future.result(10) == "D"
    assert order == ["D0", "D1", "D2"] and alone.stats.handovers == 0


def test_a_job_past_its_deadline_or_given_up_is_not_run_and_the_others_go_on():
    """B's deadline passes and C is given up while A holds the turn: neither runs (each a
    DeadlineExceeded), D behind them runs; a paused job given up stops at its next
    checkpoint."""
    clock, order = FakeClock(), []
    s = FairScheduler(quantum_s=0.0, clock=clock)
    gate = threading.Event()
    a_started, on_start = started_event()
    a = s.submit(batches(s, clock, "A", 3, order, gate), on_start=on_start)
    assert a_started.wait(10)
    b = s.submit(batches(s, clock, "B", 1, order), deadline=Deadline(time.monotonic() + 0.05))
    c = s.submit(batches(s, clock, "C", 1, order), deadline=Deadline.after(600))
    d = s.submit(batches(s, clock, "D", 2, order))
    time.sleep(0.1)  # B's deadline passes while it waits
    c.cancel()  # C's client left
    gate.set()
    with pytest.raises(DeadlineExceeded, match="deadline"):
        b.future.result(10)
    with pytest.raises(DeadlineExceeded, match="given up"):
        c.future.result(10)
    assert a.future.result(10) == "A" and d.future.result(10) == "D"
    assert "B0" not in order and "C0" not in order
    assert order == ["A0", "D0", "D1", "A1", "A2"]  # D, new, before A's next batch
    assert s.stats.skipped == 2 and s.stats.failed == 2


def test_a_paused_job_given_up_stops_when_its_turn_comes_again():
    """A is given up (its client left) while it holds the turn: it hands the turn on at its
    next checkpoint and stops there, when the turn comes back to it."""
    clock, order = FakeClock(), []
    s = FairScheduler(quantum_s=0.0, clock=clock)
    gate = threading.Event()
    a_started, on_start = started_event()
    deadline = Deadline.after(600)
    a = s.submit(batches(s, clock, "A", 5, order, gate), deadline=deadline, on_start=on_start)
    assert a_started.wait(10)
    b = s.submit(batches(s, clock, "B", 1, order))
    deadline.cancel()
    gate.set()
    assert b.future.result(10) == "B"
    with pytest.raises(DeadlineExceeded, match="given up"):
        a.future.result(10)
    assert order == ["A0", "B0"]


def test_a_failing_job_hands_the_turn_on_and_the_others_finish():
    clock, order = FakeClock(), []
    s = FairScheduler(quantum_s=0.0, clock=clock)
    gate = threading.Event()
    a_started, on_start = started_event()
    a = s.submit(batches(s, clock, "A", 3, order, gate), on_start=on_start)
    assert a_started.wait(10)
    bad = s.submit(batches(s, clock, "X", 3, order, fail_at=1))
    c = s.submit(batches(s, clock, "C", 2, order))
    gate.set()
    with pytest.raises(ValueError, match="X failed"):
        bad.future.result(10)
    assert a.future.result(10) == "A" and c.future.result(10) == "C"
    assert order == ["A0", "X0", "C0", "C1", "A1", "A2"]
    assert s.stats.failed == 1 and s.waiting() == 0


def test_too_many_jobs_are_refused_and_a_checkpoint_outside_a_job_does_nothing():
    s = FairScheduler(max_jobs=1)
    gate = threading.Event()
    first = s.submit(lambda: gate.wait(10))
    with pytest.raises(Busy, match="at most 1"):
        s.submit(lambda: None)
    gate.set()
    assert first.future.result(10) is True
    deadline = time.monotonic() + 10
    while True:  # the slot frees once the job's thread has handed the turn back
        try:
            assert s.submit(lambda: 7).future.result(10) == 7
            break
        except Busy:
            assert time.monotonic() < deadline
            time.sleep(0.01)
    s.checkpoint()  # the test's own thread is no job: nothing happens


def test_a_paced_deadline_is_a_checkpoint_then_its_request_s_deadline():
    """What the searches check before every step: the scheduler's checkpoint first, then
    the request's own deadline (whose time and cancel flag the server moves and sets)."""
    calls = []
    inner = Deadline.after(600)
    paced = PacedDeadline(inner, lambda: calls.append("pause"))
    paced.check()
    assert calls == ["pause"] and not paced.passed() and paced.left() > 500
    paced.at = time.monotonic() - 1  # moved earlier by the server: the inner one moves
    assert inner.passed() and paced.passed()
    with pytest.raises(DeadlineExceeded):
        paced.check()
    inner.at = time.monotonic() + 600
    paced.cancel()
    assert inner.cancelled and paced.cancelled
    with pytest.raises(DeadlineExceeded, match="cancelled"):
        paced.check()


def test_a_batch_of_an_engine_that_cannot_stop_mid_batch_is_sized_by_the_work_rate():
    """CTranslate2's batches hold what takes about a quarter of a second at the server's
    rate, at least one sentence, at most max_batch."""
    slow = ServeLimits(work_per_second=1_000)
    assert slow.batch_size(64, 10) == 1  # 1,000/s x 0.25 s / (32 steps x 10) < 1
    fast = ServeLimits(work_per_second=100_000, max_batch=32)
    assert fast.batch_size(64, 10) == 32  # 78 fit
    assert fast.batch_size(64, 40) == 19 and fast.batch_size(5, 1) == 5
    with pytest.raises(ValueError, match="not known yet"):
        _ = ServeLimits().max_work


def test_a_job_without_a_thread_is_refused_and_leaves_no_turn_behind(monkeypatch):
    """When no thread can be started (the host's limit), the job is refused (the server's
    503) and the scheduler goes on: the turn it was given passes on."""
    s = FairScheduler()

    def no_thread(self):
        raise RuntimeError("can't start new thread")

    with monkeypatch.context() as m:
        m.setattr(threading.Thread, "start", no_thread)
        with pytest.raises(Busy, match="no thread"):
            s.submit(lambda: 1)
    assert s.submit(lambda: 2).future.result(10) == 2 and s.waiting() == 0
