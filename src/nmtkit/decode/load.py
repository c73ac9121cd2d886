"""The library chooses the engine: :func:`load_translator`, the one way ``nmtkit translate``,
``evaluate``, ``serve`` (and ``tune``, ``backtranslate``, ``distill``) and Python code get a
translator of one or more models.

``engine="auto"`` (what a user gets unless they name one): the checkpoint's Transformer in
numpy (:mod:`nmtkit.lite`, no PyTorch to import: a one-sentence call starts in a fraction
of a second) for up to :data:`~nmtkit.lite.MAX_LINES` sentences a call, where it can run the
checkpoint; PyTorch's search (:class:`~nmtkit.decode.translator.Translator`) for the rest:
more sentences, what numpy does not do (:meth:`~nmtkit.decode.lite_translator.LiteTranslator.refuses`),
an ensemble, a device other than the CPU, ``fast=False``, reranking. ``"numpy"`` always
starts in numpy (PyTorch takes what it cannot do), ``"torch"`` is PyTorch's search,
``"ctranslate2"`` an ``nmtkit export --format ctranslate2`` directory run by CTranslate2.

This module imports no PyTorch, so that choosing numpy or CTranslate2 does not pay for it.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import UserError
from ..lite import MAX_LINES

if TYPE_CHECKING:
    from .text_translator import TextTranslator
    from .translator import Translator

log = logging.getLogger(__name__)

ENGINES = ("auto", "torch", "numpy", "ctranslate2")

EXPORT_ENGINE = "nmtkit.export.ctranslate2_engine"
"""The module of CTranslate2's engine (:func:`load_export_bundle`). It reads an export, a
layer above this one, and CTranslate2 is an optional dependency (the ``export`` extra): it
is named here and imported only when chosen."""
EXPORT_FORMAT = "nmtkit.export.ctranslate2_format"
"""The module that names an export's files (an export directory is refused as a checkpoint)."""


def load_translator(models: str | Path | Sequence[str | Path], engine: str = "auto", *,
                    device: str = "cpu", verify: bool = True, compute_type: str | None = None,
                    threads: int = 0, reverse_models: Sequence[str | Path] = (),
                    r2l_models: Sequence[str | Path] = (), src_lang: str | None = None,
                    tgt_lang: str | None = None, rerank_given: bool = True,
                    max_lines: int | None = MAX_LINES, **decode: Any) -> TextTranslator:
    """A translator of ``models`` (a checkpoint, several for an ensemble, or an export
    directory with ``engine="ctranslate2"``), run by ``engine`` (:data:`ENGINES`; see the
    module), with the stored decoding options and ``decode`` replacing some (``None``: keep
    the stored one; :func:`~nmtkit.decode.text_translator.decode_options`).

    ``device``: ``cpu``, ``cuda``, ``cuda:N``; ``verify``: refuse weights that do not match
    their stored checksum; ``compute_type``: CTranslate2's (``None``: int8 on the CPU, float16
    on a GPU); ``threads``: PyTorch's intra-op threads, or CTranslate2's (0: the library's
    choice). ``reverse_models``/``r2l_models``: the checkpoints that rerank the candidates
    (``decode.rerank``; :mod:`nmtkit.decode.rerank`), for the direction ``src_lang`` ->
    ``tgt_lang`` of a model of several (``rerank_given``: refuse them without
    ``decode.rerank``). ``max_lines``: the most sentences (after splitting) ``"auto"`` translates in numpy.

    The translator's ``bundle`` is what it was loaded from (its ``cfg``: the model's config).
    Options that do not go together are a ``UserError`` before anything loads."""
    paths = [str(models)] if isinstance(models, (str, Path)) else [str(m) for m in models]
    reranks = bool(reverse_models or r2l_models or decode.get("rerank")
                   or decode.get("reverse_weight") is not None
                   or decode.get("r2l_weight") is not None)
    check_engine_choice(engine, paths, device=device, verify=verify, fast=decode.get("fast"),
                        compute_type=compute_type, reranks=reranks)
    if engine == "ctranslate2":
        return export_translator(paths[0], device, compute_type, threads, decode)

    def torch_translator() -> Translator:
        return checkpoint_translator(paths, device, verify, threads, decode,
                                     reverse_models=reverse_models, r2l_models=r2l_models,
                                     src_lang=src_lang, tgt_lang=tgt_lang,
                                     rerank_given=rerank_given)

    numpy = engine == "numpy" or (engine == "auto" and len(paths) == 1 and device == "cpu"
                                  and decode.get("fast") is not False and not reranks)
    unsupported = None
    if numpy:
        from ..lite.checkpoint import LiteUnsupported, load_lite_bundle
        from .lite_translator import LiteTranslator
        from .text_translator import decode_options

        try:  # a file both readers refuse: its CheckpointError, before PyTorch is imported
            bundle = load_lite_bundle(paths[0], verify=verify)
        except LiteUnsupported as e:  # a file or model numpy does not run: PyTorch does
            unsupported = e
        else:
            tr = LiteTranslator(bundle, decode_options(bundle.cfg.decode, **decode),
                                torch_translator, None if engine == "numpy" else max_lines)
            tr.bundle = bundle
            return tr
    translator = torch_translator()  # (a file PyTorch refuses: its one-line error, no warning)
    if unsupported is not None:
        (log.warning if engine == "numpy" else log.debug)(
            "%s: translating with PyTorch, not numpy: %s", paths[0], unsupported)
    return translator


