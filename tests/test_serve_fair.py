"""Fair serving (issue 74 item 6): a one-word request sent while a long request runs is
answered in about its own time, on both engines, not after the long one; and the work bound
is measured with the loaded model when the app is made, so that a request the host cannot
answer in time is refused at once and one it can is answered within ``--timeout``.

Before, every model call went through one thread in turn: with ``serve --timeout 10`` a
one-word request sent a second after a 64-text beam-10 request waited 6-9 s (29 s on a
default server), and the fixed work rate (20,000 a second) admitted requests a busy 2-core
host needed minutes for. The long requests here are made slow on purpose (a sleep in each
step of a heavy batch, or in each CTranslate2 call of several sentences), so that the
measured times say what the scheduling does, whatever the host's load."""

import threading
import time

import pytest

pytest.importorskip("fastapi")

from fastapi.testclient import TestClient  # noqa: E402

from nmtkit.checkpoint import load_bundle  # noqa: E402
from nmtkit.data.vocab import EOS  # noqa: E402
from nmtkit.decode.translator import Translator  # noqa: E402
from nmtkit.serve.app import create_app  # noqa: E402
from nmtkit.serve.limits import ServeLimits  # noqa: E402

from .helpers import exported_copy_model  # noqa: E402

LONG = " ".join(str(i % 10 + 1) for i in range(30))  # 30 copy-task symbols
ONE_WORD = {"texts": ["7"], "beam": 1}
STEP_S = 0.2
"""How long one step of the heavy batch takes (torch)."""
HEAVY_ROWS = 8
"""A step over more rows than this is the long request's (the one-word request has one)."""


def long_and_short(client, long_body, started, wait_s=0.5):
    """Send ``long_body`` in a thread; once its search has ``started`` (and ``wait_s`` more),
    send :data:`ONE_WORD`. Returns (the long request's response, its start and end, the
    short response, when it was sent and answered)."""
    long: dict[str, object] = {}

    def send_long():
        long["start"] = time.monotonic()
        long["response"] = client.post("/v1/translate", json=long_body)
        long["end"] = time.monotonic()

    thread = threading.Thread(target=send_long)
    thread.start()
    assert started.wait(60), "the long request's search did not start"
    time.sleep(wait_s)
    sent = time.monotonic()
    short = client.post("/v1/translate", json=ONE_WORD)
    answered = time.monotonic()
    thread.join(120)
    assert not thread.is_alive()
    return long["response"], long["start"], long["end"], short, sent, answered


@pytest.fixture
def slow_torch_bundle(copy_run):
    """The copy model with a slow step (:data:`STEP_S`) for heavy batches, whose end of
    sentence it hardly wants (so they run to their length cap); an event set at the first
    heavy step."""
    bundle = load_bundle(copy_run / "last.pt")
    model = bundle.model
    started = threading.Event()

    def slow(state, prev):  # the class's step, looked up now: nmtkit.fast may swap the class
        log_probs, state, attn = type(model).step(model, state, prev)
        if prev.numel() > HEAVY_ROWS:
            started.set()
            time.sleep(STEP_S)
            log_probs = log_probs.clone()
            log_probs[:, EOS] -= 30.0
        return log_probs, state, attn

    model.step = slow
    return bundle, started


@pytest.mark.slow
def test_a_one_word_request_is_answered_while_a_long_one_runs_torch(slow_torch_bundle, copy_bundle):
    """The long request (16 texts at beam 4, some 40 steps of 0.2 s: 8 s) runs; a one-word
    request sent half a second into it is answered within 2 s, long before the long one
    ends, and the long one is still answered in full. Before: the one-word request waited
    for the whole long one."""
    bundle, started = slow_torch_bundle
    expected = Translator.from_bundle(copy_bundle).translate_lines(ONE_WORD["texts"], beam=1)
    limits = ServeLimits(timeout_s=120, max_wait_ms=0, work_per_second=20_000)
    with TestClient(create_app(bundle, limits)) as c:
        long, start, end, short, sent, answered = long_and_short(
            c, {"texts": [LONG] * 16, "beam": 4}, started)
    latency = answered - sent
    print(f"torch: one-word request answered in {latency:.2f} s; the long one took "
          f"{end - start:.2f} s and ended {end - answered:.2f} s after it")
    assert short.status_code == 200, short.text
    assert short.json()["translations"] == expected
    assert long.status_code == 200 and len(long.json()["translations"]) == 16
    assert answered < end - 2.0  # well before the long one ends
    assert latency < 2.0


