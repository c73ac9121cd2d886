"""The attention maps of one text as a translator translates it: what ``nmtkit plot
attention`` (:mod:`nmtkit.viz.attention`) and ``POST /v1/attention`` (:mod:`nmtkit.serve.app`)
show. The translation comes from the translator's own search; the maps from feeding it back
with teacher forcing (:func:`nmtkit.decode.attention.teacher_forced_maps`); a text of several
sentences gets every sentence's, joined as its translations are.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from ..data.sentences import sentence_separator
from ..data.vocab import BOS, BOS_TOKEN, EOS_TOKEN
from ..errors import UserError
from ..models.seq2seq import Seq2Seq
from .attention import AXES, teacher_forced_maps
from .deadline import Deadline
from .lines import join_translations, plan_lines
from .options import TranslateOptions
from .targets import prefix_pieces
from .translation import Translation
from .translator import Translator


@dataclass
class SentenceAttention:
    """One translated sentence and its attention maps, source axes in reading order."""

    text: str
    translation: Translation
    """The best translation (its ``src_tokens`` are the source subwords in reading order)."""
    maps: dict[str, Tensor]
    """kind -> (layers, heads, queries, keys); every row is a probability distribution."""

    @property
    def tokens(self) -> dict[str, list[str]]:
        """The labels named in :data:`AXES`: ``source``, ``target`` and ``target_in``."""
        t = self.translation
        return {"source": [*t.src_tokens, EOS_TOKEN], "target": [*t.tokens, EOS_TOKEN],
                "target_in": [BOS_TOKEN, *t.tokens]}


def sentence_attention(translator: Translator, text: str, *, model: Seq2Seq | None = None,
                       beam: int | None = None, max_length: int | None = None,
                       need_attention: bool = False, max_src_tokens: int | None = None,
                       prefix: str | None = None, token_scores: bool = False,
                       tgt_lang: str | None = None, mbr: int | None = None,
                       deadline: Deadline | None = None) -> SentenceAttention:
    """Translate ``text`` with ``translator`` (into ``tgt_lang`` for a multilingual model:
    the source then starts with its ``<2xx>`` token), then teacher-force ``<s>`` + the
    translation through ``model.attention_maps`` (``model``: the translator's unless given).

    ``prefix``: a target text the translation must start with (a forced prefix, see
    :meth:`~nmtkit.decode.translator.Translator.translate`); ``token_scores``: the translation
    carries its ``token_log_probs``; ``mbr``: the translation chosen by minimum Bayes risk
    among that many candidates (None: the translator's ``decode.mbr``); ``deadline``: the
    search's (:attr:`~nmtkit.decode.options.TranslateOptions.deadline`).

    A text of several sentences is cut as the translator cuts a line
    (``decode.split_sentences``, :mod:`nmtkit.decode.lines`; a prefix shared out as
    :mod:`nmtkit.decode.targets` says) and every sentence is translated and teacher-forced on
    its own; the answer is the line's: the sentences' translations joined
    (:func:`~nmtkit.decode.lines.join_translations`) and their maps put block-diagonally
    (:func:`joined_maps`). Each sentence is read as it is (no protected spans): the maps are
    the model's own, token for token.

    A model without ``attention_maps`` falls back to the source attention the search recorded
    (one layer, one head; needs ``need_attention``). Raises ``ValueError`` for a text with no
    tokens, a source longer than ``max_src_tokens`` (all sentences together), or a model
    that exposes no attention.
    """
    if getattr(translator, "reverse_target", False):
        raise UserError("attention: a right-to-left model (data.reverse_target) reranks a "
                         "left-to-right model's candidates; inspect the left-to-right model")
    model = translator.model if model is None else model
    sentences = text_sentences(translator, text)
    sources = [translator.encode_source(s, tgt_lang) for s in sentences]
    n_src = sum(len(toks) for toks, _ in sources)
    if not n_src:
        raise UserError("text: nothing to translate (empty after tokenization)")
    if max_src_tokens is not None and n_src > max_src_tokens:
        raise UserError(f"text: {n_src} source tokens, attention is limited to {max_src_tokens}")
    kept = [i for i, (toks, _) in enumerate(sources) if toks]  # (a sentence of no token: none)
    sentences, sources = [sentences[i] for i in kept], [sources[i] for i in kept]
    lang = tgt_lang or translator.languages[1] or "en"
    pieces = prefix_pieces(prefix, len(sentences), lang) if prefix is not None else None
    options = TranslateOptions(beam=beam, max_length=max_length, need_attention=need_attention,
                               token_scores=token_scores,
                               prefixes=None if pieces is None else pieces + [""] * (len(
                                   sentences) - len(pieces)), tgt_lang=tgt_lang,
                               mbr=mbr, deadline=deadline,
                               split_sentences=False, protect_spans=False)  # the model's own reading
    hyps = [r[0] for r in translator.translate(sentences, options)]
    if hasattr(model, "attention_maps"):
        parts = [teacher_forced_maps(model, ids.tolist(),
                                     [BOS, *translator.tgt_vocab.encode(h.tokens, add_eos=False)],
                                     translator.reverse_source)
                 for (_, ids), h in zip(sources, hyps, strict=True)]
    elif all(h.attention is not None for h in hyps):  # (T, S), already in reading order
        parts = [{"decoder_src": torch.from_numpy(h.attention).float()[None, None]}  # (1, 1, T, S)
                 for h in hyps if h.attention is not None]
    else:
        raise UserError(f"attention: model {type(model).__name__} exposes no attention")
    hyp = join_translations(hyps, sentence_separator(lang))
    sizes = [(len(h.src_tokens), len(h.tokens)) for h in hyps]
    return SentenceAttention(text, hyp, joined_maps(parts, sizes))


def text_sentences(translator: Translator, text: str) -> list[str]:
    """The sentences ``translator`` cuts ``text`` into (``decode.split_sentences``; else
    ``text`` whole), at least one."""
    plan = plan_lines([text], translator.languages[0] or "en",
                      translator.decode_cfg.split_sentences, None)
    return [p.text for p in plan.sentences] or [text]


def joined_maps(parts: Sequence[dict[str, Tensor]], sizes: Sequence[tuple[int, int]]
                ) -> dict[str, Tensor]:
    """The maps of a line from its sentences' (``parts[k]``: kind -> (layers, heads, q, k) of
    sentence k, of ``sizes[k]`` = (source tokens, target tokens)), block-diagonal over the
    line's axes (:data:`~nmtkit.decode.attention.AXES`; the line's tokens are the sentences'
    one after another, one ``</s>`` and one ``<s>``): each sentence's rows over its own
    columns, its ``</s>`` (``<s>``) column gathered into the line's one, and of the
    ``</s>`` rows the last sentence's kept (as :func:`~nmtkit.decode.lines.join_translations`
    joins the search's attention). Every row stays a distribution. One sentence: its maps."""
    if len(parts) == 1:
        return dict(parts[0])
    total = (sum(s for s, _ in sizes), sum(t for _, t in sizes))
    out: dict[str, Tensor] = {}
    for kind in parts[0]:
        rows_axis, cols_axis = AXES.get(kind, ("target", "source"))
        first = parts[0][kind]
        n_rows, n_cols = _axis_size(rows_axis, total), _axis_size(cols_axis, total)
        joined = first.new_zeros((*first.shape[:2], n_rows, n_cols))
        offsets = (0, 0)
        for k, (maps, size) in enumerate(zip(parts, sizes, strict=True)):
            last = k == len(parts) - 1
            rows = _positions(rows_axis, size, offsets, total, last, rows=True)
            cols = torch.tensor(_positions(cols_axis, size, offsets, total, last, rows=False))
            keep = [i for i, r in enumerate(rows) if r is not None]
            block = maps[kind][:, :, keep]  # (layers, heads, kept rows, sentence columns)
            wide = block.new_zeros((*block.shape[:3], n_cols)).index_add_(3, cols, block)
            joined.index_add_(2, torch.tensor([rows[i] for i in keep]), wide)
            offsets = (offsets[0] + size[0], offsets[1] + size[1])
        out[kind] = joined
    return out


def _axis_size(axis: str, total: tuple[int, int]) -> int:
    """The line's length along ``axis`` (``source``, ``target``, ``target_in``)."""
    return (total[0] if axis == "source" else total[1]) + 1


def _positions(axis: str, size: tuple[int, int], offsets: tuple[int, int],
               total: tuple[int, int], last: bool, rows: bool) -> list[int | None]:
    """Where each position of one sentence's ``axis`` goes on the line's (``None``: left
    out): its tokens after the sentences before it (``offsets``); its ``</s>`` to the line's
    last position (as a row only for the ``last`` sentence); ``target_in``'s ``<s>`` to 0."""
    if axis == "target_in":
        return [0, *[1 + offsets[1] + j for j in range(size[1])]]
    n, off, end = (size[0], offsets[0], total[0]) if axis == "source" else (size[1], offsets[1], total[1])
    return [*[off + j for j in range(n)], end if (last or not rows) else None]
