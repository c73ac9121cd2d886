"""A translator that starts without PyTorch: a checkpoint's Transformer run in numpy
(:mod:`nmtkit.lite`) behind the text pipeline every engine shares
(:class:`~nmtkit.decode.text_translator.TextTranslator`).

It searches what :mod:`nmtkit.lite.search` searches (greedy or beam search, n best, token
scores) for a few lines at a time, one sentence after another: the cold start of a short
``nmtkit translate`` (PyTorch's import alone takes longer than all of it). Anything else it
hands to nmtkit's PyTorch :class:`~nmtkit.decode.translator.Translator` of the same
checkpoint and options, built the first time it is needed (``full``): more lines than
``max_lines`` (a batched PyTorch search is faster then), forced prefixes, constraints,
sampling, MBR, reranking, a right-to-left model or reversed sources, alignments and the
source attention. The attention that puts back the spans the vocabulary cannot say
(:meth:`~nmtkit.decode.text_translator.TextTranslator.by_sentence`) is its own, a numpy
array that never leaves the translator. Results are the PyTorch translator's within float
tolerance (``tests/test_lite.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, cast

import numpy as np

from ..config import DecodeConfig
from ..data.directions import target_tags
from ..data.sentences import text_languages
from ..data.vocab import Vocab
from ..lite import MAX_LINES
from ..lite.checkpoint import LiteBundle
from ..lite.search import search
from .options import TranslateOptions
from .text_translator import TextTranslator, text_lines, warn_of_a_long_search
from .translation import Translation


class LiteTranslator(TextTranslator):
    """Text in, text out with a :class:`~nmtkit.lite.checkpoint.LiteBundle`; what it does
    not do goes to ``full()``, the PyTorch translator of the same checkpoint and options."""

    src_vocab: Vocab
    tensor_attention = False  # (inside by_sentence only: a call that asks for it goes to PyTorch)

    def __init__(self, bundle: LiteBundle, decode: DecodeConfig,
                 full: Callable[[], TextTranslator], max_lines: int | None = MAX_LINES) -> None:
        cfg = bundle.cfg
        self.src_vocab = bundle.src_vocab
        super().__init__(bundle.src_tok, bundle.tgt_tok, decode, cfg.data.reverse_source,
                         cfg.model.max_positions, target_tags=target_tags(cfg.data),
                         languages=text_languages(cfg.data))
        self.bundle, self.model = bundle, bundle.model
        self.tgt_vocab = bundle.tgt_vocab
        self.max_lines = max_lines
        """Calls with more lines go to ``full()`` (``None``: no limit)."""
        self._full_factory = full
        self._full: TextTranslator | None = None

    def full(self) -> TextTranslator:
        """The PyTorch translator of this checkpoint, with this translator's options and
        reranking models (built once, when first needed)."""
        if self._full is None:
            self._full = self._full_factory()
        self._full.decode_cfg, self._full.reverse = self.decode_cfg, self.reverse
        return self._full

    def searches(self, o: TranslateOptions, cfg: DecodeConfig, n_lines: int) -> bool:
        """Whether numpy translates a call of ``n_lines`` lines with options ``o`` (resolved:
        ``cfg``)."""
        return not (o.prefixes is not None or o.constraints is not None or o.need_attention
                    or o.alignments or cfg.sampling or cfg.mbr or cfg.rerank
                    or self.reverse_source or self.bundle.cfg.data.reverse_target
                    or (self.max_lines is not None and n_lines > self.max_lines))

    def encode_source(self, line: str, tgt_lang: str | None = None) -> tuple[list[str], np.ndarray]:
        """(source tokens, the ids the model reads: ``</s>`` at the end), as the PyTorch
        translator's."""
        toks, model_order = self.source_tokens(line, self.target_tag(tgt_lang))
        return toks, np.asarray(self.src_vocab.encode(model_order, add_eos=True), dtype=np.int64)

    def translate(self, lines: Iterable[str], options: TranslateOptions | None = None
                  ) -> list[list[Translation]]:
        """One list of ``n_best`` translations per line, in input order, as
        :meth:`nmtkit.decode.translator.Translator.translate` gives them."""
        o = TranslateOptions() if options is None else options
        texts = list(text_lines(lines))
        cfg, _ = self.call_options(o)
        if not self.searches(o, cfg, len(texts)):
            return self.full().translate(texts, o)
        if cfg.split_sentences or cfg.protect_spans:  # lines -> sentences -> here again
            return self.by_sentence(texts, o, cfg, self._sentences)
        return self._sentences(texts, o)

    def _sentences(self, texts: list[str], o: TranslateOptions) -> list[list[Translation]]:
        """The numpy search of each text, read whole; with ``o.need_attention`` (asked by
        :meth:`by_sentence` for the sentences whose spans it puts back, and dropped there)
        each translation carries its source attention as a numpy array."""
        cfg, max_length = self.call_options(o)
        self.target_tag(o.tgt_lang)  # a missing or unknown language: an error before any work
        encoded = [self.encode_source(line, o.tgt_lang) for line in texts]
        warn_of_a_long_search(cfg, [len(ids) for _, ids in encoded], max_length)
        check = o.deadline.check if o.deadline is not None else None

        def run(batch: list[int]) -> list[list[Translation]]:
            out = []
            for i in batch:
                src_tokens, ids = encoded[i]
                hyps = search(self.model, ids, cfg, max_length=max_length,
                              token_scores=o.token_scores, need_attention=o.need_attention,
                              check=check)
                # the attention is an array here: by_sentence reads and drops it
                out.append([self.translation(self.tgt_vocab.decode(h.tokens), src_tokens, h.score,
                                             cast(Any, h.attention),
                                             token_log_probs=h.token_log_probs, log_prob=h.log_prob)
                            for h in hyps])
            return out

        return self.in_length_order([toks for toks, _ in encoded], cfg.n_best,
                                    lambda todo: ([i] for i in todo), run, o.progress)

