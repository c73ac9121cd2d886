"""The confidence view (issue 15): token probabilities with low ones marked, source tokens that
received little attention flagged as possible omissions (decode/confidence.py), returned by the
API on request, and the page that shows them and re-decodes after a kept beginning (a forced
prefix), tested in headless Chromium."""

import math
import socket
import threading
import time

import numpy as np
import pytest
import torch

from nmtkit.config import load
from nmtkit.decode.confidence import (
    LOW_COVERAGE,
    LOW_PROBABILITY,
    confidence,
    coverage,
    translation_confidence,
)
from nmtkit.decode.options import TranslateOptions
from nmtkit.decode.translation import Translation
from nmtkit.decode.translator import Translator
from nmtkit.train.loop import Trainer

from .helpers import ROOT, severe_browser_errors, tiny_copy_overrides

# --- the computation -----------------------------------------------------------------------------


def test_a_source_token_without_attention_is_flagged():
    # 3 output tokens + </s> (rows), 3 source tokens + </s> (columns); token 1 is never looked at
    a = np.array([[0.9, 0.0, 0.05, 0.05],
                  [0.1, 0.0, 0.8, 0.1],
                  [0.0, 0.0, 0.7, 0.3],
                  [0.0, 1.0, 0.0, 0.0]], dtype=np.float32)  # the </s> row does not count
    lps = [math.log(0.9), math.log(0.3), math.log(0.6), math.log(0.99)]
    c = confidence(lps, a, n_src=3, n_tgt=3)
    assert c.possible_omissions == [False, True, False]
    assert c.coverage == pytest.approx([1.0 * 4 / 3, 0.0, 1.55 * 4 / 3])
    assert c.token_probs == pytest.approx([0.9, 0.3, 0.6, 0.99])
    assert c.low_probability == [False, True, False, False]
    assert (c.low_probability_threshold, c.low_coverage_threshold) == (LOW_PROBABILITY, LOW_COVERAGE)
    stricter = confidence(lps, a, 3, 3, low_probability=0.95, low_coverage=1.5)
    assert stricter.low_probability == [True, True, True, False]
    assert stricter.possible_omissions == [True, True, False]


def test_even_attention_gives_coverage_one_and_padding_is_ignored():
    even = np.full((5, 4), 0.25, dtype=np.float32)  # 4 output tokens + </s>, 3 source tokens + </s>
    padded = np.concatenate([even, np.zeros((5, 2), dtype=np.float32)], axis=1)  # batch padding after </s>
    for a in (even, padded):
        assert coverage(a, n_src=3, n_tgt=4) == pytest.approx([1.0, 1.0, 1.0])
    assert coverage(even, n_src=3, n_tgt=0) == [0.0, 0.0, 0.0]  # an empty output covers nothing


def test_confidence_rejects_mismatched_inputs():
    with pytest.raises(ValueError, match="one per token and one for </s>"):
        confidence([0.0, 0.0], np.full((3, 3), 1 / 3), n_src=2, n_tgt=2)
    with pytest.raises(ValueError, match="expected"):
        confidence([0.0, 0.0, 0.0], np.full((3, 2), 0.5), n_src=2, n_tgt=2)


def test_translation_confidence():
    empty = translation_confidence(Translation("", [], [], 0.0))
    assert (empty.token_probs, empty.coverage) == ([], [])
    t = Translation("x y", ["x", "y"], ["a"], -1.0, torch.tensor([[0.5, 0.5], [1.0, 0.0], [0.0, 1.0]]),
                    token_log_probs=[-0.1, -2.0, -0.2])
    c = translation_confidence(t, low_probability=0.2)
    assert c.token_probs == pytest.approx([math.exp(-0.1), math.exp(-2.0), math.exp(-0.2)])
    assert c.low_probability == [False, True, False] and c.coverage == pytest.approx([1.5])
    with pytest.raises(ValueError, match="token_scores"):
        translation_confidence(Translation("x", ["x"], ["a"], 0.0))


# --- the API -------------------------------------------------------------------------------------

pytest.importorskip("fastapi")
from fastapi.testclient import TestClient  # noqa: E402

from nmtkit.serve.app import create_app  # noqa: E402


