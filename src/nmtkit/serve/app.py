"""HTTP API and web page for a trained model (FastAPI; schema at ``/openapi.json``).

- ``POST /v1/translate`` ``{"texts": [...], "beam": 5, "max_length": null}`` ->
  ``{"translations": [...]}`` in input order; concurrent requests share model calls
  (:mod:`nmtkit.serve.batcher`). Optional ``"prefixes": [...]`` (forced target prefixes),
  ``"constraints": [[...], ...]`` (target phrases each translation must contain),
  ``"scores": true`` (adds ``scores``, ``token_log_probs``, ``tokens``),
  ``"alignments": true`` (adds ``alignments`` in Pharaoh ``i-j``, ``tokens``, ``src_tokens``),
  ``"confidence": true`` (adds ``confidence``, ``tokens``, ``src_tokens``: see below) and
  ``"alignment_layer"``/``"alignment_head"`` (the decoder layer and head whose source attention
  gives alignments and coverage; -1: the last layer, the heads' mean) and ``"n_best": N``
  (adds ``n_best``: each text's N best, each with the fields asked for, as ``nmtkit translate
  --n-best``; at most the beam, checked as there; the per-text fields stay the best's)
  run as one direct call; a response has only the fields asked for. A forced prefix counts
  against the output cap: one of more tokens than ``max_length`` (default: the server's
  ``--max-length``) is a 422, here and in ``/v1/attention``. ``--max-length`` caps every
  answer, a request without ``max_length`` too (on top of the model's own length rule).
- ``POST /v1/attention`` ``{"text": "..."}`` -> source/target tokens and every attention
  map of the model for that sentence (kind -> layer -> head -> query x key); the PyTorch
  engine only (``nmtkit serve --engine ctranslate2`` answers 501: CTranslate2 returns no
  per-layer attention). Optional ``"prefix"`` (a forced target prefix: the page's "keep the
  beginning, re-decode the rest"; ``forced_tokens`` says how many tokens it became) and
  ``"confidence": true`` (adds ``confidence`` for the sentence, and ``prefix_texts``: the
  translation's text through each output token, a prefix that keeps it).
- ``GET /health`` -> model name, architecture, languages, device, engine (``torch`` or
  ``ctranslate2``) and whether it has attention maps, limits, batching counters.
- ``GET /`` -> the page (``static/``): translate, look at the attention and the confidence
  view, keep a translation's beginning and re-decode the rest.

The confidence view (:mod:`nmtkit.decode.confidence`), one object per translation:
``token_probs`` (P of each output token and of ``</s>``), ``low_probability`` (each below
``low_probability_threshold``, default :data:`~nmtkit.decode.confidence.LOW_PROBABILITY`),
``coverage`` (per source token, the attention it received over the output, 1 = an even share)
and ``possible_omissions`` (each below ``low_coverage_threshold``, default
:data:`~nmtkit.decode.confidence.LOW_COVERAGE`); a request may set both thresholds
(``"low_probability"``, ``"low_coverage"``).

With ``nmtkit serve --engine ctranslate2`` every field above is served as well (forced
prefixes, scores, n-best, alignments and confidence from the attention the export returns:
:class:`~nmtkit.export.ctranslate2_engine.CTranslate2Translator`), but for what CTranslate2 cannot
do, a 501 saying why: constraints (it has no constrained search), another alignment
layer/head than the one chosen at export, and ``/v1/attention``'s per-layer maps.

Every error is JSON ``{"detail": "<message>"}`` (validation errors add ``"errors"``): bad input
is a 4xx that says what is wrong, a request past its time limit is a 503. A request whose client
disconnects before its answer is ready is dropped: its queued work is skipped.

Each request gets a :class:`~nmtkit.decode.deadline.Deadline` from ``--timeout``: its search
checks it between steps, so a request past its time limit (or whose client left) stops within
one step instead of keeping the model busy for the requests behind it. The search work a
request may ask for is bounded in proportion to ``--timeout`` (:mod:`nmtkit.serve.limits`,
at a rate measured with the loaded model when the app is made, :mod:`nmtkit.serve.calibrate`,
unless ``--work-rate`` gives one): more is a 413 before it queues. Requests take turns on the
model (:mod:`nmtkit.serve.scheduler`): a long one offers it to the others before each search
step and each batch, so a short request sent while a long one runs is answered in about its
own time. Constraint phrases that cannot fit in the output cap
(with the text's prefix) are a 422 naming ``constraints.N``, and an answer with constraints
says per text whether they are all in it (``constraints_met``).
"""

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from fastapi import FastAPI, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse, Response
from fastapi.staticfiles import StaticFiles
from pydantic import BaseModel
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .. import __version__
from ..checkpoint import Bundle
from ..config import ModelConfig, dec_layers
from ..decode.attention import AXES, layer_head
from ..decode.confidence import LOW_COVERAGE, LOW_PROBABILITY, confidence, translation_confidence
from ..decode.deadline import Deadline
from ..decode.options import TranslateOptions
from ..decode.sentence_attention import SentenceAttention, sentence_attention
from ..decode.text_translator import decode_options, pharaoh
from ..decode.translation import Translation
from ..decode.translator import Translator, check_model_alignment_choice
from .batcher import MicroBatcher
from .calibrate import resolved_work_rate
from .limits import ServeLimits
from .scheduler import Busy, FairScheduler
from .schemas import ErrorResponse, TranslateResponse, request_models
from .security import HostAllowList

