"""Self-contained checkpoints: config, tokenizers, vocabularies, weights, optimizer, schedule,
step, RNG and data position, so that "rebuild, then load weights" needs no other file.

Written atomically (temporary file + rename), loaded with ``torch.load(weights_only=True)``:
a file that carries pickled code is refused, and every failure is a :class:`CheckpointError`
that names the file.
"""

from __future__ import annotations

import logging
import pickle
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from .config import Config, ConfigError
from .data.prepare import vocab_from_state
from .data.tokenizers import Tokenizer
from .data.vocab import Vocab
from .io import atomic_save
from .models import build_model

log = logging.getLogger(__name__)

FORMAT = "nmtkit-checkpoint"
VERSION = 1


class CheckpointError(RuntimeError):
    """A checkpoint that cannot be used; the message names the file and the problem."""


def save_checkpoint(path: str | Path, payload: dict[str, Any]) -> None:
    payload = {"format": FORMAT, "version": VERSION, **payload}
    atomic_save(path, lambda f: torch.save(payload, f))


def load_checkpoint(path: str | Path, map_location: str | torch.device = "cpu") -> dict[str, Any]:
    """Read a checkpoint safely (no pickled code) and check its format."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"{path}: checkpoint not found")
    try:
        ckpt = torch.load(path, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as e:
        raise CheckpointError(f"{path}: refused: the file is not a plain nmtkit checkpoint "
                              f"(it carries objects that would run code when loaded): {e}") from None
    except (RuntimeError, EOFError, zipfile.BadZipFile, OSError, ValueError) as e:
        raise CheckpointError(f"{path}: truncated or corrupted checkpoint: {e}") from None
    if not isinstance(ckpt, dict) or ckpt.get("format") != FORMAT:
        raise CheckpointError(f"{path}: not an nmtkit checkpoint (no '{FORMAT}' marker)")
    if ckpt.get("version", 0) > VERSION:
        raise CheckpointError(f"{path}: checkpoint version {ckpt['version']} is newer than this "
                              f"nmtkit understands ({VERSION})")
    for key in ("config", "tokenizers", "vocab", "model"):
        if key not in ckpt:
            raise CheckpointError(f"{path}: checkpoint lacks '{key}'")
    return ckpt


@dataclass
class Bundle:
    """Everything needed to translate: config, model, tokenizers and vocabularies."""

    cfg: Config
    model: torch.nn.Module
    src_tok: Tokenizer
    tgt_tok: Tokenizer
    src_vocab: Vocab
    tgt_vocab: Vocab
    path: Path | None = None

    def translator(self, **decode_overrides):
        from dataclasses import replace

        from .decode.translator import Translator

        dec = replace(self.cfg.decode, **decode_overrides)
        return Translator(self.model, self.src_tok, self.tgt_tok, self.src_vocab, self.tgt_vocab,
                          dec, self.cfg.data.reverse_source, self.cfg.model.max_positions)


def bundle_from_checkpoint(ckpt: dict, path: str | Path | None = None,
                           device: str | torch.device = "cpu") -> Bundle:
    """Rebuild the model from the stored config, then load its weights."""
    where = str(path) if path is not None else "<checkpoint>"
    try:
        cfg = Config.from_dict(ckpt["config"], where)
    except ConfigError as e:
        raise CheckpointError(f"{where}: stored config is invalid: {e}") from None
    try:
        v = vocab_from_state(ckpt)
        src_tok, tgt_tok, src_vocab, tgt_vocab = v.src_tok, v.tgt_tok, v.src_vocab, v.tgt_vocab
    except (KeyError, TypeError, ValueError) as e:  # e.g. a corrupted SentencePiece model
        raise CheckpointError(f"{where}: stored tokenizer or vocabulary is unreadable: {e}") from None
    model = build_model(cfg.model, len(src_vocab), len(tgt_vocab))
    try:
        model.load_state_dict(ckpt["model"])
    except RuntimeError as e:
        raise CheckpointError(f"{where}: weights do not fit the stored architecture/vocabulary "
                              f"({cfg.model.arch}, src {len(src_vocab)}, tgt {len(tgt_vocab)}): "
                              f"{str(e).splitlines()[0]}") from None
    model.to(device).eval()
    return Bundle(cfg, model, src_tok, tgt_tok, src_vocab, tgt_vocab,
                  Path(path) if path is not None else None)


def load_bundle(path: str | Path, device: str | torch.device = "cpu") -> Bundle:
    return bundle_from_checkpoint(load_checkpoint(path), path, device)
