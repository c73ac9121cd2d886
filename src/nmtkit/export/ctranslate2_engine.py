"""Reading a CTranslate2 export of an nmtkit model and translating with it: the serving
engine ``nmtkit serve --engine ctranslate2`` (:class:`CTranslate2Translator`,
:func:`load_export_bundle`). Writing the export is :mod:`nmtkit.export.ctranslate2`.

The engine shares nmtkit's text pipeline (:class:`~nmtkit.decode.text_translator.TextTranslator`:
tokenizers, sentence splitting, protected spans, forced prefixes) and replaces only the
search by CTranslate2's; what CTranslate2 cannot do (lexically constrained search) is refused
with the reason.
"""

from __future__ import annotations

import copy
import json
import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import ctranslate2

from ..config import Config, ConfigError, DataConfig, DecodeConfig, ModelConfig
from ..data.directions import target_tags
from ..data.sentences import text_languages
from ..data.tokenizers import Tokenizer, tokenizer_from_state
from ..data.vocab import BOS_TOKEN, EOS_TOKEN, PAD_TOKEN, UNK, Vocab
from ..decode.choice import candidate_options, choose_all
from ..decode.options import TranslateOptions
from ..decode.rerank import require_reverse
from ..decode.text_translator import (
    TargetTextError,
    TextTranslator,
    alignment_from_attention,
    decode_options,
    text_lines,
)
from ..decode.translation import Translation
from ..errors import UserError
from ..rules import output_cap
from . import ExportError
from .ctranslate2_format import META_FILE, META_FORMAT, META_VERSION, NEVER, NEVER_SET

if TYPE_CHECKING:
    import torch


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


def _with_eos_column(rows: list[list[float]]) -> torch.Tensor:
    """CTranslate2's source attention rows (source tokens only: it leaves out the ``</s>`` it
    appended) with the ``</s>`` column put back: each row is a softmax over the tokens and
    ``</s>``, so ``</s>`` has what the tokens leave. (rows, S) -> (rows, S + 1)."""
    import torch  # (the engine itself needs none: only a translation's attention is a tensor)

    att = torch.tensor(rows, dtype=torch.float32).reshape(len(rows), -1)  # (rows, S)
    eos = (1.0 - att.sum(dim=1, keepdim=True)).clamp_min(0.0)  # (rows, 1)
    return torch.cat([att, eos], dim=1)


