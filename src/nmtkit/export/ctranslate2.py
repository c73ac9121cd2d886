"""Export a Transformer checkpoint to CTranslate2, and translate with the export as nmtkit does.

nmtkit's :class:`~nmtkit.models.transformer.Transformer` maps one to one onto CTranslate2's
``TransformerSpec`` (a declaration of the weights its C++ Transformer reads):

========================================  =================================================
nmtkit                                    CTranslate2 spec
========================================  =================================================
``src_embed.lut`` / ``tgt_embed.lut``     ``encoder.embeddings[0]`` / ``decoder.embeddings``
                                          (both multiplied by sqrt(d_model), Sec. 3.4)
``position.pe`` (sin on even dims, cos     ``{encoder,decoder}.position_encodings.encodings``:
on odd dims, interleaved)                 the table is exported explicitly, because
                                          CTranslate2's built-in one puts all sines first
``position.table`` (``learned``)          the same two tables: the learned rows
RoPE (``rope``, every self-attention)     ``rotary_dim`` 0 (all of a head), interleaved
                                          pairs, base 10000 in both stacks' self-attention
                                          (CTranslate2 rotates no source attention either)
self-attention ``in_proj`` (3d x d)       ``self_attention.linear[0]`` (fused Q, K, V)
source attention ``in_proj[:d]``,         ``attention.linear[0]`` (Q), ``attention.linear[1]``
``in_proj[d:]``                           (fused K, V)
``out_proj``                              last ``linear`` of each attention
``feed_forward.w_1`` / ``w_2`` (ReLU)     ``ffn.linear_0`` / ``ffn.linear_1``
``sublayer[i].norm`` (pre or post)        ``layer_norm`` of the i-th sub-layer, ``pre_norm``
``encoder_norm`` / ``decoder_norm``       ``{encoder,decoder}.layer_norm`` (pre-norm only)
``generator`` (bias optional, tied)       ``decoder.projection`` (tied weights are stored
                                          once, as an alias)
========================================  =================================================

The vocabularies are exported in nmtkit's id order (``<pad> <unk> <s> </s>`` at 0..3), so
CTranslate2's ids are nmtkit's. Sources end with ``</s>`` and no ``<s>``
(``add_source_eos``); the decoder starts from ``<s>``.

Beside CTranslate2's own files (``model.bin``, ``config.json``, ``*_vocabulary.json``) the
export directory holds what is needed to go from text to text: the SentencePiece model(s),
``nmtkit.json`` (tokenizers, ``reverse_source``, decoding defaults) and a ``README.txt``.
:class:`CTranslate2Translator` reads them and translates like
:class:`nmtkit.decode.translator.Translator`.
"""

from __future__ import annotations

import inspect
import json
import logging
import os
import re
import stat
from collections.abc import Iterable
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import ctranslate2
import torch
from ctranslate2.converters.converter import Converter
from ctranslate2.specs import common_spec, transformer_spec
from ctranslate2.specs.model_spec import ACCEPTED_MODEL_TYPES

from .. import __version__
from ..checkpoint import Bundle, bundle_from_checkpoint, load_checkpoint
from ..config import Config, ModelConfig, dec_layers, enc_layers
from ..data.vocab import BOS_TOKEN, EOS_TOKEN, UNK_TOKEN
from ..io import atomic_dir, atomic_write_bytes, atomic_write_text, errors_naming
from ..models.positions import ROPE_BASE, LearnedPositionalEmbedding
from ..models.transformer import PositionalEncoding
from ..rules import output_cap_source
from . import ExportError
from .ctranslate2_format import META_FILE, META_FORMAT, META_VERSION, NEVER

if TYPE_CHECKING:
    from ..models.attention import MultiHeadAttention
    from ..models.transformer import DecoderLayer, EncoderLayer, PositionwiseFeedForward, Transformer

log = logging.getLogger(__name__)

QUANTIZATIONS = ACCEPTED_MODEL_TYPES
"""int8, int8_float32, int8_float16, int8_bfloat16, int16, float16, bfloat16, float32."""


# --- weights -> spec ----------------------------------------------------------------------------


def _np(t: torch.Tensor) -> Any:
    return t.detach().to("cpu").float().numpy().copy()


def _set_linear(spec: common_spec.LinearSpec, weight: torch.Tensor,
                bias: torch.Tensor | None = None) -> None:
    spec.weight = _np(weight)
    if bias is not None:
        spec.bias = _np(bias)


