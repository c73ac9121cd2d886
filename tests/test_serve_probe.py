"""What a hostile-input probe of ``nmtkit serve`` found: broken limits accepted at start-up, a
forced prefix longer than the output cap, and a busy port found only after the model loaded."""

import math
import socket

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

from fastapi.testclient import TestClient  # noqa: E402

from nmtkit.config import MAX_BEAM  # noqa: E402
from nmtkit.serve.app import create_app  # noqa: E402
from nmtkit.serve.limits import ServeLimits  # noqa: E402
from nmtkit.serve.security import (  # noqa: E402
    check_bindable,
    check_keep_alive,
    parse_allowed_hosts,
)

INF, NAN = math.inf, math.nan


# --- limits --------------------------------------------------------------------------------------

def test_default_limits_and_the_cli_defaults_are_accepted():
    from nmtkit.cli import build_parser

    ServeLimits()
    a = build_parser().parse_args(["serve", "--model", "m.pt"])
    ServeLimits(max_texts=a.max_texts, max_chars=a.max_chars, max_beam=a.max_beam,
                max_length=a.max_length, max_body_bytes=a.max_body_bytes, timeout_s=a.timeout,
                max_batch=a.max_batch, max_wait_ms=a.max_wait_ms)
    assert check_keep_alive(a.timeout_keep_alive) == 5.0
    # edges that are fine
    ServeLimits(max_wait_ms=0, max_beam=MAX_BEAM, timeout_s=0.2, max_texts=1)


@pytest.mark.parametrize("field, value, option", [
    ("max_wait_ms", INF, "--max-wait-ms"),
    ("max_wait_ms", NAN, "--max-wait-ms"),
    ("max_wait_ms", -1.0, "--max-wait-ms"),
    ("max_wait_ms", 1e9, "--max-wait-ms"),
    ("timeout_s", NAN, "--timeout"),
    ("timeout_s", INF, "--timeout"),
    ("timeout_s", 0.0, "--timeout"),
    ("timeout_s", -5.0, "--timeout"),
    ("max_texts", 0, "--max-texts"),
    ("max_texts", -3, "--max-texts"),
    ("max_chars", 0, "--max-chars"),
    ("max_beam", 0, "--max-beam"),
    ("max_beam", MAX_BEAM + 1, "--max-beam"),
    ("max_length", -1, "--max-length"),
    ("max_length", 2**40, "--max-length"),
    ("max_body_bytes", 0, "--max-body-bytes"),
    ("max_batch", 0, "--max-batch"),
    ("max_batch", 2.5, "--max-batch"),
    ("max_pending", 0, "serve limit max_pending"),
    ("max_attention_tokens", NAN, "serve limit max_attention_tokens"),
])
def test_broken_limits_are_refused_naming_the_option(field, value, option):
    with pytest.raises(ValueError, match=f"^{option}") as e:
        ServeLimits(**{field: value})
    assert field in str(e.value) and repr(value) in str(e.value)


def test_the_limit_message_says_what_is_allowed():
    with pytest.raises(ValueError) as e:
        ServeLimits(max_wait_ms=INF)
    assert str(e.value).startswith("--max-wait-ms must be a finite number >= 0 and <= 60000, got inf")


# --- --allowed-hosts, --timeout-keep-alive --------------------------------------------------------

def test_allowed_hosts_are_parsed_and_lowercased():
    assert parse_allowed_hosts("Example.org, 127.0.0.1 ,::1") == ["example.org", "127.0.0.1", "::1"]
    assert parse_allowed_hosts("*") == ["*"]


@pytest.mark.parametrize("text, says", [
    (",", "names no host"), ("", "names no host"), (" , ", "names no host"),
    ("a,,b", "empty host name"), ("example.org,", "empty host name"),
    ("example.org:8000", "not a host name"), ("[::1]", "not a host name"),
    ("http://example.org", "not a host name"), ("exa mple.org", "not a host name"),
])
def test_allowed_hosts_that_match_nothing_are_refused(text, says):
    with pytest.raises(ValueError, match="--allowed-hosts") as e:
        parse_allowed_hosts(text)
    assert says in str(e.value)


