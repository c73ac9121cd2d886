"""Reading a CTranslate2 export of an nmtkit model and translating with it: the serving
engine ``nmtkit serve --engine ctranslate2`` (:class:`CTranslate2Translator`,
:func:`load_export_bundle`). Writing the export is :mod:`nmtkit.export.ctranslate2`.

The engine runs in nmtkit's text pipeline (:class:`~nmtkit.decode.text_translator.TextTranslator`:
tokenizers, sentence splitting, protected spans, forced prefixes) and supplies only the
search of a batch (:meth:`CTranslate2Translator.search`), CTranslate2's; what CTranslate2
cannot do (lexically constrained search) is refused with the reason.
"""

from __future__ import annotations

import copy
import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, ClassVar

import ctranslate2
import numpy as np

from ..config import Config, ConfigError, DataConfig, DecodeConfig, ModelConfig
from ..data.directions import target_tags
from ..data.sentences import text_languages
from ..data.tokenizers import Tokenizer, tokenizer_from_state
from ..data.vocab import Vocab
from ..decode.engine import Found, SearchRequest, Source
from ..decode.options import TranslateOptions
from ..decode.text_translator import TextTranslator, decode_options
from ..errors import UserError
from ..rules import output_cap
from . import ExportError
from .ctranslate2_format import META_FILE, META_FORMAT, META_VERSION, NEVER, NEVER_SET

log = logging.getLogger(__name__)



def read_meta(model_dir: str | Path) -> dict[str, Any]:
    path = Path(model_dir) / META_FILE
    try:
        meta = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ExportError(f"{path}: not found; is {model_dir} an `nmtkit export` directory?") from None
    except json.JSONDecodeError as e:
        raise ExportError(f"{path}: invalid JSON at line {e.lineno}: {e.msg}") from None
    if not isinstance(meta, dict) or meta.get("format") != META_FORMAT:
        raise ExportError(f"{path}: not an nmtkit CTranslate2 export (no '{META_FORMAT}' marker)")
    if meta.get("version", 0) > META_VERSION:
        raise ExportError(f"{path}: export version {meta['version']} is newer than this nmtkit "
                          f"understands ({META_VERSION})")
    return meta


def _load_tokenizer(desc: dict[str, Any], model_dir: Path) -> Tokenizer:
    state = dict(desc)
    name = state.pop("model_file", None)
    if name is not None:
        state["model_proto"] = (model_dir / name).read_bytes()
    return tokenizer_from_state(state)


NO_CONSTRAINTS = ("constraints: CTranslate2 has no lexically constrained search (it can force a "
                  "translation's beginning, not make it contain a phrase anywhere); nmtkit's own "
                  "search does it: a checkpoint (.pt), `nmtkit serve --engine torch`")
"""Why the ctranslate2 engine refuses constraints (the server answers 501 with it)."""


def export_attention(meta: dict[str, Any]) -> tuple[int, int]:
    """(decoder layer, head) of the source attention an export returns, as nmtkit names them
    (-1: the last layer, the heads' mean): ``nmtkit.json``'s ``attention``
    (:func:`exported_attention`); an export made before it was recorded returns CTranslate2's
    default, the first head of the last layer."""
    att = meta.get("attention")
    if isinstance(att, dict):
        return int(att["layer"]), int(att["head"])
    return -1, 0


def _target_vocabulary(model_dir: Path, side: str = "target") -> list[str]:
    """The target (or ``side``'s) tokens in id order (nmtkit's ids:
    :func:`transformer_spec_from_bundle`)."""
    for name in (f"{side}_vocabulary", "shared_vocabulary"):
        if (model_dir / f"{name}.json").is_file():
            tokens = json.loads((model_dir / f"{name}.json").read_text(encoding="utf-8"))
            return [str(t) for t in tokens]
        if (model_dir / f"{name}.txt").is_file():  # ctranslate2 < 3
            return (model_dir / f"{name}.txt").read_text(encoding="utf-8").splitlines()
    raise ExportError(f"{model_dir}: no {side} vocabulary ({side}_vocabulary.json or "
                      "shared_vocabulary.json)")