def _set_layer_norm(spec: common_spec.LayerNormSpec, norm: Any) -> None:
    spec.gamma = _np(norm.weight)
    spec.beta = _np(norm.bias)


def _set_self_attention(spec: Any, mha: MultiHeadAttention, norm: Any) -> None:
    _set_linear(spec.linear[0], mha.in_proj.weight, mha.in_proj.bias)  # (3d, d): Q, K, V
    _set_linear(spec.linear[1], mha.out_proj.weight, mha.out_proj.bias)
    _set_layer_norm(spec.layer_norm, norm)


def _set_source_attention(spec: Any, mha: MultiHeadAttention, norm: Any) -> None:
    d = mha.d_model
    _set_linear(spec.linear[0], mha.in_proj.weight[:d], mha.in_proj.bias[:d])  # Q
    _set_linear(spec.linear[1], mha.in_proj.weight[d:], mha.in_proj.bias[d:])  # K, V: (2d, d)
    _set_linear(spec.linear[2], mha.out_proj.weight, mha.out_proj.bias)
    _set_layer_norm(spec.layer_norm, norm)


def _set_ffn(spec: Any, ffn: PositionwiseFeedForward, norm: Any) -> None:
    _set_linear(spec.linear_0, ffn.w_1.weight, ffn.w_1.bias)
    _set_linear(spec.linear_1, ffn.w_2.weight, ffn.w_2.bias)
    _set_layer_norm(spec.layer_norm, norm)


def check_exportable(bundle_or_arch: Bundle | str, where: str = "<checkpoint>") -> None:
    """Raise :class:`ExportError` unless the model is a Transformer (the only exportable arch)."""
    arch = bundle_or_arch if isinstance(bundle_or_arch, str) else bundle_or_arch.cfg.model.arch
    if arch != "transformer":
        raise ExportError(f"{where}: model.arch is {arch!r}; only 'transformer' checkpoints can be "
                          "exported to CTranslate2 (it has no recurrent encoder-decoder with "
                          "additive attention)")
    if not isinstance(bundle_or_arch, str) and bundle_or_arch.cfg.data.reverse_target:
        raise ExportError(f"{where}: a right-to-left model (data.reverse_target): it reranks a "
                          "left-to-right model's candidates (--r2l-model), which the ctranslate2 "
                          "engine does not do; export the left-to-right model")


def exported_attention(cfg: Config) -> tuple[int, int]:
    """(decoder layer, head) of the source attention the export returns (``return_attention``:
    alignments, the confidence view's coverage), as ``decode.alignment_layer`` /
    ``alignment_head`` name one (-1: the last layer; -1: the heads' mean). It is fixed in
    ``model.bin`` (CTranslate2's ``alignment_layer`` and ``alignment_heads``: the mean of the
    first k heads), so a head other than 0 or the mean cannot be exported: the mean instead
    (:func:`transformer_spec_from_bundle` warns)."""
    layer, head = cfg.decode.alignment_layer, cfg.decode.alignment_head
    return layer, -1 if head > 0 else head


def _architecture(cfg: ModelConfig, where: str,
                  attention: tuple[int, int] = (-1, -1)) -> transformer_spec.TransformerSpec:
    """CTranslate2's Transformer for ``cfg``: layers, heads, pre- or post-norm, ReLU, the source
    attention it returns (``attention``: (layer, head) of :func:`exported_attention`), and for
    ``model.positional: rope`` rotary self-attention in both stacks (Su et al. 2021, Eq. 34:
    every dimension of a head, pairs (2i, 2i+1) interleaved, theta_i = 10000^(-2i/d_k))."""
    layers = (enc_layers(cfg), dec_layers(cfg))
    layer, head = attention
    arch: dict[str, Any] = {"pre_norm": cfg.norm == "pre", "activation": common_spec.Activation.RELU}
    aligned = {"alignment_layer": layer, "alignment_heads": cfg.heads if head == -1 else 1}
    if cfg.positional != "rope":
        return transformer_spec.TransformerSpec.from_config(layers, cfg.heads, **arch, **aligned)
    if "rotary_dim" not in inspect.signature(transformer_spec.TransformerEncoderSpec.__init__).parameters:
        raise ExportError(f"{where}: model.positional is 'rope', and this ctranslate2 "
                          f"({ctranslate2.__version__}) has no rotary embeddings in an encoder: "
                          "upgrade ctranslate2 to export it")
    rope = {"rotary_dim": 0, "rotary_interleave": True, "rotary_base": ROPE_BASE}
    return transformer_spec.TransformerSpec(
        transformer_spec.TransformerEncoderSpec(layers[0], cfg.heads, **arch, **rope),
        transformer_spec.TransformerDecoderSpec(layers[1], cfg.heads, **arch, **rope, **aligned))


