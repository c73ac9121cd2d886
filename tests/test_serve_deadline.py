"""``nmtkit serve`` under a request that asks for much (issue 66, items 2 and 3): its search
stops at its deadline (``--timeout``) so that the requests behind it are served, the work one
request may ask for is bounded in proportion to ``--timeout`` (413), and constraint phrases that
cannot fit in the output cap are refused (422) rather than cut; answers with constraints say
whether each translation has them all (``constraints_met``)."""

import asyncio
import math
import threading
import time

import pytest

pytest.importorskip("fastapi")

from fastapi.testclient import TestClient  # noqa: E402

from nmtkit.checkpoint import load_bundle  # noqa: E402
from nmtkit.data.vocab import EOS  # noqa: E402
from nmtkit.decode.deadline import Deadline, DeadlineExceeded  # noqa: E402
from nmtkit.decode.translator import Translator  # noqa: E402
from nmtkit.serve.app import create_app, translate_details  # noqa: E402
from nmtkit.serve.batcher import MicroBatcher  # noqa: E402
from nmtkit.serve.limits import ServeLimits  # noqa: E402

TIMEOUT_S = 2.0
"""The load test's ``--timeout``."""
STEP_S = 0.25
"""How long one step of a heavy batch takes in the load test."""
HEAVY_ROWS = 8
"""A step over more rows than this is a heavy request's (a small one has one row)."""
LONG = " ".join(str(i % 10 + 1) for i in range(30))  # 30 copy-task symbols
SMALL = {"texts": ["1 2 3"], "beam": 1}
HEAVY = {  # 16 texts x beam 4: 64 rows a step, 33 steps of STEP_S: 8 s without a deadline
    "plain": {"texts": [LONG] * 16, "beam": 4},
    "constrained": {"texts": [LONG] * 16, "beam": 4, "constraints": [["5 5"]] * 16},
}


@pytest.fixture
def slow_bundle(copy_run):
    """(the copy model, loaded afresh, with a slow step for heavy batches; the times of their
    steps; an event set at the first one). A heavy batch's step takes :data:`STEP_S` and the
    model hardly wants to end it, so it runs to its length cap; a small request's step is as
    fast as ever."""
    bundle = load_bundle(copy_run / "last.pt")
    model = bundle.model
    heavy_steps: list[float] = []
    started = threading.Event()

    def slow(state, prev):  # the class's step, looked up now: nmtkit.fast may swap the class
        log_probs, state, attn = type(model).step(model, state, prev)
        if prev.numel() > HEAVY_ROWS:
            heavy_steps.append(time.monotonic())
            started.set()
            time.sleep(STEP_S)
            log_probs = log_probs.clone()
            log_probs[:, EOS] -= 30.0
        return log_probs, state, attn

    model.step = slow
    return bundle, heavy_steps, started


@pytest.mark.slow
@pytest.mark.parametrize("kind", sorted(HEAVY))
def test_a_heavy_request_never_delays_a_small_one_past_the_deadline(slow_bundle, copy_bundle, kind):
    """A heavy request (8 s of search) gets its 503 at the deadline and its search stops
    there: a small request sent while it runs is answered (200) within the deadline, and the
    heavy search takes no step after it. Before, the heavy search ran on for its 8 s and the
    small request waited behind it (503 after ``--timeout``)."""
    bundle, heavy_steps, started = slow_bundle
    expected = Translator.from_bundle(copy_bundle).translate_lines(SMALL["texts"], beam=1)
    heavy: dict[str, object] = {}
    limits = ServeLimits(timeout_s=TIMEOUT_S, max_wait_ms=0, work_per_second=20_000)  # (not
    with TestClient(create_app(bundle, limits)) as c:  # measured on the slowed model)
        def send_heavy():
            heavy["start"] = time.monotonic()
            heavy["response"] = c.post("/v1/translate", json=HEAVY[kind])
            heavy["end"] = time.monotonic()

        thread = threading.Thread(target=send_heavy)
        thread.start()
        assert started.wait(30), "the heavy search did not start"
        time.sleep(0.8)  # well into the heavy search
        sent = time.monotonic()
        small = c.post("/v1/translate", json=SMALL)
        latency = time.monotonic() - sent
        thread.join(60)
        time.sleep(2 * STEP_S)  # time for more heavy steps, if any were still to come
        stats = c.get("/health").json()["batching"]
    assert small.status_code == 200, small.text
    assert small.json()["translations"] == expected
    assert latency < TIMEOUT_S, f"the small request waited {latency:.2f} s"
    response = heavy["response"]
    assert response.status_code == 503 and "timed out" in response.json()["detail"]
    assert heavy["end"] - heavy["start"] < TIMEOUT_S + 2 * STEP_S + 1.0
    # the heavy search's last step began before its deadline (checked before each step)
    assert max(heavy_steps) < heavy["start"] + TIMEOUT_S + 0.2, (
        max(heavy_steps) - heavy["start"])
    assert len(heavy_steps) <= TIMEOUT_S / STEP_S + 1
    if kind == "plain":  # a batched request: the batcher counts the batch it stopped
        assert stats["stopped"] == 1


