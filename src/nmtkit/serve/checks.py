"""A request's options checked before any work (:mod:`nmtkit.serve.app` calls these): the
target language, forced prefixes and constraint phrases against the target vocabulary and the
output cap, n-best and MBR against the decoding options, and the search work against the
bound that ``--timeout`` sets (:mod:`nmtkit.serve.limits`). Each refusal is an HTTP error
whose message names the field and the bound."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from fastapi import HTTPException

from .. import rules
from ..decode.choice import candidate_options
from ..decode.text_translator import TargetTextError, decode_options
from .limits import ServeLimits, work_error

if TYPE_CHECKING:
    from ..decode.text_translator import TextTranslator


@runtime_checkable
class TargetChecks(Protocol):
    """A translator that checks forced prefixes and constraint phrases against its target
    vocabulary before the search (``target_ids``: a
    :class:`~nmtkit.decode.text_translator.TargetTextError` naming the text)."""

    def target_ids(self, prefixes: Sequence[str] | None,
                   constraints: Sequence[Sequence[str]] | None, n_lines: int,
                   max_length: int | None = None) -> object: ...


def checked_tgt_lang(translator: TextTranslator, tgt_lang: str | None) -> str | None:
    """A request's ``tgt_lang``, checked before any work: a 422 naming the model's target
    languages when it is missing (a model of several) or not one of them."""
    try:
        translator.target_tag(tgt_lang)
    except ValueError as e:
        raise HTTPException(422, f"tgt_lang: {e}") from None
    return tgt_lang


def checked_prefixes(translator: TextTranslator, prefixes: list[str] | None, max_length: int | None,
                     limits: ServeLimits, field: str = "prefixes") -> None:
    """Forced prefixes, checked before any work: a prefix is part of the output, so it counts
    against the output cap (the request's ``max_length``, else the server's
    ``limits.max_length``); a longer one is a 422 (the search would otherwise stretch the
    output to fit it, past the cap)."""
    cap = output_cap(max_length, limits)
    whose = "the request's max_length" if max_length is not None else "the server's max_length"
    for i, prefix in enumerate(prefixes or []):
        n = len(translator.prefix_tokens(prefix, None))
        if n > cap:
            where = field if field == "prefix" else f"{field}.{i}"
            raise HTTPException(422, f"{where}: {n} target tokens, more than {whose} ({cap}): "
                                     "a forced prefix counts against the output cap")


def checked_n_best(translator: TextTranslator, beam: int, n_best: int, mbr: int | None) -> None:
    """A request's ``n_best``, checked before any work as ``nmtkit translate --n-best`` is
    (:func:`~nmtkit.decode.text_translator.decode_options`: at most the beam, or MBR's or the
    server's reranking candidates): a 422 saying why."""
    try:
        decode_options(translator.decode_cfg, beam=beam, n_best=n_best, mbr=mbr)
    except ValueError as e:
        raise HTTPException(422, f"n_best: {e}") from None


def checked_mbr(translator: TextTranslator, mbr: int | None) -> None:
    """A request's ``mbr`` where the server reranks: MBR then chooses among the reranking's
    best (:mod:`nmtkit.decode.choice`), so it must be below the candidates reranked (422)."""
    reranking = rerank_info(translator)
    rerank = reranking["candidates"] if reranking else 0
    if mbr and rerank and mbr >= rerank:
        raise HTTPException(422, f"mbr {mbr}: this server reranks {rerank} candidates and MBR "
                                 f"chooses among the reranking's best: ask for fewer than {rerank}")


def output_cap(asked: int | None, limits: ServeLimits) -> int:
    """The most output tokens of an answer: the request's ``max_length`` (at most
    ``--max-length``, by the schema), else ``--max-length`` itself: a hard cap, whatever the
    model's length rule (``decode.max_len_a`` x source + ``max_len_b``) allows."""
    return limits.max_length if asked is None else asked


def model_cap(translator: TextTranslator, asked: int | None, limits: ServeLimits) -> tuple[int, str]:
    """(the most output tokens of an answer, what sets it): :func:`output_cap`, lowered to
    the model's position table where that is smaller (the search cuts every output there)."""
    cap = output_cap(asked, limits)
    whose = "the request's max_length" if asked is not None else "the server's --max-length"
    positions = translator.max_positions
    if positions is not None and positions - 1 < cap:
        return positions - 1, "the model's position table"
    return cap, whose


def target_lengths(translator: TextTranslator, n: int, prefixes: list[str] | None,
                   constraints: list[list[str]] | None) -> tuple[list[int], list[list[int]]]:
    """(each text's forced prefix, each text's constraint phrases) in target tokens, as the
    search takes them (:meth:`~nmtkit.decode.text_translator.TextTranslator.prefix_tokens`); 0 and
    [] where none."""
    pre = [len(translator.prefix_tokens(p, None)) for p in prefixes] if prefixes else [0] * n
    phrases = ([[len(translator.prefix_tokens(p, None)) for p in cs if p.strip()] for cs in constraints]
               if constraints else [[] for _ in range(n)])
    return pre, phrases


def checked_constraints_fit(translator: TextTranslator, prefixes: list[str] | None,
                            constraints: list[list[str]] | None, max_length: int | None,
                            limits: ServeLimits) -> None:
    """Constraint phrases, checked before any work: a text's phrases (and its forced prefix)
    are all part of its output, so together they must fit in the output cap
    (:func:`model_cap`); a text whose phrases cannot is a 422 naming ``constraints.N`` (the
    search would otherwise end at the cap without some of them)."""
    if not constraints:
        return
    cap, whose = model_cap(translator, max_length, limits)
    pre, phrases = target_lengths(translator, len(constraints), prefixes, constraints)
    for i, (p, ps) in enumerate(zip(pre, phrases, strict=True)):
        if ps and sum(ps) + p > cap:
            prefix = f" and {p} of its prefix" if p else ""
            raise HTTPException(422, f"constraints.{i}: {sum(ps)} target tokens of constraint "
                                     f"phrases{prefix}, more than {whose} ({cap}) by "
                                     f"{sum(ps) + p - cap}: the translation cannot contain them "
                                     "all; ask for a larger max_length or shorter phrases")


def checked_work(translator: TextTranslator, texts: list[str], beam: int, mbr: int | None,
                 max_length: int | None, limits: ServeLimits, prefixes: list[str] | None = None,
                 constraints: list[list[str]] | None = None, split: bool | None = None) -> None:
    """The search work a request asks for (:func:`request_work`), checked before it queues:
    more than ``limits.max_work`` (``--work-rate``, measured at start-up, x ``--timeout``,
    :mod:`nmtkit.serve.limits`) is a 413 saying by how much, at once: such a request could
    not be answered in time."""
    steps, width, phrases = request_work(translator, texts, beam, mbr, max_length, limits,
                                         prefixes, constraints, split)
    error = work_error(steps, width, phrases, limits)
    if error is not None:
        raise HTTPException(413, error)


def request_work(translator: TextTranslator, texts: list[str], beam: int, mbr: int | None,
                 max_length: int | None, limits: ServeLimits, prefixes: list[str] | None = None,
                 constraints: list[list[str]] | None = None, split: bool | None = None
                 ) -> tuple[list[int], int, list[int]]:
    """(each text's search steps, hypotheses per text, each text's constraint phrases): what
    :func:`~nmtkit.serve.limits.search_work` counts of a request. Per text: its search
    steps (the model's length rule, :func:`nmtkit.rules.output_cap`, on its source tokens
    and ``</s>``, raised to fit its constraints and prefix, at most the output cap,
    ``</s>`` included; none for an empty text; a text cut into sentences, ``split`` or
    ``decode.split_sentences``, without prefixes or constraints: at most the sum of its
    sentences', each searched with a cap of its own, :func:`split_steps`), the hypotheses
    per text (the beam, or MBR's or reranking's candidates, or samples) and its constraint
    phrases."""
    cfg = translator.decode_cfg
    try:
        asked = candidate_options(decode_options(cfg, beam=beam, mbr=mbr))
    except ValueError:  # refused later, with its own message
        asked = cfg
    width = asked.n_best if asked.sampling else asked.beam
    cap, _ = model_cap(translator, max_length, limits)
    positions = translator.max_positions
    pre, phrases = target_lengths(translator, len(texts), prefixes, constraints)
    cut = (cfg.split_sentences if split is None else split) and not prefixes and not constraints
    steps = []
    for text, p, ps in zip(texts, pre, phrases, strict=True):
        src = len(translator.src_tok.encode(text.strip())) if text.strip() else 0
        n = max(1, len(SENTENCE_END.findall(text))) if cut else 1
        if positions is not None:
            src = min(src, n * (positions - 1))
        if src == 0:
            steps.append(0)
        elif n > 1:
            steps.append(split_steps(src, n, cap, cfg.max_len_a, cfg.max_len_b))
        else:
            rule = rules.output_cap(src + 1, cfg.max_len_a, cfg.max_len_b)  # (+ 1: its </s>)
            steps.append(min(cap + 1, max(rule, sum(ps) + p + 1, 1)))
    return steps, width, [len(ps) for ps in phrases]


SENTENCE_END = re.compile(r"[.!?;:\u2026\u3002\uff01\uff1f\n]+")
"""Where a text may be cut into sentences: counting these bounds the sentences from above
(an abbreviation's dot counts too), without running the sentence splitter on the event loop."""


def split_steps(src: int, n: int, cap: int, max_len_a: float, max_len_b: float) -> int:
    """At most the search steps of a text of ``src`` source tokens cut into at most ``n``
    sentences, each searched with its own cap (the length rule on its tokens and ``</s>``,
    at most ``cap + 1``): the rule's sum, ``floor(a (src + n) + n b)`` (a sum of floors is at
    most the floor of the sum), at most ``n (cap + 1)``."""
    return min(n * (cap + 1), max(rules.output_cap(src + n, max_len_a, n * max_len_b), n))


def checked_target_texts(translator: TextTranslator, n: int, prefixes: list[str] | None,
                         constraints: list[list[str]] | None = None,
                         field: str = "prefixes") -> None:
    """Forced prefixes and constraint phrases of ``n`` texts, checked before any work as the
    search will take them (:meth:`~nmtkit.decode.translator.Translator.target_ids`, an
    export's :meth:`~nmtkit.export.ctranslate2_engine.CTranslate2Translator.target_ids`): a
    token the model's target vocabulary lacks (it would come out as ``<unk>``) is a 422
    naming the field (``field``: "prefix" for the attention request's one prefix)."""
    if not isinstance(translator, TargetChecks):
        return
    try:
        translator.target_ids(prefixes, constraints, n)
    except TargetTextError as e:
        where = field if field == "prefix" else f"{e.field}.{e.index}"
        raise HTTPException(422, f"{where}: {e.problem}") from None


def rerank_info(translator: TextTranslator) -> dict[str, Any] | None:
    """How every answer is reranked (``nmtkit serve --reverse-model ... --rerank N``): the
    candidates, the reverse and right-to-left models' weights and how many they are; None
    when it is not."""
    reverse = getattr(translator, "reverse", None)
    if reverse is None or not translator.decode_cfg.rerank:
        return None
    return {"candidates": translator.decode_cfg.rerank,
            "reverse_weight": translator.decode_cfg.reverse_weight,
            "reverse_models": len(reverse.translators),
            "r2l_weight": translator.decode_cfg.r2l_weight if reverse.r2l else None,
            "r2l_models": len(reverse.r2l)}
