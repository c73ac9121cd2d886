"""Corpus-level scores with sacreBLEU (Post 2018) on detokenized, cased text, with signatures."""

from __future__ import annotations

import math
from typing import Any

from sacrebleu.metrics.bleu import BLEU
from sacrebleu.metrics.chrf import CHRF


def score(hypotheses: list[str], references: list[str]) -> dict[str, Any]:
    """BLEU and chrF of detokenized hypotheses against one reference each.

    Returns {"bleu", "chrf", "signature": {"bleu", "chrf"}, "n"}.
    """
    if len(hypotheses) != len(references):
        raise ValueError(f"{len(hypotheses)} hypotheses vs {len(references)} references")
    bleu = BLEU()
    chrf = CHRF()
    b = bleu.corpus_score(hypotheses, [references])
    c = chrf.corpus_score(hypotheses, [references])
    return {
        "bleu": round(b.score, 2),
        "chrf": round(c.score, 2),
        "signature": {"bleu": str(bleu.get_signature()), "chrf": str(chrf.get_signature())},
        "n": len(hypotheses),
    }


def perplexity(nll_sum: float, n_tokens: int) -> float:
    """exp(mean negative log-likelihood per target token)."""
    return math.exp(min(nll_sum / max(n_tokens, 1), 100.0))
