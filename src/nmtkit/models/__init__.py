"""Models: one builder from config to a module implementing :mod:`nmtkit.models.seq2seq`.

Importing this package imports no PyTorch (the builders import their modules when called),
so that :mod:`.sinusoid` serves the numpy forward pass's cold start too.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..config import ModelConfig

if TYPE_CHECKING:
    from .seq2seq import Seq2Seq


def build_model(cfg: ModelConfig, src_vocab_size: int, tgt_vocab_size: int) -> Seq2Seq:
    """Hyperparameters -> model, by ``cfg.arch``."""
    if cfg.arch == "transformer":
        from .transformer import build_transformer

        return build_transformer(cfg, src_vocab_size, tgt_vocab_size)
    if cfg.arch == "rnn":
        from .rnn import build_rnn

        return build_rnn(cfg, src_vocab_size, tgt_vocab_size)
    raise ValueError(f"unknown model.arch {cfg.arch!r}")
