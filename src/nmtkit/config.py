"""Run configuration: dataclasses are the only place defaults live.

A YAML recipe is read into :class:`Config`; every key must name a field (an
unknown key is an error, not silently ignored), every value is checked against
the field's type, and ``--set section.key=value`` overrides are applied before
validation, so an impossible run fails before any work starts.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml


class ConfigError(ValueError):
    """A configuration that cannot describe a valid run."""


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
    a file for ``tsv``."""
    valid: str = "val"
    test: str = "test_2016_flickr"
    tokenizer: str = "sentencepiece"
    """``sentencepiece`` (trained on the training split), ``word`` (spaCy blank rules), ``whitespace``."""
    spm_model_type: str = "bpe"
    """SentencePiece algorithm: ``bpe`` or ``unigram``."""
    vocab_size: int = 8000
    """SentencePiece vocabulary size (joint over both languages when ``joint_vocab``)."""
    joint_vocab: bool = True
    """One vocabulary for source and target (needed to tie all three embeddings)."""
    min_freq: int = 2
    """Word/whitespace tokenizers: drop types seen fewer times in training."""
    lowercase: bool = False
    max_len: int = 100
    """Training pairs with more tokens than this on either side are skipped (counted, logged)."""
    reverse_source: bool = False
    """Reverse source token order (Sutskever et al. 2014; seed 003)."""
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
    """Length of the precomputed sinusoidal table; longer inputs are truncated."""
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
    """Wall-clock budget for training; 0 = none."""
    lr_schedule: str = "noam"
    """``noam``: factor * d^-0.5 * min(s^-0.5, s * warmup^-1.5) (Eq. 3); ``constant``; ``plateau``."""
    lr: float = 1.0
    """Base rate: the Noam factor, or the constant/plateau initial rate."""
    warmup: int = 4000
    adam_betas: tuple[float, float] = (0.9, 0.98)
    adam_eps: float = 1e-9
    weight_decay: float = 0.0
    label_smoothing: float = 0.1
    clip_norm: float = 0.0
    """Clip the global gradient norm to this value; 0 = off."""
    valid_every: int = 1000
    """Validate every this many optimizer steps (also at the end)."""
    valid_bleu: bool = True
    """Greedy-decode the validation set and report BLEU at each validation."""
    valid_max_sents: int = 0
    """Use only the first N validation pairs for BLEU (0 = all)."""
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
    amp: bool = False
    """bf16 autocast on CUDA."""
    compile: bool = False
    """``torch.compile`` the training forward (dynamic shapes; pays off on GPUs)."""
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


@dataclass
class Config:
    """A whole run: one dataclass per concern."""

    name: str = "run"
    data: DataConfig = field(default_factory=DataConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    decode: DecodeConfig = field(default_factory=DecodeConfig)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, raw: dict[str, Any], source: str = "<dict>") -> Config:
        cfg = _build(cls, raw, source, "")
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
            kwargs[name] = _build(tp, value, source, f"{prefix}{name}.")
        else:
            kwargs[name] = _coerce(value, tp, prefix + name, source)
    return cls(**kwargs)


def _check(cond: bool, source: str, msg: str) -> None:
    if not cond:
        raise ConfigError(f"{source}: {msg}")


def _check_finite(cfg: Config, source: str) -> None:
    """Every float field is a finite number (NaN and inf are never a meaningful setting)."""
    import math

    for section in (cfg.data, cfg.model, cfg.train, cfg.decode):
        name = type(section).__name__.removesuffix("Config").lower()
        for f in dataclasses.fields(section):
            value = getattr(section, f.name)
            values = value if isinstance(value, tuple) else (value,)
            for v in values:
                _check(not isinstance(v, float) or math.isfinite(v), source,
                       f"{name}.{f.name} must be a finite number, got {value!r}")