@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    """A tiny copy-task model with 2 layers of 2 heads, trained briefly."""
    run = tmp_path_factory.mktemp("confidence")
    cfg = load(ROOT / "configs" / "copy_task.yaml",
               tiny_copy_overrides(40) + ["model.layers=2", "train.valid_bleu=false",
                                          "train.valid_every=40"])
    trainer = Trainer(cfg, run)
    trainer.run()
    return trainer.bundle()


@pytest.fixture(scope="module")
def client(bundle):
    with TestClient(create_app(bundle)) as c:
        yield c


@pytest.mark.slow
def test_translate_returns_the_confidence_view_on_request(client, bundle):
    texts = ["1 2 3 4 5", "", "7 7 8"]
    body = client.post("/v1/translate", json={"texts": texts, "beam": 2, "confidence": True,
                                              "prefixes": ["9", "", ""]}).json()
    assert set(body) == {"translations", "tokens", "src_tokens", "confidence"}
    expected = Translator.from_bundle(bundle).translate(texts, TranslateOptions(
        beam=2, prefixes=["9", "", ""], token_scores=True, need_attention=True))
    for (h,), c in zip(expected, body["confidence"], strict=True):
        assert c["token_probs"] == pytest.approx([math.exp(x) for x in h.token_log_probs or []], abs=1e-6)
        assert c["low_probability"] == [p < LOW_PROBABILITY for p in c["token_probs"]]
        want = coverage(h.attention, len(h.src_tokens), len(h.tokens)) if h.src_tokens else []
        assert c["coverage"] == pytest.approx(want, abs=1e-6)
        assert c["possible_omissions"] == [x < LOW_COVERAGE for x in c["coverage"]]
        assert len(c["coverage"]) == len(h.src_tokens)
    assert body["confidence"][1]["token_probs"] == []  # an empty line: nothing to show
    # thresholds from the request; a named layer/head changes the coverage, not the probabilities
    named = client.post("/v1/translate", json={"texts": texts[:1], "beam": 2, "confidence": True,
                                               "prefixes": ["9"], "low_probability": 1.0,
                                               "low_coverage": 100, "alignment_layer": 0,
                                               "alignment_head": 1}).json()["confidence"][0]
    assert all(named["low_probability"]) and all(named["possible_omissions"])
    assert (named["low_probability_threshold"], named["low_coverage_threshold"]) == (1.0, 100.0)
    assert named["token_probs"] == pytest.approx(body["confidence"][0]["token_probs"], abs=1e-6)
    assert named["coverage"] != pytest.approx(body["confidence"][0]["coverage"], abs=1e-6)


@pytest.mark.slow
def test_attention_with_a_prefix_and_confidence(client):
    r = client.post("/v1/attention", json={"text": "1 2 3 4", "beam": 1, "prefix": "9 9",
                                           "confidence": True})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["translation"].startswith("9 9") and body["forced_tokens"] == 2
    tokens = body["tokens"]["target"][:-1]
    assert body["prefix_texts"] == [" ".join(tokens[:t + 1]) for t in range(len(tokens))]
    c = body["confidence"]
    # coverage from the maps returned: last layer, heads averaged, output-token rows
    w = torch.tensor(body["attention"]["decoder_src"]["weights"][-1]).mean(0)  # (T + 1, S + 1)
    n_src, n_tgt = len(body["tokens"]["source"]) - 1, len(tokens)
    assert c["coverage"] == pytest.approx(((n_src + 1) / n_tgt * w[:n_tgt, :n_src].sum(0)).tolist(),
                                          abs=1e-3)
    assert len(c["token_probs"]) == n_tgt + 1 and 0 < min(c["token_probs"]) <= max(c["token_probs"]) <= 1
    plain = client.post("/v1/attention", json={"text": "1 2 3 4", "beam": 1}).json()
    assert "confidence" not in plain and plain["forced_tokens"] == 0
    # found by the schema fuzzer: a control token as the prefix is an unknown word, not a 500;
    # an unknown word is refused, not written as <unk> (probe III, failure 8)
    odd = client.post("/v1/attention", json={"text": "0.1.0", "beam": 1, "prefix": "<pad>",
                                             "confidence": True})
    assert odd.status_code == 422, odd.text
    assert "the model's target vocabulary has no '<pad>'" in odd.json()["detail"]