if TYPE_CHECKING:
    from ..config import Config
    from ..decode.text_translator import TextTranslator
    from ..models.seq2seq import Seq2Seq
from .checks import (
    checked_constraints_fit,
    checked_mbr,
    checked_n_best,
    checked_prefixes,
    checked_target_texts,
    checked_tgt_lang,
    checked_work,
    output_cap,
    rerank_info,
)

log = logging.getLogger(__name__)

STATIC = Path(__file__).resolve().parent / "static"


class ServedBundle(Protocol):
    """What the app serves, whatever runs the search: a checkpoint
    (:class:`nmtkit.checkpoint.Bundle`, ``nmtkit serve --engine torch``) or an export
    (:class:`nmtkit.export.ctranslate2_engine.CTranslate2Bundle`, ``--engine ctranslate2``)."""

    @property
    def cfg(self) -> "Config": ...  # name, languages, architecture, decoding defaults

    @property
    def path(self) -> Path | None: ...

    @property
    def model(self) -> "Seq2Seq | None": ...  # None: no attention maps (CTranslate2)

    @property
    def engine(self) -> str: ...


@runtime_checkable
class PartialEngine(Protocol):
    """A translator that cannot do all that nmtkit's own search does (an export's,
    :class:`nmtkit.export.ctranslate2_engine.CTranslate2Translator`): it says why before any work."""

    def unsupported(self, options: TranslateOptions) -> str | None: ...


@runtime_checkable
class EngineBundle(Protocol):
    """A served bundle whose engine brings its own translator (an export:
    :class:`nmtkit.export.ctranslate2_engine.CTranslate2Bundle`); a checkpoint's is
    :meth:`Translator.from_bundle <nmtkit.decode.translator.Translator.from_bundle>`."""

    def translator(self) -> "TextTranslator": ...


def default_translator(bundle: ServedBundle) -> "TextTranslator":
    """The translator that serves ``bundle`` with its stored decoding options."""
    if isinstance(bundle, Bundle):  # a checkpoint: nmtkit's own search
        return Translator.from_bundle(bundle)
    if isinstance(bundle, EngineBundle):
        return bundle.translator()
    raise TypeError(f"cannot serve a {type(bundle).__name__}: a checkpoint (load_bundle) or an "
                    "export (load_export_bundle) is served")


# --- errors ------------------------------------------------------------------------------------

def _where(loc: tuple[Any, ...] | list[Any]) -> str:
    parts = [str(p) for p in loc if p != "body"]
    return ".".join(parts) if parts else "body"


def _validation_message(errors: list[dict[str, Any]]) -> str:
    msgs = []
    for e in errors:
        loc = tuple(e.get("loc", ()))
        if e.get("type") == "missing" and loc == ("body",):
            msgs.append("the request body is empty: send a JSON object")
        elif e.get("type") == "json_invalid":
            msgs.append(f"the request body is not valid JSON: {e.get('ctx', {}).get('error', '')}"
                        .rstrip(": "))
        elif loc == ("body",) and e.get("type") in ("model_attributes_type", "dict_type"):
            msgs.append("the request body must be a JSON object")
        else:
            msg = str(e.get("msg", "invalid")).removeprefix("Value error, ")
            msgs.append(f"{_where(loc)}: {msg}")
    return "; ".join(msgs) or "invalid request"


