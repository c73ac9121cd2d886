"""Text <-> token strings.

Every tokenizer implements the small :class:`Tokenizer` protocol: ``encode``
(text to token strings), ``decode`` (token strings back to text) and
``state`` (a plain dict that rebuilds it through :func:`tokenizer_from_state`).
``state`` holds only str/int/float/bool/bytes/list/dict, because it travels
inside checkpoints that are read with ``torch.load(weights_only=True)``.

- :class:`SentencePieceTokenizer`: BPE or unigram subwords, trained in memory
  on the training split; the serialized model proto is the whole state.
- :class:`WordTokenizer`: spaCy's blank-language rules, as the seeds (The
  Annotated Transformer) tokenize Multi30k, with a rule-based detokenizer.
- :class:`WhitespaceTokenizer`: ``str.split`` (synthetic tasks, pre-tokenized text).
"""

from __future__ import annotations

import io
import logging
from collections.abc import Iterable
from typing import Any, Protocol, runtime_checkable

import sentencepiece as spm

from nmtkit.config import SPM_MODEL_TYPES, TOKENIZERS, DataConfig

from ..errors import UserError

log = logging.getLogger(__name__)


@runtime_checkable
class Tokenizer(Protocol):
    kind: str

    def encode(self, text: str) -> list[str]:
        """Text -> token strings."""
        ...

    def decode(self, tokens: list[str]) -> str:
        """Token strings -> detokenized text."""
        ...

    def state(self) -> dict[str, Any]:
        """Plain data (str/int/float/bool/bytes/list/dict) for :func:`tokenizer_from_state`."""
        ...


# ---------------------------------------------------------------------------
# SentencePiece


SPM_SEED = 1234
"""Seed for SentencePiece's random generator (training is also run without shuffling)."""

BYTE_PIECES = tuple(f"<0x{b:02X}>" for b in range(256))
"""The pieces of SentencePiece's byte fallback, one per byte value."""


class SentencePieceTokenizer:
    """Subword tokenizer (Kudo & Richardson 2018), BPE or unigram.

    Build it with :meth:`train`; the model lives in memory as proto bytes, so
    no file is needed beside the checkpoint.
    """

    kind = "sentencepiece"

    def __init__(self, model_proto: bytes, lowercase: bool = False):
        self.model_proto = bytes(model_proto)
        self.lowercase = lowercase
        self.sp = spm.SentencePieceProcessor()
        try:
            self.sp.LoadFromSerializedProto(self.model_proto)
        except Exception as e:  # the C++ side raises a bare RuntimeError/OSError
            raise UserError(f"invalid SentencePiece model proto: {e}") from None

    @classmethod
    def train(
        cls,
        lines: Iterable[str],
        vocab_size: int,
        model_type: str = "bpe",
        lowercase: bool = False,
        input_sentence_size: int = 2_000_000,
        num_threads: int = 1,
        byte_fallback: bool = False,
    ) -> SentencePieceTokenizer:
        """Train on ``lines`` in memory; the same input always gives the same model bytes.

        ``vocab_size`` is a soft limit (``hard_vocab_limit=False``): a corpus too
        small to reach it yields a smaller vocabulary instead of an error.
        ``byte_fallback``: a character without a piece is written as the pieces of its
        UTF-8 bytes (``<0xF0>``...; SentencePiece's byte fallback)
        instead of ``<unk>``, so that every text encodes and decodes back unchanged. The
        256 byte pieces come on top of ``vocab_size``: the pieces learned from the text,
        and so every text's segmentation, are those of a model without them.
        Only the first ``input_sentence_size`` non-empty lines are used (no
        random sampling, for determinism).  Keep ``num_threads=1`` for
        reproducible models: with more threads unigram's pieces and scores
        depend on the thread count, and the count is stored in the proto.
        """
        if model_type not in SPM_MODEL_TYPES:
            raise UserError(f"model_type must be bpe or unigram, got {model_type!r}")

        sentences = [line.strip() for line in lines]
        sentences = [line.lower() if lowercase else line for line in sentences if line]
        if not sentences:
            raise UserError("cannot train SentencePiece on an empty corpus")

        buf = io.BytesIO()
        spm.set_random_generator_seed(SPM_SEED)
        try:
            spm.SentencePieceTrainer.train(
                sentence_iterator=iter(sentences),
                model_writer=buf,
                model_type=model_type,
                vocab_size=vocab_size + (len(BYTE_PIECES) if byte_fallback else 0),
                character_coverage=1.0,
                byte_fallback=byte_fallback,
                hard_vocab_limit=False,
                input_sentence_size=input_sentence_size,
                shuffle_input_sentence=False,
                num_threads=num_threads,
                # nmtkit's Vocab owns BOS/EOS/PAD; SentencePiece only needs <unk>.
                unk_id=0,
                bos_id=-1,
                eos_id=-1,
                pad_id=-1,
                minloglevel=2,
            )
        except RuntimeError as e:  # e.g. "Vocabulary size is smaller than required_chars"
            raise UserError(
                f"SentencePiece {model_type} training (vocab_size={vocab_size}) failed: {e}"
            ) from None
        return cls(buf.getvalue(), lowercase=lowercase)

    def pieces(self) -> list[str]:
        """Every piece of the model, in SentencePiece id order (``<unk>`` first)."""
        return [self.sp.IdToPiece(i) for i in range(self.sp.GetPieceSize())]

    def byte_pieces(self) -> list[str]:
        """The 256 byte pieces (``<0x00>`` ... ``<0xFF>``) of a model trained with
        ``byte_fallback``; ``[]`` for one without (a model from before, or ``data.byte_fallback:
        false``). The vocabulary keeps them although the training text may never use them."""
        return [p for i, p in enumerate(self.pieces()) if self.sp.IsByte(i)]

    def encode(self, text: str) -> list[str]:
        if self.lowercase:
            text = text.lower()
        pieces: list[str] = self.sp.EncodeAsPieces(text)
        return pieces

    def sample(self, text: str, alpha: float, nbest: int = -1) -> list[str]:
        """One sampled segmentation of ``text`` (subword regularisation, training only):
        BPE-dropout with merge-dropout probability ``alpha`` for a BPE model (``nbest``
        ignored), or for a unigram model a draw from P(segmentation)^alpha among the
        ``nbest`` best (-1: all) segmentations. The draw comes from SentencePiece's own
        generator: seed it with :meth:`seed_sampling` for a reproducible sequence."""
        if self.lowercase:
            text = text.lower()
        pieces: list[str] = self.sp.Encode(text, out_type=str, enable_sampling=True,
                                           alpha=alpha, nbest_size=nbest)
        return pieces

    @staticmethod
    def seed_sampling(seed: int) -> None:
        """(Re)seed SentencePiece's process-wide random generator, used by :meth:`sample`."""
        spm.set_random_generator_seed(seed)

    def decode(self, tokens: list[str]) -> str:
        text: str = self.sp.DecodePieces(list(tokens))
        return text

    def state(self) -> dict[str, Any]:
        return {"kind": self.kind, "model_proto": self.model_proto, "lowercase": self.lowercase}

    def __repr__(self) -> str:
        return (
            f"SentencePieceTokenizer(pieces={self.sp.GetPieceSize()}, lowercase={self.lowercase})"
        )


