"""Translator: text in, text out. Sort by length, batch, search, unsort, detokenize."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, replace

import numpy as np
import torch

from ..config import DecodeConfig
from ..data.batching import pad_batch
from ..data.vocab import EOS, PAD
from ..models.prepack import pack_for_inference
from .search import Hypothesis, beam_search, greedy_search

log = logging.getLogger(__name__)


@dataclass
class Translation:
    text: str
    tokens: list[str]
    src_tokens: list[str]
    score: float
    attention: torch.Tensor | None = None  # (len(tokens) + 1, len(src_tokens) + 1)


def decode_options(cfg: DecodeConfig, **overrides) -> DecodeConfig:
    """``cfg`` with the given options replaced; ``None`` means "not given, keep the default".

    The one way the command line, the server and the Python API turn optional arguments
    into a :class:`~nmtkit.config.DecodeConfig` (defaults live only in ``config.py``).
    """
    given = {k: v for k, v in overrides.items() if v is not None}
    return replace(cfg, **given) if given else cfg


class Translator:
    """Wraps a model with its tokenizers and vocabularies (everything a checkpoint holds)."""

    @classmethod
    def from_bundle(cls, bundle, **decode_overrides) -> Translator:
        """A translator for a loaded checkpoint (:func:`nmtkit.checkpoint.load_bundle`) with
        the stored decoding options, ``decode_overrides`` replacing some (see
        :func:`decode_options`)."""
        cfg = bundle.cfg
        return cls(bundle.model, bundle.src_tok, bundle.tgt_tok, bundle.src_vocab,
                   bundle.tgt_vocab, decode_options(cfg.decode, **decode_overrides),
                   cfg.data.reverse_source, cfg.model.max_positions)

    def __init__(self, model, src_tok, tgt_tok, src_vocab, tgt_vocab, decode: DecodeConfig,
                 reverse_source: bool = False, max_src_len: int | None = None):
        self.model = model.eval()
        self.src_tok, self.tgt_tok = src_tok, tgt_tok
        self.src_vocab, self.tgt_vocab = src_vocab, tgt_vocab
        self.decode_cfg = decode
        self.reverse_source = reverse_source
        self.max_src_len = max_src_len
        self.device = next(model.parameters()).device
        pack_for_inference(self.model)  # CPU: weights in the GEMM library's layout, once

    def encode_source(self, line: str) -> tuple[list[str], np.ndarray]:
        toks = self.src_tok.encode(line.strip())
        if self.max_src_len is not None and len(toks) + 1 > self.max_src_len:
            log.warning("input of %d tokens truncated to %d", len(toks), self.max_src_len - 1)
            toks = toks[: self.max_src_len - 1]
        ids = self.src_vocab.encode(toks[::-1] if self.reverse_source else toks, add_eos=True)
        return toks, np.asarray(ids, dtype=np.int64)

    @torch.no_grad()
    def translate(self, lines: Iterable[str], beam: int | None = None,
                  batch_size: int | None = None, need_attention: bool = False,
                  n_best: int | None = None,
                  max_length: int | None = None) -> list[list[Translation]]:
        """One list of ``n_best`` translations per input line, in input order (``None``:
        the configured ``decode.beam``, ``decode.batch_size``, ``decode.n_best``).

        ``max_length`` caps every output at that many tokens (EOS not counted) on top of the
        configured ``max_len_a * src_len + max_len_b``.
        """
        cfg = self.decode_cfg
        beam = cfg.beam if beam is None else beam
        batch_size = batch_size or cfg.batch_size
        n_best = min(cfg.n_best, beam) if n_best is None else n_best
        if beam < 1:
            raise ValueError(f"beam must be >= 1, got {beam}")
        if max_length is not None and max_length < 1:
            raise ValueError(f"max_length must be >= 1, got {max_length}")
        if self.max_src_len is not None:  # the output may not outgrow the position table either
            limit = self.max_src_len - 1
            max_length = limit if max_length is None else min(max_length, limit)
        encoded = [self.encode_source(line) for line in lines]
        results: list[list[Translation] | None] = [None] * len(encoded)
        todo = []
        for i, (toks, _) in enumerate(encoded):
            if toks:
                todo.append(i)
            else:  # nothing to translate: an empty line stays empty
                results[i] = [Translation("", [], [], 0.0)] * n_best
        todo.sort(key=lambda i: len(encoded[i][1]))
        for start in range(0, len(todo), batch_size):
            chunk = todo[start:start + batch_size]
            src = pad_batch([encoded[i][1] for i in chunk]).to(self.device)
            src_mask = (src != PAD).unsqueeze(-2)
            if beam == 1 and n_best == 1:
                hyps = [[h] for h in greedy_search(self.model, src, src_mask, cfg.max_len_a,
                                                   cfg.max_len_b, need_attention, max_length)]
            else:
                hyps = beam_search(self.model, src, src_mask, beam, cfg.length_penalty,
                                   cfg.max_len_a, cfg.max_len_b, n_best, need_attention,
                                   max_length, cfg.early_stop)
            for i, hs in zip(chunk, hyps, strict=True):
                results[i] = [self._finish(h, encoded[i][0]) for h in hs]
        return results  # type: ignore[return-value]

    def _finish(self, h: Hypothesis, src_tokens: list[str]) -> Translation:
        toks = self.tgt_vocab.decode([t for t in h.tokens if t != EOS])
        attn = h.attention.cpu() if h.attention is not None else None
        if attn is not None and self.reverse_source:
            n = len(src_tokens)
            attn = torch.cat([attn[:, :n].flip(1), attn[:, n:]], dim=1)
        return Translation(self.tgt_tok.decode(toks), toks, src_tokens, h.score, attn)

    def translate_lines(self, lines: list[str], beam: int | None = None,
                        batch_size: int | None = None) -> list[str]:
        return [r[0].text for r in self.translate(lines, beam, batch_size)]
