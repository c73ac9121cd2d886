"""``nmtkit serve --engine``: the same API, page and micro-batcher in front of nmtkit's PyTorch
model (``torch``) or of its CTranslate2 export (``ctranslate2``). A tiny copy-task model is
trained briefly, exported (float32, so that greedy search must give nmtkit's output), and
served in-process by both engines; the command line picks the engine by the flag and refuses
what it cannot serve with a message that says why; the load benchmark compares both."""

import json
import subprocess
import sys
import threading
from pathlib import Path

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("ctranslate2")

from fastapi.testclient import TestClient  # noqa: E402

from nmtkit.checkpoint import load_bundle  # noqa: E402
from nmtkit.cli import main as cli_main  # noqa: E402
from nmtkit.config import load  # noqa: E402
from nmtkit.decode.translator import Translator
from nmtkit.export import ExportError  # noqa: E402
from nmtkit.export.ctranslate2 import export_ctranslate2  # noqa: E402
from nmtkit.export.ctranslate2_engine import load_export_bundle  # noqa: E402
from nmtkit.serve.app import create_app  # noqa: E402
from nmtkit.serve.limits import ServeLimits  # noqa: E402
from nmtkit.train.loop import Trainer  # noqa: E402

from .helpers import ROOT, copy_sentences, exported_copy_model, tiny_copy_overrides  # noqa: E402

TEXTS = ["1 2 3 4 5", "", "7 7 8", "9 1 2 3 4 5 6 7", "3", "10 9 8 7 6 5 4 3 2 1", "5 5 5"]


@pytest.fixture(scope="module")
def copy_export(tmp_path_factory):
    """(checkpoint, its float32 CTranslate2 export) of a tiny copy model trained 60 steps."""
    run = tmp_path_factory.mktemp("engines")
    cfg = load(ROOT / "configs" / "copy_task.yaml",
               tiny_copy_overrides(60) + ["model.layers=2", "model.dropout=0.0",
                                          "train.valid_bleu=false", "train.valid_every=60"])
    Trainer(cfg, run / "run").run()
    ckpt = run / "run" / "last.pt"
    return ckpt, export_ctranslate2(ckpt, run / "ct2")


@pytest.fixture(scope="module")
def torch_bundle(copy_export):
    return load_bundle(copy_export[0])


@pytest.fixture(scope="module")
def ct2_bundle(copy_export):
    return load_export_bundle(copy_export[1], compute_type="float32", threads=1)


@pytest.mark.slow
def test_both_engines_translate_alike_with_greedy_search(torch_bundle, ct2_bundle):
    with TestClient(create_app(torch_bundle)) as a, TestClient(create_app(ct2_bundle)) as b:
        ours = a.post("/v1/translate", json={"texts": TEXTS, "beam": 1})
        theirs = b.post("/v1/translate", json={"texts": TEXTS, "beam": 1})
    assert ours.status_code == theirs.status_code == 200, (ours.text, theirs.text)
    assert theirs.json() == ours.json()
    assert theirs.json()["translations"] == Translator.from_bundle(torch_bundle).translate_lines(TEXTS,
                                                                                               beam=1)
    assert theirs.json()["translations"][1] == ""
    assert sum(bool(t) for t in theirs.json()["translations"]) >= 5  # not all empty