# ---------------------------------------------------------------------------
# Word level (spaCy rules) and its detokenizer


def _load_spacy_tokenizer(lang: str) -> Any:
    try:
        import spacy
    except ImportError:
        raise ImportError("the word tokenizer needs spaCy: pip install 'nmtkit[word]'") from None
    try:
        return spacy.blank(lang).tokenizer
    except Exception as e:  # spaCy raises ImportError/ValueError for unknown codes
        raise UserError(f"spaCy has no tokenizer rules for language {lang!r}: {e}") from None


class WordTokenizer:
    """spaCy's blank-language tokenizer rules (no model download), whitespace tokens dropped."""

    kind = "word"

    def __init__(self, lang: str, lowercase: bool = False):
        self.lang = lang
        self.lowercase = lowercase
        self._tok = _load_spacy_tokenizer(lang)

    def encode(self, text: str) -> list[str]:
        tokens = [t.text for t in self._tok(text) if not t.text.isspace()]
        if self.lowercase:
            tokens = [t.lower() for t in tokens]
        return tokens

    def decode(self, tokens: list[str]) -> str:
        return detokenize(tokens)

    def state(self) -> dict[str, Any]:
        return {"kind": self.kind, "lang": self.lang, "lowercase": self.lowercase}

    def __repr__(self) -> str:
        return f"WordTokenizer(lang={self.lang!r}, lowercase={self.lowercase})"


# Tokens glued to the previous one / to the next one.
_CLOSE = {",", ".", "!", "?", ";", ":", ")", "]", "}", "%", "..", "...", "…", "”", "»"}
_OPEN = {"(", "[", "{", "„", "«", "$", "#", "¿", "¡"}
_JOIN = {"-", "/", "@"}
"""Infixes spaCy splits out of a word (``T-shirt``, ``und/oder``): glued to both sides
when both neighbours are word-like."""
_CLITIC_PREFIXES = ("'", "’")


def _is_clitic(tok: str) -> bool:
    """English clitics split off by spaCy: 's, 're, 'll, n't, ..."""
    low = tok.lower()
    if low in ("n't", "n’t"):
        return True
    return len(tok) > 1 and tok[0] in _CLITIC_PREFIXES and tok[1:].isalpha() and len(tok) <= 3


def _wordlike(tok: str) -> bool:
    return bool(tok) and (tok[-1].isalnum() or tok[0].isalnum())


