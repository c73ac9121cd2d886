"""``decode``: the search used by validation, ``translate`` and ``evaluate`` unless
overridden, and the grids ``nmtkit tune`` tries."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from ..errors import UserError
from .checks import MAX_SEED, Checks
from .limits import MAX_BATCH_SENTENCES, MAX_VOCAB
from .model import MAX_POSITIONS, ModelConfig, dec_layers

TUNE_BEAMS = (5,)
"""``nmtkit tune``: the beam sizes tried when none are given (the recipes' beam)."""
TUNE_LENGTH_PENALTIES = (0.0, 0.3, 0.6, 1.0, 1.4)
"""``nmtkit tune``: the length penalties tried when none are given, from the raw
log-probability (0) to a strong preference for longer outputs."""
TUNE_REVERSE_WEIGHTS = (0.0, 0.5, 1.0, 2.0, 3.0, 4.0, 6.0)
"""``nmtkit tune``: the reverse model's weights tried with ``--rerank`` when none are given
(0: the beam's own order, the baseline every weight is measured against)."""
TUNE_R2L_WEIGHTS = (0.0, 0.5, 1.0, 2.0)
"""``nmtkit tune``: the right-to-left models' weights tried with ``--rerank`` and
``--r2l-model`` when none are given (each with every reverse weight)."""
TUNE_METRICS: Mapping[str, Literal["higher", "lower"]] = {
    "bleu": "higher", "chrf": "higher", "bleu_lc_tok": "higher", "ter": "lower"}
"""``nmtkit tune --metric``: the scores a setting can be chosen by, each with the direction
that is better: cased sacreBLEU (the default), chrF, BLEU on lowercased tokenized text
(:func:`nmtkit.evaluate.tokenized_bleu`; for a model trained on lowercased text,
``data.lowercase``, whose output has no case), and TER (Snover et al. 2006), an edit rate,
so the lowest wins."""


MAX_BEAM = 1024
"""The largest beam (and number of n-best outputs or samples) nmtkit searches with: a beam
search keeps beam x vocabulary scores per sentence, and beyond this a typo (``--beam
100000``) would exhaust memory or run for hours instead of being refused."""


MAX_LEN_A = 1000.0
"""The largest ``decode.max_len_a``: outputs a thousand times the source length."""


MAX_LENGTH_PENALTY = 5.0
"""The largest ``decode.length_penalty``, GNMT's alpha in ((5 + |y|) / 6) ** alpha (Wu et al.
2016, Sec. 7, who found 0.2 best of 0-1; OpenNMT-py's and Marian's users take 0.6-1,
fairseq's ``--lenpen`` (|y| ** alpha) 0-2). At 5 the penalty of the longest output a position
table allows (``MAX_POSITIONS``) is 1.6e20, finite in float32, and each further token still
changes it; near 9.5 it overflows to inf, every hypothesis then scores 0 and the first one
wins (``--length-penalty 1000`` gave "There is two carks")."""


TEMPERATURE_RANGE = (1e-3, 1e3)
"""``decode.sampling_temperature`` bounds: beyond them the scaled log-probabilities overflow
or all but one underflow (1e-3 samples as greedy search does, 1e3 uniformly)."""
MBR_UTILITIES = ("bleu", "chrf")
"""The values of ``decode.mbr_utility`` (:mod:`nmtkit.decode.mbr`)."""


@dataclass
class DecodeConfig:
    """Search used by validation, ``translate`` and ``evaluate`` unless overridden."""

    beam: int = 5
    length_penalty: float = 0.6
    """GNMT length penalty alpha: score / ((5 + |y|) / 6) ** alpha; 0 = raw log-prob."""
    max_len_a: float = 1.2
    """Output cap = max_len_a * source_length + max_len_b."""
    max_len_b: int = 10
    batch_size: int = 64
    """Sentences per decoding batch."""
    n_best: int = 1
    early_stop: bool = False
    """Beam search: a sentence stops once its ``n_best`` best-ranked hypotheses have ended
    (OpenNMT-py's rule; ~1.3x faster, now and then a different output). Off: it goes on
    until every hypothesis in its beam has ended."""
    fast: bool = True
    """Apply :mod:`nmtkit.fast` to the model for decoding (CPU: weights packed once in the
    GEMM library's layout). Off: the readable model as written; same translations."""
    sampling: bool = False
    """Draw each output token from the model's distribution instead of searching
    (back-translation, diversity): ``n_best`` samples per sentence, ``beam`` unused."""
    sampling_temperature: float = 1.0
    """Sampling draws from softmax(log-probs / temperature): < 1 sharper, > 1 flatter."""
    sampling_top_k: int = 0
    """Sampling: only among the k most probable tokens (0 = all)."""
    sampling_top_p: float = 1.0
    """Sampling: only among the most probable tokens whose mass reaches p (nucleus sampling,
    Holtzman et al. 2020; 1.0 = all)."""
    sampling_epsilon: float = 0.0
    """Sampling: only among tokens of probability >= epsilon (epsilon sampling, Hewitt et al.
    2022; the most probable always stays; 0 = all). Good candidates for MBR (``mbr``)."""
    sampling_seed: int = 0
    """Seed of the sampling's random generator: the same seed, input and batch size give the
    same samples."""
    mbr: int = 0
    """Minimum Bayes risk decoding over this many candidates (0 = off): the n best of a beam
    at least this wide, or with ``sampling`` this many samples; the output is the candidate
    with the highest expected ``mbr_utility`` against the others (:mod:`nmtkit.decode.mbr`)."""
    mbr_utility: str = "bleu"
    """MBR's similarity of two translations: bleu (sentence BLEU+1 on words) | chrf
    (character n-gram F-score)."""
    mbr_scale: float = 0.0
    """MBR over a beam's n best: each candidate weighs P(y | x) ** mbr_scale, renormalised
    (0 = all the same, 1 = the model's posterior over the list; samples always weigh the
    same). 0 chosen on val (bleu_lc_tok; en->de, the hour recipe, 20 candidates): 0 +0.93
    over beam search, 0.3 +0.57, 1 -0.42 (benchmarks/results/mbr_*.json)."""
    rerank: int = 0
    """Reranking with a reverse model over this many candidates (0 = off): the n best of a
    beam at least this wide (or this many samples); each is scored by its beam score plus
    ``reverse_weight`` times the reverse model's log P(source | candidate) per source token,
    and the best is the output (:mod:`nmtkit.decode.rerank`). Needs a model of the other
    direction (``--reverse-model``). With ``mbr`` (below ``rerank``) too, MBR chooses among
    the ``mbr`` best of the reranked list (rerank, then MBR: Fernandes et al. 2022)."""
    reverse_weight: float = 3.0
    """Reranking: the weight of the reverse model's score against the beam's own (0: the
    beam's order). 3 chosen on val in both directions (the hour recipe, lowercased, 20
    candidates; en->de / de->en bleu_lc_tok: 0 36.60 / 40.14, 1 38.39 / 41.71, 3 39.07 /
    42.11, 6 38.81 / 41.56; benchmarks/results/mbr_rerank_*.json). Choose it on val for
    another pair: ``nmtkit tune --reverse-model ... --rerank 20``."""
    r2l_weight: float = 1.0
    """Reranking: the weight of the right-to-left models' score (``--r2l-model``, trained
    with ``data.reverse_target``: their log P(candidate | source) per candidate token, read
    from its end) against the beam's own; used only when such models are given. Choose it
    on val: ``nmtkit tune --r2l-model ... --rerank 20``."""
    split_sentences: bool = True
    """Cut each input line into sentences (pysbd's rules for ``data.src_lang``), translate
    them all in one batch and join each line's translations into one output line
    (:mod:`nmtkit.decode.lines`): a model trained on one-sentence pairs reads a paragraph as
    one long sentence and drops parts of it. Off: each line is read whole."""
    protect_spans: bool = True
    """Carry over what the vocabulary cannot say: characters without a piece (emoji, signs,
    letters never seen in training, with the numbers beside them), URLs and e-mail addresses
    are cut from what the model reads and put back into the output next to the words
    aligned to them, and no ``<unk>`` is written (:mod:`nmtkit.data.placeholders`). Off: the
    model reads them as ``<unk>`` and writes what it will."""
    alignment_layer: int = -1
    """Alignments (and the confidence view's coverage) from this decoder layer's source
    attention, counted from 0; -1 = the last layer. Transformer only (the RNN has one)."""
    alignment_head: int = -1
    """... and from this head of it, counted from 0; -1 = the heads' mean. Transformer only."""

    def validate(self, source: str) -> None:
        c = Checks(self, "decode", source)
        c.finite()
        c.within(MAX_BATCH_SENTENCES, "batch_size")
        c.within(MAX_VOCAB, "sampling_top_k")
        c.at_least(1, "beam", "batch_size")
        c.at_least(-1, "alignment_layer", "alignment_head")
        c.at_least(0, "length_penalty", "max_len_a", "max_len_b", "sampling_top_k", "sampling_seed",
                   "mbr", "mbr_scale", "rerank", "reverse_weight", "r2l_weight")
        c.at_most(MAX_BEAM, "beam", "n_best", "mbr", "rerank")
        c.one_of("mbr_utility", MBR_UTILITIES)
        c.at_most(MAX_LEN_A, "max_len_a")
        c.at_most(MAX_LENGTH_PENALTY, "length_penalty")
        c.at_most(MAX_POSITIONS, "max_len_b")
        c.at_most(MAX_SEED, "sampling_seed")
        c.require(self.max_len_a > 0 or self.max_len_b > 0, "decode.max_len_a and "
                  "decode.max_len_b cannot both be 0: the output cap A * source length + B "
                  "would leave room for no token")
        c.require(1 <= self.n_best and (self.sampling or self.mbr > 0 or self.rerank > 0
                                        or self.n_best <= self.beam),
                  f"decode.n_best must be in [1, decode.beam = {self.beam}] (any number >= 1 of "
                  f"samples with decode.sampling; up to decode.mbr or decode.rerank candidates "
                  f"with MBR or reranking), got {self.n_best}")
        low, high = TEMPERATURE_RANGE
        c.require(low <= self.sampling_temperature <= high, "decode.sampling_temperature must "
                  f"be in [{low:g}, {high:g}], got {self.sampling_temperature:g}")
        c.require(0.0 < self.sampling_top_p <= 1.0,
                  f"decode.sampling_top_p must be in (0, 1], got {self.sampling_top_p}")
        c.require(0.0 <= self.sampling_epsilon < 1.0,
                  f"decode.sampling_epsilon must be in [0, 1), got {self.sampling_epsilon}")
        c.require(self.mbr == 0 or self.n_best <= self.mbr,
                  f"decode.mbr must be 0 (off) or at least decode.n_best ({self.n_best}): the "
                  f"output is chosen among that many candidates, got {self.mbr}")
        c.require(self.rerank == 0 or self.n_best <= self.rerank,
                  f"decode.rerank must be 0 (off) or at least decode.n_best ({self.n_best}): the "
                  f"output is chosen among that many candidates, got {self.rerank}")
        c.require(self.mbr == 0 or self.rerank == 0 or self.mbr < self.rerank,
                  "decode.mbr with decode.rerank chooses among the reranking's best: it must "
                  f"be below decode.rerank (the candidates reranked), got mbr {self.mbr} and "
                  f"rerank {self.rerank}")


def alignment_choice_checks(m: ModelConfig, layer: int, head: int) -> list[tuple[bool, str]]:
    """(holds, message) of each check that (``decode.alignment_layer``,
    ``decode.alignment_head``) names a source attention of the model ``m`` describes: -1 (the
    last layer, the heads' mean) or a 0-based index below the decoder's layers / the heads;
    the RNN has a single attention with no heads: only -1, -1."""
    return [
        (m.arch != "rnn" or (layer, head) == (-1, -1),
         "decode.alignment_layer and decode.alignment_head must be -1 with model.arch: rnn (one "
         f"source attention, no layers or heads to choose), got layer {layer}, head {head}"),
        (layer < dec_layers(m), "decode.alignment_layer must be -1 (the last layer) or below the "
         f"decoder's layers ({dec_layers(m)}), got {layer}"),
        (head < m.heads, "decode.alignment_head must be -1 (the heads' mean) or below model.heads "
         f"({m.heads}), got {head}"),
    ]


def check_alignment_choice(m: ModelConfig, layer: int, head: int) -> None:
    """``ValueError`` with the message of the first of :func:`alignment_choice_checks` that
    fails (the translator's check of a model it was handed)."""
    for holds, message in alignment_choice_checks(m, layer, head):
        if not holds:
            raise UserError(message)