LOWER_BOUNDS = [  # (key, smallest allowed value); 0 means "none"/"all"/"off" where allowed
    ("data.copy_len", 1), ("data.copy_vocab", 2), ("data.copy_train_size", 1),
    ("data.copy_valid_size", 1), ("model.max_positions", 2), ("train.max_epochs", 0),
    ("train.log_every", 1), ("train.seed", 0), ("train.max_nonfinite", 1),
    ("train.valid_max_sents", 0), ("train.threads", 0), ("train.weight_decay", 0),
    ("train.clip_norm", 0), ("train.patience", 0), ("train.warmup", 0),
    ("decode.length_penalty", 0),
]
POSITIVE = ["model.layer_norm_eps", "train.adam_eps"]


def _value(cfg: Config, key: str) -> Any:
    section, name = key.split(".")
    return getattr(getattr(cfg, section), name)


def validate(cfg: Config, source: str = "<config>") -> None:
    """Reject impossible values before any work starts."""
    d, m, t, s = cfg.data, cfg.model, cfg.train, cfg.decode
    _check_finite(cfg, source)
    for key, low in LOWER_BOUNDS:
        value = _value(cfg, key)
        _check(value >= low, source, f"{key} must be >= {low}, got {value}")
    for key in POSITIVE:
        value = _value(cfg, key)
        _check(value > 0, source, f"{key} must be > 0, got {value}")
    _check(all(0.0 <= b < 1.0 for b in t.adam_betas), source,
           f"train.adam_betas must each be in [0, 1), got {t.adam_betas}")
    _check(d.corpus in ("multi30k", "iwslt14", "wmt14", "parallel", "tsv", "copy"), source,
           f"data.corpus must be multi30k|iwslt14|wmt14|parallel|tsv|copy, got {d.corpus!r}")
    _check(d.tokenizer in ("sentencepiece", "word", "whitespace"), source,
           f"data.tokenizer must be sentencepiece|word|whitespace, got {d.tokenizer!r}")
    _check(d.spm_model_type in ("bpe", "unigram"), source, "data.spm_model_type must be bpe|unigram")
    _check(d.vocab_size >= 16, source, "data.vocab_size must be >= 16")
    _check(d.min_freq >= 1, source, "data.min_freq must be >= 1")
    _check(d.max_len >= 1, source, "data.max_len must be >= 1")
    _check(d.tokenizer_sample >= 0, source, "data.tokenizer_sample must be >= 0 (0 = all)")
    _check(m.arch in ("transformer", "rnn"), source,
           f"model.arch must be transformer|rnn, got {m.arch!r}")
    _check(m.norm in ("pre", "post"), source, "model.norm must be pre|post")
    _check(m.d_model > 0 and m.heads > 0, source, "model.d_model and model.heads must be > 0")
    _check(m.arch != "transformer" or m.d_model % m.heads == 0, source,
           f"model.d_model ({m.d_model}) must be divisible by model.heads ({m.heads})")
    _check(m.layers >= 1 and m.enc_layers >= 0 and m.dec_layers >= 0, source, "layers must be >= 1")
    for k in ("dropout", "attention_dropout", "relu_dropout"):
        _check(0.0 <= getattr(m, k) < 1.0, source, f"model.{k} must be in [0, 1)")
    _validate_rnn(m, source)
    _check(not m.tie_all or d.joint_vocab or d.corpus == "copy", source,
           "model.tie_all needs data.joint_vocab: true (one vocabulary for all three embeddings)")
    _check(t.max_tokens > 0, source, "train.max_tokens must be > 0")
    _check(t.accum >= 1, source, "train.accum must be >= 1")
    _check(t.max_steps >= 1, source, "train.max_steps must be >= 1")
    _check(t.max_minutes >= 0, source, "train.max_minutes must be >= 0")
    _check(t.lr_schedule in ("noam", "constant", "plateau"), source,
           "train.lr_schedule must be noam|constant|plateau")
    _check(t.lr > 0, source, "train.lr must be > 0")
    _check(t.lr_schedule != "noam" or t.warmup >= 1, source, "train.warmup must be >= 1 for noam")
    _check(0.0 <= t.label_smoothing < 1.0, source, "train.label_smoothing must be in [0, 1)")
    _check(0.0 < t.plateau_factor < 1.0, source, "train.plateau_factor must be in (0, 1)")
    _check(t.plateau_patience >= 0, source, "train.plateau_patience must be >= 0")
    _check(t.valid_every >= 1, source, "train.valid_every must be >= 1")
    _check(t.early_stop_metric in ("bleu", "loss"), source, "train.early_stop_metric must be bleu|loss")
    _check(t.keep_last >= 0, source, "train.keep_last must be >= 0")
    _check(t.device in ("auto", "cpu", "cuda"), source, "train.device must be auto|cpu|cuda")
    _check(s.beam >= 1, source, f"decode.beam must be >= 1, got {s.beam}")
    _check(1 <= s.n_best <= s.beam, source, "decode.n_best must be in [1, beam]")
    _check(s.batch_size >= 1, source, "decode.batch_size must be >= 1")
    _check(s.max_len_a >= 0 and s.max_len_b >= 0, source, "decode.max_len_a/b must be >= 0")


