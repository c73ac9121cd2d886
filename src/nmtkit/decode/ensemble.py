"""Ensembles: several models decoding as one.

:class:`Ensemble` implements the search's model interface (``encode``/``start``/``step``/
``reorder``) over a list of models. At each step every model scores the next token and the
ensemble's log-probability is the log of the models' *mean probability*:

    log P(y | ...) = log (1/n) sum_m P_m(y | ...) = logsumexp_m(log P_m) - log n

(a mixture of the models, which is again a distribution; fairseq does the same). Greedy,
beam, sampling and forced prefixes therefore work on an ensemble unchanged. The source
attention it reports is the models' mean.

The models must share their vocabularies (the target one to average over tokens, the source
one to read the same ids) and the direction they read the source in:
:func:`ensemble_translator` checks that and names the files that differ.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor, nn

from ..data.directions import target_tags
from ..data.sentences import text_languages
from ..errors import UserError
from ..models.seq2seq import Seq2Seq
from .text_translator import decode_options
from .translator import Translator

if TYPE_CHECKING:
    from ..checkpoint import Bundle
    from ..config import DecodeConfig


class Ensemble(Seq2Seq):
    """Models averaged in probability space at every decoding step."""

    def __init__(self, models: Sequence[Seq2Seq]) -> None:
        super().__init__()
        if not models:
            raise ValueError("an ensemble needs at least one model")
        self.members = nn.ModuleList(models)  # registered: .eval(), .parameters(), nmtkit.fast
        self.models: list[Seq2Seq] = list(models)  # the same, typed
        self.src_vocab_size = models[0].src_vocab_size
        self.tgt_vocab_size = models[0].tgt_vocab_size
        self.log_n = math.log(len(models))

    def encode(self, src: Tensor, src_mask: Tensor) -> list[Any]:
        """Each model's memory."""
        return [m.encode(src, src_mask) for m in self.models]

    def start(self, memory: list[Any], src_mask: Tensor, need_attention: bool = False) -> list[Any]:
        """Each model's decoder state."""
        return [m.start(mem, src_mask, need_attention=need_attention)
                for m, mem in zip(self.models, memory, strict=True)]

    def step(self, state: list[Any], prev_tokens: Tensor) -> tuple[Tensor, list[Any], Tensor | None]:
        """prev_tokens (batch,) -> log of the models' mean probability (batch, V), the new
        states, and the models' mean source attention (batch, S) or None."""
        outs = [m.step(s, prev_tokens) for m, s in zip(self.models, state, strict=True)]
        log_probs = torch.stack([lp for lp, _, _ in outs])  # (models, batch, V)
        mixed = torch.logsumexp(log_probs, dim=0) - self.log_n  # (batch, V)
        attns = [a for _, _, a in outs if a is not None]
        attn = torch.stack(attns).mean(dim=0) if attns else None  # (batch, S)
        return mixed, [s for _, s, _ in outs], attn

    def reorder(self, state: list[Any], index: Tensor, same_source: bool = False) -> list[Any]:
        return [m.reorder(s, index, same_source=same_source)
                for m, s in zip(self.models, state, strict=True)]


def ensemble_translator(bundles: Sequence[Bundle], names: Sequence[str | Path] | None = None,
                        decode: DecodeConfig | None = None,
                        **decode_overrides: Any) -> Translator:
    """A :class:`~nmtkit.decode.translator.Translator` over the ensemble of ``bundles``'
    models, with the first one's tokenizers and ``decode`` (default: the first one's
    decoding options; ``decode_overrides`` replace some, see
    :func:`~nmtkit.decode.text_translator.decode_options`).

    ``ValueError`` naming the files (``names``, default the bundles' paths) if the
    vocabularies or the source direction differ. One bundle gives a plain translator.
    """
    if not bundles:
        raise UserError("an ensemble needs at least one checkpoint")
    shown = [str(n) for n in names] if names is not None else [
        str(b.path) if b.path is not None else f"model {i + 1}" for i, b in enumerate(bundles)]
    first = bundles[0]
    if len(bundles) == 1:
        return Translator.from_bundle(first, decode, **decode_overrides)
    for b, name in zip(bundles[1:], shown[1:], strict=True):
        for what, mine, theirs in (("target vocabulary", b.tgt_vocab, first.tgt_vocab),
                                   ("source vocabulary", b.src_vocab, first.src_vocab)):
            if mine != theirs:
                raise UserError(f"cannot ensemble {shown[0]} and {name}: their {what} differs "
                                 f"({len(theirs)} and {len(mine)} types); the models of an "
                                 "ensemble must share their vocabularies")
        if b.cfg.data.reverse_source != first.cfg.data.reverse_source:
            raise UserError(f"cannot ensemble {shown[0]} and {name}: one reads the source "
                             "reversed (data.reverse_source), the other does not")
        if b.cfg.data.reverse_target != first.cfg.data.reverse_target:
            raise UserError(f"cannot ensemble {shown[0]} and {name}: one writes its output "
                             "right to left (data.reverse_target), the other does not")
        if b.cfg.data.directions != first.cfg.data.directions:
            raise UserError(f"cannot ensemble {shown[0]} and {name}: they were trained on different "
                             f"directions (data.directions {list(first.cfg.data.directions)} and "
                             f"{list(b.cfg.data.directions)})")
    cfg = first.cfg
    max_positions = min(b.cfg.model.max_positions for b in bundles)
    return Translator(Ensemble([b.model for b in bundles]), first.src_tok, first.tgt_tok,
                      first.src_vocab, first.tgt_vocab,
                      decode_options(cfg.decode if decode is None else decode, **decode_overrides),
                      cfg.data.reverse_source, max_positions, target_tags=target_tags(cfg.data),
                      reverse_target=cfg.data.reverse_target, languages=text_languages(cfg.data))
