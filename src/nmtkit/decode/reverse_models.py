"""The models that rerank (:mod:`nmtkit.decode.rerank`), from loaded checkpoints: each
checked against the direction of the forward model whose candidates it scores, each asked
for the right language where it is a model of several directions (Johnson et al. 2017)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from ..data.multilingual import Direction, directions
from .rerank import ReverseScorer
from .translator import Translator

if TYPE_CHECKING:
    from ..checkpoint import Bundle


def reverse_scorer(bundles: Sequence[Bundle], forward: Direction,
                   names: Sequence[str] | None = None, *, r2l: Sequence[Bundle] = (),
                   r2l_names: Sequence[str] | None = None) -> ReverseScorer:
    """A :class:`ReverseScorer` of loaded checkpoints (``names``, ``r2l_names``: their files,
    for errors) for a forward model translating ``forward`` (its ``src`` -> ``tgt``).

    ``bundles``, the reverse models: a model of one direction must translate ``tgt`` ->
    ``src``; a model of several directions (``data.directions``) must have that direction
    among them, and is asked for ``src``: so one model trained both ways (``[de-en, en-de]``)
    can rerank its own translations. ``r2l``, the right-to-left models: trained with
    ``data.reverse_target``, translating ``src`` -> ``tgt`` (or with that direction among
    theirs). ``ValueError`` naming the file otherwise."""
    shown = list(names) if names is not None else [str(b.path) for b in bundles]
    back = Direction(forward.tgt, forward.src)
    tags = [_direction_tag(b, name, back, f"a reverse model for a {forward.src}->{forward.tgt} "
                           f"model must translate {back.src}->{back.tgt}")
            for b, name in zip(bundles, shown, strict=True)]
    r2l_shown = list(r2l_names) if r2l_names is not None else [str(b.path) for b in r2l]
    r2l_tags = []
    for b, name in zip(r2l, r2l_shown, strict=True):
        need = (f"a right-to-left model for a {forward.src}->{forward.tgt} model must translate "
                f"{forward.src}->{forward.tgt} with data.reverse_target: true")
        if not b.cfg.data.reverse_target:
            raise ValueError(f"{name} writes left to right (data.reverse_target is false): {need}")
        r2l_tags.append(_direction_tag(b, name, forward, need))
    return ReverseScorer([Translator.from_bundle(b) for b in bundles], tags,
                         r2l=[Translator.from_bundle(b) for b in r2l], r2l_tgt_langs=r2l_tags)


def _direction_tag(b: Bundle, name: str, want: Direction, need: str) -> str | None:
    """The target language to ask checkpoint ``b`` for so that it translates ``want``:
    ``None`` for a model of that one direction, ``want.tgt`` for a model of several
    directions that has it; ``ValueError`` naming ``name`` and saying ``need`` otherwise."""
    data = b.cfg.data
    if data.directions:
        if want not in directions(data):
            raise ValueError(f"{name} translates {', '.join(data.directions)}: {need}")
        return want.tgt
    if (data.src_lang, data.tgt_lang) != (want.src, want.tgt):
        raise ValueError(f"{name} translates {data.src_lang}->{data.tgt_lang}: {need}")
    return None