def transformer_spec_from_bundle(bundle: Bundle) -> transformer_spec.TransformerSpec:
    """Declare the CTranslate2 model: architecture flags, weights, vocabularies, config."""
    where = str(bundle.path) if bundle.path is not None else "<checkpoint>"
    check_exportable(bundle, where)
    cfg, model = bundle.cfg.model, cast("Transformer", bundle.model)
    head = bundle.cfg.decode.alignment_head
    if head > 0:
        log.warning("decode.alignment_head is %d: CTranslate2 returns the mean of a layer's first "
                    "k heads, not head %d alone; the export returns the heads' mean", head, head)
    spec = _architecture(cfg, where, exported_attention(bundle.cfg))

    enc, dec = spec.encoder, spec.decoder
    enc.embeddings[0].weight = _np(model.src_embed.lut.weight)
    dec.embeddings.weight = _np(model.tgt_embed.lut.weight)
    table = None  # rope: no table, the self-attentions rotate (CTranslate2 then adds none)
    if isinstance(model.position, PositionalEncoding):
        table = _np(model.position.pe)  # (max_positions, d): PE(pos, 2i) = sin, PE(pos, 2i+1) = cos
    elif isinstance(model.position, LearnedPositionalEmbedding):
        table = _np(model.position.table.weight)  # (max_positions, d): the learned P
    if table is not None:
        enc.position_encodings.encodings = table
        dec.position_encodings.encodings = table.copy()
    for layer_spec, layer in zip(enc.layer, cast("Iterable[EncoderLayer]", model.encoder_layers),
                                 strict=True):
        _set_self_attention(layer_spec.self_attention, layer.self_attn, layer.sublayer[0].norm)
        _set_ffn(layer_spec.ffn, layer.feed_forward, layer.sublayer[1].norm)
    for layer_spec, dec_layer in zip(dec.layer, cast("Iterable[DecoderLayer]", model.decoder_layers),
                                     strict=True):
        _set_self_attention(layer_spec.self_attention, dec_layer.self_attn, dec_layer.sublayer[0].norm)
        _set_source_attention(layer_spec.attention, dec_layer.src_attn, dec_layer.sublayer[1].norm)
        _set_ffn(layer_spec.ffn, dec_layer.feed_forward, dec_layer.sublayer[2].norm)
    if model.encoder_norm is not None:  # pre-norm stacks end with a layer norm
        _set_layer_norm(enc.layer_norm, model.encoder_norm)
        _set_layer_norm(dec.layer_norm, model.decoder_norm)
    _set_linear(dec.projection, model.generator.weight, model.generator.bias)

    spec.register_source_vocabulary(list(bundle.src_vocab.itos))
    spec.register_target_vocabulary(list(bundle.tgt_vocab.itos))
    c = spec.config
    c.unk_token, c.bos_token, c.eos_token = UNK_TOKEN, BOS_TOKEN, EOS_TOKEN
    c.decoder_start_token = BOS_TOKEN
    c.add_source_bos, c.add_source_eos = False, True  # nmtkit sources: tokens, then </s>
    c.layer_norm_epsilon = float(cfg.layer_norm_eps)
    return spec


class NmtkitConverter(Converter):  # type: ignore[misc]  # ctranslate2 has no type information
    """CTranslate2 converter for an nmtkit checkpoint (a path or a loaded :class:`Bundle`).

    ``NmtkitConverter("best.pt").convert("out_dir", quantization="int8")`` writes only
    CTranslate2's files; :func:`export_ctranslate2` adds tokenizers, metadata and a README,
    and writes atomically.
    """

    def __init__(self, checkpoint: str | Path | Bundle) -> None:
        self.checkpoint = checkpoint

    def bundle(self) -> Bundle:
        if isinstance(self.checkpoint, Bundle):
            return self.checkpoint
        return load_exportable_bundle(self.checkpoint)

    def _load(self) -> transformer_spec.TransformerSpec:
        return transformer_spec_from_bundle(self.bundle())


