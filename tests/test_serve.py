"""The HTTP service: API in-process (TestClient), the micro-batcher on its own, the page in a
real headless Chromium (Debian's chromium + chromedriver, skipped when absent), and the load
benchmark at a toy size."""

import asyncio
import json
import logging
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
from nmtkit.decode.options import TranslateOptions
from nmtkit.decode.translator import Translator
from nmtkit.serve.app import create_app  # noqa: E402
from nmtkit.serve.batcher import MicroBatcher, QueueFull  # noqa: E402
from nmtkit.serve.limits import ServeLimits  # noqa: E402
from nmtkit.train.loop import Trainer  # noqa: E402

from .helpers import ROOT, SHARED_DATA, tiny_copy_overrides  # noqa: E402

CHROMIUM, CHROMEDRIVER = Path("/usr/bin/chromium"), Path("/usr/bin/chromedriver")


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

@pytest.mark.slow
def test_translate_returns_translations_in_order(client, copy_bundle):
    texts = ["1 2 3 4 5", "", "7 7 8", "9 1 2 3 4 5 6 7", "3"]
    r = client.post("/v1/translate", json={"texts": texts, "beam": 2})
    assert r.status_code == 200, r.text
    expected = Translator.from_bundle(copy_bundle).translate_lines(texts, beam=2)
    assert r.json() == {"translations": expected}
    assert r.json()["translations"][1] == ""


@pytest.mark.slow
def test_translate_returns_prefixes_scores_and_alignments_on_request(client, copy_bundle):
    texts = ["1 2 3 4 5", "", "7 7 8"]
    r = client.post("/v1/translate", json={"texts": texts, "beam": 2, "prefixes": ["9 9", "", ""],
                                           "scores": True, "alignments": True})
    assert r.status_code == 200, r.text
    body = r.json()
    assert set(body) == {"translations", "scores", "token_log_probs", "tokens", "src_tokens",
                         "alignments"}
    assert body["translations"][0].startswith("9 9")
    expected = Translator.from_bundle(copy_bundle).translate(texts, TranslateOptions(
        beam=2, prefixes=["9 9", "", ""], token_scores=True, alignments=True))
    assert body["translations"] == [hs[0].text for hs in expected]
    assert body["scores"] == pytest.approx([hs[0].score for hs in expected], abs=1e-6)
    assert body["token_log_probs"][0] == pytest.approx(expected[0][0].token_log_probs, abs=1e-6)
    assert len(body["token_log_probs"][0]) == len(body["tokens"][0]) + 1  # the tokens and </s>
    assert body["alignments"][1] == "" and len(body["alignments"][0].split()) == len(body["tokens"][0])
    only = client.post("/v1/translate", json={"texts": texts, "beam": 2, "scores": True}).json()
    assert set(only) == {"translations", "scores", "token_log_probs", "tokens"}
    plain = client.post("/v1/translate", json={"texts": texts, "beam": 2, "scores": False}).json()
    assert set(plain) == {"translations"}  # unchanged when nothing more is asked
    bad = client.post("/v1/translate", json={"texts": texts, "prefixes": ["1"]})
    assert bad.status_code == 422 and "1 given for 3 texts" in bad.json()["detail"]
    cons = client.post("/v1/translate", json={"texts": texts, "beam": 3,
                                              "constraints": [["8 8"], [], ["2"]]}).json()
    assert set(cons) == {"translations", "constraints_met"} and "8 8" in cons["translations"][0]
    assert cons["constraints_met"] == [True, True, True]
    assert "2" in cons["translations"][2].split()