class SlowCTranslate2:
    """CTranslate2's translator, with each call of more than one sentence made slow
    (:data:`CALL_S` a hypothesis: ``started`` set at the first one)."""

    CALL_S = 0.02

    def __init__(self, inner):
        self.inner, self.started, self.calls = inner, threading.Event(), []

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def translate_batch(self, tokens, *args, **kwargs):
        if len(tokens) > 1:
            self.started.set()
            self.calls.append(len(tokens))
            time.sleep(self.CALL_S * len(tokens) * kwargs.get("beam_size", 1))
        return self.inner.translate_batch(tokens, *args, **kwargs)


@pytest.fixture
def slow_ct2(tmp_path):
    """(the export of a copy model, its translator with :class:`SlowCTranslate2`, the same
    translator unslowed)."""
    pytest.importorskip("ctranslate2")
    from nmtkit.export.ctranslate2_engine import load_export_bundle

    _, export = exported_copy_model(tmp_path, "pre-bias-tied")
    bundle = load_export_bundle(export, compute_type="float32", threads=1)
    fast = bundle.translator()
    slow = load_export_bundle(export, compute_type="float32", threads=1)
    translator = slow.translator()
    translator.translator = SlowCTranslate2(translator.translator)
    return slow, translator, fast


@pytest.mark.slow
def test_a_one_word_request_is_answered_while_a_long_one_runs_ctranslate2(slow_ct2):
    """CTranslate2 searches a batch in one call that cannot stop: the server cuts the long
    request (64 texts at beam 4: 5 s of calls) into batches of about a quarter of a second at
    the work rate (here that of the slowed calls, some 1,650 hypothesis-steps a second) and
    the one-word request takes its turn between them. The long answer is the one the
    unslowed engine gives in one call."""
    bundle, translator, fast = slow_ct2
    texts = [LONG] * 64
    limits = ServeLimits(timeout_s=120, max_wait_ms=0, work_per_second=1_650)
    with TestClient(create_app(bundle, limits, translator)) as c:
        long, start, end, short, sent, answered = long_and_short(
            c, {"texts": texts, "beam": 4}, translator.translator.started)
    latency = answered - sent
    print(f"ctranslate2: one-word request answered in {latency:.2f} s; the long one took "
          f"{end - start:.2f} s and ended {end - answered:.2f} s after it; calls of "
          f"{translator.translator.calls[:5]} sentences ...")
    assert short.status_code == 200, short.text
    assert short.json()["translations"] == fast.translate_lines(ONE_WORD["texts"], beam=1)
    assert long.status_code == 200, long.text
    assert long.json()["translations"] == fast.translate_lines(texts, beam=4)
    assert answered < end - 2.0
    assert latency < 2.0


# --- the work bound, measured ----------------------------------------------------------------------

