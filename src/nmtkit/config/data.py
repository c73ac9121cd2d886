"""``data``: where the parallel text comes from and how it becomes token ids."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from .checks import Checks
from .limits import (
    MAX_COPY_PAIRS,
    MAX_EXTRA_WEIGHT,
    MAX_LENGTH,
    MAX_SUBWORD_NBEST,
    MAX_VOCAB,
    brief,
)

CORPORA = ("multi30k", "iwslt14", "wmt14", "parallel", "tsv", "copy")
PREPARED_CORPORA = ("iwslt14", "wmt14")
"""The corpora ``nmtkit prepare`` downloads and builds (one recipe each,
:data:`nmtkit.data.recipes.RECIPES`): named here so that the command line lists them without
importing the downloaders."""
TOKENIZERS = ("sentencepiece", "word", "whitespace")
SPM_MODEL_TYPES = ("bpe", "unigram")
TSV_COLUMNS = ("src", "tgt", "-")
"""What a column of a ``tsv`` file may be: the source, the target, or ``-`` (ignored)."""
TSV_SPLITS = ("train", "valid", "test")
"""The split names of a ``tsv`` file cut by ``data.tsv_split`` (in the order of the ratios)."""
VOCAB_SPECIALS = ("<pad>", "<unk>", "<s>", "</s>")
"""The tokens that :mod:`nmtkit.data.vocab` reserves (a ``data.extra`` tag may not be one)."""
DIRECTION_CORPORA = ("multi30k", "iwslt14", "wmt14", "parallel")
"""The corpora that ``data.directions`` can read in several directions (named languages)."""
LANGUAGE_CODE = re.compile(r"[A-Za-z][A-Za-z0-9_]*")
"""A language of ``data.directions`` (``de``, ``pt_br``): no ``-``, which separates the two."""


@dataclass
class ExtraCorpus:
    """One entry of ``data.extra``: more training pairs, e.g. written by ``nmtkit
    backtranslate``, read beside the training split."""

    path: str = ""
    """Path prefix of two line-aligned files ``<path>.<src_lang>`` and ``<path>.<tgt_lang>``
    (``.gz`` accepted), read as the ``parallel`` corpus reads them."""
    weight: float = 1.0
    """How many times its pairs go into the training data: the integer part repeats every
    pair, the fraction adds a seeded sample of that share (2 doubles, 0.5 keeps half)."""
    tag: str = "<bt>"
    """A token put before every source of this corpus (tagged back-translation, Caswell et
    al. 2019): one token of the source vocabulary whatever the tokenizer; empty = untagged."""


@dataclass
class DataConfig:
    """Where the parallel text comes from and how it becomes token ids."""

    corpus: str = "multi30k"
    """``multi30k``, ``iwslt14``, ``wmt14`` (named splits; the last two prepared from the raw
    archives, see ``nmtkit.data.recipes``), ``parallel`` (plain text files), ``tsv``, ``copy``."""
    src_lang: str = "de"
    tgt_lang: str = "en"
    train: str = "train"
    """Split name for ``multi30k``; a path prefix (``<prefix>.<lang>``) for ``parallel``;
    a file for ``tsv`` (with ``tsv_split``: the split names ``train``, ``valid``, ``test``)."""
    valid: str = "val"
    test: str = "test_2016_flickr"
    tokenizer: str = "sentencepiece"
    """``sentencepiece`` (trained on the training split), ``word`` (spaCy blank rules), ``whitespace``."""
    spm_model_type: str = "bpe"
    """SentencePiece algorithm: ``bpe`` or ``unigram``."""
    subword_alpha: float = 0.0
    """Subword regularisation (``sentencepiece`` only; 0 = off): the training split is
    segmented anew at each epoch by sampling, from a seed of (``train.seed``, epoch).
    ``bpe``: BPE-dropout (Provilkov et al. 2020), the probability of dropping each merge,
    in [0, 1), e.g. 0.1; ``unigram``: subword sampling (Kudo 2018), the smoothing exponent
    of the segmentation distribution, in (0, 1], e.g. 0.1 (smaller = more varied).
    Validation, test and decoding always use the deterministic segmentation. SentencePiece's
    BPE-dropout at 0.1 makes Multi30k's training sentences about 40% longer in tokens: at the
    quickstart's 10 minutes it cost half the BLEU (docs/results.md); a regulariser for long
    runs, not for short budgets."""
    subword_nbest: int = -1
    """``unigram`` subword sampling: sample among the n best segmentations (>= 2), or -1 =
    among all of them (forward-filtering backward-sampling). ``bpe``: must stay -1."""
    vocab_size: int = 8000
    """SentencePiece vocabulary size (joint over both languages when ``joint_vocab``)."""
    byte_fallback: bool = True
    """SentencePiece: a character the pieces lack is encoded as its UTF-8 bytes (256 byte
    pieces on top of ``vocab_size``) instead of ``<unk>``, so every text has an encoding that
    decodes back to it. Training text seldom needs them (every character seen in training
    gets a piece), so a model rarely learns to write them: ``decode.protect_spans`` is what
    carries unseen characters over. Models trained before keep their tokenizer."""
    joint_vocab: bool = True
    """One vocabulary for source and target (needed to tie all three embeddings)."""
    min_freq: int = 2
    """Word/whitespace tokenizers: drop types seen fewer times in training."""
    lowercase: bool = False
    """Lowercase both sides before tokenizing (training and translation): a smaller, denser
    vocabulary, as the Multi30k literature trains on its lowercased ``lc.norm.tok`` files. The
    output then has no case: score it with ``bleu_lc_tok`` or the official lowercased BLEU
    (``nmtkit tune --metric bleu_lc_tok``), not cased sacreBLEU."""
    max_len: int = 100
    """Training pairs with more tokens than this on either side are skipped (counted, logged)."""
    reverse_source: bool = False
    """Reverse source token order (Sutskever et al. 2014; seed 003)."""
    reverse_target: bool = False
    """A right-to-left model: it writes the translation's tokens last to first (the target
    side is reversed in training; translating puts the output back in reading order). Its
    use is reranking a left-to-right model's candidates (``--r2l-model``,
    ``decode.r2l_weight``; :mod:`nmtkit.decode.rerank`), the "right-to-left" rescoring of
    Sennrich et al. (2016): it scores each candidate seen from its end."""
    mmap: bool = False
    """Corpora larger than memory: stream the training text once into token-id arrays on disk
    (``$NMTKIT_CACHE/prepared/``) and memory-map them; later runs on the same files and
    settings reuse them. Off: the training split is read and encoded in memory each run."""
    tokenizer_sample: int = 1_000_000
    """Train the tokenizers on at most this many training pairs (a seeded uniform sample kept
    in corpus order; 0 = all). The vocabulary is still counted over every pair."""
    copy_vocab: int = 11
    """Copy task: symbols are 1..copy_vocab-1 (the seed's V=11)."""
    copy_len: int = 10
    copy_train_size: int = 20000
    copy_valid_size: int = 200
    tsv_columns: tuple[str, ...] = ("src", "tgt")
    """``tsv``: what each tab-separated column holds, ``src``, ``tgt`` or ``-`` (ignored); e.g.
    ``[tgt, src]`` for seed 003's ``en<TAB>ru`` file translated ru -> en."""
    tsv_file: str = ""
    """``tsv`` with ``tsv_split``: the one file that train, valid and test are cut from."""
    tsv_split: tuple[float, ...] = ()
    """``tsv``: cut ``tsv_file`` at random into splits named ``train``, ``valid`` (and ``test``)
    with these 2 (or 3) ratios, e.g. ``[0.8, 0.05, 0.15]``; empty = each split is a file."""
    tsv_seed: int = 1234
    """``tsv_split``: seed of the shuffle that assigns lines to splits (same seed, same splits)."""
    extra: tuple[ExtraCorpus, ...] = ()
    """More training pairs beside ``train`` (back-translation: ``nmtkit backtranslate``), a
    list of ``{path: PREFIX, weight: W, tag: "<bt>"}``; see :class:`ExtraCorpus`. Only the
    training data changes: validation and test are the corpus's own splits."""
    directions: tuple[str, ...] = ()
    """One model, many directions (Johnson et al. 2017): ``[de-en, en-de]`` trains one model
    on every direction named, each read from ``corpus`` with its languages, every source
    starting with a target-language token (``<2en>``) that the translator adds (``nmtkit
    translate --tgt-lang en``). Needs one joint SentencePiece model. Empty = the one direction
    ``src_lang`` -> ``tgt_lang`` (untagged); when given, ``src_lang``/``tgt_lang`` are unused."""
    direction_temperature: float = 1.0
    """``directions``: each epoch samples direction d's pairs in proportion to n_d^(1/T)
    (Arivazhagan et al. 2019); 1 = the plain union, larger = more even (e.g. 5), seeded."""

    def validate(self, source: str) -> None:
        c = Checks(self, "data", source)
        c.finite()
        c.within(MAX_VOCAB, "vocab_size", "copy_vocab")
        c.within(MAX_LENGTH, "max_len", "copy_len")
        c.within(MAX_COPY_PAIRS, "copy_train_size", "copy_valid_size")
        c.within(MAX_SUBWORD_NBEST, "subword_nbest")
        c.require(not any(e.weight > MAX_EXTRA_WEIGHT for e in self.extra),
                  f"data.extra.weight must be at most {MAX_EXTRA_WEIGHT:g} (each pair is repeated "
                  "that many times in memory; a limit of nmtkit's: nmtkit.config.limits), got "
                  f"{brief([e.weight for e in self.extra])}")
        c.one_of("corpus", CORPORA)
        c.one_of("tokenizer", TOKENIZERS)
        c.one_of("spm_model_type", SPM_MODEL_TYPES)
        c.at_least(16, "vocab_size")
        c.at_least(1, "min_freq", "max_len", "copy_len", "copy_train_size", "copy_valid_size")
        c.at_least(2, "copy_vocab")
        c.at_least(0, "tokenizer_sample")
        self._validate_subword_sampling(c)
        self._validate_tsv(c)
        self._validate_extra(c)
        self._validate_directions(c)

    def _validate_directions(self, c: Checks) -> None:
        """``data.directions``: ``SRC-TGT`` names, and what a multilingual run needs (every
        message is built, so each check is listed whether or not it fails)."""
        names, many = self.directions, bool(self.directions)
        c.positive("direction_temperature")
        c.require(many or self.corpus not in DIRECTION_CORPORA or self.src_lang != self.tgt_lang,
                  "data.src_lang and data.tgt_lang must differ where data.corpus names its "
                  f"files by language ({', '.join(DIRECTION_CORPORA)}: both sides would be "
                  f"read from one file), got {brief(self.src_lang)} and {brief(self.tgt_lang)} for "
                  f"data.corpus: {self.corpus}")
        pairs = [d.split("-") for d in names]
        c.require(all(len(p) == 2 and all(LANGUAGE_CODE.fullmatch(x) for x in p) and p[0] != p[1]
                      for p in pairs),
                  "data.directions must name directions as SRC-TGT with two different language "
                  f"codes (letters, digits, _), e.g. [de-en, en-de], got {brief(list(names))}")
        c.require(len(set(names)) == len(names),
                  f"data.directions must not list a direction twice, got {brief(list(names))}")
        c.require(not many or self.corpus in DIRECTION_CORPORA, "data.directions reads the corpus "
                  f"in several directions: data.corpus must be {'|'.join(DIRECTION_CORPORA)}, got "
                  f"{brief(self.corpus)}")
        c.require(not many or (self.tokenizer == "sentencepiece" and self.joint_vocab),
                  "data.directions needs one shared SentencePiece model: data.tokenizer: "
                  f"sentencepiece and data.joint_vocab: true, got {brief(self.tokenizer)}, "
                  f"joint_vocab {self.joint_vocab}")
        c.require(not many or not self.extra, "data.directions and data.extra cannot be combined "
                  "(data.extra reads one direction's files)")
        c.require(not many or not self.mmap,
                  "data.directions is read in memory: it needs data.mmap: false")
        c.require(not many or not self.reverse_source, "data.directions puts the target-language "
                  "token first in the source: data.reverse_source is not supported with it")
        c.require(not many or self.subword_alpha == 0, "data.directions with data.subword_alpha "
                  "> 0 is not supported yet (set data.subword_alpha: 0)")

    def _validate_extra(self, c: Checks) -> None:
        """The entries of ``data.extra`` (each check over all entries, so none is skipped)."""
        extra = self.extra
        c.require(all(e.path.strip() for e in extra),
                  "data.extra.path must be a path prefix (files PREFIX.<src_lang>, PREFIX.<tgt_lang>) "
                  f"in every entry, got {brief([e.path for e in extra])}")
        c.require(all(math.isfinite(e.weight) and e.weight > 0 for e in extra),
                  "data.extra.weight must be > 0 and not inf or NaN (2 repeats every pair, 0.5 keeps "
                  f"a seeded half), got {brief([e.weight for e in extra])}")
        c.require(all(not e.tag or (len(e.tag.split()) == 1 and e.tag == e.tag.strip()
                                    and e.tag not in VOCAB_SPECIALS) for e in extra),
                  "data.extra.tag must be one token without spaces, not one of "
                  f"{', '.join(VOCAB_SPECIALS)} (or empty: untagged), got {brief([e.tag for e in extra])}")
        c.require(not extra or not self.mmap,
                  "data.extra is read in memory: it needs data.mmap: false")

    def _validate_subword_sampling(self, c: Checks) -> None:
        """``subword_alpha``/``subword_nbest``: SentencePiece sampling of the training split."""
        alpha, nbest = self.subword_alpha, self.subword_nbest
        on, bpe = alpha != 0, self.spm_model_type == "bpe"
        c.require(nbest == -1 or nbest >= 2,
                  f"data.subword_nbest must be -1 (all segmentations) or >= 2, got {nbest}")
        c.require(not bpe or nbest == -1, "data.subword_nbest applies to spm_model_type: unigram "
                  f"(BPE-dropout has no n-best list): leave it at -1, got {nbest}")
        c.require(not bpe or 0.0 <= alpha < 1.0, "data.subword_alpha with spm_model_type: bpe is "
                  f"the BPE-dropout probability, in [0, 1) (0 = off), got {alpha}")
        c.require(bpe or 0.0 <= alpha <= 1.0, "data.subword_alpha with spm_model_type: unigram is "
                  f"the sampling smoothing exponent, in [0, 1] (0 = off), got {alpha}")
        c.require(not on or self.tokenizer == "sentencepiece",
                  "data.subword_alpha > 0 (subword sampling) needs data.tokenizer: sentencepiece, "
                  f"got {brief(self.tokenizer)}")
        c.require(not on or not self.mmap, "data.subword_alpha > 0 re-encodes the training text "
                  "at each epoch, in memory: it needs data.mmap: false")

    def _validate_tsv(self, c: Checks) -> None:
        """The ``tsv`` corpus's column order and one-file split."""
        cols = self.tsv_columns
        c.require(all(col in TSV_COLUMNS for col in cols) and cols.count("src") == 1
                  and cols.count("tgt") == 1,
                  "data.tsv_columns must name one src and one tgt column (others '-'), "
                  f"got {brief(list(cols))}")
        ratios = self.tsv_split
        c.require(not ratios or (len(ratios) in (2, 3) and all(r > 0 for r in ratios)
                                 and abs(sum(ratios) - 1.0) < 1e-6),
                  "data.tsv_split must be 2 or 3 positive ratios (train, valid[, test]) summing to 1, "
                  f"got {brief(list(ratios))}")
        c.require(not ratios or self.corpus == "tsv",
                  f"data.tsv_split needs data.corpus: tsv, got {brief(self.corpus)}")
        c.require(not ratios or bool(self.tsv_file),
                  "data.tsv_split needs data.tsv_file (the file to cut into splits)")
        names = list(TSV_SPLITS[:len(ratios)])
        c.require(not ratios or [self.train, self.valid, self.test][:len(ratios)] == names,
                  "data.train/valid/test must be the split names train/valid/test with "
                  "data.tsv_split (test only with 3 ratios), got "
                  f"{brief(self.train)}/{brief(self.valid)}/{brief(self.test)}")
        c.at_least(0, "tsv_seed")