@pytest.mark.slow
def test_translate_with_mbr_is_the_translators_mbr_choice(client, copy_bundle):
    texts = ["1 2 3 4 5", "", "7 7 8", "9 1 2 3 4 5 6 7"]
    want = [hs[0] for hs in Translator.from_bundle(copy_bundle).translate(
        texts, TranslateOptions(beam=2, mbr=4, token_scores=True))]
    r = client.post("/v1/translate", json={"texts": texts, "beam": 2, "mbr": 4})
    assert r.status_code == 200, r.text
    assert r.json() == {"translations": [t.text for t in want]}
    # the direct path (scores asked for) decodes the same way
    scored = client.post("/v1/translate", json={"texts": texts, "beam": 2, "mbr": 4,
                                                "scores": True}).json()
    assert scored["translations"] == [t.text for t in want]
    assert scored["scores"] == pytest.approx([t.score for t in want], abs=1e-6)
    # /v1/attention shows the maps of that same choice; /health gives the page its default
    beams = [hs[0].text for hs in Translator.from_bundle(copy_bundle).translate(texts,
                                                                                TranslateOptions(beam=4))]
    assert beams != [t.text for t in want]  # MBR chooses otherwise somewhere here
    for text, t in zip(texts, want, strict=True):
        if text:
            att = client.post("/v1/attention", json={"text": text, "beam": 2, "mbr": 4}).json()
            assert att["translation"] == t.text
    assert client.get("/health").json()["default_mbr"] == copy_bundle.cfg.decode.mbr == 0


@pytest.mark.slow
def test_translate_returns_the_n_best_as_translate_n_best_does(client, copy_bundle):
    texts = ["1 2 3 4 5", "", "7 7 8"]
    want = Translator.from_bundle(copy_bundle).translate(texts, TranslateOptions(
        beam=4, n_best=3, token_scores=True, alignments=True))
    r = client.post("/v1/translate", json={"texts": texts, "beam": 4, "n_best": 3, "scores": True,
                                           "alignments": True})
    assert r.status_code == 200, r.text
    body = r.json()
    assert set(body) == {"translations", "scores", "token_log_probs", "tokens", "src_tokens",
                         "alignments", "n_best"}
    assert body["translations"] == [hs[0].text for hs in want]  # the old fields: the best's
    assert [[c["translation"] for c in cs] for cs in body["n_best"]] == [[h.text for h in hs]
                                                                         for hs in want]
    for cs, hs, best_score in zip(body["n_best"], want, body["scores"], strict=True):
        assert set(cs[0]) == {"translation", "score", "token_log_probs", "tokens", "alignment"}
        assert cs[0]["score"] == best_score
        assert [c["score"] for c in cs] == pytest.approx([h.score for h in hs], abs=1e-6)
        assert [c["tokens"] for c in cs] == [h.tokens for h in hs]
        assert [c["alignment"] for c in cs] == [" ".join(f"{i}-{j}" for i, j in h.alignment or [])
                                                for h in hs]
        assert [c["token_log_probs"] for c in cs] == [pytest.approx(h.token_log_probs or [], abs=1e-6)
                                                      for h in hs]  # (none for an empty text)
    assert len({c["translation"] for c in body["n_best"][0]}) == 3  # three different ones
    plain = client.post("/v1/translate", json={"texts": texts, "beam": 4, "n_best": 3}).json()
    assert set(plain["n_best"][0][0]) == {"translation"}  # only the fields asked for
    one = client.post("/v1/translate", json={"texts": texts, "beam": 4, "n_best": 1}).json()
    assert one == client.post("/v1/translate", json={"texts": texts, "beam": 4}).json()
    assert set(one) == {"translations"}  # n_best 1: the answer old clients know


@pytest.mark.slow
def test_n_best_is_bounded_as_the_command_lines(client, copy_bundle):
    """At most the beam (or MBR's candidates), the rule of ``nmtkit translate --n-best``
    (:func:`decode_options`), and at most --max-beam, the beam's own limit."""
    from nmtkit.decode.text_translator import decode_options

    r = client.post("/v1/translate", json={"texts": ["1 2"], "beam": 2, "n_best": 3})
    assert r.status_code == 422
    with pytest.raises(ValueError) as cli_rule:
        decode_options(copy_bundle.cfg.decode, beam=2, n_best=3)
    assert r.json()["detail"] == f"n_best: {cli_rule.value}"
    too_many = client.post("/v1/translate", json={"texts": ["1 2"], "beam": 10, "n_best": 11})
    assert too_many.status_code == 422
    assert "n_best: Input should be less than or equal to 10" in too_many.json()["detail"]
    mbr = client.post("/v1/translate", json={"texts": ["1 2 3"], "beam": 2, "mbr": 4, "n_best": 3})
    assert mbr.status_code == 200, mbr.text  # MBR's candidates bound it, as on the command line
    want = Translator.from_bundle(copy_bundle).translate(["1 2 3"], TranslateOptions(
        beam=2, mbr=4, n_best=3))
    assert [c["translation"] for c in mbr.json()["n_best"][0]] == [h.text for h in want[0]]
    spec = client.get("/openapi.json").json()["components"]["schemas"]
    assert spec["TranslateRequest"]["properties"]["n_best"]["maximum"] == ServeLimits().max_beam
    assert "n_best" in spec["TranslateResponse"]["properties"] and "Candidate" in spec