@pytest.mark.slow
def test_the_work_rate_is_measured_and_bounds_what_is_admitted(copy_bundle):
    """Without a rate the app measures one with the model (and says so in /health and in a
    refusal); a request over rate x timeout is refused at once (413, naming the measured
    rate); one just within it is answered within the timeout."""
    from nmtkit.serve.checks import request_work
    from nmtkit.serve.limits import search_work

    timeout = 3.0
    start = time.monotonic()
    app = create_app(copy_bundle, ServeLimits(timeout_s=timeout, max_texts=5000))
    made_in = time.monotonic() - start
    limits = app.state.limits
    assert limits.rate_measured and limits.work_per_second >= 1
    assert made_in < 30
    with TestClient(app) as c:
        health = c.get("/health").json()["limits"]
        assert health["work_per_second"] == limits.work_per_second and health["rate_measured"]
        translator = Translator.from_bundle(copy_bundle)
        per_text = search_work(*request_work(translator, [LONG], 4, None, None, limits))
        fit = limits.max_work // per_text  # texts at beam 4 within the bound
        assert 1 <= fit < limits.max_texts, (fit, per_text, limits.max_work)
        texts, too_many = [LONG] * fit, [LONG] * (fit + 1)
        sent = time.monotonic()
        refused = c.post("/v1/translate", json={"texts": too_many, "beam": 4})
        refused_in = time.monotonic() - sent
        assert refused.status_code == 413 and refused_in < 2.0, (refused.status_code, refused_in)
        detail = refused.json()["detail"]
        assert "measured on this host" in detail and f"{limits.work_per_second:,}" in detail
        sent = time.monotonic()
        admitted = c.post("/v1/translate", json={"texts": texts, "beam": 4})
        took = time.monotonic() - sent
    print(f"measured {limits.work_per_second:,}/s; {len(texts)} texts admitted, answered in "
          f"{took:.2f} s (timeout {timeout:g} s)")
    assert admitted.status_code == 200, admitted.text
    assert took < timeout


def test_a_given_work_rate_is_used_as_it_is(copy_bundle):
    """``--work-rate`` (``work_per_second``) overrides the measurement."""
    app = create_app(copy_bundle, ServeLimits(work_per_second=1234))
    assert app.state.limits.work_per_second == 1234 and not app.state.limits.rate_measured


def test_the_measurement_counts_work_as_a_request_s_is_counted(copy_bundle):
    """The rate is the timed request's estimated work per second of a fake clock (one second
    a run), times the headroom."""
    from nmtkit.serve import calibrate

    translator = Translator.from_bundle(copy_bundle)
    limits = ServeLimits(timeout_s=10)
    ticks = iter(range(100))
    rate = calibrate.measure_work_rate(translator, limits, clock=lambda: float(next(ticks)),
                                       min_s=3.0)
    from nmtkit.serve.checks import request_work
    from nmtkit.serve.limits import search_work

    one_run = search_work(*request_work(translator, calibrate.calibration_texts(translator),
                                        calibrate.BEAM, None, None, limits))
    assert rate.runs == 3 and rate.seconds == 3.0 and rate.work == 3 * one_run
    assert rate.per_second == int(calibrate.HEADROOM * one_run)
    assert len(set(calibrate.calibration_texts(translator))) == calibrate.TEXTS


def test_the_work_of_a_text_of_several_sentences_counts_each_sentence(copy_bundle):
    """A text the server cuts into sentences is searched sentence by sentence, each with a
    length cap of its own: its work is counted as (at least) the sum of theirs, more than one
    cap for the whole text. Before, a 1,000-character text of ten sentences counted as one, so the bound
    let through several times the work it meant to."""
    from nmtkit.serve.checks import request_work

    translator = Translator.from_bundle(copy_bundle)
    limits = ServeLimits(work_per_second=1000)
    sentences = ["Ein Hund 1 2 läuft.", "Zwei Kinder 3 spielen.", "Der Mann 4 5 6 liest."]
    text = " ".join(sentences)  # (German, the copy model's source language)
    whole = request_work(translator, [text], 2, None, None, limits, split=False)[0]
    cut = request_work(translator, [text], 2, None, None, limits, split=True)[0]
    each = [request_work(translator, [s], 2, None, None, limits, split=False)[0][0]
            for s in sentences]
    assert sum(each) <= cut[0] <= sum(each) + len(sentences) and sum(each) > whole[0]
    default = cut if translator.decode_cfg.split_sentences else whole  # decode.split_sentences
    assert request_work(translator, [text], 2, None, None, limits)[0] == default
    # with a forced prefix the line is estimated whole, as before
    assert request_work(translator, [text], 2, None, None, limits, prefixes=["1"])[0][0] >= whole[0]