@pytest.mark.slow
@pytest.mark.parametrize("extra, message", [
    ({"alignment_layer": 2}, "alignment_layer: Input should be less than or equal to 1"),
    ({"alignment_head": 2}, "alignment_head: Input should be less than or equal to 1"),
    ({"alignment_layer": -2}, "greater than or equal to -1"),
    ({"low_probability": 0}, "greater than 0"),
    ({"low_coverage": -1}, "greater than or equal to 0"),
])
def test_bad_confidence_options_are_a_422(client, extra, message):
    for path, body in (("/v1/translate", {"texts": ["1 2"]}), ("/v1/attention", {"text": "1 2"})):
        r = client.post(path, json={**body, "confidence": True, **extra})
        assert r.status_code == 422 and message in r.json()["detail"], r.text


@pytest.mark.slow
def test_the_rnn_has_no_layer_or_head_to_choose(tmp_path):
    pytest.importorskip("nmtkit.models.rnn")
    cfg = load(ROOT / "configs" / "copy_task.yaml",
               tiny_copy_overrides(2) + ["model.arch=rnn", "train.valid_bleu=false"])
    trainer = Trainer(cfg, tmp_path)
    trainer.run()
    with TestClient(create_app(trainer.bundle())) as c:
        ok = c.post("/v1/attention", json={"text": "1 2 3", "confidence": True})
        assert ok.status_code == 200 and len(ok.json()["confidence"]["coverage"]) == 3
        r = c.post("/v1/translate", json={"texts": ["1 2"], "alignments": True, "alignment_layer": 0})
        assert r.status_code == 422 and "less than or equal to -1" in r.json()["detail"]
        schema = c.get("/openapi.json").json()["components"]["schemas"]["TranslateRequest"]
        assert schema["properties"]["alignment_head"]["anyOf"][0]["maximum"] == -1  # the schema says so
    with pytest.raises(ValueError, match="must be -1 with model.arch: rnn"):
        Translator.from_bundle(trainer.bundle()).translate(
            ["1 2"], TranslateOptions(alignments=True, alignment_head=0))


# --- the page in Chromium ------------------------------------------------------------------------


