"""A checkpoint loaded without PyTorch: config, tokenizers, vocabularies and a
:class:`~nmtkit.lite.transformer.NumpyTransformer` of its weights.

The checks of :func:`nmtkit.checkpoint.load_checkpoint` that decide whether a file may be
used (format marker, version, entries, finite float32 weights of exactly the config's
shapes, their stored checksum; the marker, version and checksum are
:mod:`nmtkit.checkpoint_format`'s, the PyTorch reader's own) are made here too, but a
file that fails one is not explained here: :class:`LiteUnsupported` sends the caller to
PyTorch, whose loader names the file and the problem. So this path either gives the model
PyTorch would build, or none.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..checkpoint_format import FORMAT, VERSION, WeightBytes
from ..checkpoint_format import weights_digest as digest_of
from ..config import Config, ConfigError
from ..data.tokenizers import Tokenizer, tokenizer_from_state
from ..data.vocab import Vocab
from .torch_file import TORCH_DTYPE_NAMES, UnsupportedFile, read_torch_file
from .transformer import NumpyTransformer, UnsupportedModel


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


def _weights(ckpt: dict[str, Any], verify: bool) -> dict[str, np.ndarray]:
    state = ckpt["model"]
    if not isinstance(state, dict) or not state or not all(
            isinstance(k, str) and isinstance(v, np.ndarray) for k, v in state.items()):
        raise LiteUnsupported("its 'model' entry is not a state dict of tensors")
    if any(v.dtype != np.float32 for v in state.values()):
        raise LiteUnsupported("weights that are not float32")
    if not all(bool(np.isfinite(v).all()) for v in state.values()):
        raise LiteUnsupported("weights that are not finite")
    digest = ckpt.get("weights_sha256")
    if verify and digest is not None and weights_digest(state) != digest:
        raise LiteUnsupported("weights that do not match their checksum")
    return state


def load_lite_bundle(path: str | Path, verify: bool = True) -> LiteBundle:
    """The checkpoint at ``path`` with its model in numpy; :class:`LiteUnsupported` for
    anything this path does not load (any problem with the file included)."""
    path = Path(path)
    if not path.is_file():
        raise LiteUnsupported("not a file")
    try:
        ckpt = read_torch_file(path)
    except UnsupportedFile as e:
        raise LiteUnsupported(str(e)) from None
    if not isinstance(ckpt, dict) or ckpt.get("format") != FORMAT:
        raise LiteUnsupported("no nmtkit checkpoint marker")
    if not isinstance(ckpt.get("version", 0), int) or ckpt.get("version", 0) > VERSION:
        raise LiteUnsupported("a newer checkpoint version")
    if any(key not in ckpt for key in ("config", "tokenizers", "vocab", "model")):
        raise LiteUnsupported("an entry is missing")
    state = _weights(ckpt, verify)
    try:
        cfg = Config.from_dict(ckpt["config"], str(path))
        src_tok = tokenizer_from_state(ckpt["tokenizers"]["src"])
        tgt_tok = tokenizer_from_state(ckpt["tokenizers"]["tgt"])
        src_vocab, tgt_vocab = Vocab.from_dict(ckpt["vocab"]["src"]), Vocab.from_dict(ckpt["vocab"]["tgt"])
        model = NumpyTransformer(cfg.model, state, len(src_vocab), len(tgt_vocab))
    except (ConfigError, UnsupportedModel, KeyError, TypeError, ValueError) as e:
        raise LiteUnsupported(f"{type(e).__name__}: {e}") from None
    return LiteBundle(cfg, model, src_tok, tgt_tok, src_vocab, tgt_vocab, path)
