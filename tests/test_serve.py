"""The HTTP service: API in-process (TestClient), the micro-batcher on its own, the page in a
real headless Chromium (Debian's chromium + chromedriver, skipped when absent), and the load
benchmark at a toy size."""

import asyncio
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

from fastapi.testclient import TestClient  # noqa: E402

from nmtkit.config import load  # noqa: E402
from nmtkit.serve.app import create_app  # noqa: E402
from nmtkit.serve.batcher import MicroBatcher, QueueFull  # noqa: E402
from nmtkit.serve.limits import ServeLimits  # noqa: E402
from nmtkit.train.loop import Trainer  # noqa: E402

from .conftest import ROOT, SHARED_DATA, tiny_copy_overrides  # noqa: E402

CHROMIUM, CHROMEDRIVER = Path("/usr/bin/chromium"), Path("/usr/bin/chromedriver")


@pytest.fixture(scope="session")
def copy_run(tmp_path_factory):
    """A tiny copy-task model (2 layers so the page has layers to switch), trained briefly."""
    run = tmp_path_factory.mktemp("serve_copy")
    cfg = load(ROOT / "configs" / "copy_task.yaml",
               tiny_copy_overrides(30) + ["model.layers=2", "train.valid_bleu=false"])
    trainer = Trainer(cfg, run)
    trainer.run()
    return run


@pytest.fixture(scope="session")
def copy_bundle(copy_run):
    from nmtkit.train.checkpoint import load_bundle

    return load_bundle(copy_run / "last.pt")


@pytest.fixture(scope="session")
def m30_bundle(tmp_path_factory):
    """A tiny German->English model on the offline Multi30k mirror (skip if there is none)."""
    data = Path(os.environ.get("NMTKIT_DATA", SHARED_DATA))
    if not (data / "multi30k" / "train.de.gz").exists():
        pytest.skip(f"no Multi30k mirror at {data}")
    run = tmp_path_factory.mktemp("serve_m30")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("NMTKIT_DATA", str(data))
        cfg = load(ROOT / "configs" / "multi30k_transformer_small.yaml",
                   ["train.max_steps=6", "train.valid_every=6", "train.valid_bleu=false",
                    "data.vocab_size=600", "model.d_model=32", "model.d_ff=64", "model.heads=2",
                    "model.layers=2", "train.max_tokens=1000", "train.threads=1",
                    "train.keep_last=1"])
        trainer = Trainer(cfg, run)
        trainer.run()
        return trainer.bundle()


@pytest.fixture
def client(copy_bundle):
    with TestClient(create_app(copy_bundle)) as c:
        yield c


def make_client(bundle, **limits):
    return TestClient(create_app(bundle, ServeLimits(**limits)))


# --- translate ---------------------------------------------------------------------------------

def test_translate_returns_translations_in_order(client, copy_bundle):
    texts = ["1 2 3 4 5", "", "7 7 8", "9 1 2 3 4 5 6 7", "3"]
    r = client.post("/v1/translate", json={"texts": texts, "beam": 2})
    assert r.status_code == 200, r.text
    expected = copy_bundle.translator().translate_lines(texts, beam=2)
    assert r.json() == {"translations": expected}
    assert r.json()["translations"][1] == ""


def test_max_length_caps_the_output(client):
    r = client.post("/v1/translate", json={"texts": ["1 2 3 4 5 6 7 8 9"], "beam": 1,
                                           "max_length": 2})
    assert r.status_code == 200, r.text
    assert len(r.json()["translations"][0].split()) <= 2


