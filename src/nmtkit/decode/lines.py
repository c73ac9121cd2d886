"""Lines <-> sentences: what the translator does between the lines it is given and the
sentences the model translates.

Per line (``decode.split_sentences``): cut it into sentences (:mod:`nmtkit.data.sentences`);
per sentence (``decode.protect_spans``): find the spans the model should not handle and
leave out those it cannot say (:mod:`nmtkit.data.placeholders`). The sentences of all lines
then go to the search together (sorted by length, batched, unsorted by the translator,
:meth:`~nmtkit.decode.text_translator.TextTranslator.translate`), each output gets its
protected spans back and no ``<unk>`` (:func:`restore_translation`), and each line's
sentences are joined into one translation (:func:`join_translations`): one output line per
input line, always.

What a joined translation's fields mean, for a line of sentences ``s_1 .. s_m`` (a line of
one sentence is that sentence's translation, unchanged):

- the k-th of an n-best list joins the k-th candidate of every sentence (a sentence with
  fewer candidates gives its last), so the list stays in the order of its scores;
- ``text``: the sentences' texts joined with a space (nothing for a target language written
  without spaces, :func:`nmtkit.data.sentences.sentence_separator`);
- ``tokens``, ``src_tokens``: the sentences' concatenated;
- ``score``, ``log_prob``, ``rerank_score``: the sum over the sentences (the log-probability of
  the line is the sum of its sentences' log-probabilities: they are translated
  independently); ``mbr_utility``, ``reverse_log_prob``, ``r2l_log_prob`` (averages per
  candidate or per token): the mean;
- ``token_log_probs``: every sentence's tokens' in order, then one value for the line's end,
  the sum of the sentences' ``</s>``; their sum is still ``log_prob``;
- ``attention``: block-diagonal, each sentence's output rows over its own source columns;
  the last column (``</s>``) gathers each row's attention to its own sentence's ``</s>``
  and the last row is the last sentence's ``</s>`` row;
- ``alignment``: each sentence's pairs with its source and target positions shifted by
  the tokens of the sentences before it;
- ``constraints_met``: all sentences met theirs.

A restored sentence (:func:`restore_translation`) lists a protected group as one token on
each side: in ``src_tokens`` where it stood, in the output where it was put back (in place
of the ``<unk>`` it fills, with that token's log-probability, or inserted, with
log-probability 0: copied, not predicted), all its attention on its source token.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import numpy as np

from ..data.placeholders import (
    Protected,
    Restored,
    assemble,
    find_spans,
    protect,
    restore,
    source_anchor,
)
from ..data.sentences import split_sentences
from ..data.vocab import UNK_TOKEN
from .translation import Translation

KEEP_WHOLE = ("url", "email", "number")
"""Protected kinds inside which no sentence ends (a URL's "?", a decimal point)."""


@dataclass(frozen=True)
class LinePlan:
    """How lines become sentences: ``sentences`` (each protected, :class:`Protected`) in the
    order they are translated and ``lines[i]``, the indices of line i's sentences (empty for
    a blank line)."""

    sentences: list[Protected]
    lines: list[list[int]]


def plan_lines(texts: Sequence[str], lang: str, split: bool,
               unknown: Callable[[str], Sequence[tuple[int, int]]] | None) -> LinePlan:
    """Each line of ``texts`` cut into sentences of language ``lang`` (``split``; else the
    line is one sentence, a blank line included) and each sentence protected
    (``unknown``: the parts of a text the vocabulary cannot say, :func:`unknown_spans`;
    ``None``: protection off)."""
    sentences: list[Protected] = []
    lines: list[list[int]] = []
    for text in texts:
        if split:
            keep = [(s.start, s.end) for s in find_spans(text) if s.kind in KEEP_WHOLE]
            parts = split_sentences(text, lang, keep)
        else:
            parts = [text]
        lines.append(list(range(len(sentences), len(sentences) + len(parts))))
        sentences += [protect(p, unknown) if unknown is not None else Protected(p) for p in parts]
    return LinePlan(sentences, lines)


def protect_plan(plan: LinePlan, unknown: Callable[[str], Sequence[tuple[int, int]]]) -> LinePlan:
    """``plan`` (cut with no protection) with each sentence protected (``unknown``: the parts
    of a text the vocabulary cannot say, :func:`unknown_spans`): the sentences are counted
    first (an engine takes a call by its sentences), the vocabulary's work comes after."""
    return LinePlan([protect(p.text, unknown) for p in plan.sentences], plan.lines)


def restore_translation(t: Translation, p: Protected, n_before: Sequence[int],
                        decode: Callable[[list[str]], str], separator: str = " ") -> Translation:
    """``t``, the translation of ``p.text``, with every group of ``p`` back (see the module
    docstring) and no ``<unk>``: ``n_before[k]`` is the number of the model's source tokens
    (``t.src_tokens``) before group ``k``; ``decode`` detokenizes output tokens.

    Three steps: where each group goes in the output
    (:func:`~nmtkit.data.placeholders.restore`, led by ``t.attention`` where given), the
    source with the groups where they stood (:func:`_restored_source`), the output with them
    put in (:func:`_restored_output`)."""
    tokens, n_src = list(t.tokens), len(t.src_tokens)
    if not p.groups and UNK_TOKEN not in tokens:
        return t
    if not tokens and not n_src:  # nothing but groups: nothing searched, </s> for certain
        t = replace(t, token_log_probs=[0.0], attention=np.ones((1, 1), dtype=np.float32))
    attn = t.attention  # (T + 1, S + 1)

    def wordy(tok: str) -> bool:
        return any(c.isalnum() for c in tok)

    def starts_word(j: int) -> bool:
        return not wordy(decode([tokens[j]])) or " " in decode([tokens[j - 1], tokens[j]])

    words = [j for j, tok in enumerate(tokens) if tok != UNK_TOKEN and wordy(decode([tok]))]
    source_words = [i for i, tok in enumerate(t.src_tokens) if wordy(tok.replace("\u2581", ""))]
    last_word = source_words[-1] + 1 if source_words else 0
    r = restore(tokens, [source_anchor(n, n_src) for n in n_before],
                None if attn is None else attn.tolist(), lambda tok: tok == UNK_TOKEN,
                starts_word, end=words[-1] + 1 if words else len(tokens),
                at_end=[n >= last_word for n in n_before], n_source=n_src)
    source = _restored_source(t.src_tokens, p, n_before)
    return _restored_output(t, p, r, source, decode, separator)


@dataclass(frozen=True)
class _Source:
    """A restored source: ``tokens`` (the model's, the groups where they stood),
    ``columns[i]`` the new column of model source column i (``</s>`` last), ``group_column[k]``
    the column of group k."""

    tokens: list[str]
    columns: list[int]
    group_column: dict[int, int]


def _restored_source(src_tokens: Sequence[str], p: Protected, n_before: Sequence[int]) -> _Source:
    """The source tokens with the groups of ``p`` back where they stood (before the model's
    token ``n_before[k]``, or at the end)."""
    n_src = len(src_tokens)
    tokens: list[str] = []
    columns: list[int] = []
    group_column: dict[int, int] = {}
    for i in range(n_src + 1):
        for k, g in enumerate(p.groups):
            if min(n_before[k], n_src) == i:
                group_column[k] = len(tokens)
                tokens.append(g.text)
        if i < n_src:
            columns.append(len(tokens))
            tokens.append(src_tokens[i])
    columns.append(len(tokens))  # </s>
    return _Source(tokens, columns, group_column)


def _restored_output(t: Translation, p: Protected, r: Restored, source: _Source,
                     decode: Callable[[list[str]], str], separator: str) -> Translation:
    """``t`` with its output as ``r`` places the groups: each group one token (log-probability
    of the ``<unk>`` it fills, or 0: copied, not predicted; all its attention on its own
    source column), the text detokenized between groups, the attention widened to the
    restored source and the alignment read again from it."""
    tokens, given, attn = t.tokens, t.token_log_probs, t.attention
    width = len(source.tokens) + 1
    out_tokens: list[str] = []
    log_probs: list[float] = []
    rows: list[np.ndarray] = []
    texts: list[tuple[bool, str]] = []
    run: list[str] = []
    filled = {k: j for j, k in r.replaced.items()}  # group -> the <unk> it fills
    for kind, index in r.items:
        if kind == "token":
            out_tokens.append(tokens[index])
            run.append(tokens[index])
            log_probs += [given[index]] if given is not None else []
            if attn is not None:
                rows.append(_widen(attn[index], source.columns, width))
            continue
        if run:
            texts.append((False, decode(run)))
            run = []
        out_tokens.append(p.groups[index].text)
        texts.append((True, p.groups[index].text))
        if given is not None:
            log_probs.append(0.0 if index not in filled else given[filled[index]])
        if attn is not None:
            rows.append(np.eye(width, dtype=attn.dtype)[source.group_column[index]])
    if run:
        texts.append((False, decode(run)))
    if given is not None:
        log_probs.append(given[len(tokens)] if len(given) > len(tokens) else 0.0)  # </s>
    attention, alignment = None, None
    if attn is not None:
        rows.append(_widen(attn[len(tokens)], source.columns, width) if attn.shape[0] > len(tokens)
                    else np.zeros(width, dtype=attn.dtype))
        attention = np.stack(rows)  # (len(out_tokens) + 1, len(source.tokens) + 1)
        if t.alignment is not None:
            best = attention[:len(out_tokens), :len(source.tokens)].argmax(axis=1).tolist()
            alignment = [(int(i), j) for j, i in enumerate(best)] if source.tokens else []
    return replace(t, text=assemble(texts, separator), tokens=out_tokens,
                   src_tokens=source.tokens, token_log_probs=None if given is None else log_probs,
                   attention=attention, alignment=alignment)


def source_reading_order(attention: np.ndarray, n_src: int) -> np.ndarray:
    """(T, S) ``attention`` of a model that read its source reversed with the first ``n_src``
    columns (the source tokens) put back in reading order; later ones (``</s>``, padding)
    stay where they are."""
    order = [*range(n_src - 1, -1, -1), *range(n_src, attention.shape[1])]
    return attention[:, order]


def _widen(row: np.ndarray, columns: Sequence[int], width: int) -> np.ndarray:
    """A (S + 1,) attention row over the model's source (``</s>`` last; padding beyond it
    dropped) spread over ``width`` columns: model column i goes to ``columns[i]``."""
    out = np.zeros(width, dtype=row.dtype)
    out[np.asarray(columns, dtype=np.int64)] = row[:len(columns)]
    return out


def join_translations(parts: Sequence[Translation], separator: str = " ") -> Translation:
    """One line's translation from its sentences' (in order; see the module docstring)."""
    if len(parts) == 1:
        return parts[0]
    if not parts:
        return Translation("", [], [], 0.0)
    text = separator.join(p.text for p in parts if p.text)
    tokens = [tok for p in parts for tok in p.tokens]
    src_tokens = [tok for p in parts for tok in p.src_tokens]
    token_log_probs = None
    if all(p.token_log_probs is not None for p in parts):
        token_log_probs = [v for p in parts for v in (p.token_log_probs or [])[:len(p.tokens)]]
        token_log_probs.append(sum((p.token_log_probs or [])[len(p.tokens)]
                                   for p in parts if len(p.token_log_probs or []) > len(p.tokens)))
    alignment = None
    if all(p.alignment is not None for p in parts):
        alignment, s_off, t_off = [], 0, 0
        for p in parts:
            alignment += [(i + s_off, j + t_off) for i, j in p.alignment or []]
            s_off, t_off = s_off + len(p.src_tokens), t_off + len(p.tokens)
    return Translation(
        text, tokens, src_tokens, sum(p.score for p in parts),
        attention=_block_attention(parts, len(tokens), len(src_tokens)),
        token_log_probs=token_log_probs, alignment=alignment,
        constraints_met=all(p.constraints_met for p in parts),
        log_prob=_total([p.log_prob for p in parts]),
        mbr_utility=_mean([p.mbr_utility for p in parts]),
        reverse_log_prob=_mean([p.reverse_log_prob for p in parts]),
        r2l_log_prob=_mean([p.r2l_log_prob for p in parts]),
        rerank_score=_total([p.rerank_score for p in parts]))


def _total(values: Sequence[float | None]) -> float | None:
    return None if any(v is None for v in values) else float(sum(v for v in values if v is not None))


def _mean(values: Sequence[float | None]) -> float | None:
    total = _total(values)
    return None if total is None else total / len(values)


def _block_attention(parts: Sequence[Translation], n_tgt: int, n_src: int) -> np.ndarray | None:
    """(n_tgt + 1, n_src + 1): the sentences' attention block-diagonal (module docstring)."""
    blocks = [p.attention for p in parts if p.attention is not None]
    if len(blocks) < len(parts):
        return None
    out = np.zeros((n_tgt + 1, n_src + 1), dtype=blocks[0].dtype)
    t_off = s_off = 0
    for p, a in zip(parts, blocks, strict=True):
        t, s = len(p.tokens), len(p.src_tokens)
        out[t_off:t_off + t, s_off:s_off + s] = a[:t, :s]  # (t, s) block
        out[t_off:t_off + t, n_src] = a[:t, s]  # its </s> column
        t_off, s_off = t_off + t, s_off + s
    last, s = blocks[-1], len(parts[-1].src_tokens)
    out[n_tgt, s_off - s:s_off] = last[len(parts[-1].tokens), :s]
    out[n_tgt, n_src] = last[len(parts[-1].tokens), s]
    return out


def join_lines(results: Sequence[list[Translation]], plan: LinePlan, n_best: int,
               separator: str = " ") -> list[list[Translation]]:
    """One n-best list per line of ``plan`` from the translations of its sentences
    (``results``, one list per sentence): the k-th joins every sentence's k-th (a
    sentence's last where it has fewer); a blank line gets ``n_best`` empty translations."""
    out: list[list[Translation]] = []
    for ids in plan.lines:
        if not ids:
            out.append([Translation("", [], [], 0.0)] * n_best)
            continue
        n = max(len(results[i]) for i in ids)
        out.append([join_translations([results[i][min(k, len(results[i]) - 1)] for i in ids],
                                      separator) for k in range(n)])
    return out
