"""A release checkpoint loaded without PyTorch: config, tokenizers, vocabularies and a
:class:`~nmtkit.lite.transformer.NumpyTransformer` of its weights.

A release checkpoint is a safetensors file (:mod:`nmtkit.checkpoint_format`), read here
with the safetensors library's numpy loader. Its checks are PyTorch's reader's own, from the
same module and in the same order: the header (marker, version, entries), the weights'
names, shapes and dtypes against the stored config before any weight is read, then finite
values and the stored checksum. A file that fails one is refused here, as a
:class:`~nmtkit.checkpoint_format.CheckpointError` with the message
:func:`nmtkit.checkpoint.load_checkpoint` gives, without importing PyTorch. What this path
does not run (a ``torch.save`` archive: ``last.pt`` or a release file from before
safetensors; a model other than the Transformer with sinusoidal or learned positions;
weights that are not float32) is a :class:`LiteUnsupported`, and the caller loads the file
with PyTorch. So this path either gives the model PyTorch would build, or PyTorch's refusal,
or none.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from safetensors import SafetensorError, safe_open

from ..checkpoint_format import (
    CHECKSUM_MISMATCH,
    FORMAT,
    NOT_FINITE,
    SAFETENSORS,
    VERSION,
    CheckpointError,
    WeightBytes,
    check_weight_table,
    checkpoint_kind,
    described,
    release_header,
    stored_config,
    stored_vocab_sizes,
    unreadable,
)
from ..checkpoint_format import weights_digest as digest_of
from ..config import Config
from ..data.tokenizers import Tokenizer, tokenizer_from_state
from ..data.vocab import Vocab
from .transformer import NumpyTransformer, UnsupportedModel, check_supported, expected_shapes

__all__ = ["FORMAT", "VERSION", "LiteBundle", "LiteUnsupported", "load_lite_bundle", "weights_digest"]

TORCH_DTYPE_NAMES = {np.dtype(np.float32): "torch.float32", np.dtype(np.float64): "torch.float64",
                     np.dtype(np.float16): "torch.float16"}
"""How PyTorch prints each float dtype (``str(tensor.dtype)``), as checksums of weights spell it."""


class LiteUnsupported(Exception):
    """A checkpoint this path does not load (the message says why): load it with PyTorch."""


def weights_digest(state: dict[str, np.ndarray]) -> str:
    """:func:`nmtkit.checkpoint_format.weights_digest` of these arrays (dtypes named as
    PyTorch prints them): :func:`nmtkit.checkpoint.weights_digest` of the same tensors."""
    return digest_of(WeightBytes(name, TORCH_DTYPE_NAMES[a.dtype], tuple(a.shape),
                                 np.ascontiguousarray(a).reshape(-1).view(np.uint8).data)
                     for name, a in sorted(state.items()))


@dataclass
class LiteBundle:
    """What :class:`nmtkit.checkpoint.Bundle` holds, the model in numpy."""

    cfg: Config
    model: NumpyTransformer
    src_tok: Tokenizer
    tgt_tok: Tokenizer
    src_vocab: Vocab
    tgt_vocab: Vocab
    path: Path


def _read(path: Path) -> tuple[Config, dict[str, Any], dict[str, np.ndarray]]:
    """The file's config, entries and weights (tied names included), checked as PyTorch's
    reader checks them up to the weights' values."""
    where = str(path)
    if checkpoint_kind(path) != SAFETENSORS:
        raise LiteUnsupported("a torch.save archive (last.pt, or a release checkpoint written "
                              "before safetensors): PyTorch reads it")
    try:
        with safe_open(where, framework="np") as f:
            header = release_header(where, f)
            cfg = stored_config(where, header.entries)
            src_vocab, tgt_vocab = stored_vocab_sizes(where, header.entries)
            try:
                check_supported(cfg.model)
            except UnsupportedModel as e:
                raise LiteUnsupported(str(e)) from None
            check_weight_table(where, described(cfg, src_vocab, tgt_vocab), header.weights,
                               expected_shapes(cfg.model, src_vocab, tgt_vocab))
            if any(dtype != "F32" for dtype, _ in header.weights.values()):
                raise LiteUnsupported("weights that are not float32")
            state = {name: f.get_tensor(name) for name in header.weights if name not in header.tied}
    except SafetensorError as e:
        raise unreadable(where, e) from None
    state.update({alias: state[name] for alias, name in header.tied.items()})
    return cfg, header.entries, state


def _check_values(where: str, state: dict[str, np.ndarray], verify: bool, digest: Any) -> None:
    """Finite weights (in name order, as PyTorch's reader checks them) and, unless ``verify``
    is off, the ones whose checksum was stored."""
    for name, a in sorted(state.items()):
        if not bool(np.isfinite(a).all()):
            raise CheckpointError(f"{where}: weight {name} {NOT_FINITE}")
    if verify and digest is not None and weights_digest(state) != digest:
        raise CheckpointError(f"{where}: {CHECKSUM_MISMATCH}")


def load_lite_bundle(path: str | Path, verify: bool = True) -> LiteBundle:
    """The release checkpoint at ``path`` with its model in numpy. A
    :class:`~nmtkit.checkpoint_format.CheckpointError` for a file PyTorch's reader refuses
    too (the same message), :class:`LiteUnsupported` for a file this path does not run."""
    path = Path(path)
    cfg, entries, state = _read(path)
    _check_values(str(path), state, verify, entries.get("weights_sha256"))
    try:
        tokenizers, vocab = entries["tokenizers"], entries["vocab"]
        src_tok = tokenizer_from_state(tokenizers["src"])
        tgt_tok = tokenizer_from_state(tokenizers["tgt"])
        src_vocab = Vocab.from_dict(vocab["src"])
        tgt_vocab = Vocab.from_dict(vocab["tgt"])
    except (KeyError, TypeError, ValueError) as e:
        raise CheckpointError(f"{path}: stored tokenizer or vocabulary is unreadable: {e}") from None
    try:
        model = NumpyTransformer(cfg.model, state, len(src_vocab), len(tgt_vocab))
    except UnsupportedModel as e:
        raise LiteUnsupported(str(e)) from None
    return LiteBundle(cfg, model, src_tok, tgt_tok, src_vocab, tgt_vocab, path)
