"""Load weights trained with The Annotated Transformer (harvardnlp, 2018) into nmtkit.

The reference builds its model with ``make_model(src_vocab, tgt_vocab, N, d_model, d_ff,
h, dropout)``: a pre-norm encoder-decoder (``x + Sublayer(LayerNorm(x))``, a final
LayerNorm on each stack), four separate ``d_model x d_model`` linears per attention
(query, key, value, output), and an untied ``Generator`` projection. That is the
architecture of an nmtkit :class:`~nmtkit.models.transformer.Transformer` with
``norm="pre"`` and no weight tying (up to the layer-norm formula, see
:func:`from_reference`), so converting a checkpoint is a renaming of its state_dict, plus
one fusion: nmtkit
stores the query/key/value projections of an attention as a single ``(3 d_model, d_model)``
``in_proj`` (rows: query, then key, then value).

Names, reference -> nmtkit (``S`` is ``encoder``/``decoder``, ``A`` an attention):

* ``src_embed.0.lut.weight`` -> ``src_embed.lut.weight`` (``tgt_embed`` likewise)
* ``S.layers.i.A.linears.{0,1,2}.*`` -> ``S_layers.i.A.in_proj.*`` (concatenated)
* ``S.layers.i.A.linears.3.*`` -> ``S_layers.i.A.out_proj.*``
* ``S.layers.i.feed_forward.w_{1,2}.*`` -> ``S_layers.i.feed_forward.w_{1,2}.*``
* ``S.layers.i.sublayer.k.norm.{a_2,b_2}`` -> ``S_layers.i.sublayer.k.norm.{weight,bias}``
* ``S.norm.{a_2,b_2}`` -> ``S_norm.{weight,bias}``
* ``generator.proj.*`` -> ``generator.*``

The positional-encoding buffers ``src_embed.1.pe`` / ``tgt_embed.1.pe`` are accepted
and only checked for shape (nmtkit recomputes the same sinusoid table); their length sets
``max_positions``.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import Tensor

from ..config import ModelConfig
from ..errors import UserError
from ..models.transformer import Transformer

_PE_KEYS = ("src_embed.1.pe", "tgt_embed.1.pe")
_DEFAULT_MAX_POSITIONS = 5000  # the reference's PositionalEncoding(max_len=5000)


def _linear(prefix: str, d_out: int, d_in: int) -> dict[str, tuple[int, ...]]:
    return {f"{prefix}.weight": (d_out, d_in), f"{prefix}.bias": (d_out,)}


def _norm(prefix: str, d: int) -> dict[str, tuple[int, ...]]:
    return {f"{prefix}.a_2": (d,), f"{prefix}.b_2": (d,)}


def _attention(prefix: str, d: int) -> dict[str, tuple[int, ...]]:
    shapes: dict[str, tuple[int, ...]] = {}
    for j in range(4):
        shapes.update(_linear(f"{prefix}.linears.{j}", d, d))
    return shapes


def reference_shapes(src_vocab: int, tgt_vocab: int, N: int, d_model: int,
                     d_ff: int) -> dict[str, tuple[int, ...]]:
    """Every parameter the reference's ``make_model`` creates, with its shape (no buffers)."""
    d = d_model
    shapes: dict[str, tuple[int, ...]] = {
        "src_embed.0.lut.weight": (src_vocab, d),
        "tgt_embed.0.lut.weight": (tgt_vocab, d),
    }
    for stack, attns, n_sub in (("encoder", ("self_attn",), 2),
                                ("decoder", ("self_attn", "src_attn"), 3)):
        for i in range(N):
            p = f"{stack}.layers.{i}"
            for a in attns:
                shapes.update(_attention(f"{p}.{a}", d))
            shapes.update(_linear(f"{p}.feed_forward.w_1", d_ff, d))
            shapes.update(_linear(f"{p}.feed_forward.w_2", d, d_ff))
            for k in range(n_sub):
                shapes.update(_norm(f"{p}.sublayer.{k}.norm", d))
        shapes.update(_norm(f"{stack}.norm", d))
    shapes.update(_linear("generator.proj", tgt_vocab, d))
    return shapes


def _validate(state_dict: Mapping[str, Tensor], expected: dict[str, tuple[int, ...]],
              d_model: int) -> int:
    """Check names and shapes; return the positional table length (max_positions)."""
    missing = [k for k in expected if k not in state_dict]
    if missing:
        raise UserError(f"reference state_dict is missing key(s): {', '.join(missing)}")
    unexpected = sorted(k for k in state_dict if k not in expected and k not in _PE_KEYS)
    if unexpected:
        raise UserError(f"reference state_dict has unexpected key(s): {', '.join(unexpected)} "
                         "(check N, or that it comes from make_model)")
    for key, shape in expected.items():
        got = tuple(state_dict[key].shape)
        if got != shape:
            raise UserError(f"reference state_dict key {key}: shape {got}, expected {shape} "
                             "(check src_vocab, tgt_vocab, d_model and d_ff)")
    max_positions = _DEFAULT_MAX_POSITIONS
    for key in _PE_KEYS:
        if key in state_dict:
            pe = state_dict[key]
            if pe.dim() != 3 or pe.size(0) != 1 or pe.size(2) != d_model:
                raise UserError(f"reference state_dict key {key}: shape {tuple(pe.shape)}, "
                                 f"expected (1, max_len, {d_model})")
            max_positions = int(pe.size(1))
    return max_positions