def test_max_length_caps_the_output(client):
    r = client.post("/v1/translate", json={"texts": ["1 2 3 4 5 6 7 8 9"], "beam": 1,
                                           "max_length": 2})
    assert r.status_code == 200, r.text
    assert len(r.json()["translations"][0].split()) <= 2


@pytest.mark.slow
def test_concurrent_requests_share_model_calls(copy_bundle):
    texts = [f"{i} {i % 3 + 1} 5 6" for i in range(1, 11)]
    expected = Translator.from_bundle(copy_bundle).translate_lines(texts, beam=1)
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


def test_batcher_keeps_mbr_requests_apart_and_passes_mbr_as_a_keyword():
    calls = []

    def fake(texts, beam, max_length, **kw):
        calls.append((list(texts), kw))
        return [f"{t}/{kw.get('mbr')}" for t in texts]

    async def main():
        b = MicroBatcher(fake, max_batch=100, max_wait_ms=50)
        out = await asyncio.gather(b.submit(["a"], 2), b.submit(["b"], 2, mbr=8),
                                   b.submit(["c"], 2, mbr=8), b.submit(["d"], 2, mbr=4))
        await b.stop()
        b.close()
        return out

    assert asyncio.run(main()) == [["a/None"], ["b/8"], ["c/8"], ["d/4"]]
    assert sorted(calls, key=str) == sorted([(["a"], {}), (["b", "c"], {"mbr": 8}),
                                             (["d"], {"mbr": 4})], key=str)


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


def test_batcher_skips_requests_cancelled_while_queued():
    """A request given up while it waits (client gone) is skipped and never blocks the queue."""
    started, release, calls = threading.Event(), threading.Event(), []

    def fake(texts, beam, max_length):
        calls.append(list(texts))
        started.set()
        release.wait(10)  # the first batch holds the model until the queue is set up
        return [t.upper() for t in texts]

    async def main():
        b = MicroBatcher(fake, max_batch=8, max_wait_ms=0)
        first = asyncio.ensure_future(b.submit(["a"], 1))
        await asyncio.to_thread(started.wait, 10)
        gone = asyncio.ensure_future(b.submit(["b"], 1))
        kept = asyncio.ensure_future(b.submit(["c"], 1))
        await asyncio.sleep(0.05)
        gone.cancel()
        release.set()
        out = await asyncio.wait_for(asyncio.gather(first, kept), 10)
        after = await asyncio.wait_for(b.submit(["d"], 1), 10)  # the worker is still alive
        await b.stop()
        b.close()
        return out, after, gone.cancelled(), b.stats

    out, after, cancelled, stats = asyncio.run(main())
    assert out == [["A"], ["C"]] and after == ["D"] and cancelled
    assert calls == [["a"], ["c"], ["d"]]
    assert stats.dropped == 1 and stats.sentences == 3


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


@pytest.mark.slow
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


@pytest.mark.slow
def test_attention_with_only_decoder_src(copy_bundle):
    bundle = replace(copy_bundle, model=OnlySourceAttention(copy_bundle.model))
    with TestClient(create_app(bundle, translator=Translator.from_bundle(copy_bundle))) as c:
        r = c.post("/v1/attention", json={"text": "4 5 6"})
    assert r.status_code == 200, r.text
    check_attention(r.json(), {"decoder_src"})
    assert r.json()["attention"]["decoder_src"]["heads"] == 1


