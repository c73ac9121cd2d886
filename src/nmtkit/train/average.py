"""Checkpoint averaging (Vaswani et al. 2017, Sec. 6.1: "averaging the last 5 checkpoints")."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from ..checkpoint import CheckpointError, load_checkpoint, release_payload, save_checkpoint
from ..errors import UserError


def add_weights(total: dict[str, torch.Tensor], ck: dict[str, Any], ref: dict[str, Any],
                path: str | Path, first: str | Path) -> None:
    """``total += ck``'s weights (in float64), once ``ck`` is known to share the first
    checkpoint's (``ref``, read from ``first``) architecture, vocabulary and weight names
    and shapes."""
    if ck["config"]["model"] != ref["config"]["model"] or ck["vocab"] != ref["vocab"]:
        raise CheckpointError(f"{path}: architecture or vocabulary differs from {first}")
    if set(ck["model"]) != set(total):
        raise CheckpointError(f"{path}: parameter names differ from {first}")
    for k, v in ck["model"].items():
        if v.shape != total[k].shape:
            raise CheckpointError(f"{path}: {k} has shape {tuple(v.shape)}, "
                                  f"{tuple(total[k].shape)} in {first}")
        if v.is_floating_point():
            total[k] += v.double()


def average_checkpoints(paths: list[str | Path], out: str | Path,
                        progress: Callable[[int, int], None] | None = None) -> dict[str, Any]:
    """Element-wise mean of the weights of ``paths``; config, tokenizers and vocab of the
    first. Reads the weights only: ``step_*.pt`` and ``best.pt`` (release checkpoints) and
    ``last.pt`` alike. The average is a release checkpoint (no optimizer state: it is for
    inference or fine-tuning with ``--init-from``), with ``averaged_from`` naming its parts.
    It is written as safetensors (:func:`~nmtkit.checkpoint.save_checkpoint`), whatever
    the kind of its parts (older ``.pt`` release checkpoints included). All checkpoints
    must share architecture and vocabulary. ``progress(1, len(paths))``
    after each checkpoint read (``nmtkit average``'s bar).
    """
    if not paths:
        raise UserError("average: no checkpoints given")
    total: dict[str, torch.Tensor] | None = None
    ref = None
    for path in paths:
        ck = load_checkpoint(path)
        if ref is None:
            ref = ck
            total = {k: v.detach().double().clone() if v.is_floating_point() else v.clone()
                     for k, v in ck["model"].items()}
        else:
            assert total is not None  # set with ref, on the first checkpoint
            add_weights(total, ck, ref, path, paths[0])
        if progress is not None:
            progress(1, len(paths))
    assert ref is not None and total is not None
    avg = {k: (v / len(paths)).to(ref["model"][k].dtype) if v.is_floating_point() else v
           for k, v in total.items()}
    views: dict[tuple[Any, ...], str] = {}
    for k, v in ref["model"].items():  # weights tied in the first stay one tensor (stored once)
        first = views.setdefault((v.data_ptr(), v.dtype, tuple(v.shape), v.stride()), k)
        avg[k] = avg[first]
    payload = {k: v for k, v in release_payload(ref).items()
               if k not in ("format", "version", "weights_sha256", "step")}
    payload["model"] = avg
    payload["averaged_from"] = [str(p) for p in paths]
    save_checkpoint(out, payload)
    return payload
