"""Run configuration: dataclasses are the only place defaults live.

A YAML recipe is read into :class:`Config`; every key must name a field (an
unknown key is an error, not silently ignored), every value is checked against
the field's type, and ``--set section.key=value`` overrides are applied before
validation, so an impossible run fails before any work starts.

Each section checks its own values (``DataConfig.validate`` ...) against the allowed values
defined once here (``ARCHS``, ``CORPORA`` ...; the modules that use a value import them);
:func:`validate` runs every section's checks, then the checks between sections.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import math
import re
import types
import typing
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import yaml


class ConfigError(ValueError):
    """A configuration that cannot describe a valid run."""


CORPORA = ("multi30k", "iwslt14", "wmt14", "parallel", "tsv", "copy")
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


def split_direction_name(entry: str) -> tuple[tuple[str, str] | None, str]:
    """A ``train.forgetting_splits`` entry -> ((source, target language) or ``None``, split).

    ``SRC-TGT:SPLIT`` (``de-en:test_2016_flickr``) names the direction to read the split in:
    the part before the first ``:`` holds a ``-`` and no path separator. Anything else is a
    plain split name or path prefix (``None``: the run's direction). The parts are checked by
    :meth:`TrainConfig.validate`."""
    head, sep, split = entry.partition(":")
    if not sep or "-" not in head or "/" in head or "\\" in head:
        return None, entry
    src, _, tgt = head.partition("-")
    return (src, tgt), split


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
        c = _Checks(self, "data", source)
        c.finite()
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

    def _validate_directions(self, c: _Checks) -> None:
        """``data.directions``: ``SRC-TGT`` names, and what a multilingual run needs (every
        message is built, so each check is listed whether or not it fails)."""
        names, many = self.directions, bool(self.directions)
        c.positive("direction_temperature")
        c.require(many or self.corpus not in DIRECTION_CORPORA or self.src_lang != self.tgt_lang,
                  "data.src_lang and data.tgt_lang must differ where data.corpus names its "
                  f"files by language ({', '.join(DIRECTION_CORPORA)}: both sides would be "
                  f"read from one file), got {self.src_lang!r} and {self.tgt_lang!r} for "
                  f"data.corpus: {self.corpus}")
        pairs = [d.split("-") for d in names]
        c.require(all(len(p) == 2 and all(LANGUAGE_CODE.fullmatch(x) for x in p) and p[0] != p[1]
                      for p in pairs),
                  "data.directions must name directions as SRC-TGT with two different language "
                  f"codes (letters, digits, _), e.g. [de-en, en-de], got {list(names)}")
        c.require(len(set(names)) == len(names),
                  f"data.directions must not list a direction twice, got {list(names)}")
        c.require(not many or self.corpus in DIRECTION_CORPORA, "data.directions reads the corpus "
                  f"in several directions: data.corpus must be {'|'.join(DIRECTION_CORPORA)}, got "
                  f"{self.corpus!r}")
        c.require(not many or (self.tokenizer == "sentencepiece" and self.joint_vocab),
                  "data.directions needs one shared SentencePiece model: data.tokenizer: "
                  f"sentencepiece and data.joint_vocab: true, got {self.tokenizer!r}, "
                  f"joint_vocab {self.joint_vocab}")
        c.require(not many or not self.extra, "data.directions and data.extra cannot be combined "
                  "(data.extra reads one direction's files)")
        c.require(not many or not self.mmap,
                  "data.directions is read in memory: it needs data.mmap: false")
        c.require(not many or not self.reverse_source, "data.directions puts the target-language "
                  "token first in the source: data.reverse_source is not supported with it")
        c.require(not many or self.subword_alpha == 0, "data.directions with data.subword_alpha "
                  "> 0 is not supported yet (set data.subword_alpha: 0)")

    def _validate_extra(self, c: _Checks) -> None:
        """The entries of ``data.extra`` (each check over all entries, so none is skipped)."""
        extra = self.extra
        c.require(all(e.path.strip() for e in extra),
                  "data.extra.path must be a path prefix (files PREFIX.<src_lang>, PREFIX.<tgt_lang>) "
                  f"in every entry, got {[e.path for e in extra]}")
        c.require(all(math.isfinite(e.weight) and e.weight > 0 for e in extra),
                  "data.extra.weight must be > 0 and not inf or NaN (2 repeats every pair, 0.5 keeps "
                  f"a seeded half), got {[e.weight for e in extra]}")
        c.require(all(not e.tag or (len(e.tag.split()) == 1 and e.tag == e.tag.strip()
                                    and e.tag not in VOCAB_SPECIALS) for e in extra),
                  "data.extra.tag must be one token without spaces, not one of "
                  f"{', '.join(VOCAB_SPECIALS)} (or empty: untagged), got {[e.tag for e in extra]}")
        c.require(not extra or not self.mmap,
                  "data.extra is read in memory: it needs data.mmap: false")

    def _validate_subword_sampling(self, c: _Checks) -> None:
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
                  f"got {self.tokenizer!r}")
        c.require(not on or not self.mmap, "data.subword_alpha > 0 re-encodes the training text "
                  "at each epoch, in memory: it needs data.mmap: false")

    def _validate_tsv(self, c: _Checks) -> None:
        """The ``tsv`` corpus's column order and one-file split."""
        cols = self.tsv_columns
        c.require(all(col in TSV_COLUMNS for col in cols) and cols.count("src") == 1
                  and cols.count("tgt") == 1,
                  f"data.tsv_columns must name one src and one tgt column (others '-'), got {list(cols)}")
        ratios = self.tsv_split
        c.require(not ratios or (len(ratios) in (2, 3) and all(r > 0 for r in ratios)
                                 and abs(sum(ratios) - 1.0) < 1e-6),
                  "data.tsv_split must be 2 or 3 positive ratios (train, valid[, test]) summing to 1, "
                  f"got {list(ratios)}")
        c.require(not ratios or self.corpus == "tsv",
                  f"data.tsv_split needs data.corpus: tsv, got {self.corpus!r}")
        c.require(not ratios or bool(self.tsv_file),
                  "data.tsv_split needs data.tsv_file (the file to cut into splits)")
        names = list(TSV_SPLITS[:len(ratios)])
        c.require(not ratios or [self.train, self.valid, self.test][:len(ratios)] == names,
                  "data.train/valid/test must be the split names train/valid/test with "
                  f"data.tsv_split (test only with 3 ratios), got {self.train}/{self.valid}/{self.test}")
        c.at_least(0, "tsv_seed")


ARCHS = ("transformer", "rnn")
NORMS = ("pre", "post")
RNN_ATTENTIONS = ("concat", "general", "dot")
RNN_INITS = ("glorot", "uniform")
POSITIONAL_ENCODINGS = ("sinusoidal", "learned", "rope")
"""``model.positional``: how the Transformer knows word order (see :mod:`nmtkit.models.positions`)."""


@dataclass
class ModelConfig:
    """Architecture hyperparameters (Vaswani et al. 2017, Table 3)."""

    arch: str = "transformer"
    """``transformer`` (Vaswani et al. 2017) or ``rnn`` (LSTM encoder, GRU decoder with
    attention: seed 003, Bahdanau et al. 2015)."""
    layers: int = 6
    """N for both stacks unless ``enc_layers``/``dec_layers`` are given (RNN: stacked layers)."""
    enc_layers: int = 0
    dec_layers: int = 0
    d_model: int = 512
    d_ff: int = 2048
    heads: int = 8
    dropout: float = 0.1
    attention_dropout: float = 0.0
    """Dropout on attention probabilities (the Annotated Transformer uses ``dropout`` there)."""
    relu_dropout: float = 0.0
    """Dropout inside the FFN between the two linears."""
    norm: str = "post"
    """``post``: LayerNorm(x + Sublayer(x)) (paper, Sec. 3.1); ``pre``: x + Sublayer(LayerNorm(x))."""
    layer_norm_eps: float = 1e-6
    tie_output: bool = True
    """Share the target embedding with the pre-softmax projection (Sec. 3.4)."""
    tie_all: bool = True
    """Share source embedding too (requires ``data.joint_vocab``)."""
    output_bias: bool = True
    """Bias in the pre-softmax projection. Without it (as in fairseq) training skips a
    (tokens x vocab) bias copy per step, ~2% of a small model's CPU step."""
    max_positions: int = 1024
    """Positions a Transformer reads: the length of its position table (sinusoidal or
    learned) or of RoPE's precomputed angles; longer inputs are truncated."""
    positional: str = "sinusoidal"
    """Transformer word order: ``sinusoidal`` (the paper's fixed table added to the embeddings,
    Sec. 3.5), ``learned`` (a trained (max_positions, d_model) table added instead, as in
    ConvS2S, BERT and fairseq), ``rope`` (no table: every self-attention rotates its queries
    and keys by their positions, Su et al. 2021, Eq. 34)."""
    # --- arch: rnn (``dropout``, ``layers``, ``tie_output`` and ``tie_all`` apply too) ---------
    emb_dim: int = 256
    """RNN: source and target embedding size (the Transformer uses ``d_model``)."""
    rnn_hidden: int = 512
    """RNN: decoder GRU state size, and the size of the encoder states it attends to
    (each direction gets half when ``bidirectional``, as the seed's ENC_HID = DEC_HID // 2)."""
    bidirectional: bool = True
    """RNN: bidirectional LSTM encoder; per layer the final forward and backward states are
    concatenated and projected (tanh) to the decoder's initial state."""
    attention: str = "concat"
    """RNN attention score: ``concat`` v^T tanh(W[h; s]) (the seed's), ``general`` h^T W s,
    ``dot`` h^T s."""
    attention_dim: int = 0
    """RNN ``concat`` attention: size of the energy layer W (0 = ``rnn_hidden``)."""
    attention_temperature: float = 1.0
    """RNN: softmax(score / temperature); 1 = plain softmax, -> 0 sharpens towards argmax."""
    teacher_forcing: float = 1.0
    """RNN training: probability of feeding the gold previous token (else the model's own
    argmax); 1 = always gold (plain teacher forcing), the seed uses 0.5."""
    teacher_forcing_min: float = 0.0
    """RNN: floor of the teacher-forcing ratio when annealing."""
    teacher_forcing_anneal_steps: int = 0
    """RNN: anneal the ratio linearly from ``teacher_forcing`` to ``teacher_forcing_min``
    over this many updates; 0 = constant ratio."""
    init: str = "glorot"
    """RNN: ``glorot`` (Xavier-uniform matrices, zero biases, N(0, emb_dim^-1/2) embeddings) or
    ``uniform`` (every parameter U(-init_range, init_range): the seed's init_weights)."""
    init_range: float = 0.08

    def validate(self, source: str) -> None:
        c = _Checks(self, "model", source)
        c.finite()
        c.one_of("arch", ARCHS)
        c.one_of("norm", NORMS)
        c.positive("d_model", "heads", "d_ff", "layer_norm_eps")
        c.require(self.arch != "transformer" or self.d_model % self.heads == 0,
                  f"model.d_model ({self.d_model}) must be divisible by model.heads ({self.heads})")
        c.at_least(1, "layers")
        c.at_least(0, "enc_layers", "dec_layers")
        c.at_least(2, "max_positions")
        c.at_most(MAX_POSITIONS, "max_positions")
        c.fraction("dropout", "attention_dropout", "relu_dropout")
        c.one_of("positional", POSITIONAL_ENCODINGS)
        c.require(self.arch == "transformer" or self.positional == "sinusoidal",
                  "model.positional other than sinusoidal needs model.arch: transformer (the RNN "
                  f"reads word order through its recurrence), got {self.positional!r}")
        c.require(self.positional != "rope" or (self.d_model // self.heads) % 2 == 0,
                  "model.positional: rope rotates pairs of dimensions: d_model / heads must be "
                  f"even, got {self.d_model} / {self.heads}")
        self._validate_rnn(c)

    def _validate_rnn(self, c: _Checks) -> None:
        """The recurrent model's options (some only make sense for it)."""
        c.positive("emb_dim", "rnn_hidden", "attention_temperature", "init_range")
        c.require(not self.bidirectional or self.rnn_hidden % 2 == 0,
                  f"model.rnn_hidden ({self.rnn_hidden}) must be even with model.bidirectional "
                  "(each encoder direction gets half)")
        c.one_of("attention", RNN_ATTENTIONS)
        c.one_of("init", RNN_INITS)
        c.at_least(0, "attention_dim", "teacher_forcing_anneal_steps")
        c.in_unit_interval("teacher_forcing", "teacher_forcing_min")
        c.require(self.teacher_forcing_anneal_steps == 0 or self.teacher_forcing_min <= self.teacher_forcing,
                  "model.teacher_forcing_min must not exceed model.teacher_forcing when annealing")
        if self.arch != "rnn":
            # The Transformer feeds all gold positions at once and has its own initialisation.
            c.require(self.teacher_forcing == 1.0, "model.teacher_forcing < 1 needs model.arch: rnn")
            c.require(self.teacher_forcing_anneal_steps == 0,
                      "model.teacher_forcing_anneal_steps > 0 needs model.arch: rnn")
            c.require(self.init == "glorot", "model.init: uniform is implemented for model.arch: rnn")


LR_SCHEDULES = ("noam", "constant", "plateau", "inverse_sqrt", "cosine")
OPTIMIZERS = ("adam", "adamw")
"""``train.optimizer``: Adam with L2 in the gradient (Kingma & Ba 2015; the paper's), or AdamW
with decoupled weight decay (Loshchilov & Hutter 2019)."""
EARLY_STOP_METRICS = ("bleu", "loss")
DEVICES = ("auto", "cpu", "cuda")
AMP_MODES = ("off", "bf16", "fp16")
FREEZE_GROUPS = ("encoder", "embeddings", "decoder")
"""What ``train.freeze`` may name (see :mod:`nmtkit.train.finetune` for which parameters
each group holds)."""


@dataclass
class TrainConfig:
    """Optimisation, budgets, validation and checkpoints (paper Sec. 5)."""

    seed: int = 1234
    max_tokens: int = 4096
    """Token budget per batch, padding counted, on the larger of the two sides."""
    accum: int = 1
    """Gradient accumulation: batches per optimizer step."""
    max_steps: int = 100000
    max_epochs: int = 0
    """0 = no epoch limit."""
    max_minutes: float = 0.0
    """Wall-clock budget for training; 0 = none; at most :data:`MAX_MINUTES` (a year)."""
    lr_schedule: str = "noam"
    """``noam``: lr * d^-0.5 * min(s^-0.5, s * warmup^-1.5) (Eq. 3); ``constant``; ``plateau``
    (lowered when validation loss stalls); ``inverse_sqrt``: linear warmup to lr, then
    lr * sqrt(warmup / s) (fairseq's); ``cosine``: linear warmup to lr, then a half cosine
    from lr down to ``min_lr`` at step ``cosine_steps`` (Loshchilov & Hutter 2017), min_lr after."""
    lr: float = 1.0
    """What it means depends on ``lr_schedule``: the Noam factor (``noam``: the rate peaks at
    lr * d_model^-0.5 * warmup^-0.5); the rate itself for ``constant`` and the initial rate of
    ``plateau``; the peak rate, reached at step ``warmup``, of ``inverse_sqrt`` and ``cosine``."""
    warmup: int = 4000
    """Steps of linear warmup (``noam``, ``inverse_sqrt``: >= 1; ``cosine``: 0 = none)."""
    min_lr: float = 0.0
    """``cosine`` and ``budget_schedule``: the rate at the end of the decay (and after it);
    below ``lr`` (cosine) or the peak rate (budget)."""
    cosine_steps: int = 0
    """``cosine``: the step at which the decay reaches ``min_lr`` (0 = ``max_steps``; with the
    default max_steps of 100000 and a run ended earlier by ``max_minutes``/``max_epochs`` the
    rate never gets far down: give the run's real length). Must exceed ``warmup``."""
    budget_schedule: bool = False
    """With ``max_minutes``: fit the schedule to the time budget. After
    ``budget_probe_steps`` updates (at the configured warmup's rate) the run measures its
    seconds per update, plans how many updates the remaining minutes allow, and from then on
    warms up over ``budget_warmup`` of them to the configured schedule's peak rate and decays
    linearly to ``min_lr`` at the last one (:func:`nmtkit.train.schedule.budget_rate`); the
    run ends there or when the time is up. The plan is revised at each validation (with its
    cost), while the run is in its warmup every ``budget_probe_steps`` updates (warmup
    included: a slow start must not fix it), and after it every ``budget_revise_every`` of
    its updates (a machine that gets faster or slower later must not leave the plan wrong),
    each time from the latest updates' time; logged and kept in the checkpoint
    (``--resume`` follows it). Needs ``noam``, ``inverse_sqrt`` or ``cosine`` (for the peak)."""
    budget_probe_steps: int = 20
    """``budget_schedule``: updates timed before planning (the first one, which warms up
    caches, is not counted)."""
    budget_warmup: float = 0.1
    """``budget_schedule``: the warmup's share of the planned updates (never more than
    ``warmup`` updates)."""
    budget_revise_every: float = 0.05
    """``budget_schedule``: after the plan's warmup, the share of its updates between two
    revisions (at least ``budget_probe_steps`` updates; validations revise it as well)."""
    budget_reserve: float = 0.05
    """``budget_schedule``: share of the remaining time left out of the plan (the plan counts
    updates in the rest, after the last validation's time; each revision counts again)."""
    optimizer: str = "adam"
    """``adam``: Adam, ``weight_decay`` added to the gradient as L2 (on every weight, as
    before; the paper uses none); ``adamw``: AdamW, weights shrunk by lr * ``weight_decay``
    at each step apart from the gradient (Loshchilov & Hutter 2019), on matrices and
    embeddings only: 1-D tensors (biases, LayerNorm gains and shifts) are not decayed."""
    adam_betas: tuple[float, float] = (0.9, 0.98)
    adam_eps: float = 1e-9
    weight_decay: float = 0.0
    """Adam: L2 coefficient; AdamW: decoupled decay rate (e.g. 0.01). 0 = none."""
    label_smoothing: float = 0.1
    word_dropout: float = 0.0
    """Replace each ordinary token of a training batch's source and decoder input by
    ``<unk>`` with this probability (0 = off; special tokens and tags never):
    :func:`nmtkit.train.regularize.word_dropout`."""
    rdrop: float = 0.0
    """R-Drop's weight alpha (Liang et al. 2021): each batch goes through the model twice
    and the symmetric KL of the two outputs is added to the loss (0 = off; the paper uses
    5 for a Transformer on IWSLT). An update costs about twice as much:
    :func:`nmtkit.train.regularize.rdrop_loss`."""
    clip_norm: float = 0.0
    """Clip the global gradient norm to this value; 0 = off."""
    valid_every: int = 1000
    """Validate every this many optimizer steps (also at the end)."""
    valid_bleu: bool = True
    """Greedy-decode the validation set and report BLEU at each validation."""
    valid_max_sents: int = 0
    """Use only the first N validation pairs for BLEU (0 = all)."""
    sample_every: int = 1
    """Every this many validations (0 = never), greedy-translate the first ``samples``
    validation sentences and print source / reference / hypothesis into the log and
    ``<run>/samples.txt`` (appended under a step header): the model's progress, read."""
    samples: int = 3
    """How many fixed validation sentences (the first ones) ``sample_every`` shows."""
    early_stop_metric: str = "bleu"
    """``bleu`` (higher is better) or ``loss`` (lower is better); selects ``best.pt``."""
    patience: int = 0
    """Stop after this many validations without improvement; 0 = never."""
    plateau_factor: float = 0.5
    """``plateau`` schedule: multiply the rate by this when validation loss stalls."""
    plateau_patience: int = 1
    """``plateau`` schedule: validations without a lower loss tolerated before lowering it
    (the rate drops on the next one)."""
    keep_last: int = 5
    """Keep the last k step checkpoints (for ``nmtkit average``)."""
    log_every: int = 50
    threads: int = 0
    """torch intra-op threads; 0 = PyTorch's default."""
    device: str = "auto"
    """``auto`` (cuda if available), ``cpu`` or ``cuda``."""
    amp: str = "off"
    """Mixed precision: ``off`` (fp32); ``bf16``: bfloat16 autocast on CUDA, and on a CPU
    with bfloat16 in hardware (Intel AMX: products at 3-8x the float32 rate; AVX512-BF16 as
    on AMD Zen 4/5: about 4.5x, whole steps 1.65x); ignored, with a log line, on other CPUs,
    where it is slower than fp32; ``fp16``:
    float16 autocast with a dynamic loss scale (``torch.amp.GradScaler``) for GPUs without
    bf16 (V100, T4); it also runs on a CPU, to test the code path. The loss scale goes to
    the log and into the checkpoint. Older recipes and checkpoints wrote a boolean:
    ``true`` reads as ``bf16``, ``false`` as ``off`` (YAML 1.1 also reads an unquoted
    ``off`` as ``false``)."""
    compile: bool = False
    """``torch.compile`` the training forward (dynamic shapes; pays off on GPUs). With
    ``cuda_graphs``: the whole loss of a batch (forward, loss sums and their backward) is
    compiled once for symbolic shapes, and each fixed shape's graph replays the compiled
    kernels (fused elementwise work: layer norms, dropout, residuals, casts)."""
    cuda_graphs: bool = False
    """Replay each update's forward + backward from CUDA graphs (:mod:`nmtkit.fast.cuda_graphs`):
    batches are padded to a few fixed shapes (:func:`nmtkit.data.batching.static_batches`,
    up to ``max_tokens`` padded tokens each) and each shape is captured once. For
    Transformers on one GPU, where short sentences make training launch-bound; not with
    ``rdrop``, ``word_dropout``, ``amp: fp16`` or several processes (with ``compile`` the
    graphs replay compiled kernels). On a CPU the same fixed shapes and buffers run without
    graphs."""
    fast: bool = True
    """Apply :mod:`nmtkit.fast` to the built model for training: CPU kernels for dropout and
    attention, and (with ``retain_freed_memory``) the allocator setting. Off: the model of
    :mod:`nmtkit.models` runs as written (same numbers within float tolerance; the dropout
    masks are drawn differently)."""
    retain_freed_memory: bool = True
    """With ``fast``: keep memory freed by one step in the process for the next (glibc
    malloc, see :mod:`nmtkit.fast.allocator`): no page faults on the step's large tensors.
    Off: freed memory goes back to the system at once."""
    max_nonfinite: int = 5
    """Stop after this many consecutive steps with a NaN/inf loss (each is skipped)."""
    freeze: tuple[str, ...] = ()
    """Parameter groups kept fixed (``requires_grad`` off), any of ``encoder``, ``embeddings``,
    ``decoder``; meant for fine-tuning (``nmtkit train --init-from``). A tied embedding
    matrix (``model.tie_output``/``tie_all``) is one parameter: it belongs to ``embeddings``
    only, so freezing ``embeddings`` also fixes the tied output projection (and the source
    embedding), and freezing ``decoder`` leaves it trainable."""
    forgetting_splits: tuple[str, ...] = ()
    """Splits of ``data.corpus`` (names, or path prefixes for ``parallel``) scored with BLEU
    and chrF before training and at its end, into ``<run>/forgetting.json`` (before, after,
    delta): how much a fine-tuned model forgot of its parent's data (the ``--report-splits``
    option of ``nmtkit train``). ``SRC-TGT:SPLIT`` (e.g. ``de-en:test_2016_flickr``) scores a
    split in another direction than the run's: a parent's direction after fine-tuning on the
    other one. With ``data.directions`` every entry names its direction this way."""
    tensorboard: bool = False
    """Also write TensorBoard event files (training loss, rate, tokens/s, validation metrics)
    into ``<run>/tensorboard/`` (needs the ``tensorboard`` extra)."""
    ema: float = 0.0
    """Decay of an exponential moving average of the weights, updated after every step
    (e.g. 0.999; 0 = off). Validation, ``best.pt`` and every checkpoint's weights are then
    the average (the raw weights are kept beside it, for ``--resume``)."""

    def validate(self, source: str) -> None:
        c = _Checks(self, "train", source)
        c.finite()
        c.one_of("lr_schedule", LR_SCHEDULES)
        c.one_of("optimizer", OPTIMIZERS)
        c.one_of("early_stop_metric", EARLY_STOP_METRICS)
        c.one_of("device", DEVICES)
        c.positive("max_tokens", "lr", "adam_eps")
        c.at_least(1, "accum", "max_steps", "valid_every", "log_every", "max_nonfinite")
        c.at_least(0, "seed", "max_epochs", "max_minutes", "warmup", "weight_decay", "clip_norm",
                   "patience", "plateau_patience", "keep_last", "valid_max_sents", "threads")
        c.at_most(MAX_SEED, "seed")
        c.at_most(MAX_MINUTES, "max_minutes")
        c.at_least(0, "sample_every")
        c.at_least(1, "samples")
        c.require(not self.cuda_graphs or not (self.rdrop or self.word_dropout
                                               or self.amp == "fp16"),
                  "train.cuda_graphs replays fixed kernels: not with train.rdrop, "
                  "train.word_dropout or train.amp: fp16")
        c.require(self.lr_schedule not in ("noam", "inverse_sqrt") or self.warmup >= 1,
                  "train.warmup must be >= 1 for noam and inverse_sqrt")
        self._validate_cosine(c)
        self._validate_budget(c)
        c.fraction("label_smoothing", "word_dropout")
        c.at_least(0, "rdrop")
        c.require(all(0.0 <= b < 1.0 for b in self.adam_betas),
                  f"train.adam_betas must each be in [0, 1), got {self.adam_betas}")
        c.require(0.0 < self.plateau_factor < 1.0,
                  f"train.plateau_factor must be in (0, 1), got {self.plateau_factor}")
        c.one_of("amp", AMP_MODES)
        c.fraction("ema")
        c.require(all(g in FREEZE_GROUPS for g in self.freeze),
                  f"train.freeze may list {', '.join(FREEZE_GROUPS)}, got {list(self.freeze)}")
        c.require(len(set(self.freeze)) < len(FREEZE_GROUPS),
                  f"train.freeze must leave a group to train, got {list(self.freeze)}")
        c.require(all(s.strip() for s in self.forgetting_splits),
                  f"train.forgetting_splits must name splits, got {list(self.forgetting_splits)}")
        named = [(e, *split_direction_name(e)) for e in self.forgetting_splits]
        bad = [e for e, d, split in named if d is not None and not (
            all(LANGUAGE_CODE.fullmatch(x) for x in d) and d[0] != d[1] and split.strip())]
        c.require(not bad, "train.forgetting_splits must write a direction as SRC-TGT:SPLIT with "
                  "two different language codes (letters, digits, _), e.g. "
                  f"de-en:test_2016_flickr, got {bad}")

    def _validate_budget(self, c: _Checks) -> None:
        """``budget_schedule`` and its settings."""
        c.at_least(2, "budget_probe_steps")
        c.fraction("budget_reserve")
        c.require(0.0 < self.budget_revise_every <= 1.0,
                  f"train.budget_revise_every must be in (0, 1], got {self.budget_revise_every}")
        c.require(0.0 < self.budget_warmup < 1.0,
                  f"train.budget_warmup must be in (0, 1), got {self.budget_warmup}")
        on = self.budget_schedule
        c.require(not on or self.max_minutes > 0, "train.budget_schedule fits the schedule to "
                  "train.max_minutes: set it (> 0), or turn budget_schedule off")
        c.require(not on or self.lr_schedule in ("noam", "inverse_sqrt", "cosine"),
                  "train.budget_schedule takes its peak rate from lr_schedule noam, "
                  f"inverse_sqrt or cosine, got {self.lr_schedule!r}")

    def _validate_cosine(self, c: _Checks) -> None:
        """``min_lr`` and ``cosine_steps`` (used by the ``cosine`` schedule only)."""
        c.at_least(0, "min_lr", "cosine_steps")
        cosine, horizon = self.lr_schedule == "cosine", self.cosine_steps or self.max_steps
        c.require(not cosine or self.min_lr < self.lr, "train.min_lr must be below train.lr for "
                  f"cosine, got min_lr {self.min_lr}, lr {self.lr}")
        c.require(not cosine or horizon > self.warmup, "train.cosine_steps (0 = train.max_steps) "
                  f"must exceed train.warmup for cosine, got {horizon}, warmup {self.warmup}")


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
TUNE_METRICS = ("bleu", "chrf", "bleu_lc_tok")
"""``nmtkit tune --metric``: the scores a setting can be chosen by: cased sacreBLEU (the
default), chrF, and BLEU on lowercased tokenized text (:func:`nmtkit.evaluate.tokenized_bleu`;
for a model trained on lowercased text, ``data.lowercase``, whose output has no case)."""


MAX_BEAM = 1024
"""The largest beam (and number of n-best outputs or samples) nmtkit searches with: a beam
search keeps beam x vocabulary scores per sentence, and beyond this a typo (``--beam
100000``) would exhaust memory or run for hours instead of being refused."""
MAX_POSITIONS = 1 << 16
"""The longest position table a model may ask for, and so the longest output cap."""
MAX_LEN_A = 1000.0
"""The largest ``decode.max_len_a``: outputs a thousand times the source length."""
MAX_SEED = (1 << 63) - 1
"""The largest seed a torch random generator takes (``decode.sampling_seed``, ``train.seed``)."""
MAX_MINUTES = 365 * 24 * 60.0
"""The largest ``train.max_minutes``, a year: any real budget, and far from where the
budget schedule's arithmetic (``max_minutes * 60`` seconds, updates counted in them)
overflows."""
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
    alignment_layer: int = -1
    """Alignments (and the confidence view's coverage) from this decoder layer's source
    attention, counted from 0; -1 = the last layer. Transformer only (the RNN has one)."""
    alignment_head: int = -1
    """... and from this head of it, counted from 0; -1 = the heads' mean. Transformer only."""

    def validate(self, source: str) -> None:
        c = _Checks(self, "decode", source)
        c.finite()
        c.at_least(1, "beam", "batch_size")
        c.at_least(-1, "alignment_layer", "alignment_head")
        c.at_least(0, "length_penalty", "max_len_a", "max_len_b", "sampling_top_k", "sampling_seed",
                   "mbr", "mbr_scale", "rerank", "reverse_weight", "r2l_weight")
        c.at_most(MAX_BEAM, "beam", "n_best", "mbr", "rerank")
        c.one_of("mbr_utility", MBR_UTILITIES)
        c.at_most(MAX_LEN_A, "max_len_a")
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


@dataclass
class Config:
    """A whole run: one dataclass per concern."""

    name: str = "run"
    data: DataConfig = field(default_factory=DataConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    decode: DecodeConfig = field(default_factory=DecodeConfig)

    def validate(self, source: str) -> None:
        """The checks between sections (each section checks itself; :func:`validate` runs all)."""
        if self.model.tie_all and not self.data.joint_vocab and self.data.corpus != "copy":
            raise ConfigError(f"{source}: model.tie_all needs data.joint_vocab: true "
                              "(one vocabulary for all three embeddings)")
        _Checks(self.train, "train", source).require(
            not self.train.cuda_graphs or self.model.arch == "transformer",
            f"train.cuda_graphs needs model.arch: transformer, got {self.model.arch!r}")
        self._validate_forgetting_directions(source)
        c = _Checks(self.decode, "decode", source)
        for holds, message in alignment_choice_checks(self.model, self.decode.alignment_layer,
                                                      self.decode.alignment_head):
            c.require(holds, message)

    def _validate_forgetting_directions(self, source: str) -> None:
        """A model of ``data.directions`` is asked for one target language per split: each of
        ``train.forgetting_splits`` names its direction (``SRC-TGT:SPLIT``), into one of the
        directions' target languages (any source: a zero-shot direction is scored as asked).
        Both messages are built for every config, so each check is listed."""
        dirs = self.data.directions
        c = _Checks(self.train, "train", source)
        named = [(e, split_direction_name(e)[0]) for e in self.train.forgetting_splits] if dirs else []
        plain = [e for e, d in named if d is None]
        c.require(not plain, "train.forgetting_splits with data.directions must name each split's "
                  f"direction as SRC-TGT:SPLIT (e.g. de-en:val), got {plain}")
        targets = sorted({d.split("-")[-1] for d in dirs})
        other = [e for e, d in named if d is not None and d[1] not in targets]
        c.require(not other, "train.forgetting_splits with data.directions must translate into "
                  f"one of its target languages, got {other} (targets: {', '.join(targets)})")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, raw: dict[str, Any], source: str = "<dict>") -> Config:
        cfg: Config = _build(cls, raw, source, "")
        validate(cfg, source)
        return cfg


def _coerce(value: Any, tp: Any, where: str, source: str) -> Any:
    """Check ``value`` against the annotated type ``tp`` (with mild numeric coercion)."""
    origin = typing.get_origin(tp)
    if tp is bool:
        if isinstance(value, bool):
            return value
    elif tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
    elif tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, str):  # YAML 1.1 reads ``1e-3`` (no dot) as a string
            try:
                return float(value)
            except ValueError:
                pass
    elif tp is str:
        if isinstance(value, str):
            return value
    elif origin is tuple:
        args = typing.get_args(tp)
        if len(args) == 2 and args[1] is Ellipsis:  # tuple[str, ...]: a YAML list of any length
            if isinstance(value, (list, tuple)) and dataclasses.is_dataclass(args[0]):
                entry = cast(type, args[0])  # a list of small sections (``data.extra``)
                return tuple(_build(entry, v, source, f"{where}[{i}].") for i, v in enumerate(value))
            if isinstance(value, (list, tuple)):
                return tuple(_coerce(v, args[0], where, source) for v in value)
            raise ConfigError(f"{source}: {where}: expected a list of {args[0].__name__}, "
                              f"got {value!r}")
        if isinstance(value, (list, tuple)) and len(value) == len(args):
            return tuple(_coerce(v, a, where, source) for v, a in zip(value, args, strict=True))
    elif origin in (types.UnionType, typing.Union):
        for a in typing.get_args(tp):
            try:
                return _coerce(value, a, where, source)
            except ConfigError:
                continue
    raise ConfigError(f"{source}: {where}: expected {getattr(tp, '__name__', tp)}, got {value!r}")


def _build(cls: type, raw: Any, source: str, prefix: str) -> Any:
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ConfigError(f"{source}: {prefix or 'top level'}: expected a mapping, got {raw!r}")
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(str(k) for k in set(raw) - names)
    if unknown:
        raise ConfigError(
            f"{source}: unknown key(s) {', '.join(prefix + k for k in unknown)}; "
            f"known: {', '.join(sorted(names))}"
        )
    kwargs = {}
    for name, value in raw.items():
        tp = hints[name]
        if dataclasses.is_dataclass(tp):
            kwargs[name] = _build(cast(type, tp), value, source, f"{prefix}{name}.")
        else:
            if isinstance(value, bool) and prefix + name in LEGACY_BOOLEANS:
                value = LEGACY_BOOLEANS[prefix + name][value]
            kwargs[name] = _coerce(value, tp, prefix + name, source)
    return cls(**kwargs)


LEGACY_BOOLEANS: dict[str, dict[bool, str]] = {"train.amp": {True: "bf16", False: "off"}}
"""Keys that were booleans before they took a word: what the old values mean now (older
checkpoints store the boolean in their config, and must still load)."""


class _Checks:
    """The checks one section makes of its own values. Every message starts with the source
    file and names the key in full (``model.d_model``)."""

    def __init__(self, section: Any, name: str, source: str):
        self.section, self.name, self.source = section, name, source

    def require(self, cond: bool, msg: str) -> None:
        if not cond:
            raise ConfigError(f"{self.source}: {msg}")

    def _each(self, names: tuple[str, ...]) -> Iterator[tuple[str, Any]]:
        for name in names:
            yield f"{self.name}.{name}", getattr(self.section, name)

    def finite(self) -> None:
        """Every float field is a finite number (NaN and inf are never a meaningful setting)."""
        names = tuple(f.name for f in dataclasses.fields(self.section))
        for key, value in self._each(names):
            values = value if isinstance(value, tuple) else (value,)
            self.require(all(not isinstance(v, float) or math.isfinite(v) for v in values),
                         f"{key} must be a finite number, got {value!r}")

    def one_of(self, name: str, allowed: tuple[str, ...]) -> None:
        value = getattr(self.section, name)
        self.require(value in allowed, f"{self.name}.{name} must be {'|'.join(allowed)}, got {value!r}")

    def at_least(self, low: int, *names: str) -> None:
        for key, value in self._each(names):
            self.require(value >= low, f"{key} must be >= {low}, got {value}")

    def at_most(self, high: float, *names: str) -> None:
        for key, value in self._each(names):  # (a float bound as 1000, an integer one in full)
            self.require(value <= high, f"{key} must be <= {high:g}, got {value:g}"
                         if isinstance(high, float) else f"{key} must be <= {high}, got {value}")

    def positive(self, *names: str) -> None:
        for key, value in self._each(names):
            self.require(value > 0, f"{key} must be > 0, got {value}")

    def fraction(self, *names: str) -> None:
        """In [0, 1): a dropout or smoothing probability."""
        for key, value in self._each(names):
            self.require(0.0 <= value < 1.0, f"{key} must be in [0, 1), got {value}")

    def in_unit_interval(self, *names: str) -> None:
        for key, value in self._each(names):
            self.require(0.0 <= value <= 1.0, f"{key} must be in [0, 1], got {value}")


def validate(cfg: Config, source: str = "<config>") -> None:
    """Reject impossible values before any work starts: each section, then across sections."""
    for section in (cfg.data, cfg.model, cfg.train, cfg.decode):
        section.validate(source)
    cfg.validate(source)


def parse_override(item: str) -> tuple[list[str], Any]:
    """``a.b=c`` -> (["a", "b"], YAML-parsed c)."""
    if "=" not in item:
        raise ConfigError(f"--set {item!r}: expected section.key=value")
    key, value = item.split("=", 1)
    path = key.strip().split(".")
    if not all(p.strip() for p in path):
        raise ConfigError(f"--set {item!r}: expected section.key=value")
    try:
        parsed = _yaml(value) if value != "" else ""
    except yaml.YAMLError as e:
        first = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise ConfigError(f"--set {item!r}: the value is not valid YAML ({first})") from None
    return path, parsed


def apply_overrides(raw: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    for item in overrides:
        path, value = parse_override(item)
        node = raw
        for p in path[:-1]:
            if node.get(p) is None:  # absent, or an empty section in YAML (``train:``)
                node[p] = {}
            node = node[p]
            if not isinstance(node, dict):
                raise ConfigError(f"--set {item!r}: {p} is not a section")
        node[path[-1]] = value
    return raw


class _RecipeLoader(yaml.SafeLoader):  # type: ignore[misc]  # PyYAML has no type hints
    """YAML's safe loader, except that a key given twice in one mapping is an error (the
    later value would silently win: two ``lr:`` lines in ``train``, the second forgotten)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        first: dict[Any, int] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            try:
                seen = key in first
            except TypeError:  # an unhashable key: the safe loader's own error says so
                break
            if seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r} (first given on line {first[key] + 1})",
                    key_node.start_mark)
            first[key] = key_node.start_mark.line
        mapping: dict[Any, Any] = super().construct_mapping(node, deep)
        return mapping


def _yaml(text: str) -> Any:
    return yaml.load(text, Loader=_RecipeLoader)  # noqa: S506  (a SafeLoader subclass)


def load(path: str | Path, overrides: list[str] | None = None) -> Config:
    """Read a YAML recipe, apply ``--set`` overrides, validate."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{path}: config file not found") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not a UTF-8 text file (a YAML recipe was expected)") from None
    except OSError as e:  # a directory, no permission
        raise ConfigError(f"{path}: cannot read the config file: {e.strerror or e}") from None
    try:
        raw = _yaml(text) or {}
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)  # one line: file:line: the problem
        where = f"{path}:{mark.line + 1}" if mark is not None else str(path)
        problem = " ".join(filter(None, (getattr(e, "context", None), getattr(e, "problem", None))))
        raise ConfigError(f"{where}: invalid YAML: {problem or e}") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: top level must be a mapping of sections (data, model, "
                          f"train, decode), got a {type(raw).__name__}")
    raw = apply_overrides(raw, overrides or [])
    if "name" not in raw:
        raw["name"] = path.stem
    cfg = Config.from_dict(raw, str(path))
    check_installed(cfg, str(path))
    return cfg