@pytest.mark.slow
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

@pytest.mark.slow
def test_attention_reverse_source_is_shown_in_reading_order(copy_bundle):
    cfg = replace(copy_bundle.cfg, data=replace(copy_bundle.cfg.data, reverse_source=True))
    bundle = replace(copy_bundle, cfg=cfg)
    with TestClient(create_app(bundle)) as c:
        r = c.post("/v1/attention", json={"text": "1 2 3", "kinds": ["encoder"]})
    assert r.status_code == 200, r.text
    assert r.json()["tokens"]["source"] == ["1", "2", "3", "</s>"]
    check_attention(r.json(), {"encoder"})


@pytest.mark.slow
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


@pytest.mark.slow
def test_openapi_lists_the_routes(client):
    spec = client.get("/openapi.json").json()
    assert {"/v1/translate", "/v1/attention", "/health"} <= set(spec["paths"])
    assert "post" in spec["paths"]["/v1/translate"]
    schema = json.dumps(spec["components"]["schemas"])
    assert "TranslateRequest" in schema and "AttentionRequest" in schema


@pytest.mark.slow
def test_page_and_its_assets_are_served(client):
    page = client.get("/")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    for needle in ('id="source"', 'id="translate"', 'id="heatmap"', 'id="kind"', 'id="layer"',
                   'id="head"', 'id="tgt-lang"', "/static/app.js", "/static/style.css"):
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
    ({"texts": ["1"], "mbr": -1}, "mbr: Input should be greater than or equal to 0"),
    ({"texts": ["1"], "mbr": 11}, "mbr: Input should be less than or equal to 10"),
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


@pytest.mark.slow
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