def detokenize(tokens: list[str]) -> str:
    """Join word tokens into text with rule-based spacing.

    No space before closing punctuation (``, . ! ? ; : ) %``) and English
    clitics (``'s``, ``n't``); none after opening brackets and ``„``; ``"``
    (and ``'`` used as a quote) alternate between opening and closing; a
    hyphen or slash between two words is glued to both (``T-shirt``).
    """
    out: list[str] = []
    glue_next = False  # the previous token wants no space after it
    open_double = False  # inside "..."
    open_single = False  # inside '...'
    open_german = False  # inside „...“
    n = len(tokens)
    last_single = max((i for i, t in enumerate(tokens) if t in ("'", "`")), default=-1)
    for i, tok in enumerate(tokens):
        if not tok:
            continue
        prev = tokens[i - 1] if i > 0 else ""
        nxt = tokens[i + 1] if i + 1 < n else ""
        space = bool(out) and not glue_next
        glue_next = False
        if tok in _CLOSE or _is_clitic(tok):
            space = False
        elif tok in _OPEN:
            glue_next = True
            if tok == "„":
                open_german = True
        elif tok in _JOIN and _wordlike(prev) and _wordlike(nxt):
            space = False
            glue_next = True
        elif tok == '"':
            if open_double:
                space = False
            else:
                glue_next = True
            open_double = not open_double
        elif tok in ("“", "‘"):
            if tok == "“" and open_german:  # German closing quote
                space = False
                open_german = False
            else:  # English opening quote
                glue_next = True
        elif tok == "’":
            space = False
        elif tok in ("'", "`"):
            if open_single:  # closing a quote
                space = False
                open_single = False
            elif i < last_single:  # another one follows: a quote opens ('free dinner')
                glue_next = True
                open_single = True
            else:  # a lone apostrophe: plural possessive (girls')
                space = False
        if space:
            out.append(" ")
        out.append(tok)
    return "".join(out)


# ---------------------------------------------------------------------------
# Whitespace


class WhitespaceTokenizer:
    """``str.split`` / ``" ".join``: for synthetic tasks and pre-tokenized text."""

    kind = "whitespace"

    def __init__(self, lowercase: bool = False):
        self.lowercase = lowercase

    def encode(self, text: str) -> list[str]:
        return (text.lower() if self.lowercase else text).split()

    def decode(self, tokens: list[str]) -> str:
        return " ".join(tokens)

    def state(self) -> dict[str, Any]:
        return {"kind": self.kind, "lowercase": self.lowercase}

    def __repr__(self) -> str:
        return f"WhitespaceTokenizer(lowercase={self.lowercase})"


# ---------------------------------------------------------------------------
# Factories


def tokenizer_from_state(state: dict[str, Any]) -> Tokenizer:
    """Rebuild a tokenizer from its :meth:`Tokenizer.state`."""
    if not isinstance(state, dict) or "kind" not in state:
        raise UserError(
            f"tokenizer state must be a dict with a 'kind', got {type(state).__name__}"
        )
    kind = state["kind"]
    lowercase = bool(state.get("lowercase", False))
    if kind == SentencePieceTokenizer.kind:
        return SentencePieceTokenizer(state["model_proto"], lowercase=lowercase)
    if kind == WordTokenizer.kind:
        return WordTokenizer(state["lang"], lowercase=lowercase)
    if kind == WhitespaceTokenizer.kind:
        return WhitespaceTokenizer(lowercase=lowercase)
    raise UserError(f"unknown tokenizer kind {kind!r} (known: {', '.join(TOKENIZERS)})")


def train_tokenizers(
    cfg: DataConfig, src_lines: list[str], tgt_lines: list[str]
) -> tuple[Tokenizer, Tokenizer]:
    """Source and target tokenizers for ``cfg`` (trained on the given training text).

    SentencePiece with ``joint_vocab`` trains one model on both sides and
    returns that same object twice; otherwise one model per side, each with
    ``cfg.vocab_size``.
    """
    if cfg.tokenizer == "sentencepiece":

        def train(lines: list[str]) -> SentencePieceTokenizer:
            return SentencePieceTokenizer.train(
                lines,
                vocab_size=cfg.vocab_size,
                model_type=cfg.spm_model_type,
                lowercase=cfg.lowercase,
                byte_fallback=cfg.byte_fallback,
            )

        if cfg.joint_vocab:
            log.info(
                "training a joint SentencePiece %s model (%d pieces) on %d + %d lines",
                cfg.spm_model_type,
                cfg.vocab_size,
                len(src_lines),
                len(tgt_lines),
            )
            joint = train(list(src_lines) + list(tgt_lines))
            return joint, joint
        log.info(
            "training SentencePiece %s models (%d pieces each)", cfg.spm_model_type, cfg.vocab_size
        )
        return train(src_lines), train(tgt_lines)
    if cfg.tokenizer == "word":
        return (
            WordTokenizer(cfg.src_lang, lowercase=cfg.lowercase),
            WordTokenizer(cfg.tgt_lang, lowercase=cfg.lowercase),
        )
    if cfg.tokenizer == "whitespace":
        return WhitespaceTokenizer(lowercase=cfg.lowercase), WhitespaceTokenizer(
            lowercase=cfg.lowercase
        )
    raise UserError(
        f"unknown tokenizer {cfg.tokenizer!r} (known: {', '.join(TOKENIZERS)})"
    )