def _body_error_message(exc: BaseException | None) -> str | None:
    """What was wrong with a body that FastAPI could not parse (it says only "error parsing")."""
    if isinstance(exc, UnicodeDecodeError):
        return "the request body is not valid UTF-8"
    if isinstance(exc, RecursionError):
        return "the request body is nested too deeply"
    return None


async def _until_disconnected(receive: Receive) -> None:
    """Return once the client has gone away (call after the request body was read)."""
    while (await receive())["type"] != "http.disconnect":
        pass


CLIENT_CLOSED_REQUEST = 499
"""Status logged for a request whose client left before the answer (nobody receives it)."""


def _jsonable_errors(errors: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Validation errors without the raw input/context objects (which may not be JSON)."""
    return [{"loc": [str(p) for p in e.get("loc", ())], "msg": e.get("msg", ""),
             "type": e.get("type", "")} for e in errors]


class BodySizeLimit:
    """ASGI middleware: bodies over ``max_bytes`` get a 413 before any parsing.

    Checks Content-Length up front and also counts a chunked body as it arrives.
    """

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app, self.max_bytes = app, max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] in ("GET", "HEAD", "OPTIONS"):
            return await self.app(scope, receive, send)
        too_big = JSONResponse(status_code=413, content={
            "detail": f"request body too large: at most {self.max_bytes} bytes"})
        length = dict(scope.get("headers") or []).get(b"content-length")
        if length is not None:
            try:
                if int(length) > self.max_bytes:
                    return await too_big(scope, receive, send)
            except ValueError:
                return await JSONResponse(status_code=400, content={
                    "detail": "invalid Content-Length header"})(scope, receive, send)
        # Read the body (bounded), then replay it to the app.
        chunks: list[bytes] = []
        size, more = 0, True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_bytes:
                return await too_big(scope, receive, send)
            chunks.append(chunk)
            more = message.get("more_body", False)
        body, sent = b"".join(chunks), False

        async def replay() -> Message:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        return await self.app(scope, replay, send)


async def on_invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
    errs = list(exc.errors())
    return JSONResponse(status_code=422, content={"detail": _validation_message(errs),
                                                  "errors": _jsonable_errors(errs)})


async def on_http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
    detail = str(exc.detail)
    if exc.status_code == 400:
        detail = _body_error_message(exc.__cause__) or detail
    return JSONResponse(status_code=exc.status_code, content={"detail": detail},
                        headers=getattr(exc, "headers", None))


ERRORS: dict[int | str, dict[str, Any]] = {
    code: {"model": ErrorResponse} for code in (400, 413, 422, 503)}


# --- time limits and clients that leave ---------------------------------------------------------

async def in_time(request: Request, coro: Awaitable[Any], timeout_s: float) -> Any:
    """Await ``coro`` within ``timeout_s``; give up on it if the client disconnects.

    Giving up cancels the request's future, so the batcher skips its queued work and cancels
    the request's :class:`~nmtkit.decode.deadline.Deadline` (a search that runs stops at its
    next step). A search that stops at the deadline itself
    (:class:`~nmtkit.decode.deadline.DeadlineExceeded`, a ``TimeoutError``) is the same 503.
    """
    work = asyncio.ensure_future(asyncio.wait_for(coro, timeout_s))
    gone = asyncio.ensure_future(_until_disconnected(request.receive))
    try:
        done, _ = await asyncio.wait({work, gone}, return_when=asyncio.FIRST_COMPLETED)
    finally:  # also when this handler is cancelled
        gone.cancel()
        if not work.done():
            work.cancel()
            work.add_done_callback(lambda t: t.cancelled() or t.exception())
    if work not in done:
        log.info("%s %s: client disconnected, request dropped", request.method, request.url.path)
        return Response(status_code=CLIENT_CLOSED_REQUEST)
    try:
        return work.result()
    except TimeoutError:
        raise HTTPException(503, f"request timed out after {timeout_s:g} s "
                                 "(server busy or input too long); try again") from None
    except Busy as e:  # (the batcher's queue, or the scheduler's threads)
        raise HTTPException(503, str(e)) from None


# --- model calls (run in the batcher's worker thread) -------------------------------------------

STEPWISE_ENGINES = frozenset({"torch", "numpy"})
"""Engines whose search checks its deadline before every step (nmtkit's own): a request takes
its turns there (:mod:`nmtkit.serve.scheduler`), so its batches may be large; CTranslate2
searches a batch in one call and checks the deadline before each call only, so its batches
are sized to a fraction of a second (:meth:`~nmtkit.serve.limits.ServeLimits.batch_size`)."""


def served_batch_size(translator: "TextTranslator", limits: ServeLimits, sentences: int,
                      beam: int, mbr: int | None) -> int:
    """Sentences searched together for a call of ``sentences`` texts: all of them with an
    engine of :data:`STEPWISE_ENGINES`, else what takes about
    :data:`~nmtkit.serve.limits.BATCH_S` at the server's work rate."""
    if translator.engine in STEPWISE_ENGINES:
        return max(1, sentences)
    return limits.batch_size(sentences, max(beam, mbr or 0))


def translate_fn(translator: "TextTranslator", limits: ServeLimits | None = None
                 ) -> Callable[..., list[str]]:
    """The batcher's model call: (texts, beam, max_length[, tgt_lang][, mbr=N][,
    deadline=D]) -> the best translation of each, :func:`served_batch_size` sentences at a
    time (``limits``; ``None``: all at once)."""
    def translate_batch(texts: list[str], beam: int, max_length: int | None,
                        tgt_lang: str | None = None, *, mbr: int | None = None,
                        deadline: Deadline | None = None) -> list[str]:
        size = (max(1, len(texts)) if limits is None
                else served_batch_size(translator, limits, len(texts), beam, mbr))
        options = TranslateOptions(beam=beam, batch_size=size, max_length=max_length,
                                   tgt_lang=tgt_lang, mbr=mbr, deadline=deadline)
        results = translator.translate(texts, options)
        return [r[0].text for r in results]

    return translate_batch


@dataclass(frozen=True)
class ConfidenceRequest:
    """What a request asked of the confidence view and the attention it reads (``None``: the
    defaults: :mod:`nmtkit.decode.confidence`'s thresholds, the model's ``decode`` layer/head)."""

    confidence: bool = False
    low_probability: float | None = None
    low_coverage: float | None = None
    alignment_layer: int | None = None
    alignment_head: int | None = None

    @classmethod
    def of(cls, req: Any) -> "ConfidenceRequest":
        return cls(req.confidence, req.low_probability, req.low_coverage, req.alignment_layer,
                   req.alignment_head)

    @property
    def thresholds(self) -> tuple[float, float]:
        return (LOW_PROBABILITY if self.low_probability is None else self.low_probability,
                LOW_COVERAGE if self.low_coverage is None else self.low_coverage)

    def layer_head(self, translator: "TextTranslator") -> tuple[int, int]:
        """The (layer, head) asked for, else the translator's; ``ValueError`` if nmtkit's
        model cannot give it (:func:`~nmtkit.decode.translator.check_model_alignment_choice`;
        another engine says what it cannot give itself, :func:`checked_engine`)."""
        cfg = translator.decode_cfg
        chosen = (cfg.alignment_layer if self.alignment_layer is None else self.alignment_layer,
                  cfg.alignment_head if self.alignment_head is None else self.alignment_head)
        if isinstance(translator, Translator):
            check_model_alignment_choice(translator.model, *chosen)
        return chosen

    def asked(self) -> bool:
        return self != ConfidenceRequest()


def translate_details(translator: "TextTranslator", texts: list[str], beam: int,
                      max_length: int | None, prefixes: list[str] | None,
                      constraints: list[list[str]] | None, scores: bool, alignments: bool,
                      conf: ConfidenceRequest | None = None, tgt_lang: str | None = None,
                      mbr: int | None = None, n_best: int = 1, *,
                      deadline: Deadline | None = None,
                      split_sentences: bool | None = None,
                      batch_size: int | None = None) -> dict[str, Any]:
    """``POST /v1/translate`` asked for more than the text (forced prefixes, constraints,
    scores, alignments, confidence, ``n_best`` above 1): one direct call outside the
    micro-batches (stopped at ``deadline``; ``batch_size`` sentences at a time, default all),
    the fields it asked for (with constraints:
    ``constraints_met``; with ``n_best``: :func:`n_best_json`)."""
    conf = conf or ConfidenceRequest()
    layer, head = conf.layer_head(translator)
    options = TranslateOptions(
        beam=beam, batch_size=batch_size or max(1, len(texts)), max_length=max_length,
        prefixes=prefixes,
        constraints=constraints, token_scores=scores or conf.confidence, alignments=alignments,
        need_attention=conf.confidence, alignment_layer=layer, alignment_head=head,
        tgt_lang=tgt_lang, mbr=mbr, n_best=n_best, deadline=deadline,
        split_sentences=split_sentences)
    lists = translator.translate(texts, options)
    results = [r[0] for r in lists]
    out: dict[str, Any] = {"translations": [r.text for r in results]}
    if constraints is not None:
        out["constraints_met"] = [r.constraints_met for r in results]
    if scores:
        out["scores"] = [r.score for r in results]
        out["token_log_probs"] = [r.token_log_probs or [] for r in results]
    if scores or alignments or conf.confidence:
        out["tokens"] = [r.tokens for r in results]
    if alignments or conf.confidence:
        out["src_tokens"] = [r.src_tokens for r in results]
    if alignments:
        out["alignments"] = [pharaoh(r.alignment) for r in results]
    if conf.confidence:
        out["confidence"] = [asdict(translation_confidence(r, *conf.thresholds)) for r in results]
    if n_best > 1:
        out["n_best"] = [n_best_json(hs, constraints is not None, scores, alignments, conf)
                         for hs in lists]
    return out


def n_best_json(candidates: list[Translation], constrained: bool, scores: bool, alignments: bool,
                conf: ConfidenceRequest) -> list[dict[str, Any]]:
    """One text's n best (``"n_best"`` of the answer), each with the fields asked for, as
    ``nmtkit translate --n-best`` lists them: with constraints, those that miss one are left
    out, but the first."""
    shown = [h for j, h in enumerate(candidates) if j == 0 or not constrained or h.constraints_met]
    out = []
    for h in shown:
        c: dict[str, Any] = {"translation": h.text}
        if scores:
            c["score"], c["token_log_probs"] = h.score, h.token_log_probs or []
        if scores or alignments or conf.confidence:
            c["tokens"] = h.tokens
        if alignments:
            c["alignment"] = pharaoh(h.alignment)
        if conf.confidence:
            c["confidence"] = asdict(translation_confidence(h, *conf.thresholds))
        out.append(c)
    return out


def attention_json(att: SentenceAttention, kinds: list[str] | None = None) -> dict[str, Any]:
    """The answer of ``POST /v1/attention``: tokens, and kind -> layer -> head -> query x key
    (5 decimals), each kind naming the tokens that label its rows and columns."""
    out: dict[str, Any] = {}
    for kind, w in att.maps.items():  # (layers, heads, queries, keys)
        if kinds is not None and kind not in kinds:
            continue
        rows, cols = AXES.get(kind, ("target", "source"))
        mats = ((w * 1e5).round() / 1e5).tolist()  # 5 decimals: smaller JSON
        out[kind] = {"rows": rows, "cols": cols, "layers": len(mats),
                     "heads": len(mats[0]) if mats else 0, "weights": mats}
    hyp = att.translation
    return {"text": att.text, "translation": hyp.text, "score": hyp.score,
            "tokens": att.tokens, "attention": out}


def attention_for(bundle: ServedBundle, translator: Translator, text: str, beam: int, max_length: int | None,
                  max_src_tokens: int, kinds: list[str] | None = None, prefix: str | None = None,
                  conf: ConfidenceRequest | None = None, tgt_lang: str | None = None,
                  mbr: int | None = None, *, deadline: Deadline | None = None) -> dict[str, Any]:
    """Translate ``text`` (into ``tgt_lang``; starting with ``prefix`` if given; its search
    stopped at ``deadline``), then return
    the attention maps of ``bundle.model`` for that translation
    (:func:`nmtkit.decode.sentence_attention.sentence_attention`; chosen by MBR among ``mbr``
    candidates where given, as ``/v1/translate`` chooses) as JSON; with ``conf.confidence``
    also its confidence view (coverage from the maps' decoder source attention of the chosen
    layer/head) and ``prefix_texts``."""
    conf = conf or ConfidenceRequest()
    layer, head = conf.layer_head(translator)
    att = sentence_attention(translator, text, model=bundle.model, beam=beam,
                             max_length=max_length, max_src_tokens=max_src_tokens,
                             prefix=prefix, token_scores=conf.confidence, tgt_lang=tgt_lang,
                             mbr=mbr, deadline=deadline)
    out = attention_json(att, kinds)
    out["forced_tokens"] = len(translator.prefix_tokens(prefix, None)) if prefix else 0
    hyp = att.translation
    if conf.confidence:
        src_att = layer_head(att.maps["decoder_src"], layer, head).numpy()  # (T + 1, S + 1)
        out["confidence"] = asdict(confidence(hyp.token_log_probs or [], src_att,
                                              len(hyp.src_tokens), len(hyp.tokens),
                                              *conf.thresholds))
        out["prefix_texts"] = [translator.tgt_tok.decode(hyp.tokens[:t + 1])
                               for t in range(len(hyp.tokens))]
    return out


def chosen_layer_head(conf: ConfidenceRequest, translator: "TextTranslator") -> tuple[int, int]:
    """The request's alignment layer/head, checked before any work: a 422 naming the problem
    (the RNN has none to choose, an index past the model's layers or heads)."""
    try:
        return conf.layer_head(translator)
    except ValueError as e:
        raise HTTPException(422, str(e)) from None


def health_info(bundle: ServedBundle, translator: "TextTranslator", limits: ServeLimits,
                batcher: MicroBatcher, default_beam: int) -> dict[str, Any]:
    cfg = bundle.cfg
    return {"status": "ok", "model": model_name(bundle), "name": cfg.name,
            "architecture": cfg.model.arch, "src_lang": cfg.data.src_lang,
            "tgt_lang": cfg.data.tgt_lang, "device": str(getattr(translator, "device", "?")),
            "engine": bundle.engine, "attention": has_attention(bundle, translator),
            "parameters": parameter_count(bundle),
            "default_beam": default_beam, "default_mbr": translator.decode_cfg.mbr,
            "version": __version__,
            "limits": asdict(limits), "batching": batcher.stats.as_dict(),
            "scheduling": batcher.scheduler.stats.as_dict(),
            # data.directions: the languages a request's "tgt_lang" may name
            "directions": list(cfg.data.directions), "tgt_langs": sorted(translator.target_tags),
            "rerank": rerank_info(translator)}


def checked_engine(translator: "TextTranslator", constraints: list[list[str]] | None,
                   alignments: bool, conf: ConfidenceRequest) -> None:
    """What the engine cannot do, refused before any work: a 501 with its reason (the
    ctranslate2 engine: constraints, and the source attention of another layer or head than
    its export's, :meth:`~nmtkit.export.ctranslate2_engine.CTranslate2Translator.unsupported`)."""
    if isinstance(translator, PartialEngine):
        why = translator.unsupported(TranslateOptions(
            constraints=constraints, alignments=alignments, need_attention=conf.confidence,
            alignment_layer=conf.alignment_layer, alignment_head=conf.alignment_head))
        if why:
            raise HTTPException(501, why)


def parameter_count(bundle: ServedBundle) -> int | None:
    if bundle.model is not None:
        return sum(p.numel() for p in bundle.model.parameters())
    count = getattr(bundle, "parameters", None)  # an export records its model's count
    return count if isinstance(count, int) else None


def has_attention(bundle: ServedBundle, translator: "TextTranslator") -> bool:
    """Whether ``POST /v1/attention`` can answer: the PyTorch engine (attention maps of
    every layer and head, or an RNN's one map); CTranslate2 returns no per-layer maps."""
    return bundle.model is not None and isinstance(translator, Translator)


def attention_shape(bundle: ServedBundle) -> tuple[int, int] | None:
    """(decoder layers, heads) a request may name for its alignments and coverage (the RNN:
    (0, 0), only the -1 defaults); ``None`` where the model is not known (CTranslate2)."""
    model_cfg = getattr(bundle.model, "cfg", None)
    if not isinstance(model_cfg, ModelConfig):
        return None
    return (0, 0) if model_cfg.arch == "rnn" else (dec_layers(model_cfg), model_cfg.heads)


def model_name(bundle: ServedBundle) -> str:
    path = bundle.path
    return f"{path.parent.name}/{path.name}" if path is not None else bundle.cfg.name


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    yield
    await app.state.batcher.stop()
    app.state.batcher.close()


# --- the app -----------------------------------------------------------------------------------

def create_app(bundle: ServedBundle, limits: ServeLimits | None = None,
               translator: "TextTranslator | None" = None,
               allowed_hosts: list[str] | None = None) -> FastAPI:
    """A FastAPI app serving ``bundle`` (see :func:`nmtkit.checkpoint.load_bundle`, or
    :func:`nmtkit.export.ctranslate2_engine.load_export_bundle` for the CTranslate2 engine).

    ``allowed_hosts``: the ``Host`` names accepted (:mod:`nmtkit.serve.security`); ``None``
    accepts any (the command line passes the bind address and the loopback names).
    Interactive docs (``/docs``) are off: they would load scripts from a CDN; the schema
    is at ``/openapi.json``.
    """
    translator = served_translator(bundle, translator)
    limits = resolved_work_rate(translator, limits or ServeLimits())  # measured, unless given
    default_beam = decode_options(bundle.cfg.decode, max_beam=limits.max_beam).beam
    scheduler = FairScheduler()
    batcher = MicroBatcher(translate_fn(translator, limits),
                           limits.max_batch, limits.max_wait_ms, limits.max_pending, scheduler)
    bodies = request_models(limits, default_beam, attention_shape(bundle))
    app = FastAPI(title="nmtkit", version=__version__, lifespan=lifespan, docs_url=None,
                  redoc_url=None, description=f"Translation service for {model_name(bundle)} "
                  f"({bundle.cfg.data.src_lang} -> {bundle.cfg.data.tgt_lang}).")
    app.state.batcher = batcher
    app.state.limits = limits
    app.add_middleware(BodySizeLimit, max_bytes=limits.max_body_bytes)
    app.add_middleware(HostAllowList, allowed_hosts=allowed_hosts)  # outermost: runs first
    # Starlette types a handler as taking any Exception; it passes each only its own class.
    app.add_exception_handler(RequestValidationError, on_invalid)  # type: ignore[arg-type]
    app.add_exception_handler(StarletteHTTPException, on_http_error)  # type: ignore[arg-type]
    add_translate_route(app, translator, batcher, limits, bodies.translate)
    add_attention_route(app, bundle, translator, batcher, limits, bodies.attention)

    @app.get("/health", summary="Model, languages, device, limits")
    async def health() -> dict[str, Any]:
        return health_info(bundle, translator, limits, batcher, default_beam)

    @app.get("/", include_in_schema=False)
    async def page() -> FileResponse:
        return FileResponse(STATIC / "index.html", media_type="text/html; charset=utf-8")

    app.mount("/static", StaticFiles(directory=STATIC), name="static")
    return app


def served_translator(bundle: ServedBundle, translator: "TextTranslator | None") -> "TextTranslator":
    """The translator that answers: ``translator``, else the bundle's default one. The model's
    ``decode.rerank`` is dropped (with a warning) where no reverse model was loaded to
    rerank with."""
    translator = translator or default_translator(bundle)
    if translator.decode_cfg.rerank and translator.reverse is None:
        log.warning("the model's decode.rerank (%d) is not used: the server loads no reverse "
                    "model to rerank with; it answers with the beam's best",
                    translator.decode_cfg.rerank)
        translator.decode_cfg = decode_options(translator.decode_cfg, rerank=0)
    return translator


def checked_details(translator: "TextTranslator", req: Any, conf: ConfidenceRequest,
                    limits: ServeLimits) -> None:
    """Refuse, before any work, a ``/v1/translate`` request whose details (prefixes,
    constraints, alignments, the confidence view) the engine, the model or ``limits``
    cannot serve: an HTTP error naming the field."""
    checked_engine(translator, req.constraints, req.alignments, conf)
    chosen_layer_head(conf, translator)
    checked_prefixes(translator, req.prefixes, req.max_length, limits)
    checked_target_texts(translator, len(req.texts), req.prefixes, req.constraints)
    checked_constraints_fit(translator, req.prefixes, req.constraints, req.max_length, limits)
    checked_work(translator, req.texts, req.beam, req.mbr, req.max_length, limits,
                 req.prefixes, req.constraints, req.split_sentences)


def add_translate_route(app: FastAPI, translator: "TextTranslator", batcher: MicroBatcher,
                        limits: ServeLimits, TranslateRequest: type[BaseModel]) -> None:
    """``POST /v1/translate``: a plain request (texts, beam, length, language, MBR) joins the
    micro-batches; one that asks for more (prefixes, constraints, scores, alignments, the
    confidence view, n-best lists, sentence splitting) is checked and translated alone."""

    # The request model is a class built at run time (bounded by ``limits``): no static type.
    @app.post("/v1/translate", response_model=TranslateResponse,
              responses={**ERRORS, 501: {"model": ErrorResponse}},
              response_model_exclude_none=True, summary="Translate sentences (in order)")
    async def translate(req: TranslateRequest,  # type: ignore[valid-type]
                        request: Request) -> TranslateResponse | Response:
        body: Any = req
        deadline = Deadline.after(limits.timeout_s)  # its search stops there
        extras = (body.prefixes, body.constraints, body.scores, body.alignments)
        conf = ConfidenceRequest.of(body)
        tgt_lang = checked_tgt_lang(translator, body.tgt_lang)
        checked_mbr(translator, body.mbr)
        checked_n_best(translator, body.beam, body.n_best, body.mbr)
        split = body.split_sentences
        if (any(x is not None and x is not False for x in extras) or conf.asked()
                or body.n_best > 1 or split is not None):
            checked_details(translator, body, conf, limits)
            size = served_batch_size(translator, limits, len(body.texts), body.beam, body.mbr)
            work = batcher.run(partial(translate_details, split_sentences=split,
                                       batch_size=size),
                               translator, body.texts, body.beam,
                               output_cap(body.max_length, limits), *extras, conf, tgt_lang,
                               body.mbr, body.n_best, deadline=deadline)
            detail = await in_time(request, work, limits.timeout_s)
            return detail if isinstance(detail, Response) else TranslateResponse(**detail)
        checked_work(translator, body.texts, body.beam, body.mbr, body.max_length, limits)
        job = batcher.submit(body.texts, body.beam, output_cap(body.max_length, limits),
                             tgt_lang, body.mbr, deadline=deadline)
        out = await in_time(request, job, limits.timeout_s)
        return out if isinstance(out, Response) else TranslateResponse(translations=out)


def add_attention_route(app: FastAPI, bundle: ServedBundle, translator: "TextTranslator",
                        batcher: MicroBatcher, limits: ServeLimits,
                        AttentionRequest: type[BaseModel]) -> None:
    """``POST /v1/attention``: one sentence translated with the attention maps of every
    layer and head (the PyTorch engine only: a 501 otherwise)."""

    @app.post("/v1/attention", response_model=dict[str, Any],
              responses={**ERRORS, 501: {"model": ErrorResponse}},
              summary="Translate one sentence and return its attention maps")
    async def attention(req: AttentionRequest,  # type: ignore[valid-type]
                        request: Request) -> dict[str, Any] | Response:
        body: Any = req
        if not has_attention(bundle, translator) or not isinstance(translator, Translator):
            raise HTTPException(501, f"attention maps are not available with the {bundle.engine} "
                                     "engine (CTranslate2 returns no per-layer attention); serve "
                                     "the checkpoint (.pt) with --engine torch to see them")
        if not hasattr(bundle.model, "attention_maps"):
            raise HTTPException(501, f"{bundle.cfg.model.arch} models do not expose attention maps")
        deadline = Deadline.after(limits.timeout_s)  # its search stops there
        conf = ConfidenceRequest.of(body)
        chosen_layer_head(conf, translator)
        tgt_lang = checked_tgt_lang(translator, body.tgt_lang)
        checked_mbr(translator, body.mbr)
        prefixes = None if body.prefix is None else [body.prefix]
        if prefixes is not None:
            checked_prefixes(translator, prefixes, body.max_length, limits, field="prefix")
            checked_target_texts(translator, 1, prefixes, field="prefix")
        checked_work(translator, [body.text], body.beam, body.mbr, body.max_length, limits,
                     prefixes)
        work = batcher.run(attention_for, bundle, translator, body.text, body.beam,
                           output_cap(body.max_length, limits), limits.max_attention_tokens,
                           body.kinds, body.prefix, conf, tgt_lang, body.mbr, deadline=deadline)
        try:
            result: dict[str, Any] | Response = await in_time(request, work, limits.timeout_s)
            return result
        except ValueError as e:
            raise HTTPException(422, str(e)) from None