@pytest.mark.parametrize("body,message", [
    (b'{"texts": ["\xff\xfe"]}', "not valid UTF-8"),
    (b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
])
def test_unparseable_bodies_get_a_400_that_says_why(client, body, message):
    r = client.post("/v1/translate", content=body, headers={"content-type": "application/json"})
    assert r.status_code == 400 and message in r.json()["detail"]


@pytest.mark.slow
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


@pytest.mark.slow
def test_the_app_survives_a_restarted_lifespan(copy_bundle):
    app = create_app(copy_bundle)
    for _ in range(2):  # the first shutdown must not leave the batcher without its thread
        with TestClient(app) as c:
            assert c.post("/v1/translate", json={"texts": ["1 2"]}).status_code == 200
            assert c.post("/v1/attention", json={"text": "1 2"}).status_code == 200


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


@pytest.mark.slow
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

        # "Choose: MBR of 5": the page asks for it, in the translation and in its maps
        import urllib.request

        assert [o.get_attribute("value") for o in
                Select(driver.find_element(By.ID, "mbr")).options] == ["0", "5", "10"]
        beam = Select(driver.find_element(By.ID, "beam")).first_selected_option.get_attribute("value")
        ask = urllib.request.Request(
            live_server + "/v1/translate", headers={"content-type": "application/json"},
            data=json.dumps({"texts": ["Zwei Hunde spielen im Schnee."], "beam": int(beam),
                             "mbr": 5}).encode())
        with urllib.request.urlopen(ask, timeout=60) as r:
            want = json.loads(r.read())["translations"][0]
        Select(driver.find_element(By.ID, "mbr")).select_by_value("5")
        driver.find_element(By.ID, "translate").click()
        wait.until(lambda d: d.execute_script(
            "return state.mbr === 5 && state.att !== null && state.att.translation") == want)
        assert driver.find_element(By.ID, "translation").text == want

        shot = tmp_path / "serve_page.png"
        assert driver.save_screenshot(str(shot)) and shot.stat().st_size > 10_000
        if os.environ.get("NMTKIT_SCREENSHOT"):
            shutil.copy(shot, os.environ["NMTKIT_SCREENSHOT"])
        errors = [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]
        assert not errors, errors
    finally:
        driver.quit()


@pytest.mark.slow
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


# --- fuzzing: no generated request gets a 500 ----------------------------------------------------

# Small limits keep each generated request cheap; the schema (and so the fuzzing) follows them.
FUZZ_LIMITS = {"max_texts": 4, "max_chars": 80, "max_beam": 3, "max_length": 16,
               "max_attention_tokens": 24, "timeout_s": 20.0, "max_body_bytes": 20_000}
FUZZ_OPERATIONS = [("POST", "/v1/translate"), ("POST", "/v1/attention"), ("GET", "/health")]


def fuzz_settings(max_examples: int):
    """Hypothesis settings of the schema fuzzing; NMTKIT_FUZZ_EXAMPLES=N runs N examples per
    case instead (a longer campaign than CI's)."""
    from hypothesis import HealthCheck, settings

    max_examples = int(os.environ.get("NMTKIT_FUZZ_EXAMPLES", max_examples))
    return settings(max_examples=max_examples, deadline=None, database=None,
                    suppress_health_check=list(HealthCheck), print_blob=True)


@pytest.fixture(scope="module")
def fuzz_app(copy_bundle):
    return create_app(copy_bundle, ServeLimits(**FUZZ_LIMITS))


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["positive", "negative"])
@pytest.mark.parametrize("method,path", FUZZ_OPERATIONS, ids=[p for _, p in FUZZ_OPERATIONS])
def test_schemathesis_fuzzing_of_the_openapi_schema(fuzz_app, method, path, mode):
    """Requests generated from /openapi.json (valid ones, and ones that break it): every answer
    is documented (status, content type, body schema), valid ones are accepted, invalid ones
    refused, none is a 5xx, none takes long."""
    schemathesis = pytest.importorskip("schemathesis")
    from hypothesis import given

    if mode == "negative" and method == "GET":
        pytest.skip("GET /health takes no input to break")
    schema = schemathesis.openapi.from_asgi("/openapi.json", fuzz_app)
    strategy = schema[path][method].as_strategy(generation_mode=schemathesis.GenerationMode(mode))

    # What a schema cannot say: an attention text must have tokens, and at most
    # max_attention_tokens of them (the limit on characters is in the schema); a translate
    # request's prefixes and constraints are one per text, of words the model knows, a prefix
    # no longer than max_length; a tgt_lang must be the model's; n_best at most the beam.
    semantic = path in ("/v1/attention", "/v1/translate") and mode == "positive"
    excluded = []
    if semantic:
        from schemathesis.specs.openapi.checks import positive_data_acceptance

        excluded = [positive_data_acceptance]

    @fuzz_settings(100 if method == "POST" else 5)
    @given(case=strategy)
    def check(case):
        start = time.monotonic()
        response = case.call_and_validate(excluded_checks=excluded)
        assert response.status_code < 500, response.text
        assert time.monotonic() - start < FUZZ_LIMITS["timeout_s"]
        if semantic and response.status_code != 200:
            assert response.status_code == 422, response.text
            assert any(m in response.json()["detail"] for m in (
                "must not be empty", "nothing to translate", "attention is limited to",
                "given for", "this model translates into", "target vocabulary has no",
                "n_best: ", "counts against the output cap")), response.text

    check()


def json_values():
    from hypothesis import strategies as st

    scalars = (st.none() | st.booleans() | st.integers() | st.integers(min_value=2**63)
               | st.floats() | st.text(max_size=20) | st.sampled_from(["", " ", "\x00", "\u202e",
                                                                       "1 2 3", "\U0001f600"]))
    return st.recursive(scalars, lambda kids: st.lists(kids, max_size=3)
                        | st.dictionaries(st.text(max_size=6), kids, max_size=3), max_leaves=12)


