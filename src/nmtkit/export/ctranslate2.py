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

import copy
import inspect
import json
import logging
import os
import re
import stat
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, cast

import ctranslate2
import torch
from ctranslate2.converters.converter import Converter
from ctranslate2.specs import common_spec, transformer_spec
from ctranslate2.specs.model_spec import ACCEPTED_MODEL_TYPES

from .. import __version__
from ..checkpoint import Bundle, bundle_from_checkpoint, load_checkpoint
from ..config import Config, ConfigError, DataConfig, DecodeConfig, ModelConfig, dec_layers, enc_layers
from ..data.multilingual import target_tags
from ..data.sentences import text_languages
from ..data.tokenizers import Tokenizer, tokenizer_from_state
from ..data.vocab import BOS_TOKEN, EOS_TOKEN, PAD_TOKEN, UNK, UNK_TOKEN, Vocab
from ..decode.attention import reading_order
from ..decode.choice import candidate_options, choose_all
from ..decode.options import TranslateOptions
from ..decode.rerank import require_reverse
from ..decode.translation import Translation
from ..decode.translator import (
    TargetTextError,
    TextTranslator,
    alignment_from_attention,
    decode_options,
    text_lines,
)
from ..io import atomic_dir, atomic_write_bytes, atomic_write_text, errors_naming
from ..models.positions import ROPE_BASE, LearnedPositionalEmbedding
from ..models.transformer import PositionalEncoding
from . import ExportError

if TYPE_CHECKING:
    from ..models.attention import MultiHeadAttention
    from ..models.transformer import DecoderLayer, EncoderLayer, PositionwiseFeedForward, Transformer

log = logging.getLogger(__name__)