def test_concurrent_requests_share_model_calls(copy_bundle):
    texts = [f"{i} {i % 3 + 1} 5 6" for i in range(1, 11)]
    expected = copy_bundle.translator().translate_lines(texts, beam=1)
    results: dict[int, object] = {}
    with make_client(copy_bundle, max_wait_ms=300, max_batch=64) as c:
        barrier = threading.Barrier(len(texts))

        def fire(i):
            barrier.wait()
            results[i] = c.post("/v1/translate", json={"texts": [texts[i]], "beam": 1})

        threads = [threading.Thread(target=fire, args=(i,)) for i in range(len(texts))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        stats = c.get("/health").json()["batching"]
    assert [results[i].json()["translations"][0] for i in range(len(texts))] == expected
    assert stats["requests"] == len(texts)
    assert stats["model_calls"] < len(texts), stats
    assert stats["largest_batch"] > 1


def test_batcher_groups_by_options_and_keeps_order():
    calls = []

    def fake(texts, beam, max_length):
        calls.append((list(texts), beam, max_length))
        return [f"{t}/b{beam}/m{max_length}" for t in texts]

    async def main():
        b = MicroBatcher(fake, max_batch=100, max_wait_ms=50)
        jobs = [(["a", "b"], 1, None), (["c"], 2, None), (["d"], 1, None), (["e"], 1, 5)]
        out = await asyncio.gather(*(b.submit(t, beam, ml) for t, beam, ml in jobs))
        await b.stop()
        b.close()
        return out, b.stats

    out, stats = asyncio.run(main())
    assert out == [["a/b1/mNone", "b/b1/mNone"], ["c/b2/mNone"], ["d/b1/mNone"], ["e/b1/m5"]]
    assert sorted(calls, key=str) == sorted([(["a", "b", "d"], 1, None), (["c"], 2, None),
                                             (["e"], 1, 5)], key=str)
    assert stats.model_calls == 3 and stats.requests == 4 and stats.largest_batch == 3


def test_batcher_respects_max_batch_and_passes_errors_on():
    sizes = []

    def fake(texts, beam, max_length):
        sizes.append(len(texts))
        if "boom" in texts:
            raise RuntimeError("model exploded")
        return list(texts)

    async def main():
        b = MicroBatcher(fake, max_batch=3, max_wait_ms=50, max_pending=8)
        ok = await asyncio.gather(*(b.submit([str(i)], 1) for i in range(7)))
        with pytest.raises(RuntimeError, match="exploded"):
            await b.submit(["boom"], 1)
        with pytest.raises(QueueFull, match="busy"):
            await b.submit([str(i) for i in range(9)], 1)
        await b.stop()
        b.close()
        return ok

    assert asyncio.run(main()) == [[str(i)] for i in range(7)]
    assert max(sizes) <= 3 and sum(sizes[:-1]) == 7


# --- attention ---------------------------------------------------------------------------------

def check_attention(body, expect_kinds):
    tokens = body["tokens"]
    assert tokens["source"][-1] == "</s>" and tokens["target"][-1] == "</s>"
    assert tokens["target_in"][0] == "<s>" and len(tokens["target_in"]) == len(tokens["target"])
    assert set(body["attention"]) == set(expect_kinds)
    for kind, m in body["attention"].items():
        rows, cols = len(tokens[m["rows"]]), len(tokens[m["cols"]])
        assert len(m["weights"]) == m["layers"] >= 1
        for layer in m["weights"]:
            assert len(layer) == m["heads"] >= 1
            for head in layer:
                assert len(head) == rows and all(len(r) == cols for r in head), kind
                for r in head:
                    assert abs(sum(r) - 1.0) < 1e-3 and min(r) >= 0.0, kind


def test_attention_shapes_and_rows_sum_to_one(client, copy_bundle):
    r = client.post("/v1/attention", json={"text": "1 2 3 4 5", "beam": 2})
    assert r.status_code == 200, r.text
    body = r.json()
    check_attention(body, {"encoder", "decoder_self", "decoder_src"})
    cfg = copy_bundle.cfg.model
    assert body["attention"]["decoder_src"]["layers"] == 2 == cfg.layers
    assert body["attention"]["encoder"]["heads"] == cfg.heads
    assert body["tokens"]["source"] == ["1", "2", "3", "4", "5", "</s>"]
    same = client.post("/v1/translate", json={"texts": ["1 2 3 4 5"], "beam": 2}).json()
    assert body["translation"] == same["translations"][0]
    # decoder self-attention never looks ahead
    for head in body["attention"]["decoder_self"]["weights"][0]:
        assert all(v == 0.0 for i, row in enumerate(head) for v in row[i + 1:])
    only = client.post("/v1/attention", json={"text": "1 2", "kinds": ["decoder_src"]}).json()
    assert set(only["attention"]) == {"decoder_src"}


class OnlySourceAttention:
    """Stands in for an RNN: its ``attention_maps`` has one kind with one head."""

    def __init__(self, model):
        self._model = model

    def __getattr__(self, name):
        return getattr(self._model, name)

    def attention_maps(self, src, tgt_in):
        w = self._model.attention_maps(src, tgt_in)["decoder_src"][-1]
        return {"decoder_src": [w.mean(dim=1, keepdim=True)]}  # (b, 1, T, S)


def test_attention_with_only_decoder_src(copy_bundle):
    bundle = replace(copy_bundle, model=OnlySourceAttention(copy_bundle.model))
    with TestClient(create_app(bundle, translator=copy_bundle.translator())) as c:
        r = c.post("/v1/attention", json={"text": "4 5 6"})
    assert r.status_code == 200, r.text
    check_attention(r.json(), {"decoder_src"})
    assert r.json()["attention"]["decoder_src"]["heads"] == 1


def test_rnn_model_is_served_with_its_one_map(tmp_path):
    pytest.importorskip("nmtkit.models.rnn")
    cfg = load(ROOT / "configs" / "copy_task.yaml",
               tiny_copy_overrides(2) + ["model.arch=rnn", "train.valid_bleu=false"])
    trainer = Trainer(cfg, tmp_path)
    trainer.run()
    with TestClient(create_app(trainer.bundle())) as c:
        assert c.get("/health").json()["architecture"] == "rnn"
        r = c.post("/v1/translate", json={"texts": ["1 2 3", "4 5"], "beam": 2})
        assert r.status_code == 200 and len(r.json()["translations"]) == 2
        r = c.post("/v1/attention", json={"text": "1 2 3", "beam": 2})
    assert r.status_code == 200, r.text
    check_attention(r.json(), {"decoder_src"})
    assert (r.json()["attention"]["decoder_src"]["layers"],
            r.json()["attention"]["decoder_src"]["heads"]) == (1, 1)

def test_attention_reverse_source_is_shown_in_reading_order(copy_bundle):
    cfg = replace(copy_bundle.cfg, data=replace(copy_bundle.cfg.data, reverse_source=True))
    bundle = replace(copy_bundle, cfg=cfg)
    with TestClient(create_app(bundle)) as c:
        r = c.post("/v1/attention", json={"text": "1 2 3", "kinds": ["encoder"]})
    assert r.status_code == 200, r.text
    assert r.json()["tokens"]["source"] == ["1", "2", "3", "</s>"]
    check_attention(r.json(), {"encoder"})


def test_attention_of_a_german_sentence(m30_bundle):
    with TestClient(create_app(m30_bundle)) as c:
        r = c.post("/v1/attention", json={"text": "Zwei Hunde spielen im Schnee.", "beam": 1})
    assert r.status_code == 200, r.text
    check_attention(r.json(), {"encoder", "decoder_self", "decoder_src"})
    assert "".join(r.json()["tokens"]["source"]).replace("▁", " ").strip().startswith("Zwei")


# --- health, schema, page ----------------------------------------------------------------------

def test_health_describes_the_model(client, copy_bundle):
    h = client.get("/health").json()
    assert h["status"] == "ok" and h["architecture"] == "transformer"
    assert (h["src_lang"], h["tgt_lang"]) == (copy_bundle.cfg.data.src_lang,
                                             copy_bundle.cfg.data.tgt_lang)
    assert h["device"] == "cpu" and h["model"].endswith("/last.pt") and h["name"] == "copy_task"
    assert h["limits"]["max_texts"] == ServeLimits().max_texts


def test_openapi_lists_the_routes(client):
    spec = client.get("/openapi.json").json()
    assert {"/v1/translate", "/v1/attention", "/health"} <= set(spec["paths"])
    assert "post" in spec["paths"]["/v1/translate"]
    schema = json.dumps(spec["components"]["schemas"])
    assert "TranslateRequest" in schema and "AttentionRequest" in schema


def test_page_and_its_assets_are_served(client):
    page = client.get("/")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    for needle in ('id="source"', 'id="translate"', 'id="heatmap"', 'id="kind"', 'id="layer"',
                   'id="head"', "/static/app.js", "/static/style.css"):
        assert needle in page.text
    assert "http://" not in page.text and "https://" not in page.text  # no CDN
    js = client.get("/static/app.js")
    assert js.status_code == 200 and "/v1/attention" in js.text
    assert client.get("/static/style.css").status_code == 200


# --- limits and errors -------------------------------------------------------------------------

BAD = [
    (None, "empty"),
    ("{not json", "not valid JSON"),
    ("[1, 2]", "JSON object"),
    ({}, "texts: Field required"),
    ({"texts": []}, "at least 1"),
    ({"texts": "1 2"}, "texts: Input should be a valid list"),
    ({"texts": [1, 2]}, "texts.0: Input should be a valid string"),
    ({"texts": ["1"] * 65}, "at most 64"),
    ({"texts": ["1 " * 600]}, "at most 1000 characters"),
    ({"texts": ["1"], "beam": 0}, "beam: Input should be greater than or equal to 1"),
    ({"texts": ["1"], "beam": 11}, "beam: Input should be less than or equal to 10"),
    ({"texts": ["1"], "beam": "5"}, "beam: Input should be a valid integer"),
    ({"texts": ["1"], "beam": 2.5}, "beam: Input should be a valid integer"),
    ({"texts": ["1"], "max_length": 0}, "max_length"),
    ({"texts": ["1"], "max_length": 10_000}, "less than or equal to 256"),
    ({"texts": ["1"], "tekst": 1}, "tekst: Extra inputs are not permitted"),
]


@pytest.mark.parametrize("body,message", BAD, ids=[m for _, m in BAD])
def test_bad_translate_requests_get_a_422_with_a_message(client, body, message):
    if body is None:
        r = client.post("/v1/translate")
    elif isinstance(body, str):
        r = client.post("/v1/translate", content=body, headers={"content-type": "application/json"})
    else:
        r = client.post("/v1/translate", json=body)
    assert r.status_code == 422, r.text
    assert message in r.json()["detail"]


@pytest.mark.parametrize("body,message", [
    ({"text": "   "}, "text: must not be empty"),
    ({"text": ["1"]}, "text: Input should be a valid string"),
    ({"text": "1", "kinds": ["cross"]}, "kinds.0"),
    ({"text": " ".join(["1"] * 201)}, "attention is limited to 200"),
])
def test_bad_attention_requests_get_a_422_with_a_message(client, body, message):
    r = client.post("/v1/attention", json=body)
    assert r.status_code == 422, r.text
    assert message in r.json()["detail"]


def test_body_size_limit_gives_413(copy_bundle):
    with make_client(copy_bundle, max_body_bytes=200) as c:
        big = {"texts": ["1 2 3"] * 40}
        r = c.post("/v1/translate", json=big)
        assert r.status_code == 413 and "at most 200 bytes" in r.json()["detail"]

        def chunks():  # no Content-Length: counted while it arrives
            for _ in range(10):
                yield b" " * 50
            yield json.dumps({"texts": ["1"]}).encode()

        r = c.post("/v1/translate", content=chunks(), headers={"content-type": "application/json"})
        assert r.status_code == 413
        assert c.post("/v1/translate", json={"texts": ["1 2"]}).status_code == 200


def test_a_request_past_its_time_limit_gets_503(copy_bundle):
    # the batcher waits 2 s for company, the request may take 0.2 s
    with make_client(copy_bundle, timeout_s=0.2, max_wait_ms=2000) as c:
        r = c.post("/v1/translate", json={"texts": ["1 2 3"]})
        assert r.status_code == 503 and "timed out after 0.2 s" in r.json()["detail"]
        deadline = time.monotonic() + 30  # the abandoned request is skipped, not translated
        while c.get("/health").json()["batching"]["dropped"] == 0:
            assert time.monotonic() < deadline
            time.sleep(0.1)
        assert c.get("/health").json()["batching"]["model_calls"] == 0


def test_unknown_routes_and_methods_are_json(client):
    assert client.get("/nope").json() == {"detail": "Not Found"}
    r = client.get("/v1/translate")
    assert r.status_code == 405 and "detail" in r.json()


def test_limits_must_be_positive():
    with pytest.raises(ValueError, match="max_texts"):
        ServeLimits(max_texts=0)


def test_cli_serve_binds_loopback_by_default():
    from nmtkit.cli import build_parser

    a = build_parser().parse_args(["serve", "--model", "m.pt"])
    assert (a.host, a.port, a.max_texts, a.timeout) == ("127.0.0.1", 8000, 64, 30.0)


# --- a real server: browser and load benchmark ---------------------------------------------------

@pytest.fixture
def live_server(m30_bundle):
    """uvicorn on a free loopback port, in a background thread."""
    import uvicorn

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(create_app(m30_bundle), log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert time.monotonic() < deadline and thread.is_alive(), "server did not start"
        time.sleep(0.05)
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join(10)
    sock.close()


@pytest.mark.skipif(not (CHROMIUM.exists() and CHROMEDRIVER.exists()),
                    reason="needs Debian's chromium and chromium-driver (apt)")
def test_page_in_headless_chromium(live_server, tmp_path):
    webdriver = pytest.importorskip("selenium.webdriver")
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.actions.action_builder import ActionBuilder
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select, WebDriverWait

    opts = webdriver.ChromeOptions()
    opts.binary_location = str(CHROMIUM)
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--disable-background-networking", "--disable-component-update",
                "--disable-sync", "--no-first-run", "--window-size=1280,1500",
                f"--user-data-dir={tmp_path / 'profile'}"):
        opts.add_argument(arg)
    driver = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=opts)
    try:
        wait = WebDriverWait(driver, 60)
        driver.get(live_server + "/")
        wait.until(lambda d: d.find_element(By.ID, "pair").text == "de → en")
        src = driver.find_element(By.ID, "source")
        src.clear()
        src.send_keys("Zwei Hunde spielen im Schnee.")
        driver.find_element(By.ID, "translate").click()
        wait.until(lambda d: d.find_element(By.ID, "translation").text.strip())
        canvas = driver.find_element(By.ID, "heatmap")
        wait.until(lambda d: canvas.get_attribute("data-state") == "ready")
        assert canvas.get_attribute("data-kind") == "decoder_src"
        assert int(canvas.get_attribute("data-cols")) >= 2
        assert driver.find_element(By.ID, "status").get_attribute("class") == "status"

        Select(driver.find_element(By.ID, "layer")).select_by_value("1")
        Select(driver.find_element(By.ID, "head")).select_by_value("1")
        wait.until(lambda d: (canvas.get_attribute("data-layer"), canvas.get_attribute("data-head"))
                   == ("1", "1"))
        Select(driver.find_element(By.ID, "kind")).select_by_value("encoder")
        wait.until(lambda d: canvas.get_attribute("data-kind") == "encoder")
        Select(driver.find_element(By.ID, "kind")).select_by_value("decoder_src")
        wait.until(lambda d: canvas.get_attribute("data-kind") == "decoder_src")

        # hover the first cell: the tooltip names both tokens and the weight
        x, y = driver.execute_script(
            "const c = document.getElementById('heatmap'); c.scrollIntoView({block: 'nearest'});"
            "const r = c.getBoundingClientRect(), g = state.geom;"
            "return [Math.round(r.left + g.left + g.cell / 2), Math.round(r.top + g.top + g.cell / 2)];")
        hover = ActionBuilder(driver)
        hover.pointer_action.move_to_location(x, y)
        hover.perform()
        tip = driver.find_element(By.ID, "tooltip")
        wait.until(lambda d: tip.is_displayed())
        assert "weight" in tip.text and "source" in tip.text and "output" in tip.text

        shot = tmp_path / "serve_page.png"
        assert driver.save_screenshot(str(shot)) and shot.stat().st_size > 10_000
        if os.environ.get("NMTKIT_SCREENSHOT"):
            shutil.copy(shot, os.environ["NMTKIT_SCREENSHOT"])
        errors = [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]
        assert not errors, errors
    finally:
        driver.quit()


def test_load_benchmark_runs_at_toy_size(copy_run, tmp_path):
    out = tmp_path / "load.json"
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "serve_load.py"),
                           "--model", str(copy_run / "last.pt"), "--requests", "12",
                           "--concurrency", "1", "4", "--out", str(out)],
                          capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(out.read_text())
    assert [r["concurrency"] for r in result["runs"]] == [1, 4]
    for r in result["runs"]:
        assert r["requests"] == 12 and r["failed"] == 0
        assert r["requests_per_s"] > 0 and r["latency_ms"]["p95"] >= r["latency_ms"]["p50"] > 0