def check_engine_choice(engine: str, models: Sequence[str], *, device: str = "cpu",
                        verify: bool = True, fast: bool | None = None,
                        compute_type: str | None = None, reranks: bool = False) -> None:
    """``UserError`` for options that do not go with ``engine`` (before anything loads):
    with ctranslate2 one export directory and none of a checkpoint's options (``fast``,
    ``verify``) or reranking's (CTranslate2 runs no reverse model); with numpy one
    checkpoint on the CPU, fast paths on, no reranking; with torch (or auto) no
    ``compute_type`` and no export directory as a model (it names the engine to use)."""
    if engine not in ENGINES:
        raise UserError(f"engine {engine!r}: one of {', '.join(ENGINES)}")
    if engine in ("ctranslate2", "numpy"):
        if len(models) != 1:
            raise UserError(f"--engine {engine} runs one model: an ensemble of checkpoints "
                            "is for --engine torch")
        if engine == "ctranslate2" and (fast is False or not verify):
            raise UserError("--no-fast and --no-verify apply to --engine torch (a checkpoint) only")
        if engine == "numpy" and (fast is False or device != "cpu"):
            raise UserError("--engine numpy runs on the CPU and is one of nmtkit's fast paths: "
                            "drop --no-fast and --device, or use --engine torch")
        if reranks:
            raise UserError("--reverse-model, --r2l-model, --rerank and their weights: "
                            "reranking runs with --engine torch (a checkpoint) only")
        if engine == "ctranslate2":
            return
    if compute_type is not None:
        raise UserError("--compute-type applies to --engine ctranslate2 only")
    meta_file = importlib.import_module(EXPORT_FORMAT).META_FILE
    for m in models:
        if (Path(m) / meta_file).is_file():
            raise UserError(f"{m}: a CTranslate2 export directory; run it with --engine "
                            "ctranslate2 (or give the checkpoint it was exported from)")


def export_translator(model: str, device: str, compute_type: str | None, threads: int,
                      decode: dict[str, Any]) -> TextTranslator:
    """The translator of the CTranslate2 export ``model`` (its ``bundle``: the export's
    :class:`~nmtkit.export.ctranslate2_engine.CTranslate2Bundle`)."""
    try:  # ctranslate2: an optional dependency
        engine = importlib.import_module(EXPORT_ENGINE)
    except ImportError as e:
        raise UserError(f"--engine ctranslate2 needs the 'export' extra "
                        f"(pip install 'nmtkit[export]'): {e}") from None
    bundle = engine.load_export_bundle(model, device, compute_type, threads)
    tr: TextTranslator = bundle.translator(**decode)
    tr.bundle = bundle
    return tr


def checkpoint_translator(paths: Sequence[str], device: str, verify: bool, threads: int,
                          decode: dict[str, Any], *, reverse_models: Sequence[str | Path] = (),
                          r2l_models: Sequence[str | Path] = (), src_lang: str | None = None,
                          tgt_lang: str | None = None, rerank_given: bool = True) -> Translator:
    """PyTorch's translator of the checkpoints ``paths`` (an ensemble of several), with the
    models that rerank its candidates (see :func:`load_translator`)."""
    import torch

    from ..checkpoint import load_bundle
    from .ensemble import ensemble_translator
    from .text_translator import decode_options

    if threads:
        torch.set_num_threads(threads)
    bundles = [load_bundle(m, device, verify=verify) for m in paths]
    tr = ensemble_translator(bundles, paths, decode=decode_options(bundles[0].cfg.decode, **decode))
    tr.bundle = bundles[0]
    reverse, r2l = reverse_models, r2l_models
    if reverse or r2l:
        from ..data.directions import evaluation_direction
        from .reverse_models import reverse_scorer

        if not tr.decode_cfg.rerank and rerank_given:
            raise UserError(f"{'--reverse-model' if reverse else '--r2l-model'} scores the "
                            "candidates of decode.rerank: add --rerank N (e.g. --rerank 10)")
        _, forward = evaluation_direction(bundles[0].cfg.data, src_lang, tgt_lang)
        tr.reverse = reverse_scorer(
            [load_bundle(m, device, verify=verify) for m in reverse], forward,
            [str(m) for m in reverse], r2l=[load_bundle(m, device, verify=verify) for m in r2l],
            r2l_names=[str(m) for m in r2l])
    return tr