def _with_eos_column(rows: list[list[float]]) -> np.ndarray:
    """CTranslate2's source attention rows (source tokens only: it leaves out the ``</s>`` it
    appended) with the ``</s>`` column put back: each row is a softmax over the tokens and
    ``</s>``, so ``</s>`` has what the tokens leave. (rows, S) -> (rows, S + 1)."""
    att = np.asarray(rows, dtype=np.float32).reshape(len(rows), -1)  # (rows, S)
    eos = np.maximum(np.float32(1.0) - att.sum(axis=1, keepdims=True), np.float32(0.0))  # (rows, 1)
    return np.concatenate([att, eos], axis=1)


Hyps = list[list[tuple[list[str], float]]]
"""CTranslate2's n best of each sentence: (tokens, score)."""


class CTranslate2Translator(TextTranslator):
    """Text in, text out with an exported model, as :class:`nmtkit.decode.translator.Translator`.

    The text side is nmtkit's own pipeline (:class:`~nmtkit.decode.text_translator.TextTranslator`:
    the checkpoint's tokenizer, truncation to the position table, ``reverse_source``, options,
    empty lines, length order, detokenizing); this engine supplies the search
    (:meth:`search`). It gives CTranslate2 the same length cap per sentence (CTranslate2's
    ``max_decoding_length`` is per call: see :meth:`search`) and never returns ``<pad>``/``<s>``
    (nmtkit's search cannot produce them).

    It gives what nmtkit's search gives but constraints (:meth:`refuses`): n-best lists
    (``num_hypotheses``), forced prefixes (``target_prefix``), token scores (``score_batch``:
    teacher forcing) and the source attention with alignments and the confidence view's
    coverage (``return_attention``; of the layer and heads chosen at export,
    :func:`exported_attention`). Where it can, the result is nmtkit's own, scores included.
    It differs:

    - ``length_penalty``: passed through, but CTranslate2 divides the log-probability by
      ``n ** length_penalty`` where nmtkit divides by the GNMT ``((5 + n) / 6) ** length_penalty``
      (``n``: tokens and ``</s>``; the same ranking for 0);
    - at the length cap nmtkit forces ``</s>`` (and pays its log-probability), CTranslate2
      stops without it;
    - beam search: CTranslate2 keeps every finished hypothesis, nmtkit keeps finished ones in
      its ``beam`` slots where better-scoring live ones can push them out, so CTranslate2 now
      and then returns a more probable translation than nmtkit;
    - a sentence whose unconstrained search output contains ``<pad>``/``<s>`` is searched
      again with both suppressed, and then its scores are normalised over the other tokens.
    """

    engine = "ctranslate2"

    def __init__(self, model_dir: str | Path, device: str = "cpu", compute_type: str = "default",
                 intra_threads: int = 0, inter_threads: int = 1, **translator_kwargs: Any) -> None:
        self.model_dir = Path(model_dir)
        meta = read_meta(self.model_dir)
        self.meta = meta
        layer, head = export_attention(meta)  # the only attention the export gives
        super().__init__(_load_tokenizer(meta["tokenizers"]["src"], self.model_dir),
                         _load_tokenizer(meta["tokenizers"]["tgt"], self.model_dir),
                         DecodeConfig(**{**meta["decode"], "alignment_layer": layer,
                                         "alignment_head": head}),
                         bool(meta["reverse_source"]), meta.get("max_positions"),
                         # languages known only from an export that stores its config
                         target_tags=(target_tags(export_config(meta, self.model_dir).data)
                                      if isinstance(meta.get("config"), dict) else None),
                         languages=(text_languages(export_config(meta, self.model_dir).data)
                                    if isinstance(meta.get("config"), dict) else (None, None)))
        self.tgt_vocab = Vocab(_target_vocabulary(self.model_dir))
        self.src_vocab = Vocab(_target_vocabulary(self.model_dir, "source"))  # protected spans
        self.device = device
        self.exact_caps = True
        """Each sentence searched at its own length cap (:meth:`search`); False: every
        sentence of a call at the largest cap among them (one CTranslate2 call)."""
        self.translator = ctranslate2.Translator(str(self.model_dir), device=device,
                                                 compute_type=compute_type,
                                                 intra_threads=intra_threads,
                                                 inter_threads=inter_threads, **translator_kwargs)

    def refuses(self, options: TranslateOptions, cfg: DecodeConfig | None = None,
                n_lines: int = 0) -> str | None:
        """Why this engine cannot do what ``options`` ask (``None``: it can): constraints
        (:data:`NO_CONSTRAINTS`), or the source attention of another layer or head than the
        one chosen at export (CTranslate2 returns that one only). The server answers 501 with
        it (:meth:`~nmtkit.decode.text_translator.TextTranslator.unsupported`)."""
        if options.constraints is not None:
            return NO_CONSTRAINTS
        if not (options.alignments or options.need_attention):
            return None
        have = self.decode_cfg.alignment_layer, self.decode_cfg.alignment_head
        asked = (have[0] if options.alignment_layer is None else options.alignment_layer,
                 have[1] if options.alignment_head is None else options.alignment_head)
        layers, heads = int(self.meta["layers"][1]), int(self.meta["heads"])

        def same(x: tuple[int, int]) -> tuple[int, int]:  # -1 names the last layer, 1 head's mean
            return (layers - 1 if x[0] == -1 else x[0], 0 if heads == 1 and x[1] == -1 else x[1])

        if same(asked) == same(have):
            return None
        layer = "the last decoder layer" if have[0] == -1 else f"decoder layer {have[0]}"
        what = "the heads' mean" if have[1] == -1 else f"head {have[1]}"
        return (f"alignment layer {asked[0]}, head {asked[1]}: this export returns the source "
                f"attention of {layer} ({what}) only, chosen when it was exported "
                "(decode.alignment_layer/alignment_head); export again with those set, or use "
                "nmtkit's own search (--engine torch)")

    def target_ids(self, prefixes: Sequence[str] | None,
                   constraints: Sequence[Sequence[str]] | None, n_lines: int,
                   max_length: int | None = None
                   ) -> tuple[list[list[int]] | None, list[list[list[int]]] | None]:
        """(each line's forced prefix as target ids, ``None``), checked as nmtkit's search
        checks them (:meth:`~nmtkit.decode.text_translator.TextTranslator.target_ids`);
        constraints: a ``UserError`` (:data:`NO_CONSTRAINTS`)."""
        if constraints is not None:
            raise UserError(NO_CONSTRAINTS)
        return super().target_ids(prefixes, None, n_lines, max_length)

    def steps(self, source: Source, request: SearchRequest) -> int:
        """The tokens before ``</s>`` that ``source`` may produce: nmtkit's length cap, raised
        to fit its forced prefix."""
        cfg = request.cfg
        cap = output_cap(len(source.tokens) + 1, cfg.max_len_a, cfg.max_len_b, request.max_length) - 1
        return max(cap, len(source.prefix or []))

    def batches(self, order: list[int], sources: list[Source],
                request: SearchRequest) -> list[list[int]]:
        """Every sentence in one CTranslate2 call, which batches them by length itself
        (``max_batch_size``); those whose cap leaves room for ``</s>`` only on their own.
        With a deadline (``nmtkit serve``'s), ``batch_size`` sentences a call: the deadline
        is checked before each call (CTranslate2's cannot be stopped once started), and the
        server hands the model to other requests there (:mod:`nmtkit.serve.scheduler`)."""
        none = [i for i in order if self.steps(sources[i], request) == 0]  # nothing to search
        rest = [i for i in order if self.steps(sources[i], request) > 0]  # (in length order)
        if request.deadline is None:
            return [b for b in (none, rest) if b]
        size = request.cfg.batch_size
        return [b for b in (none, *(rest[i:i + size] for i in range(0, len(rest), size))) if b]

    def search(self, sources: list[Source], request: SearchRequest) -> list[list[Found]]:
        """CTranslate2's n best of each source, with what ``request`` asks for besides them
        (:meth:`_found`).

        The sentences are searched in one CTranslate2 call, capped at the largest length cap
        among them, since CTranslate2's ``max_decoding_length`` is per call. With
        :attr:`exact_caps` each sentence then gets nmtkit's own cap (:meth:`_exact_caps`). A
        forced prefix raises its sentence's cap to fit it, as nmtkit's search does.

        ``score`` is CTranslate2's: the log-probability (``</s>`` included) divided by
        ``(len(tokens) + 1) ** length_penalty`` (a hypothesis cut at the length cap has no
        ``</s>``: ``len(tokens) ** length_penalty``); for greedy search the log-probability,
        as nmtkit's. With a forced prefix it counts the prefix's tokens too, as nmtkit's
        (CTranslate2's own leaves them out).
        """
        steps = [self.steps(s, request) for s in sources]
        n_steps = max(steps)
        if n_steps == 0:  # only </s> fits
            return self._found(sources, [[([], 0.0)] * request.cfg.n_best for _ in sources],
                               steps, request)
        out = self._search(sources, n_steps, request)
        if self.exact_caps:
            out = self._exact_caps(sources, steps, n_steps, out, request)
        return self._found(sources, out, steps, request)

    def _search(self, sources: list[Source], n_steps: int, request: SearchRequest) -> Hyps:
        """CTranslate2's n-best (tokens, score) of ``sources``, ``n_steps`` tokens at most.
        Suppressing tokens renormalises CTranslate2's softmax over the others, which nmtkit
        does not do (it computes log-probabilities over all tokens, then excludes
        <pad>/<s>): search unconstrained first, then again only where that produced them.
        The deadline is checked before each call: CTranslate2's search cannot be stopped
        once started (``nmtkit serve`` bounds a request's work up front,
        :mod:`nmtkit.serve.limits`)."""
        cfg, deadline = request.cfg, request.deadline
        options = dict(max_batch_size=cfg.batch_size, beam_size=cfg.beam,
                       num_hypotheses=cfg.n_best,
                       length_penalty=cfg.length_penalty if cfg.beam > 1 else 0.0,
                       min_decoding_length=0, max_input_length=0, return_scores=True,
                       max_decoding_length=n_steps)
        tokens = [s.model_tokens for s in sources]
        starts = ([self.tgt_vocab.decode(s.prefix, strip_special=False) if s.prefix else None
                   for s in sources] if any(s.prefix is not None for s in sources) else None)
        if deadline is not None:
            deadline.check()
        out = [list(zip(r.hypotheses, r.scores, strict=True))
               for r in self.translator.translate_batch(tokens, starts, **options)]
        redo = [j for j, hyps in enumerate(out) if any(not NEVER_SET.isdisjoint(h) for h, _ in hyps)]
        if redo:
            if deadline is not None:
                deadline.check()
            again = self.translator.translate_batch(
                [tokens[j] for j in redo], [starts[j] for j in redo] if starts else None,
                **options, suppress_sequences=[[t] for t in NEVER])
            for j, r in zip(redo, again, strict=True):
                out[j] = list(zip(r.hypotheses, r.scores, strict=True))
        return out

    def _exact_caps(self, sources: list[Source], steps: list[int], n_steps: int, out: Hyps,
                    request: SearchRequest) -> Hyps:
        """``out`` (searched at the call's cap ``n_steps``) with each sentence at its own cap
        (``steps``): greedy search chooses each token without looking at the cap, so an output
        that went past its cap is cut there (and its score recomputed as CTranslate2 gives it
        at the cap); a beam search that reached its sentence's cap is run again at that cap
        (one call per distinct cap, for those sentences only; a beam search that ended before
        its cap keeps its result, unless a hypothesis cut at the cap would have outscored it,
        which CTranslate2 would rank too)."""
        reached = [j for j in range(len(sources)) if steps[j] < n_steps
                   and any(len(h) >= steps[j] for h, _ in out[j])]
        if reached and request.cfg.beam == 1:  # greedy: cut at the cap, score without </s>
            cut = [out[j][0][0][:steps[j]] for j in reached]
            scored = self.translator.score_batch([sources[j].model_tokens for j in reached], cut,
                                                 max_input_length=0)
            for j, toks, r in zip(reached, cut, scored, strict=True):
                out[j] = [(toks, float(sum(r.log_probs[:len(toks)])))]
        elif reached:  # beam: search those again, each at its own cap
            by_cap: dict[int, list[int]] = {}
            for j in reached:
                by_cap.setdefault(steps[j], []).append(j)
            for cap, js in by_cap.items():
                for j, hyps in zip(js, self._search([sources[j] for j in js], cap, request),
                                   strict=True):
                    out[j] = hyps
        return out

    def _found(self, sources: list[Source], out: Hyps, steps: list[int],
               request: SearchRequest) -> list[list[Found]]:
        """The :class:`~nmtkit.decode.engine.Found` of each sentence's n-best (tokens, score)
        ``out``, with what ``request`` asks for besides the text:

        - token log-probabilities (``token_scores``; and always with a forced prefix, whose
          tokens CTranslate2's score leaves out): ``score_batch``, teacher forcing, nmtkit's
          ``token_log_probs`` (the tokens, then ``</s>``); a prefixed sentence's score and
          ``log_prob`` are recomputed from them (and its list reordered by them);
        - the source attention: :meth:`_source_attention`.
        """
        cfg = request.cfg
        flat = [(j, toks) for j, hyps in enumerate(out) for toks, _ in hyps]
        prefixed = {j for j, s in enumerate(sources) if s.prefix}
        log_probs: list[list[float]] = []
        if request.token_scores or prefixed:
            log_probs = [list(r.log_probs) for r in self.translator.score_batch(
                [sources[j].model_tokens for j, _ in flat], [toks for _, toks in flat],
                max_batch_size=cfg.batch_size, max_input_length=0)]
        attention: list[np.ndarray] = []
        if request.attention:
            attention = self._source_attention([sources[j].model_tokens for j, _ in flat],
                                               [toks for _, toks in flat], cfg.batch_size)
        results, k = [], 0
        for j, hyps in enumerate(out):
            row = []
            for toks, score in hyps:
                cut = len(toks) >= steps[j]  # stopped at the cap: no </s>
                log_prob = self._log_prob(toks, score, steps[j], cfg)
                if j in prefixed:  # CTranslate2's score leaves the forced tokens out
                    log_prob = float(sum(log_probs[k][:len(toks)] if cut else log_probs[k]))
                    n = len(toks) if cut else len(toks) + 1
                    score = (log_prob / n ** cfg.length_penalty if cfg.beam > 1 and n
                             else log_prob)
                row.append(Found(toks, score, log_prob,
                                 log_probs[k] if request.token_scores else None,
                                 attention[k] if attention else None))
                k += 1
            if j in prefixed:
                row.sort(key=lambda f: -f.score)  # (stable: ties keep CTranslate2's order)
            results.append(row)
        return results

    def _source_attention(self, sources: list[list[str]], outputs: list[list[str]],
                          batch_size: int) -> list[np.ndarray]:
        """(len(output) + 1, len(source) + 1) source attention of each output given its source,
        rows the steps that predict its tokens, then ``</s>``; columns the source tokens (in
        the order the model reads them), then ``</s>``: the layer and heads chosen at export
        (:func:`exported_attention`).

        From a second pass, greedy decoding forced through the output (``target_prefix``) and
        one step more (the ``</s>`` row, also for an output stopped at its cap), not from the
        search: in a batch, CTranslate2's beam search returns the first step's attention of
        another sentence (ctranslate2 4.x); forced greedy decoding returns every row as
        nmtkit's teacher forcing computes it."""
        if not sources:
            return []
        results = self.translator.translate_batch(
            sources, [toks or None for toks in outputs], max_batch_size=batch_size,
            beam_size=1, max_decoding_length=max(len(t) for t in outputs) + 1,
            min_decoding_length=0, max_input_length=0, return_attention=True,
            return_end_token=True)
        return [_with_eos_column(r.attention[0][:len(toks) + 1])
                for r, toks in zip(results, outputs, strict=True)]

    @staticmethod
    def _log_prob(tokens: list[str], score: float, cap: int, cfg: DecodeConfig) -> float:
        """The log-probability behind CTranslate2's ``score`` (see :meth:`search`): the
        score times ``n ** length_penalty``, ``n`` the tokens and ``</s>``, or the tokens
        alone for a hypothesis that reached its sentence's ``cap`` (cut, no ``</s>``)."""
        if cfg.beam == 1 or cfg.length_penalty == 0:
            return score
        n = len(tokens) if len(tokens) >= cap else len(tokens) + 1
        return float(score * n ** cfg.length_penalty)

    def translate_lines(self, lines: list[str], beam: int | None = None,
                        batch_size: int | None = None, exact_caps: bool = True, *,
                        tgt_lang: str | None = None,
                        progress: Callable[[int, int], None] | None = None) -> list[str]:
        """As :meth:`TextTranslator.translate_lines`; ``exact_caps``: :attr:`exact_caps` for
        this call."""
        tr = self
        if exact_caps != self.exact_caps:
            tr = copy.copy(self)
            tr.exact_caps = exact_caps
        return TextTranslator.translate_lines(tr, lines, beam, batch_size, tgt_lang=tgt_lang,
                                              progress=progress)

    def score(self, sources: list[str], targets: list[str]) -> list[list[float]]:
        """Per-token log-probabilities of each target (its tokens, then </s>) given its source,
        from CTranslate2 (``score_batch``); nmtkit's teacher-forced ``forward`` gives the same."""
        src = [self.source(s, self.target_tag(None)).model_tokens for s in sources]
        tgt = [self.tgt_tok.encode(t.strip()) for t in targets]
        return [list(r.log_probs) for r in self.translator.score_batch(src, tgt, max_input_length=0)]