# --- the batcher on its own ----------------------------------------------------------------------

def endless_translation(calls):
    """A batcher model call that never ends unless its deadline stops it (each round checks
    it, as a search step does); ``calls`` counts the calls and their rounds."""
    def translate(texts, beam, max_length, *, deadline=None):
        calls.append(0)
        while True:
            deadline.check()
            calls[-1] += 1
            time.sleep(0.01)

    return translate


def test_the_batcher_stops_a_batch_whose_requests_were_all_given_up():
    """A request given up while its batch runs (its client left, or it timed out) cancels the
    batch's deadline when nobody else waits for it: the model call stops at its next check,
    and the next request is served at once."""
    calls: list[int] = []

    def translate(texts, beam, max_length, *, deadline=None):
        if texts == ["quick"]:
            return ["QUICK"]
        return endless_translation(calls)(texts, beam, max_length, deadline=deadline)

    async def main():
        b = MicroBatcher(translate, max_batch=8, max_wait_ms=0)
        job = asyncio.ensure_future(b.submit(["slow"], 1, deadline=Deadline.after(600)))
        while not calls:
            await asyncio.sleep(0.01)
        job.cancel()  # the client left
        start = time.monotonic()
        quick = await asyncio.wait_for(b.submit(["quick"], 1, deadline=Deadline.after(600)), 10)
        waited = time.monotonic() - start
        await b.stop()
        b.close()
        return quick, waited, b.stats

    quick, waited, stats = asyncio.run(main())
    assert quick == ["QUICK"] and waited < 1.0
    assert stats.stopped == 1 and len(calls) == 1


def test_a_batch_runs_on_for_the_requests_still_waiting_and_stops_at_their_deadline():
    """Two requests in one batch: one given up (its deadline the later) leaves the batch
    running for the other, until that one's deadline; a request past its deadline while
    queued is never run."""
    calls: list[int] = []
    slow = endless_translation(calls)

    async def scenario():
        b = MicroBatcher(slow, max_batch=8, max_wait_ms=100)
        gone = asyncio.ensure_future(b.submit(["a"], 1, deadline=Deadline.after(600)))
        kept = asyncio.ensure_future(b.submit(["b"], 1, deadline=Deadline.after(0.6)))
        await asyncio.sleep(0.3)
        assert len(calls) == 1  # one batch for both
        gone.cancel()
        start = time.monotonic()
        with pytest.raises(DeadlineExceeded):
            await asyncio.wait_for(kept, 5)
        stopped_after = time.monotonic() - start
        # queued past its deadline: answered without a model call
        late = Deadline(time.monotonic() - 1)
        with pytest.raises(DeadlineExceeded, match="before its batch ran"):
            await asyncio.wait_for(b.submit(["c"], 1, deadline=late), 5)
        await b.stop()
        b.close()
        return stopped_after, b.stats

    stopped_after, stats = asyncio.run(scenario())
    assert stopped_after < 1.0  # b's deadline (0.3 s after the cancel), not a's (600 s)
    assert len(calls) == 1 and stats.stopped == 1 and stats.dropped == 1


def test_run_cancels_its_deadline_when_given_up():
    """``MicroBatcher.run`` (the direct calls: constraints, scores, attention) passes the
    deadline on and cancels it when the request is given up: the call stops at its next
    check and the model thread is free for the next one."""
    calls: list[int] = []
    slow = endless_translation(calls)

    async def main():
        b = MicroBatcher(lambda texts, beam, max_length: list(texts), max_wait_ms=0)
        deadline = Deadline.after(600)
        work = asyncio.ensure_future(b.run(slow, ["a"], 1, None, deadline=deadline))
        while not calls:
            await asyncio.sleep(0.01)
        work.cancel()
        start = time.monotonic()
        after = await asyncio.wait_for(b.run(lambda: "free"), 10)
        waited = time.monotonic() - start
        await b.stop()
        b.close()
        return deadline, after, waited

    deadline, after, waited = asyncio.run(main())
    assert deadline.cancelled and after == "free" and waited < 1.0


# --- the work one request may ask for --------------------------------------------------------------

def steps_of(bundle, n_tokens: int) -> int:
    """Search steps of a copy-task source of ``n_tokens`` (the model's length rule, </s>
    included), as the server estimates them."""
    d = bundle.cfg.decode
    return math.floor(d.max_len_a * (n_tokens + 1) + d.max_len_b)


