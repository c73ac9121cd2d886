"""The models that rerank (:mod:`nmtkit.decode.rerank`): :class:`ReverseScorer`, their
teacher-forced scores of the candidates, and :func:`reverse_scorer`, one from loaded
checkpoints: each checked against the direction of the forward model whose candidates it
scores, each asked for the right language where it is a model of several directions
(Johnson et al. 2017)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Protocol

import numpy as np
import torch

from ..data.batching import pad_batch, pad_mask
from ..data.directions import Direction, directions
from ..data.tokenizers import Tokenizer
from ..data.vocab import BOS, PAD, Vocab
from ..errors import UserError
from ..models.seq2seq import Seq2Seq, target_mask
from .translator import Translator

if TYPE_CHECKING:
    from ..checkpoint import Bundle


class ScoringModel(Protocol):
    """What reranking reads of a model with its text pipeline: a
    :class:`~nmtkit.decode.translator.Translator` is one. Reranking sits below the translator
    (which calls it), so it names only what it uses."""

    model: Seq2Seq
    device: torch.device
    tgt_tok: Tokenizer
    tgt_vocab: Vocab
    max_positions: int | None

    def encode_source(self, line: str, tgt_lang: str | None = None) -> tuple[list[str], np.ndarray]:
        """The source tokens of ``line`` and its ids (``</s>`` included)."""
        ...


class ReverseScorer:
    """The models that rerank candidates by reading them the other way round.

    ``translators``: models trained in the reverse direction, for log P(x | y) of source lines
    given candidate translations (each a :class:`ScoringModel`, such as an nmtkit
    :class:`~.translator.Translator`, whose tokenizers and vocabularies read the candidate as
    its source and the source line as its target). ``tgt_langs``: per translator, the language
    to ask it for when it is a model of several directions (the forward model's source
    language), ``None`` for a model of one direction; all ``None`` when not given. ``r2l``:
    right-to-left models of the forward direction (``data.reverse_target``), for log P(y | x)
    read from the candidate's end; ``r2l_tgt_langs``: their target language where they have
    several. At least one model of either kind."""

    def __init__(self, translators: Sequence[ScoringModel],
                 tgt_langs: Sequence[str | None] | None = None, batch_size: int = 128, *,
                 r2l: Sequence[ScoringModel] = (),
                 r2l_tgt_langs: Sequence[str | None] | None = None) -> None:
        if not translators and not r2l:
            raise ValueError("reranking needs at least one reverse or right-to-left model")
        self.translators = list(translators)
        self.tgt_langs = list(tgt_langs) if tgt_langs is not None else [None] * len(translators)
        self.r2l = list(r2l)
        """Right-to-left models of the forward direction (may be empty)."""
        self.r2l_tgt_langs = (list(r2l_tgt_langs) if r2l_tgt_langs is not None
                              else [None] * len(self.r2l))
        for langs, models, what in ((self.tgt_langs, self.translators, "reverse"),
                                    (self.r2l_tgt_langs, self.r2l, "right-to-left")):
            if len(langs) != len(models):
                raise ValueError(f"{len(langs)} target languages for {len(models)} {what} models")
        self.batch_size = batch_size
        """Pairs per teacher-forced pass."""

    def _target_ids(self, tr: ScoringModel, line: str) -> np.ndarray:
        """The reverse model's target ids of a source line: its tokens, cut to the position
        table, then ``</s>``."""
        toks = tr.tgt_tok.encode(line.strip())
        if tr.max_positions is not None:
            toks = toks[:tr.max_positions - 1]
        return np.asarray(tr.tgt_vocab.encode(toks, add_eos=True), dtype=np.int64)

    @torch.no_grad()
    def _one_model(self, tr: ScoringModel, tgt_lang: str | None, candidates: Sequence[str],
                   sources: Sequence[str]) -> list[float]:
        """Per pair, the mean log-probability of a ``sources`` line's tokens and ``</s>``
        under ``tr`` reading a ``candidates`` line (a reverse model)."""
        srcs = [tr.encode_source(c, tgt_lang)[1] for c in candidates]
        tgts = [self._target_ids(tr, s) for s in sources]
        return self._teacher_forced(tr, srcs, tgts)

    @torch.no_grad()
    def _one_r2l_model(self, tr: ScoringModel, tgt_lang: str | None,
                       candidates: Sequence[str], sources: Sequence[str]) -> list[float]:
        """Per pair, the mean log-probability of a ``candidates`` line's tokens, last first,
        then ``</s>``, under ``tr`` (a right-to-left model) reading the ``sources`` line."""
        srcs = [tr.encode_source(s, tgt_lang)[1] for s in sources]
        tgts = []
        for c in candidates:
            ids = self._target_ids(tr, c)  # y </s>
            tgts.append(np.concatenate([ids[:-1][::-1], ids[-1:]]))  # reversed(y) </s>
        return self._teacher_forced(tr, srcs, tgts)

    def _teacher_forced(self, tr: ScoringModel, srcs: Sequence[np.ndarray],
                        tgts: Sequence[np.ndarray]) -> list[float]:
        """Per (source ids, target ids ending in ``</s>``) pair, the mean log-probability
        ``tr``'s model gives the target ids, in batches of similar length."""
        out = [0.0] * len(srcs)
        order = sorted(range(len(srcs)), key=lambda i: (len(srcs[i]), len(tgts[i])))
        for at in range(0, len(order), self.batch_size):
            rows = order[at:at + self.batch_size]
            src = pad_batch([srcs[i] for i in rows]).to(tr.device)  # (batch, S)
            tgt_out = pad_batch([tgts[i] for i in rows]).to(tr.device)  # (batch, T): y </s>
            tgt_in = torch.cat([torch.full_like(tgt_out[:, :1], BOS), tgt_out[:, :-1]], dim=1)  # <s> y
            log_probs = tr.model(src, pad_mask(src), tgt_in, target_mask(tgt_in))  # (batch, T, V)
            picked = log_probs.float().gather(-1, tgt_out.unsqueeze(-1)).squeeze(-1)  # (batch, T)
            real = tgt_out != PAD
            per_token = (picked * real).sum(dim=1) / real.sum(dim=1)  # (batch,)
            for i, value in zip(rows, per_token.tolist(), strict=True):
                out[i] = value
        return out

    def score(self, candidates: Sequence[str], sources: Sequence[str]) -> list[float]:
        """``(1 / |x|) log P(x | y)`` for each (candidate ``y``, source line ``x``) pair: the
        mean log-probability of the source's tokens and ``</s>`` (the reverse models' mean)."""
        return self._mean(self._one_model, self.translators, self.tgt_langs, candidates, sources)

    def score_r2l(self, candidates: Sequence[str], sources: Sequence[str]) -> list[float]:
        """``(1 / (|y| + 1)) log P_r2l(reversed(y) | x)`` for each (candidate ``y``, source
        line ``x``) pair: the right-to-left models' mean."""
        return self._mean(self._one_r2l_model, self.r2l, self.r2l_tgt_langs, candidates, sources)

    @staticmethod
    def _mean(one: Callable[[ScoringModel, str | None, Sequence[str], Sequence[str]], list[float]],
              models: Sequence[ScoringModel], langs: Sequence[str | None],
              candidates: Sequence[str], sources: Sequence[str]) -> list[float]:
        if len(candidates) != len(sources):
            raise ValueError(f"{len(candidates)} candidates vs {len(sources)} sources")
        if not candidates:
            return []
        if not models:
            raise ValueError("no model of this kind to score with")
        per_model = [one(tr, lang, candidates, sources)
                     for tr, lang in zip(models, langs, strict=True)]
        return [sum(col) / len(col) for col in zip(*per_model, strict=True)]


