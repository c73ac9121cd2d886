"""Translation directions and the target-language tokens that name them (Johnson et al.
2017, Sec. 3): what a translator needs to know of ``data.directions``, without the corpora
and sampling of :mod:`nmtkit.data.multilingual` (so that translating needs neither)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from ..config import DataConfig
from ..errors import UserError


def target_tag(lang: str) -> str:
    """The source token that asks for a translation into ``lang``: ``<2en>``."""
    return f"<2{lang}>"


@dataclass(frozen=True)
class Direction:
    """One translation direction of ``data.directions``."""

    src: str
    tgt: str

    @property
    def name(self) -> str:
        """``de-en``: as written in the config, and in the ``bleu_de-en`` metric's name."""
        return f"{self.src}-{self.tgt}"

    @property
    def tag(self) -> str:
        return target_tag(self.tgt)


def directions(cfg: DataConfig) -> list[Direction]:
    """``data.directions`` (checked by :meth:`DataConfig.validate`); [] for a run of one
    direction (``src_lang`` -> ``tgt_lang``, untagged)."""
    out = []
    for name in cfg.directions:
        src, tgt = name.split("-")
        out.append(Direction(src, tgt))
    return out


def direction_tags(cfg: DataConfig) -> frozenset[str]:
    """The target-language tokens of ``data.directions`` (empty for one direction)."""
    return frozenset(d.tag for d in directions(cfg))


def target_tags(cfg: DataConfig) -> dict[str, str]:
    """Target language -> the token put first in its sources: ``<2xx>`` for each target of
    ``data.directions``; for a model of one direction its target with none (``""``)."""
    dirs = directions(cfg)
    if not dirs:
        return {cfg.tgt_lang: ""}
    return {d.tgt: d.tag for d in dirs}


def for_direction(cfg: DataConfig, d: Direction) -> DataConfig:
    """``cfg`` reading one direction: its languages as ``src_lang``/``tgt_lang``."""
    return dataclasses.replace(cfg, src_lang=d.src, tgt_lang=d.tgt, directions=())


def evaluation_direction(cfg: DataConfig, src_lang: str | None,
                         tgt_lang: str | None) -> tuple[DataConfig, Direction]:
    """The direction that ``nmtkit evaluate --split`` scores: (``cfg`` reading its files, the
    direction). A model of one direction: its own (``ValueError`` if the languages given are
    others). A model of ``data.directions``: ``tgt_lang`` must be one of its targets (may be
    left out when it has one), ``src_lang`` may be left out when one direction goes into
    ``tgt_lang``; any other source language is a zero-shot direction (Johnson et al. 2017,
    Sec. 5), evaluated as asked, from any language the model has read or written; one it has
    never seen is a ``ValueError`` (back-translation would name its synthetic corpus after
    it)."""
    dirs = directions(cfg)
    if not dirs:
        own = Direction(cfg.src_lang, cfg.tgt_lang)
        if (src_lang or own.src, tgt_lang or own.tgt) != (own.src, own.tgt):
            raise UserError(f"this model translates {own.src} -> {own.tgt} only, not "
                             f"{src_lang or own.src} -> {tgt_lang or own.tgt}")
        return cfg, own
    targets = sorted({d.tgt for d in dirs})
    if tgt_lang is None and len(targets) > 1:
        raise UserError(f"this model translates into {', '.join(targets)}: name the target "
                         "language (--tgt-lang)")
    tgt = tgt_lang or targets[0]
    if tgt not in targets:
        raise UserError(f"target language {tgt!r}: this model translates into "
                         f"{', '.join(targets)} only")
    known = sorted({lang for d in dirs for lang in (d.src, d.tgt)})
    if src_lang is not None and src_lang not in known:
        raise UserError(f"source language {src_lang!r}: this model knows {', '.join(known)} "
                         "only")
    sources = sorted(d.src for d in dirs if d.tgt == tgt)
    if src_lang is None and len(sources) > 1:
        raise UserError(f"this model translates into {tgt} from {', '.join(sources)}: name the "
                         "source language (--src-lang)")
    src = src_lang or sources[0]
    if src == tgt:
        raise UserError(f"--src-lang and --tgt-lang are both {src!r}")
    d = Direction(src, tgt)
    return for_direction(cfg, d), d