@pytest.mark.parametrize("seconds", [-1.0, 0.0, INF, NAN, 1e9])
def test_broken_keep_alive_is_refused(seconds):
    with pytest.raises(ValueError, match="--timeout-keep-alive"):
        check_keep_alive(seconds)


# --- a forced prefix counts against the output cap -----------------------------------------------

@pytest.fixture
def capped(copy_bundle):  # noqa: F811
    with TestClient(create_app(copy_bundle, ServeLimits(max_length=8))) as c:
        yield c


def test_a_prefix_longer_than_the_servers_max_length_is_a_422(capped):
    long = " ".join(["9"] * 12)
    r = capped.post("/v1/translate", json={"texts": ["1 2", "3 4"], "beam": 1,
                                           "prefixes": ["", long]})
    assert r.status_code == 422, r.text
    detail = r.json()["detail"]
    assert "prefixes.1" in detail and "12 target tokens" in detail and "(8)" in detail
    r = capped.post("/v1/attention", json={"text": "1 2", "beam": 1, "prefix": long})
    assert r.status_code == 422, r.text
    assert r.json()["detail"].startswith("prefix: 12 target tokens")


def test_a_prefix_longer_than_the_requests_max_length_is_a_422(capped):
    r = capped.post("/v1/translate", json={"texts": ["1 2 3"], "beam": 1, "max_length": 3,
                                           "prefixes": ["9 9 9 9"]})
    assert r.status_code == 422, r.text
    assert "the request's max_length (3)" in r.json()["detail"]


@pytest.mark.slow
def test_a_prefix_within_the_cap_is_kept_and_the_output_stays_under_it(capped):
    # the source allows floor(1.0 * 2 + 2) = 4 tokens: the search stretches that to fit the prefix
    r = capped.post("/v1/translate", json={"texts": ["1 2"], "beam": 1,
                                           "prefixes": [" ".join(["9"] * 8)], "scores": True})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["translations"][0].startswith("9 9 9 9 9 9 9 9")
    assert len(body["tokens"][0]) <= 8
    r = capped.post("/v1/attention", json={"text": "1 2", "beam": 1, "prefix": "9 9"})
    assert r.status_code == 200 and r.json()["forced_tokens"] == 2


@pytest.mark.slow
def test_the_servers_max_length_caps_a_request_that_sets_none(copy_bundle):  # noqa: F811
    """``--max-length`` is the most output tokens of any answer: a request without
    ``max_length`` is capped by it too, not by the model's length rule alone (which allows a
    10-symbol copy 12 tokens), on both endpoints and with and without the batcher."""
    src = "1 2 3 4 5 6 7 8 9 10"
    with TestClient(create_app(copy_bundle, ServeLimits(max_length=3))) as c:
        for body in ({"texts": [src], "beam": 1, "scores": True},  # a direct call
                     {"texts": [src, src], "beam": 2}):  # through the micro-batcher
            r = c.post("/v1/translate", json=body)
            assert r.status_code == 200, r.text
            assert all(len(t.split()) <= 3 for t in r.json()["translations"]), r.text
        r = c.post("/v1/attention", json={"text": src, "beam": 1})
        assert r.status_code == 200 and len(r.json()["translation"].split()) <= 3, r.text
    with TestClient(create_app(copy_bundle, ServeLimits(max_length=256))) as c:
        r = c.post("/v1/translate", json={"texts": [src], "beam": 1})
        assert len(r.json()["translations"][0].split()) > 3  # what the cap cut short


# --- the address is checked before the model is loaded ---------------------------------------------

def test_a_port_in_use_is_refused_naming_host_and_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        with pytest.raises(ValueError, match="address already in use") as e:
            check_bindable("127.0.0.1", port)
        assert f"127.0.0.1:{port}" in str(e.value)
    check_bindable("127.0.0.1", port)  # free again


def test_port_0_is_always_bindable_and_a_bad_host_is_refused():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        check_bindable("127.0.0.1", 0)
        check_bindable("localhost", 0)
    with pytest.raises(ValueError, match="cannot resolve host") as e:
        check_bindable("no-such-host.invalid", 8000)
    assert "no-such-host.invalid:8000" in str(e.value)
    with pytest.raises(ValueError, match="port out of range"):
        check_bindable("127.0.0.1", 70000)