@pytest.mark.slow
def test_the_work_of_a_request_is_bounded_in_proportion_to_the_timeout(copy_bundle):
    steps = steps_of(copy_bundle, 5)
    body = {"texts": ["1 2 3 4 5"] * 4, "beam": 4}
    work = 4 * steps * 4  # texts x steps x beam
    rate = work * 3 // 4  # a second's work: the request needs 1.33 s of it
    with TestClient(create_app(copy_bundle, ServeLimits(timeout_s=1.0, work_per_second=rate))) as c:
        r = c.post("/v1/translate", json=body)
        assert r.status_code == 413, r.text
        detail = r.json()["detail"]
        assert f"about {work:,} hypothesis-steps" in detail
        assert f"1.3 times the {rate:,} that --timeout 1 s allows" in detail
        assert f"--work-rate {rate:,}" in detail
        # a beam half as wide fits; so does MBR's width only if the bound allows it
        assert c.post("/v1/translate", json={**body, "beam": 2}).status_code == 200
        assert c.post("/v1/translate", json={**body, "beam": 1, "mbr": 4}).status_code == 413
        # constraint phrases multiply the work: (1 + phrases)
        two = {"texts": ["1 2 3 4 5"] * 2, "beam": 4}
        assert c.post("/v1/translate", json=two).status_code == 200
        r = c.post("/v1/translate", json={**two, "constraints": [["5"], ["5"]]})
        assert r.status_code == 413 and "up to 1 constraint phrases each" in r.json()["detail"]
        # the attention request too
        r = c.post("/v1/attention", json={"text": "1 2 3 4 5 6 7 8 9 10 1 2 3 4 5", "beam": 10})
        assert r.status_code == 413 and "hypothesis-steps" in r.json()["detail"]
    # twice the timeout: twice the work
    with TestClient(create_app(copy_bundle, ServeLimits(timeout_s=2.0, work_per_second=rate))) as c:
        r = c.post("/v1/translate", json=body)
        assert r.status_code == 200, r.text
        assert c.get("/health").json()["limits"]["work_per_second"] == rate


def test_the_ctranslate2_engine_bounds_its_work_up_front_and_checks_its_deadline(copy_run, tmp_path):
    """CTranslate2's search cannot be stopped once it runs: the same 413 keeps a request's work
    in proportion to --timeout, and the deadline is checked before each of its calls."""
    pytest.importorskip("ctranslate2")
    from nmtkit.decode.options import TranslateOptions
    from nmtkit.export.ctranslate2 import export_ctranslate2
    from nmtkit.export.ctranslate2_engine import load_export_bundle

    bundle = load_export_bundle(export_ctranslate2(copy_run / "last.pt", tmp_path / "ct2"),
                                compute_type="float32", threads=1)
    body = {"texts": ["1 2 3 4 5"] * 4, "beam": 4}
    rate = 4 * steps_of(bundle, 5) * 4 * 3 // 4
    with TestClient(create_app(bundle, ServeLimits(timeout_s=1.0, work_per_second=rate))) as c:
        r = c.post("/v1/translate", json=body)
        assert r.status_code == 413 and "--timeout 1 s" in r.json()["detail"]
        assert c.post("/v1/translate", json={**body, "beam": 2}).status_code == 200
    translator = bundle.translator()
    with pytest.raises(DeadlineExceeded):
        translator.translate(["1 2 3"], TranslateOptions(deadline=Deadline(time.monotonic() - 1)))
    assert translator.translate(["1 2 3"], TranslateOptions(deadline=Deadline.after(600)))[0]


# --- constraints that cannot fit (item 3) ----------------------------------------------------------

@pytest.mark.slow
def test_constraints_longer_than_the_output_cap_are_refused_naming_the_text(copy_bundle):
    dogs = " ".join(["5"] * 200)
    with TestClient(create_app(copy_bundle, ServeLimits(max_length=40))) as c:
        r = c.post("/v1/translate", json={"texts": ["1 2"], "constraints": [[dogs]], "max_length": 3})
        assert r.status_code == 422
        assert r.json()["detail"].startswith(
            "constraints.0: 200 target tokens of constraint phrases, more than the request's "
            "max_length (3) by 197")
        # phrases together, and the text's forced prefix with them
        r = c.post("/v1/translate", json={"texts": ["1 2", "3 4"], "prefixes": ["", "7 7"],
                                          "constraints": [[], ["5", "6"]], "max_length": 3})
        assert r.status_code == 422
        assert r.json()["detail"].startswith(
            "constraints.1: 2 target tokens of constraint phrases and 2 of its prefix, more than "
            "the request's max_length (3) by 1")
        # without max_length: the server's --max-length
        r = c.post("/v1/translate", json={"texts": ["1 2"], "constraints": [[dogs]]})
        assert r.status_code == 422 and "the server's --max-length (40) by 160" in r.json()["detail"]
        # exactly the cap: translated, with every phrase, and said so
        r = c.post("/v1/translate", json={"texts": ["1 2", "3"], "constraints": [["5 5", "6"], []],
                                          "max_length": 3, "beam": 3})
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["constraints_met"] == [True, True]
        assert body["translations"][0].split().count("5") >= 2 and "6" in body["translations"][0]
        assert "constraints_met" not in c.post("/v1/translate", json={"texts": ["1 2"]}).json()


def test_constraints_met_says_when_a_translation_lacks_a_phrase(copy_bundle):
    """``constraints_met`` is the search's own word: two phrases of two tokens under a cap of
    three cannot both be in the translation (the server refuses such a request up front; the
    call behind it reports it)."""
    translator = Translator.from_bundle(copy_bundle)
    out = translate_details(translator, ["1 2", "3 4"], 2, 3, None, [["5 5", "6 6"], ["6"]],
                            False, False)
    assert out["constraints_met"] == [False, True]