def load_exportable_bundle(path: str | Path) -> Bundle:
    """Load a checkpoint, refusing a non-Transformer before building its model."""
    ckpt = load_checkpoint(path)
    arch = (ckpt["config"].get("model") or {}).get("arch", "transformer")
    check_exportable(arch, str(path))
    return bundle_from_checkpoint(ckpt, path)


# --- export directory ---------------------------------------------------------------------------


def _tokenizer_files(bundle: Bundle) -> tuple[dict[str, dict[str, Any]], dict[str, bytes]]:
    """JSON-able tokenizer descriptions for nmtkit.json, and the files they refer to."""
    files: dict[str, bytes] = {}
    described: dict[str, dict[str, Any]] = {}
    src_state, tgt_state = bundle.src_tok.state(), bundle.tgt_tok.state()
    joint = src_state == tgt_state
    for side, state in (("src", src_state), ("tgt", tgt_state)):
        state = dict(state)
        proto = state.pop("model_proto", None)
        if proto is not None:
            name = "sentencepiece.model" if joint else f"{side}.spm.model"
            files[name] = bytes(proto)
            state["model_file"] = name
        described[side] = state
    return described, files


def _plain_ct2_snippet(meta: dict[str, Any]) -> list[str]:
    """Python lines that translate one ``line`` with ctranslate2 (and the tokenizer) alone."""
    src, tgt, dec = meta["tokenizers"]["src"], meta["tokenizers"]["tgt"], meta["decode"]
    code = ["import ctranslate2"]
    if src["kind"] == "sentencepiece":
        code += ["import sentencepiece as spm",
                 f'src_sp = spm.SentencePieceProcessor(model_file="THIS_DIR/{src["model_file"]}")',
                 f'tgt_sp = spm.SentencePieceProcessor(model_file="THIS_DIR/{tgt["model_file"]}")']
        tokenize, detokenize = "src_sp.encode(line, out_type=str)", "tgt_sp.decode(tokens_out)"
    elif src["kind"] == "word":
        code += ["import spacy", "from nmtkit.data.tokenizers import detokenize",
                 f'nlp = spacy.blank("{src["lang"]}")']
        tokenize = "[t.text for t in nlp.tokenizer(line) if not t.text.isspace()]"
        detokenize = "detokenize(tokens_out)"
    else:
        tokenize, detokenize = "line.split()", '" ".join(tokens_out)'
    code += ['translator = ctranslate2.Translator("THIS_DIR", device="cpu")',
             f"tokens = {tokenize}" if not src.get("lowercase") else
             f"tokens = {tokenize.replace('(line', '(line.lower()')}"]
    if meta["reverse_source"]:
        code.append("tokens = tokens[::-1]  # the model reads its source reversed")
    # nmtkit's output cap (nmtkit.rules.output_cap) in integers, less the </s> it counts
    cap = output_cap_source(dec["max_len_a"], dec["max_len_b"], "len(tokens) + 1")
    never = ", ".join(f'["{t}"]' for t in NEVER)
    code += [f"# at most floor({dec['max_len_a']} * (len(tokens) + 1) + {dec['max_len_b']}) "
             "tokens with </s>, exactly",
             f"steps = {cap} - 1",
             "result = translator.translate_batch(",
             f"    [tokens], beam_size={dec['beam']}, length_penalty={dec['length_penalty']},",
             "    max_decoding_length=max(steps, 1),  # (CTranslate2 takes no 0)",
             "    min_decoding_length=0, max_input_length=0,",
             f"    suppress_sequences=[{never}])[0]",
             "tokens_out = result.hypotheses[0][:steps]",
             f"print({detokenize})"]
    return code