class CTranslate2Translator(TextTranslator):
    """Text in, text out with an exported model, as :class:`nmtkit.decode.translator.Translator`.

    The text side is nmtkit's own (:class:`~nmtkit.decode.text_translator.TextTranslator`: the
    checkpoint's tokenizer, truncation to the position table, ``reverse_source``, options,
    empty lines, length order, detokenizing). It gives CTranslate2 the same length cap per
    sentence (CTranslate2's ``max_decoding_length`` is per call: see :meth:`translate`) and
    never returns ``<pad>``/``<s>`` (nmtkit's search cannot produce them).

    It gives what nmtkit's search gives but constraints (:meth:`unsupported`): n-best lists
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
        self.translator = ctranslate2.Translator(str(self.model_dir), device=device,
                                                 compute_type=compute_type,
                                                 intra_threads=intra_threads,
                                                 inter_threads=inter_threads, **translator_kwargs)

    def encode_source(self, line: str, tgt_lang: str | None = None) -> tuple[list[str], list[str]]:
        """(source tokens in reading order, the tokens CTranslate2 gets; it appends </s>);
        a multilingual model's start with the token of ``tgt_lang``."""
        return self.source_tokens(line, self.target_tag(tgt_lang))

    def unsupported(self, options: TranslateOptions) -> str | None:
        """Why this engine cannot do what ``options`` ask (``None``: it can): constraints
        (:data:`NO_CONSTRAINTS`), or the source attention of another layer or head than the
        one chosen at export (CTranslate2 returns that one only). The server answers 501 with
        it."""
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
                   max_length: int | None = None) -> tuple[list[list[int]] | None, None]:
        """(each line's forced prefix as target ids, ``None``), checked as
        :meth:`Translator.target_ids <nmtkit.decode.translator.Translator.target_ids>` checks
        them: one per line, text, a :class:`~nmtkit.decode.text_translator.TargetTextError` naming
        the line for a token the target vocabulary lacks (CTranslate2 would force ``<unk>``);
        constraints: a ``ValueError`` (:data:`NO_CONSTRAINTS`)."""
        if constraints is not None:
            raise UserError(NO_CONSTRAINTS)
        if prefixes is None:
            return None, None
        texts = list(text_lines(prefixes, "prefixes"))
        if len(texts) != n_lines:
            raise ValueError(f"{len(texts)} prefixes for {n_lines} lines: give one per line "
                             "(an empty one for none)")
        forced = []
        for i, text in enumerate(texts):
            toks = self.forced_tokens(i, text, max_length)
            ids = [UNK if t in (PAD_TOKEN, BOS_TOKEN, EOS_TOKEN) else self.tgt_vocab.stoi.get(t, UNK)
                   for t in toks]  # a literal control token is a word the model does not know
            unknown = list(dict.fromkeys(t for t, j in zip(toks, ids, strict=True) if j == UNK))
            if unknown:
                raise TargetTextError("prefixes", i, f"prefix {text.strip()!r}: the model's target "
                                      f"vocabulary has no {', '.join(map(repr, unknown))} (it would "
                                      "come out as <unk>); use words the model knows")
            forced.append(ids)
        return forced, None

    def translate(self, lines: Iterable[str], options: TranslateOptions | None = None, *,
                  exact_caps: bool = True) -> list[list[Translation]]:
        """One list of ``n_best`` :class:`Translation` per input line, in input order, with
        the exported decoding options, ``options`` replacing some and asking for more, as
        :meth:`Translator.translate`: forced prefixes (CTranslate2's ``target_prefix``), token
        scores, the source attention and alignments (:meth:`_extras`). What CTranslate2 cannot
        do is a ``ValueError`` (:meth:`unsupported`).

        Every sentence is searched in one CTranslate2 call (which batches them by length),
        capped at the largest length cap among them, since CTranslate2's
        ``max_decoding_length`` is per call. ``exact_caps`` then gives each sentence nmtkit's
        own cap: greedy search chooses each token without looking at the cap, so an output
        that went past its cap is cut there (and its score recomputed as CTranslate2 gives it
        at the cap); a beam search that reached its sentence's cap is run again at that cap
        (one call per distinct cap, for those sentences only; a beam search that ended before
        its cap keeps its result, unless a hypothesis cut at the cap would have outscored it,
        which CTranslate2 would rank too). False: the shared cap only. A forced prefix raises
        its sentence's cap to fit it, as nmtkit's search does.

        ``score`` is CTranslate2's: the log-probability (``</s>`` included) divided by
        ``(len(tokens) + 1) ** length_penalty`` (a hypothesis cut at the length cap has no
        ``</s>``: ``len(tokens) ** length_penalty``); for greedy search the log-probability,
        as nmtkit's. With a forced prefix it counts the prefix's tokens too, as nmtkit's
        (CTranslate2's own leaves them out). ``mbr``: minimum Bayes risk decoding over that
        many candidates, as :meth:`Translator.translate` (each candidate's log-probability
        recovered from its score, :meth:`_log_prob`). ``decode.rerank``: the candidates
        reranked with :attr:`reverse` (nmtkit models of the reverse direction), as
        :meth:`Translator.translate`.
        """
        o = TranslateOptions() if options is None else options
        refused = self.unsupported(o)
        if refused:
            raise ValueError(f"the ctranslate2 engine cannot do this: {refused}")
        asked, max_length = self.call_options(o)
        if asked.split_sentences or asked.protect_spans:  # lines -> sentences -> here again
            return self.by_sentence(lines, o, asked, lambda sentences, inner: self.translate(
                sentences, inner, exact_caps=exact_caps))
        cfg = candidate_options(asked)  # MBR's or reranking's candidates, else the same
        self.target_tag(o.tgt_lang)  # a missing or unknown language: an error before any work
        require_reverse(asked, self.reverse)
        texts = list(text_lines(lines))
        encoded = [self.encode_source(line, o.tgt_lang) for line in texts]
        forced, _ = self.target_ids(o.prefixes, None, len(texts), max_length)
        prefix = [[self.tgt_vocab.itos[j] for j in ids] for ids in forced] if forced else None
        # tokens before EOS that each sentence may produce (one output_cap per source length),
        # raised to fit its forced prefix
        caps: dict[int, int] = {}
        for toks, _ in encoded:
            if len(toks) not in caps:
                caps[len(toks)] = output_cap(len(toks) + 1, cfg.max_len_a, cfg.max_len_b, max_length) - 1
        steps = [max(caps[len(toks)], len(prefix[i]) if prefix else 0)
                 for i, (toks, _) in enumerate(encoded)]
        ct2_options = dict(max_batch_size=cfg.batch_size, beam_size=cfg.beam,
                           num_hypotheses=cfg.n_best,
                           length_penalty=cfg.length_penalty if cfg.beam > 1 else 0.0,
                           min_decoding_length=0, max_input_length=0, return_scores=True)

        def search(idx: list[int], n_steps: int) -> list[list[tuple[list[str], float]]]:
            """CTranslate2's n-best (tokens, score) of the sentences ``idx``, ``n_steps`` tokens
            at most. Suppressing tokens renormalises CTranslate2's softmax over the others,
            which nmtkit does not do (it computes log-probabilities over all tokens, then
            excludes <pad>/<s>): search unconstrained first, then again only where that
            produced them. ``o.deadline`` is checked before each call: CTranslate2's search
            cannot be stopped once started (``nmtkit serve`` bounds a request's work up
            front, :mod:`nmtkit.serve.limits`)."""
            if o.deadline is not None:
                o.deadline.check()
            sources = [encoded[i][1] for i in idx]
            starts = [prefix[i] or None for i in idx] if prefix else None
            out = [list(zip(r.hypotheses, r.scores, strict=True))
                   for r in self.translator.translate_batch(sources, starts,
                                                            max_decoding_length=n_steps,
                                                            **ct2_options)]
            redo = [j for j, hyps in enumerate(out) if any(not NEVER_SET.isdisjoint(h) for h, _ in hyps)]
            if redo:
                if o.deadline is not None:
                    o.deadline.check()
                again = self.translator.translate_batch(
                    [sources[j] for j in redo], [starts[j] for j in redo] if starts else None,
                    max_decoding_length=n_steps, **ct2_options,
                    suppress_sequences=[[t] for t in NEVER])
                for j, r in zip(redo, again, strict=True):
                    out[j] = list(zip(r.hypotheses, r.scores, strict=True))
            return out

        def batches(todo: list[int]) -> list[list[int]]:
            none = [i for i in todo if steps[i] == 0]  # only EOS fits: nothing to search
            rest = [i for i in todo if steps[i] > 0]  # (in length order, as given)
            return [b for b in (none, rest) if b]

        def run(idx: list[int]) -> list[list[Translation]]:
            n_steps = max(steps[i] for i in idx)
            if n_steps == 0:
                out: list[list[tuple[list[str], float]]] = [[([], 0.0)] * cfg.n_best for _ in idx]
                return self._extras(idx, out, encoded, steps, prefix, o, cfg)
            out = search(idx, n_steps)
            # sentences whose own cap is below the call's and whose search reached it
            reached = [j for j, i in enumerate(idx) if steps[i] < n_steps
                       and any(len(h) >= steps[i] for h, _ in out[j])] if exact_caps else []
            if reached and cfg.beam == 1:  # greedy: cut at the cap, score without </s>
                cut = [out[j][0][0][:steps[idx[j]]] for j in reached]
                scored = self.translator.score_batch([encoded[idx[j]][1] for j in reached], cut,
                                                     max_input_length=0)
                for j, toks, r in zip(reached, cut, scored, strict=True):
                    out[j] = [(toks, float(sum(r.log_probs[:len(toks)])))]
            elif reached:  # beam: search those again, each at its own cap
                by_cap: dict[int, list[int]] = {}
                for j in reached:
                    by_cap.setdefault(steps[idx[j]], []).append(j)
                for cap, js in by_cap.items():
                    for j, hyps in zip(js, search([idx[j] for j in js], cap), strict=True):
                        out[j] = hyps
            return self._extras(idx, out, encoded, steps, prefix, o, cfg)

        return choose_all(self.in_length_order([toks for toks, _ in encoded], cfg.n_best,
                                               batches, run, o.progress),
                          texts, asked, self.reverse)

    def _extras(self, idx: list[int], out: list[list[tuple[list[str], float]]],
                encoded: list[tuple[list[str], list[str]]], steps: list[int],
                prefix: list[list[str]] | None, o: TranslateOptions,
                cfg: DecodeConfig) -> list[list[Translation]]:
        """The :class:`Translation` of each sentence's n-best (tokens, score) ``out`` (the
        sentences ``idx``), with what ``o`` asks for besides the text:

        - token log-probabilities (``token_scores``; and always with a forced prefix, whose
          tokens CTranslate2's score leaves out): ``score_batch``, teacher forcing, nmtkit's
          ``token_log_probs`` (the tokens, then ``</s>``); a prefixed sentence's score and
          ``log_prob`` are recomputed from them (and its list reordered by them);
        - the source attention (``need_attention``, ``alignments``): :meth:`_source_attention`;
          alignments from it as nmtkit's (:func:`~nmtkit.decode.text_translator.alignment_from_attention`).
        """
        flat = [(i, toks) for i, hyps in zip(idx, out, strict=True) for toks, _ in hyps]
        prefixed = {i for i in idx if prefix and prefix[i]}
        log_probs: list[list[float]] = []
        if o.token_scores or prefixed:
            log_probs = [list(r.log_probs) for r in self.translator.score_batch(
                [encoded[i][1] for i, _ in flat], [toks for _, toks in flat],
                max_batch_size=cfg.batch_size, max_input_length=0)]
        attention: list[torch.Tensor] = []
        if o.need_attention or o.alignments:
            attention = self._source_attention([encoded[i][1] for i, _ in flat],
                                               [toks for _, toks in flat], cfg.batch_size)
        results, k = [], 0
        for i, hyps in zip(idx, out, strict=True):
            src_tokens, row = encoded[i][0], []
            for toks, score in hyps:
                cut = len(toks) >= steps[i]  # stopped at the cap: no </s>
                log_prob = self._log_prob(toks, score, steps[i], cfg)
                if i in prefixed:  # CTranslate2's score leaves the forced tokens out
                    log_prob = float(sum(log_probs[k][:len(toks)] if cut else log_probs[k]))
                    n = len(toks) if cut else len(toks) + 1
                    score = (log_prob / n ** cfg.length_penalty if cfg.beam > 1 and n
                             else log_prob)
                att, align = None, None
                if attention:
                    att = attention[k]  # (len(toks) + 1, len(src_tokens) + 1), model order
                    if self.reverse_source:
                        from ..decode.attention import reading_order

                        att = reading_order(att, len(src_tokens), dims=[1])
                    if o.alignments:
                        align = alignment_from_attention(att, len(src_tokens), len(toks))
                row.append(self.translation(
                    toks, src_tokens, score, att if o.need_attention else None,
                    token_log_probs=log_probs[k] if o.token_scores else None, alignment=align,
                    log_prob=log_prob))
                k += 1
            if i in prefixed:
                row.sort(key=lambda t: -t.score)  # (stable: ties keep CTranslate2's order)
            results.append(row)
        return results

    def _source_attention(self, sources: list[list[str]], outputs: list[list[str]],
                          batch_size: int) -> list[torch.Tensor]:
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
        """The log-probability behind CTranslate2's ``score`` (see :meth:`translate`): the
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
        options = TranslateOptions(beam=beam, batch_size=batch_size, tgt_lang=tgt_lang,
                                   progress=progress)
        return [r[0].text for r in self.translate(lines, options, exact_caps=exact_caps)]

    def score(self, sources: list[str], targets: list[str]) -> list[list[float]]:
        """Per-token log-probabilities of each target (its tokens, then </s>) given its source,
        from CTranslate2 (``score_batch``); nmtkit's teacher-forced ``forward`` gives the same."""
        src = [self.encode_source(s)[1] for s in sources]
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
