""":class:`Config`, a whole run: one section per concern, each validating itself, then the
checks between sections."""

from __future__ import annotations

import dataclasses
import importlib.util
from dataclasses import dataclass, field
from typing import Any

from .checks import Checks, ConfigError
from .coerce import build_section
from .data import VOCAB_SPECIALS, DataConfig
from .decode import DecodeConfig, alignment_choice_checks
from .limits import brief
from .model import ModelConfig, check_model_size
from .train import TrainConfig, split_direction_name


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
        Checks(self.train, "train", source).require(
            not self.train.cuda_graphs or self.model.arch == "transformer",
            f"train.cuda_graphs needs model.arch: transformer, got {brief(self.model.arch)}")
        vocab = expected_vocab(self.data)
        check_model_size(self.model, vocab, vocab, source)
        self._validate_forgetting_directions(source)
        c = Checks(self.decode, "decode", source)
        for holds, message in alignment_choice_checks(self.model, self.decode.alignment_layer,
                                                      self.decode.alignment_head):
            c.require(holds, message)

    def _validate_forgetting_directions(self, source: str) -> None:
        """A model of ``data.directions`` is asked for one target language per split: each of
        ``train.forgetting_splits`` names its direction (``SRC-TGT:SPLIT``), into one of the
        directions' target languages (any source: a zero-shot direction is scored as asked).
        Both messages are built for every config, so each check is listed."""
        dirs = self.data.directions
        c = Checks(self.train, "train", source)
        named = [(e, split_direction_name(e)[0]) for e in self.train.forgetting_splits] if dirs else []
        plain = [e for e, d in named if d is None]
        c.require(not plain, "train.forgetting_splits with data.directions must name each split's "
                  f"direction as SRC-TGT:SPLIT (e.g. de-en:val), got {brief(plain)}")
        targets = sorted({d.split("-")[-1] for d in dirs})
        other = [e for e, d in named if d is not None and d[1] not in targets]
        c.require(not other, "train.forgetting_splits with data.directions must translate into "
                  f"one of its target languages, got {brief(other)} (targets: {', '.join(targets)})")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, raw: dict[str, Any], source: str = "<dict>") -> Config:
        cfg: Config = build_section(cls, raw, source)
        validate(cfg, source)
        return cfg


BYTE_PIECE_COUNT = 256
"""The byte pieces SentencePiece adds with ``data.byte_fallback``."""


def expected_vocab(data: DataConfig) -> int:
    """About how large a vocabulary ``data`` makes, before any text is read: the copy task's
    symbols, or SentencePiece's ``vocab_size`` with its byte pieces and nmtkit's special tokens
    and tags; a word or whitespace vocabulary's size is known only from the text (its
    specials alone are counted). What :func:`~nmtkit.config.model.check_model_size` is asked
    with when a config is validated."""
    specials = len(VOCAB_SPECIALS) + len(data.extra) + len(data.directions)
    if data.corpus == "copy":
        return data.copy_vocab + specials
    if data.tokenizer == "sentencepiece":
        return data.vocab_size + (BYTE_PIECE_COUNT if data.byte_fallback else 0) + specials
    return specials


def validate(cfg: Config, source: str = "<config>") -> None:
    """Reject impossible values before any work starts: each section, then across sections."""
    for section in (cfg.data, cfg.model, cfg.train, cfg.decode):
        section.validate(source)
    cfg.validate(source)


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