def junk_bodies(fields: dict):
    """Raw request bodies: arbitrary JSON, near-misses of the real body (each field right or any
    JSON, extra fields), lone surrogates, NaN, deep nesting, bytes that are not UTF-8 or JSON."""
    from hypothesis import strategies as st

    anything = json_values()
    near = st.fixed_dictionaries({}, optional={k: v | anything for k, v in fields.items()}).flatmap(
        lambda d: st.dictionaries(st.text(max_size=6), anything, max_size=2).map(
            lambda extra: {**extra, **d}))
    as_json = st.tuples(anything | near, st.booleans()).map(
        lambda v: json.dumps(v[0], ensure_ascii=v[1]))
    return st.one_of(
        as_json.map(str.encode),
        as_json.map(lambda t: (t[: len(t) // 2]).encode()),  # cut short
        st.sampled_from([b"", b"null", b"NaN", b'{"texts": ["\\ud800"]}', b'{"text": "\\udfff"}',
                         b'{"texts": ["1"], "beam": Infinity}', b"[" * 5000 + b"]" * 5000,
                         b'{"texts": ["\xff\xfe"]}', b"\xef\xbb\xbf{}", b'{"texts": ["1"]}' * 2]),
        st.binary(max_size=64),
    )


@pytest.mark.slow
@pytest.mark.parametrize("path", ["/v1/translate", "/v1/attention"])
def test_arbitrary_json_bodies_get_a_4xx_with_a_message_never_a_500(fuzz_app, path):
    """Hypothesis beyond the schema: junk bodies, any content type; the answer is 200 with the
    documented shape, or a 4xx with a JSON ``detail``, within the time limit."""
    pytest.importorskip("hypothesis")
    from hypothesis import given
    from hypothesis import strategies as st

    text = st.text(max_size=30) | st.sampled_from(["1 2 3", "4 5"])
    fields = ({"texts": st.lists(text, max_size=5), "beam": st.integers(-2, 12),
               "max_length": st.none() | st.integers(-1, 40)} if path == "/v1/translate" else
              {"text": text, "beam": st.integers(-2, 12),
               "kinds": st.lists(st.sampled_from(["encoder", "decoder_src", "x"]), max_size=3)})
    content_types = st.sampled_from(["application/json", "application/json; charset=utf-8",
                                     "text/plain", "application/x-www-form-urlencoded",
                                     "application/vnd.api+json", ""])
    with TestClient(fuzz_app, raise_server_exceptions=False) as c:

        @fuzz_settings(100)
        @given(body=junk_bodies(fields), content_type=content_types)
        def check(body, content_type):
            headers = {"content-type": content_type} if content_type else {}
            start = time.monotonic()
            r = c.post(path, content=body, headers=headers)
            assert time.monotonic() - start < FUZZ_LIMITS["timeout_s"]
            assert r.status_code in (200, 400, 413, 422), (r.status_code, r.text)
            answer = r.json()
            if r.status_code == 200:
                assert set(answer) >= ({"translations"} if path == "/v1/translate" else
                                       {"text", "translation", "tokens", "attention"})
            else:
                assert isinstance(answer["detail"], str) and answer["detail"]
                assert "error parsing the body" not in answer["detail"]

        check()


# --- clients that go away ------------------------------------------------------------------------

class GatedTranslator:
    """The real translator, but its first model call waits until ``release`` is set."""

    def __init__(self, translator):
        self._translator = translator
        self.started, self.release, self.calls = threading.Event(), threading.Event(), []

    def __getattr__(self, name):
        return getattr(self._translator, name)

    def translate(self, texts, *args, **kwargs):
        self.calls.append(list(texts))
        self.started.set()
        assert self.release.wait(20)
        return self._translator.translate(texts, *args, **kwargs)


@pytest.fixture
def serve_live():
    """``serve_live(app)`` -> base URL of uvicorn serving ``app`` on a free loopback port."""
    import uvicorn

    running = []

    def start(app):
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
        thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
        thread.start()
        running.append((server, thread, sock))
        deadline = time.monotonic() + 30
        while not server.started:
            assert time.monotonic() < deadline and thread.is_alive(), "server did not start"
            time.sleep(0.02)
        return sock.getsockname()

    yield start
    for server, thread, sock in running:
        server.should_exit = True
        thread.join(10)
        sock.close()


def raw_request(body: bytes, declared_length: int | None = None) -> bytes:
    length = len(body) if declared_length is None else declared_length
    return (b"POST /v1/translate HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n" % length) + body


def hang_up(address, data: bytes, wait: float = 0.0) -> None:
    """Connect, send ``data``, maybe wait a little, and close without reading the answer."""
    with socket.create_connection(address, timeout=5) as s:
        s.sendall(data)
        time.sleep(wait)


@pytest.mark.slow
def test_clients_that_disconnect_mid_request_do_not_stall_others(copy_bundle, serve_live):
    import httpx

    address = serve_live(create_app(copy_bundle, ServeLimits(timeout_s=10)))
    url = f"http://{address[0]}:{address[1]}"
    body = json.dumps({"texts": ["1 2 3"], "beam": 2}).encode()
    expected = Translator.from_bundle(copy_bundle).translate_lines(["1 2 3"], beam=2)
    slow = socket.create_connection(address, timeout=5)  # a client stuck mid-body meanwhile
    slow.sendall(raw_request(body[:5], declared_length=len(body)))
    try:
        with httpx.Client(base_url=url, timeout=10) as c:
            for i in range(6):
                hang_up(address, b"POST /v1/trans")  # inside the request line
                hang_up(address, raw_request(b"")[:-10])  # inside the headers
                hang_up(address, raw_request(body[:7], declared_length=len(body)))  # mid-body
                hang_up(address, raw_request(body), wait=0.01 * i)  # whole request, no reading
                start = time.monotonic()
                r = c.post("/v1/translate", json={"texts": ["1 2 3"], "beam": 2})
                assert r.status_code == 200 and r.json()["translations"] == expected
                assert time.monotonic() - start < 5
            assert c.get("/health").json()["status"] == "ok"
    finally:
        slow.close()


def test_a_real_server_refuses_an_oversized_body_before_reading_it(copy_bundle, serve_live):
    address = serve_live(create_app(copy_bundle, ServeLimits(max_body_bytes=1000)))
    with socket.create_connection(address, timeout=10) as s:
        s.sendall(raw_request(b'{"texts": ["1 2', declared_length=10**9))  # ~1 GB promised
        answer = b""
        while b"}" not in answer:  # the 413 and its JSON body, without the rest being sent
            chunk = s.recv(65536)
            assert chunk, answer
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 413") and b"at most 1000 bytes" in answer


@pytest.mark.slow
def test_a_client_gone_while_queued_is_dropped_and_does_not_block_the_batcher(copy_bundle,
                                                                             serve_live, caplog):
    """A holds the model; B queues behind it and hangs up; C queues too. Once A is done, C is
    answered and B's sentence is never translated."""
    import httpx

    caplog.set_level(logging.INFO, logger="nmtkit.serve.app")
    gated = GatedTranslator(Translator.from_bundle(copy_bundle))
    limits = ServeLimits(timeout_s=20, max_wait_ms=0, work_per_second=20_000)  # (not measured
    address = serve_live(create_app(copy_bundle, limits, translator=gated))  # through the gate)
    url = f"http://{address[0]}:{address[1]}"
    results = {}

    def post(name, text):
        with httpx.Client(base_url=url, timeout=20) as c:
            results[name] = c.post("/v1/translate", json={"texts": [text], "beam": 1})

    threads = [threading.Thread(target=post, args=("a", "1 2"))]
    threads[0].start()
    assert gated.started.wait(20)  # A is in the model
    hang_up(address, raw_request(json.dumps({"texts": ["3 4"], "beam": 1}).encode()), wait=0.1)
    deadline = time.monotonic() + 10  # the server notices B has gone
    while "client disconnected" not in caplog.text:
        assert time.monotonic() < deadline, "the disconnect was not noticed"
        time.sleep(0.02)
    threads.append(threading.Thread(target=post, args=("c", "5 6")))
    threads[1].start()
    time.sleep(0.1)  # C waits in the queue too
    gated.release.set()
    for t in threads:
        t.join(20)
        assert not t.is_alive()
    assert results["a"].status_code == 200 and results["c"].status_code == 200
    expected = Translator.from_bundle(copy_bundle).translate_lines(["5 6"], beam=1)
    assert results["c"].json()["translations"] == expected
    assert gated.calls == [["1 2"], ["5 6"]]
    with httpx.Client(base_url=url, timeout=10) as client:
        stats = client.get("/health").json()["batching"]
    assert stats["requests"] == 3 and stats["dropped"] == 1 and stats["sentences"] == 2