def reverse_scorer(bundles: Sequence[Bundle], forward: Direction,
                   names: Sequence[str] | None = None, *, r2l: Sequence[Bundle] = (),
                   r2l_names: Sequence[str] | None = None) -> ReverseScorer:
    """A :class:`ReverseScorer` of loaded checkpoints (``names``, ``r2l_names``: their files,
    for errors) for a forward model translating ``forward`` (its ``src`` -> ``tgt``).

    ``bundles``, the reverse models: a model of one direction must translate ``tgt`` ->
    ``src``; a model of several directions (``data.directions``) must have that direction
    among them, and is asked for ``src``: so one model trained both ways (``[de-en, en-de]``)
    can rerank its own translations. ``r2l``, the right-to-left models: trained with
    ``data.reverse_target``, translating ``src`` -> ``tgt`` (or with that direction among
    theirs). ``ValueError`` naming the file otherwise."""
    shown = list(names) if names is not None else [str(b.path) for b in bundles]
    back = Direction(forward.tgt, forward.src)
    tags = [_direction_tag(b, name, back, f"a reverse model for a {forward.src}->{forward.tgt} "
                           f"model must translate {back.src}->{back.tgt}")
            for b, name in zip(bundles, shown, strict=True)]
    r2l_shown = list(r2l_names) if r2l_names is not None else [str(b.path) for b in r2l]
    r2l_tags = []
    for b, name in zip(r2l, r2l_shown, strict=True):
        need = (f"a right-to-left model for a {forward.src}->{forward.tgt} model must translate "
                f"{forward.src}->{forward.tgt} with data.reverse_target: true")
        if not b.cfg.data.reverse_target:
            raise UserError(f"{name} writes left to right (data.reverse_target is false): {need}")
        r2l_tags.append(_direction_tag(b, name, forward, need))
    return ReverseScorer([Translator.from_bundle(b) for b in bundles], tags,
                         r2l=[Translator.from_bundle(b) for b in r2l], r2l_tgt_langs=r2l_tags)


def _direction_tag(b: Bundle, name: str, want: Direction, need: str) -> str | None:
    """The target language to ask checkpoint ``b`` for so that it translates ``want``:
    ``None`` for a model of that one direction, ``want.tgt`` for a model of several
    directions that has it; ``ValueError`` naming ``name`` and saying ``need`` otherwise."""
    data = b.cfg.data
    if data.directions:
        if want not in directions(data):
            raise UserError(f"{name} translates {', '.join(data.directions)}: {need}")
        return want.tgt
    if (data.src_lang, data.tgt_lang) != (want.src, want.tgt):
        raise UserError(f"{name} translates {data.src_lang}->{data.tgt_lang}: {need}")
    return None