def _convert(state_dict: Mapping[str, Tensor], N: int) -> dict[str, Tensor]:
    """Reference names -> nmtkit names, fusing q/k/v into ``in_proj``."""
    sd = state_dict
    out: dict[str, Tensor] = {
        "src_embed.lut.weight": sd["src_embed.0.lut.weight"],
        "tgt_embed.lut.weight": sd["tgt_embed.0.lut.weight"],
        "generator.weight": sd["generator.proj.weight"],
        "generator.bias": sd["generator.proj.bias"],
    }
    for stack, attns, n_sub in (("encoder", ("self_attn",), 2),
                                ("decoder", ("self_attn", "src_attn"), 3)):
        for i in range(N):
            src, dst = f"{stack}.layers.{i}", f"{stack}_layers.{i}"
            for a in attns:
                lin = f"{src}.{a}.linears"
                for part in ("weight", "bias"):
                    # rows: query, key, value -> (3 d_model, d_model) / (3 d_model,)
                    out[f"{dst}.{a}.in_proj.{part}"] = torch.cat(
                        [sd[f"{lin}.{j}.{part}"] for j in range(3)], dim=0)
                    out[f"{dst}.{a}.out_proj.{part}"] = sd[f"{lin}.3.{part}"]
            for w in ("w_1", "w_2"):
                for part in ("weight", "bias"):
                    out[f"{dst}.feed_forward.{w}.{part}"] = sd[f"{src}.feed_forward.{w}.{part}"]
            for k in range(n_sub):
                out[f"{dst}.sublayer.{k}.norm.weight"] = sd[f"{src}.sublayer.{k}.norm.a_2"]
                out[f"{dst}.sublayer.{k}.norm.bias"] = sd[f"{src}.sublayer.{k}.norm.b_2"]
        out[f"{stack}_norm.weight"] = sd[f"{stack}.norm.a_2"]
        out[f"{stack}_norm.bias"] = sd[f"{stack}.norm.b_2"]
    return out


def from_reference(
    state_dict: Mapping[str, Tensor],
    src_vocab: int,
    tgt_vocab: int,
    N: int = 6,
    d_model: int = 512,
    d_ff: int = 2048,
    h: int = 8,
) -> Transformer:
    """The state_dict of the reference's ``make_model(src_vocab, tgt_vocab, N, d_model, d_ff, h)``
    -> an equivalent nmtkit :class:`Transformer` (pre-norm, untied, dropout 0, in eval mode).

    The arguments are those given to ``make_model``. Any missing or unexpected key, or a
    tensor of the wrong shape, raises :class:`ValueError` naming the key.

    Two differences the caller must know about:

    * **Layer norm.** The reference's ``LayerNorm`` computes
      ``a_2 * (x - mean) / (std + eps) + b_2`` with the *unbiased* standard deviation and
      ``eps`` outside the square root; nmtkit uses :class:`torch.nn.LayerNorm`
      (``(x - mean) / sqrt(var_biased + eps)``). The converted model therefore reproduces
      the reference's outputs only approximately (the std differs by a factor
      ``sqrt(d / (d - 1))``); it matches exactly when the reference's ``LayerNorm`` is
      replaced by the standard biased-variance form, as the parity test does.
    * **Special ids.** The reference's vocabularies put ``<s>=0, </s>=1, <blank>=2,
      <unk>=3`` (pad is ``<blank>``), whereas nmtkit fixes ``PAD=0, UNK=1, BOS=2, EOS=3``.
      This function only moves weights, as they are: the model keeps the reference's token
      ids, so callers map ids (and pass the right start/pad symbols and masks) themselves.
    """
    if d_model % h:
        raise UserError(f"d_model ({d_model}) must be divisible by h ({h})")
    expected = reference_shapes(src_vocab, tgt_vocab, N, d_model, d_ff)
    max_positions = _validate(state_dict, expected, d_model)
    cfg = ModelConfig(arch="transformer", layers=N, d_model=d_model, d_ff=d_ff, heads=h,
                      dropout=0.0, attention_dropout=0.0, relu_dropout=0.0, norm="pre",
                      layer_norm_eps=1e-6, tie_output=False, tie_all=False, output_bias=True,
                      max_positions=max_positions)
    model = Transformer(cfg, src_vocab, tgt_vocab)
    converted = _convert(state_dict, N)
    with torch.no_grad():
        model.load_state_dict({k: v.detach().clone() for k, v in converted.items()}, strict=True)
    return model.eval()