# --- serving the export ---------------------------------------------------------------------------


def default_compute_type(device: str) -> str:
    """What ``nmtkit serve --engine ctranslate2`` computes in unless told: int8 on CPU,
    float16 on GPU (CTranslate2 converts the stored weights when it loads them)."""
    return "float16" if device.startswith("cuda") else "int8"


def _device_and_index(device: str) -> tuple[str, int]:
    """``cpu`` / ``cuda`` / ``cuda:N`` -> (CTranslate2's device, device_index)."""
    kind, _, index = device.partition(":")
    if kind not in ("cpu", "cuda") or (index and (not index.isdigit() or kind == "cpu")):
        raise ExportError(f"device {device!r}: CTranslate2 runs on 'cpu', 'cuda' or 'cuda:N'")
    return kind, int(index or 0)


def export_config(meta: dict[str, Any], model_dir: Path) -> Config:
    """The checkpoint's config stored in ``nmtkit.json`` (name, languages, architecture; the
    decoding options are ``meta["decode"]``). An export made before configs were stored gives
    what ``nmtkit.json`` says (languages unknown: ``?``)."""
    where = str(model_dir / META_FILE)
    try:
        if isinstance(meta.get("config"), dict):
            cfg = Config.from_dict(meta["config"], where)
        else:
            cfg = Config(name=model_dir.name, data=DataConfig(src_lang="?", tgt_lang="?"),
                         model=ModelConfig(arch=meta.get("arch", "transformer")))
        return replace(cfg, decode=DecodeConfig(**meta["decode"]))
    except (ConfigError, KeyError, TypeError) as e:
        raise ExportError(f"{where}: unreadable config: {e}") from None