def _readme(meta: dict[str, Any]) -> str:
    dec = meta["decode"]
    plain = "\n".join("    " + line for line in _plain_ct2_snippet(meta))
    files = ", ".join(meta["files"]) or "(none: the tokenizer needs no model file)"
    return f"""CTranslate2 export of an nmtkit checkpoint
==========================================

Made by `nmtkit export --format ctranslate2` (nmtkit {meta["nmtkit_version"]}, ctranslate2
{meta["ctranslate2_version"]}) from {meta["checkpoint"]}
Transformer, {meta["layers"][0]}+{meta["layers"][1]} layers, d_model {meta["d_model"]}, \
{meta["heads"]} heads, {meta["norm"]}-norm; weights: {meta["quantization"]}.

Files
- model.bin, config.json, *_vocabulary.json: the CTranslate2 model. Token ids are nmtkit's
  (<pad> <unk> <s> </s> = 0 1 2 3). CTranslate2 appends </s> to the source itself
  (add_source_eos) and starts the output from <s>, as nmtkit does.
- tokenizer model files: {files}.
- nmtkit.json: tokenizers, reverse_source, max_positions and the checkpoint's decoding
  settings (beam {dec["beam"]}, length_penalty {dec["length_penalty"]}, output length cap \
{dec["max_len_a"]} * source length + {dec["max_len_b"]}).

With nmtkit installed (pip install 'nmtkit[export]'), text in, text out, as `nmtkit translate`:

    from nmtkit.export.ctranslate2_engine import CTranslate2Translator
    tr = CTranslate2Translator("THIS_DIR", device="cpu", intra_threads=2)
    print(tr.translate_lines(["first sentence", "second sentence"]))

With ctranslate2 alone (THIS_DIR is this directory), for one input `line`:

{plain}

Sources longer than {meta["max_positions"] - 1} tokens do not fit the position table: cut them
(CTranslate2Translator does, as nmtkit does).

How close to `nmtkit translate`
- Greedy search (beam 1) gives nmtkit's output and scores, except that at the length cap
  nmtkit appends </s> (and counts its log-probability) where CTranslate2 just stops.
- Beam search divides log P by length ** length_penalty (length counting </s>); nmtkit by
  the GNMT ((5 + length) / 6) ** length_penalty. With length_penalty 0 both rank alike, and
  the output is nmtkit's but where CTranslate2 keeps a finished hypothesis that nmtkit's
  beam slots lost (then CTranslate2's is the more probable one).
- suppress_sequences renormalises the softmax over the other tokens, so scores are a little
  higher than nmtkit's; CTranslate2Translator suppresses <pad>/<s> only for sentences
  whose output would contain them.
"""


def _make_readable(root: Path) -> None:
    """Temporary files and directories are private (0600/0700); give the export the modes
    that the umask gives ordinary new files and directories."""
    umask = os.umask(0)
    os.umask(umask)
    root.chmod(0o777 & ~umask)
    for path in root.iterdir():
        if path.is_file():
            path.chmod(0o666 & ~umask)


_EXPORT_NAMES = re.compile(
    r"model\.bin|config\.json"  # CTranslate2's own (the converter's ModelSpec.save)
    r"|(shared|source|target)_vocabulary(_[0-9]+)?\.(json|txt)"  # .txt: ctranslate2 < 3
    r"|nmtkit\.json|README\.txt|sentencepiece\.model|(src|tgt)\.spm\.model")  # nmtkit's
"""Names of the files an export directory holds (:func:`export_ctranslate2` writes no others)."""

_KINDS = ((stat.S_ISREG, "a file"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISFIFO, "a fifo"), (stat.S_ISSOCK, "a socket"))


def _not_an_export(out: Path) -> str | None:
    """Why ``out`` may not be replaced by a new export (a phrase starting with "is"); None
    where nothing is there, an empty directory, or an earlier export: a real directory whose
    entries are all regular files named as :data:`_EXPORT_NAMES`."""
    try:
        st = os.lstat(out)
    except (FileNotFoundError, NotADirectoryError):  # (a parent that is a file: atomic_dir says)
        return None
    if stat.S_ISLNK(st.st_mode):
        target = os.readlink(out)
        what = "a directory" if out.is_dir() else "a file" if out.exists() else "nothing"
        return f"is a symbolic link (to {what}: {target}), not an export directory"
    if not stat.S_ISDIR(st.st_mode):
        kind = next((k for test, k in _KINDS if test(st.st_mode)), "not a directory")
        return f"is {kind}, not an export directory"
    try:
        with os.scandir(out) as it:
            entries = sorted(it, key=lambda e: e.name)
    except OSError as e:
        return f"is a directory that cannot be listed ({e.strerror}) to check that it is an export"
    foreign = [e.name + ("/" if e.is_dir(follow_symlinks=False) else "") for e in entries
               if not (_EXPORT_NAMES.fullmatch(e.name) and e.is_file(follow_symlinks=False))]
    if not foreign:
        return None
    shown = ", ".join(foreign[:4]) + (f" and {len(foreign) - 4} more" if len(foreign) > 4 else "")
    return f"is not an earlier export (it holds {shown})"