@pytest.fixture
def live_server(bundle):
    """uvicorn serving ``bundle`` on a free loopback port, in a background thread."""
    uvicorn = pytest.importorskip("uvicorn")
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(create_app(bundle), log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert time.monotonic() < deadline and thread.is_alive(), "server did not start"
        time.sleep(0.05)
    yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    server.should_exit = True
    thread.join(10)
    sock.close()


def page_view(driver) -> dict:
    """What the page shows: the marked/flagged tokens and the attention view's rows."""
    return driver.execute_script("""
        const toks = (id) => [...document.querySelectorAll(`#${id} .tok`)].map((el) => ({
            text: el.querySelector('.w').textContent, low: el.classList.contains('low'),
            omission: el.classList.contains('omission'), forced: el.classList.contains('forced'),
            title: el.title, p: el.dataset.p, coverage: el.dataset.coverage}));
        const c = document.getElementById('heatmap');
        return {target: toks('conf-target'), source: toks('conf-source'),
                translation: document.getElementById('translation').textContent,
                loads: c.dataset.loads, state: c.dataset.state, rows: state.geom.rowLabels,
                kind: c.dataset.kind};""")


@pytest.mark.slow
def test_confidence_view_and_prefix_editing_in_chromium(browser, live_server, client):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.ui import WebDriverWait

    text = "3 1 4 1 5 9 2 6"
    wait = WebDriverWait(browser, 60)
    browser.get(live_server + "/")
    wait.until(lambda d: d.find_element(By.ID, "model").text.startswith("copy_task"))
    # One direction: no target-language selector (a model of several: test_multilingual.py).
    assert not browser.find_element(By.ID, "tgt-lang-wrap").is_displayed()
    src = browser.find_element(By.ID, "source")
    src.clear()
    src.send_keys(text)
    browser.find_element(By.ID, "translate").click()
    wait.until(lambda d: d.find_element(By.ID, "confidence-panel").is_displayed()
               and d.find_element(By.ID, "heatmap").get_attribute("data-state") == "ready")
    assert not browser.find_element(By.ID, "confidence-note").is_displayed()
    assert browser.find_element(By.ID, "low-probability").get_attribute("placeholder") == str(LOW_PROBABILITY)
    assert browser.find_element(By.ID, "low-coverage").get_attribute("placeholder") == str(LOW_COVERAGE)

    # Thresholds between the smallest and largest numbers, so that both kinds of token show.
    beam = int(browser.find_element(By.ID, "beam").get_attribute("value"))
    api = client.post("/v1/attention", json={"text": text, "beam": beam, "confidence": True}).json()
    probs, cov = api["confidence"]["token_probs"], api["confidence"]["coverage"]
    low_p = round((min(probs) + max(probs)) / 2, 4)
    low_c = round((min(cov) + max(cov)) / 2, 4)
    assert min(probs) < low_p < max(probs) and min(cov) < low_c < max(cov)
    for field, value in (("low-probability", low_p), ("low-coverage", low_c)):
        box = browser.find_element(By.ID, field)
        box.clear()
        box.send_keys(str(value), Keys.TAB)  # change -> the view is asked for again
    panel = browser.find_element(By.ID, "confidence-panel")
    wait.until(lambda d: [float(panel.get_attribute(f"data-{k}") or "nan")
                          for k in ("low-probability", "low-coverage")] == [low_p, low_c]
               and page_view(d)["state"] == "ready")
    view = page_view(browser)
    api = client.post("/v1/attention", json={"text": text, "beam": beam, "confidence": True,
                                             "low_probability": low_p, "low_coverage": low_c}).json()
    conf = api["confidence"]
    assert [t["text"] for t in view["target"]] == api["tokens"]["target"]
    assert [t["low"] for t in view["target"]] == conf["low_probability"]
    assert any(conf["low_probability"]) and not all(conf["low_probability"])
    assert [float(t["p"]) for t in view["target"]] == pytest.approx(conf["token_probs"], abs=1e-6)
    assert all(f"p = {p:.4f}" in t["title"] for t, p in zip(view["target"], conf["token_probs"],
                                                             strict=True))
    assert [t["text"] for t in view["source"]] == api["tokens"]["source"][:-1]
    assert [t["omission"] for t in view["source"]] == conf["possible_omissions"]
    assert any(conf["possible_omissions"]) and not all(conf["possible_omissions"])
    assert all(("possible omission" in t["title"]) == t["omission"] for t in view["source"])
    assert view["translation"] == api["translation"] and view["rows"] == api["tokens"]["target"]

    # Keep the first two output tokens (click the second), type one more, re-decode the rest.
    browser.find_elements(By.CSS_SELECTOR, "#conf-target .tok")[1].click()
    prefix_box = browser.find_element(By.ID, "prefix")
    kept = api["prefix_texts"][1]
    assert prefix_box.get_attribute("value") == kept + " "
    prefix_box.send_keys("7")
    prefix = kept + " 7"
    loads = page_view(browser)["loads"]
    browser.find_element(By.ID, "redecode").click()
    wait.until(lambda d: page_view(d)["loads"] != loads and page_view(d)["state"] == "ready")
    view = page_view(browser)
    assert view["translation"].startswith(prefix)  # the kept beginning, verbatim
    again = client.post("/v1/attention", json={"text": text, "beam": beam, "confidence": True,
                                               "prefix": prefix, "low_probability": low_p,
                                               "low_coverage": low_c}).json()
    assert view["translation"] == again["translation"]
    assert view["rows"] == again["tokens"]["target"]  # the attention view followed
    assert view["kind"] == "decoder_src"
    assert [t["forced"] for t in view["target"]] == [t < 3 for t in range(len(view["target"]))]
    assert [t["low"] for t in view["target"]] == again["confidence"]["low_probability"]
    assert [t["omission"] for t in view["source"]] == again["confidence"]["possible_omissions"]
    assert "Re-decoded" in browser.find_element(By.ID, "status").text
    assert not severe_browser_errors(browser)