def check_installed(cfg: Config, source: str) -> None:
    """A recipe that is to run needs its optional packages. (Not part of :func:`validate`:
    a checkpoint's stored config must load where they are not installed, e.g. to translate.)"""
    if cfg.train.tensorboard and importlib.util.find_spec("tensorboard") is None:
        raise ConfigError(f"{source}: train.tensorboard needs the tensorboard package: pip "
                          "install 'nmtkit[tensorboard]' (or set train.tensorboard: false)")


def check_trainable(cfg: Config, source: str) -> None:
    """A Transformer's position table must hold the longest training sentence the data
    section keeps, or training fails at the first such batch (``nmtkit train`` and
    :class:`~nmtkit.train.loop.Trainer` ask). Not part of :func:`validate`: a config that
    breaks the rule still describes a usable model (a checkpoint trained on shorter
    sentences than ``data.max_len`` allows, an untrained model for a figure)."""
    copy = cfg.data.corpus == "copy"
    longest = (cfg.data.copy_len if copy else cfg.data.max_len) + 2
    if cfg.model.arch == "transformer" and cfg.model.max_positions < longest:
        raise ConfigError(
            f"{source}: model.max_positions ({cfg.model.max_positions}) must be at least "
            f"{longest}: the longest training sentence ({'data.copy_len' if copy else 'data.max_len'} "
            f"= {longest - 2} tokens) with its end-of-sentence token and a begin-of-sentence "
            "token or language tag")


def enc_layers(m: ModelConfig) -> int:
    return m.enc_layers or m.layers


def dec_layers(m: ModelConfig) -> int:
    return m.dec_layers or m.layers


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
            raise ValueError(message)