def _check_replaceable(out: Path, force: bool) -> bool:
    """Raise :class:`ExportError` unless a new export may go to ``out``; True where an
    earlier export is there to be replaced (with ``force``)."""
    why = _not_an_export(out)
    if why is not None:
        if force:
            raise ExportError(f"{out}: {why}; refusing to replace it with --force: remove it "
                              "yourself or choose another --out")
        raise ExportError(f"{out}: already exists and {why}; remove it yourself or choose "
                          "another --out")
    occupied = out.is_dir() and any(out.iterdir())
    if occupied and not force:
        raise ExportError(f"{out}: already exists; pass --force (force=True) to replace it")
    return occupied


def export_ctranslate2(checkpoint: str | Path, out_dir: str | Path, quantization: str = "float32",
                       force: bool = False) -> Path:
    """Write a CTranslate2 model directory for ``checkpoint`` at ``out_dir``.

    Everything is written into a temporary directory beside ``out_dir`` and renamed into
    place at the end, so ``out_dir`` is never half-written. An existing non-empty
    ``out_dir`` is replaced only with ``force``, and only if it is an earlier export: a
    directory (not a link to one) holding nothing but the files an export writes (CTranslate2's
    ``model.bin``, ``config.json``, ``*_vocabulary.json``/``.txt``; nmtkit's ``nmtkit.json``,
    ``README.txt``, SentencePiece models). Anything else (other entries, a file, a link, a
    device) raises :class:`ExportError` naming it, before any work and again just before the
    rename.
    """
    checkpoint, out = Path(checkpoint), Path(out_dir)
    if quantization not in QUANTIZATIONS:
        raise ExportError(f"unknown quantization {quantization!r} (known: {', '.join(QUANTIZATIONS)})")
    replace_old = _check_replaceable(out, force)  # before any work
    try:  # atomic_dir swaps out a non-empty out_dir only with replace_old, else refuses
        # (a full disk in CTranslate2's own write of model.bin is named as out_dir)
        with errors_naming(out), atomic_dir(out, replace=replace_old) as tmp:
            bundle = load_exportable_bundle(checkpoint)
            toks, files = _tokenizer_files(bundle)
            cfg = bundle.cfg
            meta = {
                "format": META_FORMAT, "version": META_VERSION, "nmtkit_version": __version__,
                "ctranslate2_version": ctranslate2.__version__, "checkpoint": str(checkpoint),
                "quantization": quantization, "arch": cfg.model.arch, "norm": cfg.model.norm,
                "layers": [enc_layers(cfg.model), dec_layers(cfg.model)],
                "d_model": cfg.model.d_model, "heads": cfg.model.heads, "tokenizers": toks,
                "files": sorted(files), "reverse_source": cfg.data.reverse_source,
                "max_positions": cfg.model.max_positions, "decode": asdict(cfg.decode),
                # for `nmtkit serve --engine ctranslate2` (name, languages, /health)
                "config": cfg.to_dict(),
                "parameters": sum(p.numel() for p in bundle.model.parameters()),
                # the source attention return_attention gives (alignments, coverage)
                "attention": dict(zip(("layer", "head"), exported_attention(cfg), strict=True)),
            }
            NmtkitConverter(bundle).convert(str(tmp), quantization=quantization, force=True)
            for name, data in files.items():
                atomic_write_bytes(tmp / name, data)
            atomic_write_text(tmp / META_FILE, json.dumps(meta, indent=2, ensure_ascii=False) + "\n")
            atomic_write_text(tmp / "README.txt", _readme(meta))
            _make_readable(tmp)
            if replace_old:  # still an export? (something may have been put there meanwhile)
                _check_replaceable(out, force)
    except FileExistsError as e:  # out_dir filled up while exporting (the rename refused)
        if e.filename != str(out):
            raise
        if force:
            raise ExportError(f"{out}: something was put there while exporting; nothing "
                              "replaced (check what it is, then export again)") from None
        raise ExportError(f"{out}: already exists; pass --force (force=True) to replace it") from None
    log.info("exported %s to %s (CTranslate2, %s)", checkpoint, out, quantization)
    return out


# --- translating with the export ----------------------------------------------------------------