@pytest.mark.slow
def test_ctranslate2_engine_beam_max_length_and_micro_batching(ct2_bundle):
    texts = [f"{i} {i % 3 + 1} 5 6" for i in range(1, 11)]
    expected = ct2_bundle.translator().translate_lines(texts, beam=1)
    results: dict[int, object] = {}
    with TestClient(create_app(ct2_bundle, ServeLimits(max_wait_ms=300, max_batch=64))) as c:
        r = c.post("/v1/translate", json={"texts": ["1 2 3 4 5 6 7 8 9"], "beam": 2,
                                          "max_length": 2})
        assert r.status_code == 200, r.text
        assert len(r.json()["translations"][0].split()) <= 2
        before = c.get("/health").json()["batching"]
        barrier = threading.Barrier(len(texts))

        def fire(i):
            barrier.wait()
            results[i] = c.post("/v1/translate", json={"texts": [texts[i]], "beam": 1})

        threads = [threading.Thread(target=fire, args=(i,)) for i in range(len(texts))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        after = c.get("/health").json()["batching"]
    assert [results[i].json()["translations"][0] for i in range(len(texts))] == expected
    assert after["requests"] - before["requests"] == len(texts)
    assert after["model_calls"] - before["model_calls"] < len(texts), after


@pytest.mark.slow
def test_ctranslate2_engine_health_page_and_attention(ct2_bundle, torch_bundle):
    with TestClient(create_app(ct2_bundle)) as c:
        h = c.get("/health").json()
        assert h["engine"] == "ctranslate2" and h["attention"] is False
        assert h["device"] == "cpu (float32)" and h["name"] == "copy_task"
        assert h["architecture"] == "transformer" and h["model"].endswith("/ct2")
        assert (h["src_lang"], h["tgt_lang"]) == (torch_bundle.cfg.data.src_lang,
                                                 torch_bundle.cfg.data.tgt_lang)
        assert h["parameters"] == sum(p.numel() for p in torch_bundle.model.parameters())
        assert h["default_beam"] == torch_bundle.cfg.decode.beam
        r = c.post("/v1/attention", json={"text": "1 2 3"})
        assert r.status_code == 501  # as the translate extras: the engine cannot do it
        assert "not available with the ctranslate2 engine" in r.json()["detail"]
        assert "--engine torch" in r.json()["detail"]
        r = c.post("/v1/translate", json={"texts": ["1 2 3"], "confidence": True})
        assert r.status_code == 200 and len(r.json()["confidence"][0]["coverage"]) == 3, r.text
        page = c.get("/")
        assert page.status_code == 200 and 'id="translate"' in page.text
        assert "state.info.attention !== false" in c.get("/static/app.js").text
    with TestClient(create_app(torch_bundle)) as c:
        h = c.get("/health").json()
        assert h["engine"] == "torch" and h["attention"] is True and h["device"] == "cpu"
        assert c.post("/v1/attention", json={"text": "1 2 3"}).status_code == 200


@pytest.fixture(scope="module")
def exact_pair(tmp_path_factory):
    """(checkpoint bundle, its float32 export served by CTranslate2) of a copy model decoded
    without length penalty (:func:`tests.helpers.copy_config`): both searches rank by log P,
    so both engines are exact and must agree."""
    ckpt, out = exported_copy_model(tmp_path_factory.mktemp("exact"), "pre-bias-tied")
    return load_bundle(ckpt), load_export_bundle(out, compute_type="float32", threads=1)


def candidates(body: dict) -> list[list[dict]]:
    """Per text, its translations as n-best items (one per text where n_best was not asked)."""
    if "n_best" in body:
        return body["n_best"]
    keys = {"translations": "translation", "scores": "score", "token_log_probs": "token_log_probs",
            "tokens": "tokens", "alignments": "alignment", "confidence": "confidence"}
    return [[{one: body[many][i] for many, one in keys.items() if many in body}]
            for i in range(len(body["translations"]))]


@pytest.mark.slow
def test_ctranslate2_engine_serves_prefixes_scores_n_best_alignments_as_torch(exact_pair):
    """The same request to both engines: the same fields, and the same values wherever the
    search found the same translation (always with greedy search; most of the n best with
    beam search, where CTranslate2 keeps finished hypotheses that nmtkit's beam drops)."""
    torch_bundle, ct2_bundle = exact_pair
    texts = copy_sentences(12, seed=5) + [""]
    prefixes = [" ".join(t.split()[:i % 3]) for i, t in enumerate(texts)]
    extras = {"scores": True, "alignments": True, "confidence": True}
    caps = [len(t.split()) + 10 for t in texts]  # decode.max_len_a 1, max_len_b 10: tokens + </s>
    with TestClient(create_app(torch_bundle)) as a, TestClient(create_app(ct2_bundle)) as b:
        for body, exact in (({"beam": 1, "prefixes": prefixes}, True),
                            ({"beam": 4, "n_best": 3}, False),
                            ({"beam": 4, "n_best": 2, "prefixes": prefixes}, False)):
            request = {"texts": texts, **body, **extras}
            ours, theirs = a.post("/v1/translate", json=request), b.post("/v1/translate", json=request)
            assert ours.status_code == theirs.status_code == 200, (ours.text, theirs.text)
            assert set(theirs.json()) == set(ours.json())
            assert theirs.json()["src_tokens"] == ours.json()["src_tokens"]
            same = total = 0
            for cap, os_, ts in zip(caps, candidates(ours.json()), candidates(theirs.json()),
                                    strict=True):
                assert len(ts) == len(os_) == body.get("n_best", 1)
                for o, t in zip(os_, ts, strict=True):
                    total += 1
                    if o["translation"] != t["translation"]:
                        continue
                    same += 1
                    assert set(t) == set(o) and t["tokens"] == o["tokens"]
                    if len(t["tokens"]) < cap:  # at the cap nmtkit pays for </s>, CTranslate2 stops
                        assert t["score"] == pytest.approx(o["score"], abs=1e-3)
                    assert t["token_log_probs"] == pytest.approx(o["token_log_probs"], abs=2e-4)
                    assert t["alignment"] == o["alignment"]
                    for key in ("token_probs", "coverage"):
                        assert t["confidence"][key] == pytest.approx(o["confidence"][key], abs=1e-3)
            assert same == total if exact else same >= 0.75 * total, (body, same, total)
            if "prefixes" in body:
                assert all(c["translation"].startswith(p) for p, cs in zip(prefixes, candidates(
                    theirs.json()), strict=True) for c in cs)


@pytest.mark.slow
def test_ctranslate2_engine_refuses_only_what_it_cannot_do(exact_pair):
    """Constraints (CTranslate2 has no constrained search) and another attention than the one
    exported: a 501 that says why. Bad input is the same 422 from both engines."""
    torch_bundle, ct2_bundle = exact_pair
    with TestClient(create_app(torch_bundle)) as a, TestClient(create_app(ct2_bundle)) as b:
        cons = {"texts": ["w1 w2"], "constraints": [["w3"]]}
        assert a.post("/v1/translate", json=cons).status_code == 200
        r = b.post("/v1/translate", json=cons)
        assert r.status_code == 501 and "no lexically constrained search" in r.json()["detail"]
        other = {"texts": ["w1 w2"], "alignments": True, "alignment_layer": 0}
        assert a.post("/v1/translate", json=other).status_code == 200
        r = b.post("/v1/translate", json=other)
        assert r.status_code == 501, r.text
        assert "returns the source attention of the last decoder layer (the heads' mean) only, chosen " \
               "when it was exported" in r.json()["detail"]
        last = {"texts": ["w1 w2"], "alignments": True, "alignment_layer": 1, "alignment_head": -1}
        assert b.post("/v1/translate", json=last).json()["alignments"] == \
            a.post("/v1/translate", json=last).json()["alignments"]  # layer 1 of 2: the last
        for bad in ({"texts": ["w1", "w2"], "prefixes": ["w1", "w1 zz"]},
                    {"texts": ["w1"], "beam": 2, "n_best": 3}):
            ours, theirs = a.post("/v1/translate", json=bad), b.post("/v1/translate", json=bad)
            assert ours.status_code == theirs.status_code == 422
            assert theirs.json() == ours.json()
        assert "/v1/translate" in b.get("/openapi.json").json()["paths"]
        documented = b.get("/openapi.json").json()["paths"]["/v1/translate"]["post"]["responses"]
        assert "501" in documented


@pytest.mark.slow
def test_an_export_without_a_stored_config_is_still_served(copy_export, tmp_path):
    """Exports made before nmtkit.json stored the config: served, languages unknown."""
    import shutil

    old = shutil.copytree(copy_export[1], tmp_path / "old")
    meta = json.loads((old / "nmtkit.json").read_text())
    del meta["config"], meta["parameters"]
    (old / "nmtkit.json").write_text(json.dumps(meta))
    bundle = load_export_bundle(old, compute_type="float32", threads=1)
    with TestClient(create_app(bundle)) as c:
        h = c.get("/health").json()
        assert (h["name"], h["src_lang"], h["parameters"]) == ("old", "?", None)
        r = c.post("/v1/translate", json={"texts": ["1 2 3"], "beam": 1})
        assert r.status_code == 200, r.text


@pytest.fixture
def served_app(monkeypatch):
    """``serve(argv)`` -> a client of the app that ``nmtkit serve argv`` would run (uvicorn is
    not started)."""
    import uvicorn

    apps = []
    monkeypatch.setattr(uvicorn, "run", lambda app, **kw: apps.append(app))

    def serve(argv):
        assert cli_main(["serve", *argv]) == 0
        return TestClient(apps[-1], base_url="http://127.0.0.1")  # a Host the app accepts

    return serve


@pytest.mark.slow
def test_cli_serve_picks_the_engine_by_flag(copy_export, served_app):
    ckpt, ct2 = copy_export
    with served_app(["--model", str(ckpt)]) as c:  # torch is the default
        assert c.get("/health").json()["engine"] == "torch"
    with served_app(["--engine", "ctranslate2", "--model", str(ct2)]) as c:
        h = c.get("/health").json()
        # int8 on CPU (CTranslate2 names what it resolved: int8 weights, float32 activations)
        assert h["engine"] == "ctranslate2" and h["device"].startswith("cpu (int8")
        r = c.post("/v1/translate", json={"texts": ["1 2 3", ""]})
        assert r.status_code == 200 and r.json()["translations"][1] == ""
    with served_app(["--engine", "ctranslate2", "--model", str(ct2), "--compute-type", "float32",
                     "--threads", "1"]) as c:
        assert c.get("/health").json()["device"] == "cpu (float32)"


@pytest.mark.slow
@pytest.mark.parametrize("argv, message", [
    (["--engine", "ctranslate2", "--model", "{tmp}/missing"], "missing: not found; the ctranslate2 "
                                                             "engine serves the directory"),
    (["--engine", "ctranslate2", "--model", "{ckpt}"], "last.pt: not a directory"),
    (["--engine", "ctranslate2", "--model", "{tmp}"], "nmtkit.json: not found; is"),
    (["--engine", "ctranslate2", "--model", "{ct2}", "--no-fast"], "apply to --engine torch"),
    (["--model", "{ct2}"], "a CTranslate2 export directory; run it with --engine ctranslate2"),
    (["--model", "{ckpt}", "--compute-type", "int8"], "--compute-type applies to --engine "
                                                      "ctranslate2 only"),
])
def test_cli_serve_refuses_what_the_engine_cannot_serve(copy_export, tmp_path, served_app, capsys,
                                                        argv, message):
    ckpt, ct2 = copy_export
    argv = [a.format(tmp=tmp_path, ckpt=ckpt, ct2=ct2) for a in argv]
    assert cli_main(["serve", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("nmtkit: error: ") and message in err, err


@pytest.mark.slow
def test_cli_serve_refuses_a_device_that_is_not_one(copy_export, capsys):
    with pytest.raises(SystemExit) as e:  # the command line's check, for either engine
        cli_main(["serve", "--engine", "ctranslate2", "--model", str(copy_export[1]),
                  "--device", "gpu"])
    assert e.value.code == 2 and "'gpu' is not a torch device" in capsys.readouterr().err


@pytest.mark.slow
def test_a_corrupt_export_is_named(copy_export, tmp_path):
    import shutil

    bad = shutil.copytree(copy_export[1], tmp_path / "bad")
    (bad / "model.bin").write_bytes(b"not a model")
    with pytest.raises(ExportError, match=r"bad: CTranslate2 cannot load it on cpu as float32"):
        load_export_bundle(bad, compute_type="float32")


def test_cli_rejects_an_unknown_engine():
    with pytest.raises(SystemExit):
        cli_main(["serve", "--engine", "onnx", "--model", "m.pt"])


@pytest.mark.slow
def test_load_benchmark_compares_both_engines_at_toy_size(copy_export, tmp_path):
    ckpt, ct2 = copy_export
    out = tmp_path / "load.json"
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "serve_load.py"),
                           "--model", str(ckpt), "--engine", "both", "--ct2-model", str(ct2),
                           "--requests", "8", "--concurrency", "1", "4", "--beam", "2",
                           "--warmup", "1", "--server-arg=--threads=1", "--out", str(out)],
                          capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(out.read_text())
    assert set(result["engines"]) == {"torch", "ctranslate2"} and result["failed_total"] == 0
    assert result["engines"]["ctranslate2"]["model"]["device"].startswith("cpu (int8")
    for engine in result["engines"].values():
        assert engine["beam"] == 2
        assert [r["concurrency"] for r in engine["runs"]] == [1, 4]
        for r in engine["runs"]:
            assert r["requests"] == 8 and r["failed"] == 0
            assert r["requests_per_s"] > 0 and r["latency_ms"]["p95"] >= r["latency_ms"]["p50"] > 0
    assert [r["concurrency"] for r in result["ctranslate2_vs_torch"]] == [1, 4]
    assert all(r["requests_per_s_ratio"] > 0 for r in result["ctranslate2_vs_torch"])


@pytest.mark.slow
@pytest.mark.skipif(not (Path("/usr/bin/chromium").exists() and Path("/usr/bin/chromedriver").exists()),
                    reason="needs Debian's chromium and chromium-driver (apt)")
def test_page_with_the_ctranslate2_engine_in_headless_chromium(ct2_bundle, tmp_path):
    """The page translates and, the engine having no attention maps, does not ask for them."""
    webdriver = pytest.importorskip("selenium.webdriver")
    import socket
    import time

    import uvicorn
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(create_app(ct2_bundle), log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert time.monotonic() < deadline and thread.is_alive(), "server did not start"
        time.sleep(0.05)
    opts = webdriver.ChromeOptions()
    opts.binary_location = "/usr/bin/chromium"
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--disable-background-networking", "--disable-component-update",
                "--disable-sync", "--no-first-run", f"--user-data-dir={tmp_path / 'profile'}"):
        opts.add_argument(arg)
    driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=opts)
    try:
        wait = WebDriverWait(driver, 60)
        driver.get(f"http://127.0.0.1:{sock.getsockname()[1]}/")
        wait.until(lambda d: "ctranslate2" in d.find_element(By.ID, "model").text)
        assert "cpu (float32)" in driver.find_element(By.ID, "model").text
        src = driver.find_element(By.ID, "source")
        src.clear()
        src.send_keys("1 2 3 4\n5 6")
        driver.find_element(By.ID, "translate").click()
        wait.until(lambda d: d.find_element(By.ID, "status").text.startswith("Translated in"))
        expected = ct2_bundle.translator().translate_lines(["1 2 3 4", "5 6"])
        assert driver.find_element(By.ID, "translation").text.split("\n") == expected
        assert driver.find_element(By.ID, "status").get_attribute("class") == "status"
        assert not driver.find_element(By.ID, "attention-panel").is_displayed()
        assert not driver.find_element(By.ID, "sentence-wrap").is_displayed()
        assert not driver.find_element(By.ID, "confidence-panel").is_displayed()
        note = driver.find_element(By.ID, "confidence-note")  # says why there is none
        assert note.is_displayed() and "--engine torch" in note.text and "ctranslate2" in note.text
        assert ct2_bundle.path.name in driver.find_element(By.ID, "model").text
        errors = [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]
        assert not errors, errors
    finally:
        driver.quit()
        server.should_exit = True
        thread.join(10)
        sock.close()
