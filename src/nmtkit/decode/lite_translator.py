"""A translator that starts without PyTorch: a checkpoint's Transformer run in numpy
(:mod:`nmtkit.lite`) as the engine of the text pipeline every engine shares
(:class:`~nmtkit.decode.text_translator.TextTranslator`).

Its engine (:meth:`LiteTranslator.search`) searches what :mod:`nmtkit.lite.search` searches
(greedy or beam search, n best, token scores, the source attention) one sentence after
another: the cold start of a short ``nmtkit translate`` (PyTorch's import alone takes longer
than all of it). What it does not do (:meth:`LiteTranslator.refuses`) goes to its
:attr:`~nmtkit.decode.text_translator.TextTranslator.fallback`, nmtkit's PyTorch
:class:`~nmtkit.decode.translator.Translator` of the same checkpoint and options, built the
first time it is needed: more sentences than ``max_lines`` (a batched PyTorch search is
faster then), forced prefixes, constraints, sampling, MBR, reranking, a right-to-left model or
reversed sources, alignments and the source attention asked for by the caller. (The
attention that puts back the spans the vocabulary cannot say is its own.) Results are the
PyTorch translator's within float tolerance (``tests/test_lite.py``).
"""

from __future__ import annotations

from collections.abc import Callable

from ..config import DecodeConfig
from ..data.directions import target_tags
from ..data.sentences import text_languages
from ..data.vocab import Vocab
from ..lite import MAX_LINES
from ..lite.checkpoint import LiteBundle
from ..lite.search import search
from .engine import Found, SearchRequest, Source
from .options import TranslateOptions
from .text_translator import TextTranslator


class LiteTranslator(TextTranslator):
    """Text in, text out with a :class:`~nmtkit.lite.checkpoint.LiteBundle`; what it does
    not do goes to ``full()``, the PyTorch translator of the same checkpoint and options
    (its :attr:`fallback`)."""

    engine = "numpy"
    src_vocab: Vocab

    def __init__(self, bundle: LiteBundle, decode: DecodeConfig,
                 full: Callable[[], TextTranslator], max_lines: int | None = MAX_LINES) -> None:
        cfg = bundle.cfg
        super().__init__(bundle.src_tok, bundle.tgt_tok, decode, cfg.data.reverse_source,
                         cfg.model.max_positions, target_tags=target_tags(cfg.data),
                         languages=text_languages(cfg.data))
        self.bundle, self.model = bundle, bundle.model
        self.src_vocab, self.tgt_vocab = bundle.src_vocab, bundle.tgt_vocab
        self.reverse_target = cfg.data.reverse_target
        self.max_lines = max_lines
        """Calls of more sentences go to the fallback (``None``: no limit)."""
        self.fallback = full

    def refuses(self, options: TranslateOptions, cfg: DecodeConfig, n_sentences: int) -> str | None:
        """What numpy leaves to PyTorch (its :attr:`fallback`) of a call of ``n_sentences``
        sentences (after sentence splitting: a line of 500 sentences is 500 sentences' work,
        which PyTorch's batched search does faster) with ``options`` (resolved: ``cfg``)."""
        asked = {"forced prefixes": options.prefixes is not None,
                 "constraints": options.constraints is not None,
                 "the source attention": options.need_attention,
                 "alignments": options.alignments, "sampling": cfg.sampling,
                 "MBR": bool(cfg.mbr), "reranking": bool(cfg.rerank),
                 "a model that reads its source reversed": self.reverse_source,
                 "a right-to-left model": self.reverse_target,
                 f"more than {self.max_lines} sentences": (self.max_lines is not None
                                                          and n_sentences > self.max_lines)}
        refused = [what for what, given in asked.items() if given]
        return ", ".join(refused) + ": nmtkit's PyTorch search does it" if refused else None

    def search(self, sources: list[Source], request: SearchRequest) -> list[list[Found]]:
        """:func:`nmtkit.lite.search.search` of each source in turn (one sentence at a time:
        no padding), the attention as it records it."""
        check = request.deadline.check if request.deadline is not None else None
        out = []
        for s in sources:
            hyps = search(self.model, s.ids, request.cfg, max_length=request.max_length,
                          token_scores=request.token_scores, need_attention=request.attention,
                          check=check)
            out.append([Found(self.tgt_vocab.decode(h.tokens), h.score, h.log_prob,
                              h.token_log_probs, h.attention) for h in hyps])
        return out