def _validate_rnn(m: ModelConfig, source: str) -> None:
    """The recurrent model's options (some only make sense for it)."""
    _check(m.emb_dim > 0 and m.rnn_hidden > 0, source, "model.emb_dim and model.rnn_hidden must be > 0")
    _check(not m.bidirectional or m.rnn_hidden % 2 == 0, source,
           f"model.rnn_hidden ({m.rnn_hidden}) must be even with model.bidirectional "
           "(each encoder direction gets half)")
    _check(m.attention in ("concat", "general", "dot"), source,
           f"model.attention must be concat|general|dot, got {m.attention!r}")
    _check(m.attention_dim >= 0, source, "model.attention_dim must be >= 0")
    _check(m.attention_temperature > 0, source,
           f"model.attention_temperature must be > 0, got {m.attention_temperature}")
    _check(0.0 <= m.teacher_forcing <= 1.0, source, "model.teacher_forcing must be in [0, 1]")
    _check(0.0 <= m.teacher_forcing_min <= 1.0, source, "model.teacher_forcing_min must be in [0, 1]")
    _check(m.teacher_forcing_anneal_steps >= 0, source,
           "model.teacher_forcing_anneal_steps must be >= 0")
    _check(m.teacher_forcing_anneal_steps == 0 or m.teacher_forcing_min <= m.teacher_forcing, source,
           "model.teacher_forcing_min must not exceed model.teacher_forcing when annealing")
    _check(m.init in ("glorot", "uniform"), source, f"model.init must be glorot|uniform, got {m.init!r}")
    _check(m.init_range > 0, source, "model.init_range must be > 0")
    if m.arch != "rnn":
        # The Transformer feeds all gold positions at once and has its own initialisation.
        _check(m.teacher_forcing == 1.0 and m.teacher_forcing_anneal_steps == 0, source,
               "model.teacher_forcing < 1 and annealing need model.arch: rnn")
        _check(m.init == "glorot", source, "model.init: uniform is implemented for model.arch: rnn")


def parse_override(item: str) -> tuple[list[str], Any]:
    """``a.b=c`` -> (["a", "b"], YAML-parsed c)."""
    if "=" not in item:
        raise ConfigError(f"--set {item!r}: expected section.key=value")
    key, value = item.split("=", 1)
    path = key.strip().split(".")
    if not all(p.strip() for p in path):
        raise ConfigError(f"--set {item!r}: expected section.key=value")
    try:
        parsed = yaml.safe_load(value) if value != "" else ""
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
        raw = yaml.safe_load(text) or {}
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: invalid YAML: {e}") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: top level must be a mapping of sections (data, model, "
                          f"train, decode), got a {type(raw).__name__}")
    raw = apply_overrides(raw, overrides or [])
    if "name" not in raw:
        raw["name"] = path.stem
    return Config.from_dict(raw, str(path))


def enc_layers(m: ModelConfig) -> int:
    return m.enc_layers or m.layers


def dec_layers(m: ModelConfig) -> int:
    return m.dec_layers or m.layers
