"""Corpus-level scores with sacreBLEU (Post 2018) on detokenized, cased text, with signatures,
and the tokenized lowercased BLEU of the homework (seed 003) and the Multi30k literature.

``bleu`` is sacreBLEU's standard score: cased, on detokenized text, its own ``13a``
tokenizer; compare it with other sacreBLEU numbers. ``bleu_lc_tok`` is BLEU on tokenized
lowercased text as seed 003 reports it (nltk's ``corpus_bleu`` on ``WordPunctTokenizer``
tokens of lowercased text), for any corpus; on Multi30k, :func:`multi30k_tok_bleu` scores
against the official Moses-tokenized references instead (the multimodal-MT literature's
``multi-bleu.perl`` number). nmtkit computes ``bleu_lc_tok`` as follows, exactly:

1. tokenize hypotheses and references alike with :func:`word_punct_tokens`, the regular
   expression ``\\w+|[^\\w\\s]+`` (nltk's ``WordPunctTokenizer``: runs of letters/digits,
   runs of punctuation; ``"don't."`` -> ``don ' t .``), and join the tokens with spaces;
2. score with ``sacrebleu.metrics.BLEU(lowercase=True, tokenize="none")``: 4-gram corpus
   BLEU, case folded, no further tokenization (its signature says ``case:lc|tok:none``).

On a corpus with at least one match of every n-gram order this equals nltk's unsmoothed
``corpus_bleu`` on the same tokens (x 100); it is not comparable with ``bleu``.
"""

from __future__ import annotations

import logging
import math
import re
from pathlib import Path
from typing import Any

from sacrebleu.metrics.bleu import BLEU
from sacrebleu.metrics.chrf import CHRF
from sacrebleu.metrics.ter import TER

from .data.corpora import multi30k_reference_file
from .data.fetch import CorpusError
from .errors import UserError

log = logging.getLogger(__name__)

WORD_PUNCT = re.compile(r"\w+|[^\w\s]+")
"""nltk's ``WordPunctTokenizer`` pattern (seed 003 tokenizes with it)."""


def word_punct_tokens(text: str) -> list[str]:
    """Runs of word characters and runs of other non-space characters: ``"a,b!" -> [a , b !]``."""
    return WORD_PUNCT.findall(text)


def tokenized_bleu(hypotheses: list[str], references: list[str]) -> tuple[float, str]:
    """``bleu_lc_tok``: sacreBLEU (``lowercase=True``, ``tokenize="none"``) on
    :func:`word_punct_tokens` of both sides. Returns (score, signature)."""
    def tok(lines: list[str]) -> list[str]:
        return [" ".join(word_punct_tokens(line)) for line in lines]

    bleu = BLEU(lowercase=True, tokenize="none", force=True)  # tokenized on purpose
    result = bleu.corpus_score(tok(hypotheses), [tok(references)])
    return round(result.score, 2), f"{bleu.get_signature()}|pretok:wordpunct"


def score(hypotheses: list[str], references: list[str]) -> dict[str, Any]:
    """BLEU, chrF (Popovic 2015) and TER (Snover et al. 2006) of detokenized hypotheses
    against one reference each, all three sacreBLEU's with their signatures, and
    ``bleu_lc_tok`` (:func:`tokenized_bleu`).

    Returns {"bleu", "chrf", "ter", "bleu_lc_tok", "length_ratio", "signature": {"bleu",
    "chrf", "ter", "bleu_lc_tok"}, "n"}; ``length_ratio`` is the hypotheses' length over the
    references' in BLEU's tokens (below 1 BLEU's brevity penalty applies). TER is an edit
    rate: the number of word edits (insertions, deletions, substitutions and shifts of
    word sequences) per reference word, x 100, so lower is better, unlike the others.
    """
    if len(hypotheses) != len(references):
        raise UserError(f"{len(hypotheses)} hypotheses vs {len(references)} references")
    bleu = BLEU()
    chrf = CHRF()
    ter = TER()
    b = bleu.corpus_score(hypotheses, [references])
    c = chrf.corpus_score(hypotheses, [references])
    t = ter.corpus_score(hypotheses, [references])
    lc_tok, lc_tok_signature = tokenized_bleu(hypotheses, references)
    return {
        "bleu": round(b.score, 2),
        "chrf": round(c.score, 2),
        "ter": round(t.score, 2),
        "bleu_lc_tok": lc_tok,
        "length_ratio": round(b.sys_len / b.ref_len, 4) if b.ref_len else 0.0,
        "signature": {"bleu": str(bleu.get_signature()), "chrf": str(chrf.get_signature()),
                      "ter": str(ter.get_signature()), "bleu_lc_tok": lc_tok_signature},
        "n": len(hypotheses),
    }


def moses_lc_norm_tok(lines: list[str], lang: str) -> list[str]:
    """What Multi30k's official ``tok/*.lc.norm.tok.<lang>`` files hold, from raw text:
    lowercase, then Moses punctuation normalisation, then the Moses tokenizer with its
    default escaping (``'`` -> ``&apos;``), via sacremoses. On the raw val and test_2016_flickr
    files of de and en this reproduces 4027 of the 4028 official lines."""
    from sacremoses import MosesPunctNormalizer, MosesTokenizer

    norm, tok = MosesPunctNormalizer(lang), MosesTokenizer(lang)
    return [tok.tokenize(norm.normalize(line.lower()), return_str=True) for line in lines]


def official_reference(split: str, lang: str) -> Path | None:
    """Multi30k's official tokenized reference of ``split`` in ``lang``
    (:func:`nmtkit.data.corpora.multi30k_reference_file`: the mirror's ``tok/`` file, else the
    cache, else a download, sha256-checked), or ``None`` with a warning naming the file and why
    (missing offline, a sha256 mismatch). The reference is optional: only
    ``bleu_official_tok`` needs it, so ``nmtkit evaluate`` looks it up before translating
    and, without it, reports every other score rather than failing after the translation."""
    try:
        return multi30k_reference_file(split, lang)
    except (CorpusError, OSError) as e:
        log.warning("bleu_official_tok is left out (the other scores do not need it): %s", e)
        return None


def multi30k_tok_bleu(hypotheses: list[str], split: str, lang: str,
                      reference: Path | None = None) -> tuple[float, str]:
    """BLEU of detokenized ``hypotheses`` against Multi30k's official lowercased, normalised,
    tokenized reference of ``split`` in ``lang`` (``reference``, else
    :func:`nmtkit.data.corpora.multi30k_reference_file`), the convention of the multimodal-MT
    literature (``multi-bleu.perl`` on these files): the hypotheses go through
    :func:`moses_lc_norm_tok`, then sacreBLEU with ``tokenize="none"`` (the text is already
    tokenized and lowercased). Returns (score, signature)."""
    path = reference if reference is not None else multi30k_reference_file(split, lang)
    refs = path.read_text(encoding="utf-8").splitlines()
    if len(refs) != len(hypotheses):
        raise UserError(f"{path}: {len(refs)} references vs {len(hypotheses)} hypotheses")
    bleu = BLEU(tokenize="none", force=True)  # tokenized on purpose
    result = bleu.corpus_score(moses_lc_norm_tok(hypotheses, lang), [refs])
    return round(result.score, 2), f"{bleu.get_signature()}|ref:multi30k-{split}.lc.norm.tok.{lang}"


def perplexity(nll_sum: float, n_tokens: int) -> float:
    """exp(mean negative log-likelihood per target token)."""
    return math.exp(min(nll_sum / max(n_tokens, 1), 100.0))