META_FILE = "nmtkit.json"
META_FORMAT = "nmtkit-ctranslate2"
META_VERSION = 1
_NEVER = (PAD_TOKEN, BOS_TOKEN)  # tokens nmtkit's search never produces
_NEVER_SET = frozenset(_NEVER)
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
    steps = f"int({dec['max_len_a']} * (len(tokens) + 1) + {dec['max_len_b']}) - 1"
    code += ["result = translator.translate_batch(",
             f"    [tokens], beam_size={dec['beam']}, length_penalty={dec['length_penalty']},",
             f"    max_decoding_length={steps},",
             "    min_decoding_length=0, max_input_length=0,",
             '    suppress_sequences=[["<pad>"], ["<s>"]])[0]',
             "tokens_out = result.hypotheses[0]",
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

    from nmtkit.export.ctranslate2 import CTranslate2Translator
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


def read_meta(model_dir: str | Path) -> dict[str, Any]:
    path = Path(model_dir) / META_FILE
    try:
        meta = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ExportError(f"{path}: not found; is {model_dir} an `nmtkit export` directory?") from None
    except json.JSONDecodeError as e:
        raise ExportError(f"{path}: invalid JSON at line {e.lineno}: {e.msg}") from None
    if not isinstance(meta, dict) or meta.get("format") != META_FORMAT:
        raise ExportError(f"{path}: not an nmtkit CTranslate2 export (no '{META_FORMAT}' marker)")
    if meta.get("version", 0) > META_VERSION:
        raise ExportError(f"{path}: export version {meta['version']} is newer than this nmtkit "
                          f"understands ({META_VERSION})")
    return meta


def _load_tokenizer(desc: dict[str, Any], model_dir: Path) -> Tokenizer:
    state = dict(desc)
    name = state.pop("model_file", None)
    if name is not None:
        state["model_proto"] = (model_dir / name).read_bytes()
    return tokenizer_from_state(state)


def length_cap(src_len: int, decode: DecodeConfig, max_length: int | None = None) -> int:
    """nmtkit's cap on output tokens (EOS included) for a source of ``src_len`` ids (EOS
    included): ``floor(max_len_a * src_len + max_len_b)``, at least 1, at most
    ``max_length + 1`` (:func:`nmtkit.decode.beams.length_caps`, computed in float32 as there)."""
    import numpy as np

    cap = int(np.floor(np.float32(decode.max_len_a) * np.float32(src_len)
                       + np.float32(decode.max_len_b)))
    cap = max(cap, 1)
    return cap if max_length is None else min(cap, max_length + 1)


NO_CONSTRAINTS = ("constraints: CTranslate2 has no lexically constrained search (it can force a "
                  "translation's beginning, not make it contain a phrase anywhere); nmtkit's own "
                  "search does it: a checkpoint (.pt), `nmtkit serve --engine torch`")
"""Why the ctranslate2 engine refuses constraints (the server answers 501 with it)."""


def export_attention(meta: dict[str, Any]) -> tuple[int, int]:
    """(decoder layer, head) of the source attention an export returns, as nmtkit names them
    (-1: the last layer, the heads' mean): ``nmtkit.json``'s ``attention``
    (:func:`exported_attention`); an export made before it was recorded returns CTranslate2's
    default, the first head of the last layer."""
    att = meta.get("attention")
    if isinstance(att, dict):
        return int(att["layer"]), int(att["head"])
    return -1, 0


def _target_vocabulary(model_dir: Path, side: str = "target") -> list[str]:
    """The target (or ``side``'s) tokens in id order (nmtkit's ids:
    :func:`transformer_spec_from_bundle`)."""
    for name in (f"{side}_vocabulary", "shared_vocabulary"):
        if (model_dir / f"{name}.json").is_file():
            tokens = json.loads((model_dir / f"{name}.json").read_text(encoding="utf-8"))
            return [str(t) for t in tokens]
        if (model_dir / f"{name}.txt").is_file():  # ctranslate2 < 3
            return (model_dir / f"{name}.txt").read_text(encoding="utf-8").splitlines()
    raise ExportError(f"{model_dir}: no {side} vocabulary ({side}_vocabulary.json or "
                      "shared_vocabulary.json)")


def _with_eos_column(rows: list[list[float]]) -> torch.Tensor:
    """CTranslate2's source attention rows (source tokens only: it leaves out the ``</s>`` it
    appended) with the ``</s>`` column put back: each row is a softmax over the tokens and
    ``</s>``, so ``</s>`` has what the tokens leave. (rows, S) -> (rows, S + 1)."""
    att = torch.tensor(rows, dtype=torch.float32).reshape(len(rows), -1)  # (rows, S)
    eos = (1.0 - att.sum(dim=1, keepdim=True)).clamp_min(0.0)  # (rows, 1)
    return torch.cat([att, eos], dim=1)


class CTranslate2Translator(TextTranslator):
    """Text in, text out with an exported model, as :class:`nmtkit.decode.translator.Translator`.

    The text side is nmtkit's own (:class:`~nmtkit.decode.translator.TextTranslator`: the
    checkpoint's tokenizer, truncation to the position table, ``reverse_source``, options,
    empty lines, length order, detokenizing). It gives CTranslate2 the same length cap per
    sentence (CTranslate2's ``max_decoding_length`` is per call: see :meth:`translate`) and
    never returns ``<pad>``/``<s>`` (nmtkit's search cannot produce them).

    It gives what nmtkit's search gives but constraints (:meth:`unsupported`): n-best lists
    (``num_hypotheses``), forced prefixes (``target_prefix``), token scores (``score_batch``:
    teacher forcing) and the source attention with alignments and the confidence view's
    coverage (``return_attention``; of the layer and heads chosen at export,
    :func:`exported_attention`). Where it can, the result is nmtkit's own, scores included.
    It differs:

    - ``length_penalty``: passed through, but CTranslate2 divides the log-probability by
      ``n ** length_penalty`` where nmtkit divides by the GNMT ``((5 + n) / 6) ** length_penalty``
      (``n``: tokens and ``</s>``; the same ranking for 0);
    - at the length cap nmtkit forces ``</s>`` (and pays its log-probability), CTranslate2
      stops without it;
    - beam search: CTranslate2 keeps every finished hypothesis, nmtkit keeps finished ones in
      its ``beam`` slots where better-scoring live ones can push them out, so CTranslate2 now
      and then returns a more probable translation than nmtkit;
    - a sentence whose unconstrained search output contains ``<pad>``/``<s>`` is searched
      again with both suppressed, and then its scores are normalised over the other tokens.
    """

    def __init__(self, model_dir: str | Path, device: str = "cpu", compute_type: str = "default",
                 intra_threads: int = 0, inter_threads: int = 1, **translator_kwargs: Any) -> None:
        self.model_dir = Path(model_dir)
        meta = read_meta(self.model_dir)
        self.meta = meta
        layer, head = export_attention(meta)  # the only attention the export gives
        super().__init__(_load_tokenizer(meta["tokenizers"]["src"], self.model_dir),
                         _load_tokenizer(meta["tokenizers"]["tgt"], self.model_dir),
                         DecodeConfig(**{**meta["decode"], "alignment_layer": layer,
                                         "alignment_head": head}),
                         bool(meta["reverse_source"]), meta.get("max_positions"),
                         # languages known only from an export that stores its config
                         target_tags=(target_tags(export_config(meta, self.model_dir).data)
                                      if isinstance(meta.get("config"), dict) else None),
                         languages=(text_languages(export_config(meta, self.model_dir).data)
                                    if isinstance(meta.get("config"), dict) else (None, None)))
        self.tgt_vocab = Vocab(_target_vocabulary(self.model_dir))
        self.src_vocab = Vocab(_target_vocabulary(self.model_dir, "source"))  # protected spans
        self.device = device
        self.translator = ctranslate2.Translator(str(self.model_dir), device=device,
                                                 compute_type=compute_type,
                                                 intra_threads=intra_threads,
                                                 inter_threads=inter_threads, **translator_kwargs)

    def encode_source(self, line: str, tgt_lang: str | None = None) -> tuple[list[str], list[str]]:
        """(source tokens in reading order, the tokens CTranslate2 gets; it appends </s>);
        a multilingual model's start with the token of ``tgt_lang``."""
        return self.source_tokens(line, self.target_tag(tgt_lang))

    def unsupported(self, options: TranslateOptions) -> str | None:
        """Why this engine cannot do what ``options`` ask (``None``: it can): constraints
        (:data:`NO_CONSTRAINTS`), or the source attention of another layer or head than the
        one chosen at export (CTranslate2 returns that one only). The server answers 501 with
        it."""
        if options.constraints is not None:
            return NO_CONSTRAINTS
        if not (options.alignments or options.need_attention):
            return None
        have = self.decode_cfg.alignment_layer, self.decode_cfg.alignment_head
        asked = (have[0] if options.alignment_layer is None else options.alignment_layer,
                 have[1] if options.alignment_head is None else options.alignment_head)
        layers, heads = int(self.meta["layers"][1]), int(self.meta["heads"])

        def same(x: tuple[int, int]) -> tuple[int, int]:  # -1 names the last layer, 1 head's mean
            return (layers - 1 if x[0] == -1 else x[0], 0 if heads == 1 and x[1] == -1 else x[1])

        if same(asked) == same(have):
            return None
        layer = "the last decoder layer" if have[0] == -1 else f"decoder layer {have[0]}"
        what = "the heads' mean" if have[1] == -1 else f"head {have[1]}"
        return (f"alignment layer {asked[0]}, head {asked[1]}: this export returns the source "
                f"attention of {layer} ({what}) only, chosen when it was exported "
                "(decode.alignment_layer/alignment_head); export again with those set, or use "
                "nmtkit's own search (--engine torch)")

    def target_ids(self, prefixes: Sequence[str] | None,
                   constraints: Sequence[Sequence[str]] | None, n_lines: int,
                   max_length: int | None = None) -> tuple[list[list[int]] | None, None]:
        """(each line's forced prefix as target ids, ``None``), checked as
        :meth:`Translator.target_ids <nmtkit.decode.translator.Translator.target_ids>` checks
        them: one per line, text, a :class:`~nmtkit.decode.translator.TargetTextError` naming
        the line for a token the target vocabulary lacks (CTranslate2 would force ``<unk>``);
        constraints: a ``ValueError`` (:data:`NO_CONSTRAINTS`)."""
        if constraints is not None:
            raise ValueError(NO_CONSTRAINTS)
        if prefixes is None:
            return None, None
        texts = list(text_lines(prefixes, "prefixes"))
        if len(texts) != n_lines:
            raise ValueError(f"{len(texts)} prefixes for {n_lines} lines: give one per line "
                             "(an empty one for none)")
        forced = []
        for i, text in enumerate(texts):
            toks = self.forced_tokens(i, text, max_length)
            ids = [UNK if t in (PAD_TOKEN, BOS_TOKEN, EOS_TOKEN) else self.tgt_vocab.stoi.get(t, UNK)
                   for t in toks]  # a literal control token is a word the model does not know
            unknown = list(dict.fromkeys(t for t, j in zip(toks, ids, strict=True) if j == UNK))
            if unknown:
                raise TargetTextError("prefixes", i, f"prefix {text.strip()!r}: the model's target "
                                      f"vocabulary has no {', '.join(map(repr, unknown))} (it would "
                                      "come out as <unk>); use words the model knows")
            forced.append(ids)
        return forced, None

    def translate(self, lines: Iterable[str], options: TranslateOptions | None = None, *,
                  exact_caps: bool = True) -> list[list[Translation]]:
        """One list of ``n_best`` :class:`Translation` per input line, in input order, with
        the exported decoding options, ``options`` replacing some and asking for more, as
        :meth:`Translator.translate`: forced prefixes (CTranslate2's ``target_prefix``), token
        scores, the source attention and alignments (:meth:`_extras`). What CTranslate2 cannot
        do is a ``ValueError`` (:meth:`unsupported`).

        Every sentence is searched in one CTranslate2 call (which batches them by length),
        capped at the largest length cap among them, since CTranslate2's
        ``max_decoding_length`` is per call. ``exact_caps`` then gives each sentence nmtkit's
        own cap: greedy search chooses each token without looking at the cap, so an output
        that went past its cap is cut there (and its score recomputed as CTranslate2 gives it
        at the cap); a beam search that reached its sentence's cap is run again at that cap
        (one call per distinct cap, for those sentences only; a beam search that ended before
        its cap keeps its result, unless a hypothesis cut at the cap would have outscored it,
        which CTranslate2 would rank too). False: the shared cap only. A forced prefix raises
        its sentence's cap to fit it, as nmtkit's search does.

        ``score`` is CTranslate2's: the log-probability (``</s>`` included) divided by
        ``(len(tokens) + 1) ** length_penalty`` (a hypothesis cut at the length cap has no
        ``</s>``: ``len(tokens) ** length_penalty``); for greedy search the log-probability,
        as nmtkit's. With a forced prefix it counts the prefix's tokens too, as nmtkit's
        (CTranslate2's own leaves them out). ``mbr``: minimum Bayes risk decoding over that
        many candidates, as :meth:`Translator.translate` (each candidate's log-probability
        recovered from its score, :meth:`_log_prob`). ``decode.rerank``: the candidates
        reranked with :attr:`reverse` (nmtkit models of the reverse direction), as
        :meth:`Translator.translate`.
        """
        o = TranslateOptions() if options is None else options
        refused = self.unsupported(o)
        if refused:
            raise ValueError(f"the ctranslate2 engine cannot do this: {refused}")
        asked, max_length = self.call_options(o)
        if asked.split_sentences or asked.protect_spans:  # lines -> sentences -> here again
            return self.by_sentence(lines, o, asked, lambda sentences, inner: self.translate(
                sentences, inner, exact_caps=exact_caps))
        cfg = candidate_options(asked)  # MBR's or reranking's candidates, else the same
        self.target_tag(o.tgt_lang)  # a missing or unknown language: an error before any work
        require_reverse(asked, self.reverse)
        texts = list(text_lines(lines))
        encoded = [self.encode_source(line, o.tgt_lang) for line in texts]
        forced, _ = self.target_ids(o.prefixes, None, len(texts), max_length)
        prefix = [[self.tgt_vocab.itos[j] for j in ids] for ids in forced] if forced else None
        # tokens before EOS that each sentence may produce (one length_cap per source length),
        # raised to fit its forced prefix
        caps: dict[int, int] = {}
        for toks, _ in encoded:
            if len(toks) not in caps:
                caps[len(toks)] = length_cap(len(toks) + 1, cfg, max_length) - 1
        steps = [max(caps[len(toks)], len(prefix[i]) if prefix else 0)
                 for i, (toks, _) in enumerate(encoded)]
        ct2_options = dict(max_batch_size=cfg.batch_size, beam_size=cfg.beam,
                           num_hypotheses=cfg.n_best,
                           length_penalty=cfg.length_penalty if cfg.beam > 1 else 0.0,
                           min_decoding_length=0, max_input_length=0, return_scores=True)

        def search(idx: list[int], n_steps: int) -> list[list[tuple[list[str], float]]]:
            """CTranslate2's n-best (tokens, score) of the sentences ``idx``, ``n_steps`` tokens
            at most. Suppressing tokens renormalises CTranslate2's softmax over the others,
            which nmtkit does not do (it computes log-probabilities over all tokens, then
            excludes <pad>/<s>): search unconstrained first, then again only where that
            produced them. ``o.deadline`` is checked before each call: CTranslate2's search
            cannot be stopped once started (``nmtkit serve`` bounds a request's work up
            front, :mod:`nmtkit.serve.limits`)."""
            if o.deadline is not None:
                o.deadline.check()
            sources = [encoded[i][1] for i in idx]
            starts = [prefix[i] or None for i in idx] if prefix else None
            out = [list(zip(r.hypotheses, r.scores, strict=True))
                   for r in self.translator.translate_batch(sources, starts,
                                                            max_decoding_length=n_steps,
                                                            **ct2_options)]
            redo = [j for j, hyps in enumerate(out) if any(not _NEVER_SET.isdisjoint(h) for h, _ in hyps)]
            if redo:
                if o.deadline is not None:
                    o.deadline.check()
                again = self.translator.translate_batch(
                    [sources[j] for j in redo], [starts[j] for j in redo] if starts else None,
                    max_decoding_length=n_steps, **ct2_options,
                    suppress_sequences=[[t] for t in _NEVER])
                for j, r in zip(redo, again, strict=True):
                    out[j] = list(zip(r.hypotheses, r.scores, strict=True))
            return out

        def batches(todo: list[int]) -> list[list[int]]:
            none = [i for i in todo if steps[i] == 0]  # only EOS fits: nothing to search
            rest = [i for i in todo if steps[i] > 0]  # (in length order, as given)
            return [b for b in (none, rest) if b]

        def run(idx: list[int]) -> list[list[Translation]]:
            n_steps = max(steps[i] for i in idx)
            if n_steps == 0:
                out: list[list[tuple[list[str], float]]] = [[([], 0.0)] * cfg.n_best for _ in idx]
                return self._extras(idx, out, encoded, steps, prefix, o, cfg)
            out = search(idx, n_steps)
            # sentences whose own cap is below the call's and whose search reached it
            reached = [j for j, i in enumerate(idx) if steps[i] < n_steps
                       and any(len(h) >= steps[i] for h, _ in out[j])] if exact_caps else []
            if reached and cfg.beam == 1:  # greedy: cut at the cap, score without </s>
                cut = [out[j][0][0][:steps[idx[j]]] for j in reached]
                scored = self.translator.score_batch([encoded[idx[j]][1] for j in reached], cut,
                                                     max_input_length=0)
                for j, toks, r in zip(reached, cut, scored, strict=True):
                    out[j] = [(toks, float(sum(r.log_probs[:len(toks)])))]
            elif reached:  # beam: search those again, each at its own cap
                by_cap: dict[int, list[int]] = {}
                for j in reached:
                    by_cap.setdefault(steps[idx[j]], []).append(j)
                for cap, js in by_cap.items():
                    for j, hyps in zip(js, search([idx[j] for j in js], cap), strict=True):
                        out[j] = hyps
            return self._extras(idx, out, encoded, steps, prefix, o, cfg)

        return choose_all(self.in_length_order([toks for toks, _ in encoded], cfg.n_best,
                                               batches, run), texts, asked, self.reverse)

    def _extras(self, idx: list[int], out: list[list[tuple[list[str], float]]],
                encoded: list[tuple[list[str], list[str]]], steps: list[int],
                prefix: list[list[str]] | None, o: TranslateOptions,
                cfg: DecodeConfig) -> list[list[Translation]]:
        """The :class:`Translation` of each sentence's n-best (tokens, score) ``out`` (the
        sentences ``idx``), with what ``o`` asks for besides the text:

        - token log-probabilities (``token_scores``; and always with a forced prefix, whose
          tokens CTranslate2's score leaves out): ``score_batch``, teacher forcing, nmtkit's
          ``token_log_probs`` (the tokens, then ``</s>``); a prefixed sentence's score and
          ``log_prob`` are recomputed from them (and its list reordered by them);
        - the source attention (``need_attention``, ``alignments``): :meth:`_source_attention`;
          alignments from it as nmtkit's (:func:`~nmtkit.decode.translator.alignment_from_attention`).
        """
        flat = [(i, toks) for i, hyps in zip(idx, out, strict=True) for toks, _ in hyps]
        prefixed = {i for i in idx if prefix and prefix[i]}
        log_probs: list[list[float]] = []
        if o.token_scores or prefixed:
            log_probs = [list(r.log_probs) for r in self.translator.score_batch(
                [encoded[i][1] for i, _ in flat], [toks for _, toks in flat],
                max_batch_size=cfg.batch_size, max_input_length=0)]
        attention: list[torch.Tensor] = []
        if o.need_attention or o.alignments:
            attention = self._source_attention([encoded[i][1] for i, _ in flat],
                                               [toks for _, toks in flat], cfg.batch_size)
        results, k = [], 0
        for i, hyps in zip(idx, out, strict=True):
            src_tokens, row = encoded[i][0], []
            for toks, score in hyps:
                cut = len(toks) >= steps[i]  # stopped at the cap: no </s>
                log_prob = self._log_prob(toks, score, steps[i], cfg)
                if i in prefixed:  # CTranslate2's score leaves the forced tokens out
                    log_prob = float(sum(log_probs[k][:len(toks)] if cut else log_probs[k]))
                    n = len(toks) if cut else len(toks) + 1
                    score = (log_prob / n ** cfg.length_penalty if cfg.beam > 1 and n
                             else log_prob)
                att, align = None, None
                if attention:
                    att = attention[k]  # (len(toks) + 1, len(src_tokens) + 1), model order
                    if self.reverse_source:
                        att = reading_order(att, len(src_tokens), dims=[1])
                    if o.alignments:
                        align = alignment_from_attention(att, len(src_tokens), len(toks))
                row.append(self.translation(
                    toks, src_tokens, score, att if o.need_attention else None,
                    token_log_probs=log_probs[k] if o.token_scores else None, alignment=align,
                    log_prob=log_prob))
                k += 1
            if i in prefixed:
                row.sort(key=lambda t: -t.score)  # (stable: ties keep CTranslate2's order)
            results.append(row)
        return results

    def _source_attention(self, sources: list[list[str]], outputs: list[list[str]],
                          batch_size: int) -> list[torch.Tensor]:
        """(len(output) + 1, len(source) + 1) source attention of each output given its source,
        rows the steps that predict its tokens, then ``</s>``; columns the source tokens (in
        the order the model reads them), then ``</s>``: the layer and heads chosen at export
        (:func:`exported_attention`).

        From a second pass, greedy decoding forced through the output (``target_prefix``) and
        one step more (the ``</s>`` row, also for an output stopped at its cap), not from the
        search: in a batch, CTranslate2's beam search returns the first step's attention of
        another sentence (ctranslate2 4.x); forced greedy decoding returns every row as
        nmtkit's teacher forcing computes it."""
        if not sources:
            return []
        results = self.translator.translate_batch(
            sources, [toks or None for toks in outputs], max_batch_size=batch_size,
            beam_size=1, max_decoding_length=max(len(t) for t in outputs) + 1,
            min_decoding_length=0, max_input_length=0, return_attention=True,
            return_end_token=True)
        return [_with_eos_column(r.attention[0][:len(toks) + 1])
                for r, toks in zip(results, outputs, strict=True)]

    @staticmethod
    def _log_prob(tokens: list[str], score: float, cap: int, cfg: DecodeConfig) -> float:
        """The log-probability behind CTranslate2's ``score`` (see :meth:`translate`): the
        score times ``n ** length_penalty``, ``n`` the tokens and ``</s>``, or the tokens
        alone for a hypothesis that reached its sentence's ``cap`` (cut, no ``</s>``)."""
        if cfg.beam == 1 or cfg.length_penalty == 0:
            return score
        n = len(tokens) if len(tokens) >= cap else len(tokens) + 1
        return float(score * n ** cfg.length_penalty)

    def translate_lines(self, lines: list[str], beam: int | None = None,
                        batch_size: int | None = None, exact_caps: bool = True, *,
                        tgt_lang: str | None = None) -> list[str]:
        options = TranslateOptions(beam=beam, batch_size=batch_size, tgt_lang=tgt_lang)
        return [r[0].text for r in self.translate(lines, options, exact_caps=exact_caps)]

    def score(self, sources: list[str], targets: list[str]) -> list[list[float]]:
        """Per-token log-probabilities of each target (its tokens, then </s>) given its source,
        from CTranslate2 (``score_batch``); nmtkit's teacher-forced ``forward`` gives the same."""
        src = [self.encode_source(s)[1] for s in sources]
        tgt = [self.tgt_tok.encode(t.strip()) for t in targets]
        return [list(r.log_probs) for r in self.translator.score_batch(src, tgt, max_input_length=0)]


# --- serving the export ---------------------------------------------------------------------------


def default_compute_type(device: str) -> str:
    """What ``nmtkit serve --engine ctranslate2`` computes in unless told: int8 on CPU,
    float16 on GPU (CTranslate2 converts the stored weights when it loads them)."""
    return "float16" if device.startswith("cuda") else "int8"


def _device_and_index(device: str) -> tuple[str, int]:
    """``cpu`` / ``cuda`` / ``cuda:N`` -> (CTranslate2's device, device_index)."""
    kind, _, index = device.partition(":")
    if kind not in ("cpu", "cuda") or (index and (not index.isdigit() or kind == "cpu")):
        raise ExportError(f"device {device!r}: CTranslate2 runs on 'cpu', 'cuda' or 'cuda:N'")
    return kind, int(index or 0)


def export_config(meta: dict[str, Any], model_dir: Path) -> Config:
    """The checkpoint's config stored in ``nmtkit.json`` (name, languages, architecture; the
    decoding options are ``meta["decode"]``). An export made before configs were stored gives
    what ``nmtkit.json`` says (languages unknown: ``?``)."""
    where = str(model_dir / META_FILE)
    try:
        if isinstance(meta.get("config"), dict):
            cfg = Config.from_dict(meta["config"], where)
        else:
            cfg = Config(name=model_dir.name, data=DataConfig(src_lang="?", tgt_lang="?"),
                         model=ModelConfig(arch=meta.get("arch", "transformer")))
        return replace(cfg, decode=DecodeConfig(**meta["decode"]))
    except (ConfigError, KeyError, TypeError) as e:
        raise ExportError(f"{where}: unreadable config: {e}") from None


@dataclass
class CTranslate2Bundle:
    """An export loaded for serving: the surface of :class:`nmtkit.checkpoint.Bundle` that
    :func:`nmtkit.serve.app.create_app` reads (config, path, translator), with
    :class:`CTranslate2Translator` as the translator. ``model`` is None: CTranslate2 keeps its
    weights to itself and returns no per-layer attention maps."""

    cfg: Config
    path: Path
    engine_translator: CTranslate2Translator
    parameters: int | None = None
    """Parameter count of the exported model (None for an export that did not record it)."""
    model: None = None
    engine: ClassVar[str] = "ctranslate2"

    def translator(self, **decode_overrides: Any) -> CTranslate2Translator:
        """The loaded translator; with ``decode_overrides`` (see
        :func:`nmtkit.decode.translator.decode_options`) a copy that shares its model."""
        if not any(v is not None for v in decode_overrides.values()):
            return self.engine_translator
        tr = copy.copy(self.engine_translator)
        tr.decode_cfg = decode_options(tr.decode_cfg, **decode_overrides)
        return tr


def load_export_bundle(model_dir: str | Path, device: str = "cpu", compute_type: str | None = None,
                       threads: int = 0) -> CTranslate2Bundle:
    """Load an ``nmtkit export --format ctranslate2`` directory to serve it.

    ``compute_type``: CTranslate2's (``int8``, ``float16``, ``float32``, ``default`` = as
    stored, ...); None: :func:`default_compute_type`. ``threads``: intra-op threads (0 =
    CTranslate2's default). Errors name the directory and what is wrong with it.
    """
    path = Path(model_dir)
    if not path.is_dir():
        what = "not found" if not path.exists() else "not a directory"
        raise ExportError(f"{path}: {what}; the ctranslate2 engine serves the directory that "
                          "`nmtkit export --format ctranslate2` writes")
    meta = read_meta(path)
    cfg = export_config(meta, path)
    kind, index = _device_and_index(device)
    compute_type = compute_type or default_compute_type(kind)
    try:
        tr = CTranslate2Translator(path, device=kind, compute_type=compute_type,
                                   intra_threads=threads, device_index=index)
    except (RuntimeError, ValueError) as e:  # a missing/corrupt model.bin, an unsupported type
        raise ExportError(f"{path}: CTranslate2 cannot load it on {device} as {compute_type}: "
                          f"{e}") from None
    resolved = str(getattr(tr.translator, "compute_type", compute_type))  # "default" resolved
    tr.device = f"{device} ({resolved})"  # what /health and the page show
    parameters = meta.get("parameters")
    return CTranslate2Bundle(cfg, path, tr, parameters if isinstance(parameters, int) else None)