@dataclass
class CTranslate2Bundle:
    """An export loaded for serving: the surface of :class:`nmtkit.checkpoint.Bundle` that
    :func:`nmtkit.serve.app.create_app` reads (config, path, translator), with
    :class:`CTranslate2Translator` as the translator. ``model`` is None: CTranslate2 keeps its
    weights to itself and returns no per-layer attention maps."""

    cfg: Config
    path: Path
    engine_translator: CTranslate2Translator
    parameters: int | None = None
    """Parameter count of the exported model (None for an export that did not record it)."""
    model: None = None
    engine: ClassVar[str] = "ctranslate2"

    def translator(self, **decode_overrides: Any) -> CTranslate2Translator:
        """The loaded translator; with ``decode_overrides`` (see
        :func:`nmtkit.decode.text_translator.decode_options`) a copy that shares its model."""
        if not any(v is not None for v in decode_overrides.values()):
            return self.engine_translator
        tr = copy.copy(self.engine_translator)
        tr.decode_cfg = decode_options(tr.decode_cfg, **decode_overrides)
        return tr


def load_export_bundle(model_dir: str | Path, device: str = "cpu", compute_type: str | None = None,
                       threads: int = 0) -> CTranslate2Bundle:
    """Load an ``nmtkit export --format ctranslate2`` directory to serve it.

    ``compute_type``: CTranslate2's (``int8``, ``float16``, ``float32``, ``default`` = as
    stored, ...); None: :func:`default_compute_type`. ``threads``: intra-op threads (0 =
    CTranslate2's default). Errors name the directory and what is wrong with it.
    """
    path = Path(model_dir)
    if not path.is_dir():
        what = "not found" if not path.exists() else "not a directory"
        raise ExportError(f"{path}: {what}; the ctranslate2 engine serves the directory that "
                          "`nmtkit export --format ctranslate2` writes")
    meta = read_meta(path)
    cfg = export_config(meta, path)
    kind, index = _device_and_index(device)
    compute_type = compute_type or default_compute_type(kind)
    try:
        tr = CTranslate2Translator(path, device=kind, compute_type=compute_type,
                                   intra_threads=threads, device_index=index)
    except (RuntimeError, ValueError) as e:  # a missing/corrupt model.bin, an unsupported type
        raise ExportError(f"{path}: CTranslate2 cannot load it on {device} as {compute_type}: "
                          f"{e}") from None
    resolved = str(getattr(tr.translator, "compute_type", compute_type))  # "default" resolved
    tr.device = f"{device} ({resolved})"  # what /health and the page show
    parameters = meta.get("parameters")
    return CTranslate2Bundle(cfg, path, tr, parameters if isinstance(parameters, int) else None)
