"""``model``: the architecture's hyperparameters (Vaswani et al. 2017, Table 3; the RNN of
Bahdanau et al. 2015)."""

from __future__ import annotations

from dataclasses import dataclass

from .checks import Checks, ConfigError
from .limits import MAX_HEADS, MAX_LAYERS, MAX_PARAMETERS, MAX_VOCAB, MAX_WIDTH, brief

ARCHS = ("transformer", "rnn")
NORMS = ("pre", "post")
RNN_ATTENTIONS = ("concat", "general", "dot")
RNN_INITS = ("glorot", "uniform")
POSITIONAL_ENCODINGS = ("sinusoidal", "learned", "rope")
"""``model.positional``: how the Transformer knows word order (see :mod:`nmtkit.models.positions`)."""


MAX_POSITIONS = 1 << 16
"""The longest position table a model may ask for, and so the longest output cap (the
longest inputs translated in one piece are a few thousand tokens)."""


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
        c = Checks(self, "model", source)
        c.finite()
        c.within(MAX_LAYERS, "layers", "enc_layers", "dec_layers")
        c.within(MAX_WIDTH, "d_model", "d_ff", "emb_dim", "rnn_hidden", "attention_dim")
        c.within(MAX_HEADS, "heads")
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
                  f"reads word order through its recurrence), got {brief(self.positional)}")
        c.require(self.positional != "rope" or (self.d_model // self.heads) % 2 == 0,
                  "model.positional: rope rotates pairs of dimensions: d_model / heads must be "
                  f"even, got {self.d_model} / {self.heads}")
        self._validate_rnn(c)

    def _validate_rnn(self, c: Checks) -> None:
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


def enc_layers(m: ModelConfig) -> int:
    return m.enc_layers or m.layers


def dec_layers(m: ModelConfig) -> int:
    return m.dec_layers or m.layers


def parameter_count(m: ModelConfig, src_vocab: int, tgt_vocab: int) -> int:
    """The weights that building the model ``m`` describes allocates, with these vocabulary
    sizes: every matrix, bias, layer-norm gain and position table, a tied embedding counted
    as often as it is made (the builder makes each matrix, then ties them). Computed from the
    config alone, so that a model too large to build is refused before anything is
    allocated (:func:`check_model_size`)."""
    if m.arch == "rnn":
        return _rnn_parameters(m, src_vocab, tgt_vocab)
    d, f, enc, dec = m.d_model, m.d_ff, enc_layers(m), dec_layers(m)
    attention = 4 * d * d + 4 * d  # [W^Q; W^K; W^V] and W^O, with biases
    ffn = 2 * d * f + f + d
    encoder = enc * (attention + ffn + 2 * 2 * d)  # two layer norms a layer
    decoder = dec * (2 * attention + ffn + 3 * 2 * d)
    final_norms = 2 * 2 * d if m.norm == "pre" else 0
    table = m.max_positions * d if m.positional != "rope" else 2 * m.max_positions * (d // m.heads)
    output = d * tgt_vocab + (tgt_vocab if m.output_bias else 0)
    return (src_vocab + tgt_vocab) * d + table + encoder + decoder + final_norms + output


def _rnn_parameters(m: ModelConfig, src_vocab: int, tgt_vocab: int) -> int:
    """:func:`parameter_count` of the recurrent model (:mod:`nmtkit.models.rnn`)."""
    e, h, enc, dec = m.emb_dim, m.rnn_hidden, enc_layers(m), dec_layers(m)
    dirs = 2 if m.bidirectional else 1
    k = h // dirs  # each direction's LSTM state
    lstm = sum(dirs * (4 * k * ((e if i == 0 else dirs * k) + k) + 8 * k) for i in range(enc))
    gru = sum(3 * h * ((e + h if i == 0 else h) + h) + 6 * h for i in range(dec))
    a = m.attention_dim or h
    attention = {"concat": 2 * h * a + 2 * a, "general": h * h}.get(m.attention, 0)
    bridges = dec * (dirs * k * h + h)
    pred_in = e + 2 * h
    output = ((pred_in * e + e * tgt_vocab) if m.tie_output else pred_in * tgt_vocab) + \
        (tgt_vocab if m.output_bias else 0)
    return (src_vocab + tgt_vocab) * e + lstm + gru + attention + bridges + output


def check_model_size(m: ModelConfig, src_vocab: int, tgt_vocab: int, source: str) -> None:
    """:class:`~nmtkit.config.checks.ConfigError` if the model ``m`` with these vocabulary
    sizes has more than :data:`~nmtkit.config.limits.MAX_PARAMETERS` weights (each layer
    count and width within its own limit, their product may not be) or a vocabulary over
    :data:`~nmtkit.config.limits.MAX_VOCAB`: asked before the model is built (a config
    checks it with its vocabulary's expected size, a checkpoint can with the sizes it
    holds)."""
    for side, size in (("source", src_vocab), ("target", tgt_vocab)):
        if size > MAX_VOCAB:
            raise ConfigError(f"{source}: a {side} vocabulary of {brief(size)} entries, more than "
                              f"{MAX_VOCAB:,} (a limit of nmtkit's: nmtkit.config.limits)")
    n = parameter_count(m, src_vocab, tgt_vocab)
    if n > MAX_PARAMETERS:
        shape = (f"{enc_layers(m)}+{dec_layers(m)} layers of d_model {m.d_model}, d_ff {m.d_ff}"
                 if m.arch == "transformer" else
                 f"{enc_layers(m)}+{dec_layers(m)} layers of rnn_hidden {m.rnn_hidden}, "
                 f"emb_dim {m.emb_dim}")
        raise ConfigError(
            f"{source}: model: {shape} and vocabularies of {src_vocab:,}/{tgt_vocab:,} make "
            f"{n:,} weights, more than {MAX_PARAMETERS:,} ({MAX_PARAMETERS * 4 // 10**9} GB "
            "of float32; a limit of nmtkit's: nmtkit.config.limits): make it smaller")
