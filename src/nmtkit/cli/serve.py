"""``nmtkit serve``: the HTTP API and web page of a checkpoint (PyTorch) or of a CTranslate2
export."""

from __future__ import annotations

import argparse
import logging
import math
from typing import TYPE_CHECKING, cast

from ..errors import UserError
from ..serve.limits import ServeLimits as L
from .decode_options import add_engine_args, add_rerank_args, translator_from_args
from .options import NO_FAST_HELP, Subparsers, add_command, device, port, thread_count

if TYPE_CHECKING:
    from ..decode.text_translator import TextTranslator
    from ..serve.app import ServedBundle

EXAMPLES = ("  nmtkit serve --model runs/NAME/best.pt --port 8000\n"
            "  curl -s localhost:8000/v1/translate -H 'content-type: application/json' "
            "-d '{\"texts\": [\"Ein Hund.\"]}'\n"
            "  nmtkit serve --model runs/DE_EN/best.pt --reverse-model runs/EN_DE/best.pt "
            "--rerank 20 --reverse-weight 2")


def add_parser(sub: Subparsers[argparse.ArgumentParser]) -> None:
    sv = add_command(sub, "serve", run, examples=EXAMPLES,
                     help="HTTP API and web page for a checkpoint or a CTranslate2 export "
                     "(needs [serve])")
    sv.add_argument("--model", required=True,
                    help="checkpoint (.pt); with --engine ctranslate2 an export directory")
    add_engine_args(sv)
    sv.add_argument("--host", default="127.0.0.1", help="address to bind (default loopback only)")
    sv.add_argument("--port", type=port, default=8000, help="TCP port (0 = any free port)")
    sv.add_argument("--device", type=device, default="cpu", help="torch device: cpu, cuda ...")
    sv.add_argument("--no-verify", action="store_true",
                    help="load a checkpoint whose weights do not match their stored checksum")
    sv.add_argument("--no-fast", action="store_true", help=NO_FAST_HELP)
    sv.add_argument("--threads", type=thread_count, default=0,
                    help="torch threads, or CTranslate2's intra-op threads (0 = the library's "
                    "own choice)")
    sv.add_argument("--max-texts", type=int, default=L.max_texts, help="texts per request")
    sv.add_argument("--max-chars", type=int, default=L.max_chars, help="characters per text")
    sv.add_argument("--max-beam", type=int, default=L.max_beam, help="largest beam a request may ask for")
    sv.add_argument("--max-length", type=int, default=L.max_length,
                    help="the most output tokens of any answer (a request's max_length may "
                    "ask for fewer)")
    sv.add_argument("--max-body-bytes", type=int, default=L.max_body_bytes,
                    help="largest request body accepted (413 above)")
    sv.add_argument("--timeout", type=float, default=L.timeout_s,
                    help="seconds per request before a 503 (its search stops then); a request "
                    "may ask for --work-rate x --timeout hypothesis-steps of search (413 above)")
    sv.add_argument("--work-rate", type=int, default=L.work_per_second,
                    help="hypothesis-steps of search (one hypothesis, one output token) the "
                    "server is taken to do in a second: bounds each request's work with "
                    "--timeout (default: measured with the loaded model at start-up, and "
                    "logged)")
    sv.add_argument("--max-batch", type=int, default=L.max_batch,
                    help="sentences merged into one model call")
    sv.add_argument("--allowed-hosts", metavar="H1,H2",
                    help="Host header names accepted, comma-separated ('*' = any; default: the "
                    "bind address, 127.0.0.1, localhost, ::1)")
    sv.add_argument("--timeout-keep-alive", type=float, default=5.0,
                    help="seconds an idle keep-alive connection is held open (default 5; "
                    "rounded up to whole seconds)")
    sv.add_argument("--max-wait-ms", type=float, default=L.max_wait_ms,
                    help="how long a request waits for others to batch with")
    add_rerank_args(sv)  # every answer reranked (--engine torch, a model of one direction)


def run(a: argparse.Namespace) -> int:
    from ..serve.security import (
        check_bindable,
        check_keep_alive,
        default_allowed_hosts,
        parse_allowed_hosts,
    )

    # Every option checked before the model is loaded (ValueError -> "nmtkit: error: ...", 2).
    limits = L(max_texts=a.max_texts, max_chars=a.max_chars, max_beam=a.max_beam,
               max_length=a.max_length, max_body_bytes=a.max_body_bytes,
               timeout_s=a.timeout, max_batch=a.max_batch, max_wait_ms=a.max_wait_ms,
               work_per_second=a.work_rate)
    hosts = (parse_allowed_hosts(a.allowed_hosts) if a.allowed_hosts is not None
             else default_allowed_hosts(a.host))
    keep_alive = check_keep_alive(a.timeout_keep_alive)
    check_bindable(a.host, a.port)
    try:  # fastapi, uvicorn: optional dependencies
        import uvicorn

        from ..serve.app import create_app
    except ImportError as e:
        raise SystemExit(f"nmtkit: error: serving needs the 'serve' extra "
                         f"(pip install 'nmtkit[serve]'): {e}") from None
    bundle, translator = served_bundle(a)
    if a.host not in ("127.0.0.1", "localhost", "::1"):
        logging.getLogger("nmtkit.serve").warning(
            "listening on %s: the service is reachable from other machines", a.host)
    uvicorn.run(create_app(bundle, limits, translator, allowed_hosts=hosts), host=a.host, port=a.port,
                log_level="debug" if a.verbose else "info",
                timeout_keep_alive=math.ceil(keep_alive))  # uvicorn takes whole seconds
    return 0


def served_bundle(a: argparse.Namespace) -> tuple[ServedBundle, TextTranslator]:
    """What ``nmtkit serve`` serves: a checkpoint run by PyTorch (``--engine torch``), or an
    ``nmtkit export --format ctranslate2`` directory run by CTranslate2 (``--engine
    ctranslate2``), with the translator the library loads for the flags
    (:func:`~nmtkit.cli.decode_options.translator_from_args`). The server reranks every
    answer: ``--rerank`` needs its models, and a model of one direction."""
    bundle, tr = translator_from_args(a, engine=a.engine)
    if tr.reverse is not None and bundle.cfg.data.directions:
        raise UserError(f"{a.model} translates {', '.join(bundle.cfg.data.directions)}: the "
                        "server reranks a model of one direction (each request's tgt_lang "
                        "would need reverse models of its own)")
    if a.rerank and tr.reverse is None:  # (a checkpoint's own decode.rerank: create_app warns)
        raise UserError("--rerank needs the model(s) of the reverse direction that score the "
                        "candidates: give --reverse-model CKPT (or a right-to-left model, "
                        "--r2l-model CKPT)")
    return cast("ServedBundle", bundle), tr
