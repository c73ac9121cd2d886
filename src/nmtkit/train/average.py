"""Checkpoint averaging (Vaswani et al. 2017, Sec. 6.1: "averaging the last 5 checkpoints")."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from ..checkpoint import CheckpointError, load_checkpoint, release_payload, save_checkpoint


def average_checkpoints(paths: list[str | Path], out: str | Path) -> dict[str, Any]:
    """Element-wise mean of the weights of ``paths``; config, tokenizers and vocab of the
    first. Reads the weights only: ``step_*.pt`` and ``best.pt`` (release checkpoints) and
    ``last.pt`` alike. The average is a release checkpoint (no optimizer state: it is for
    inference or fine-tuning with ``--init-from``), with ``averaged_from`` naming its parts.
    All checkpoints must share architecture and vocabulary.
    """
    if not paths:
        raise ValueError("average: no checkpoints given")
    total: dict[str, torch.Tensor] | None = None
    ref = None
    for path in paths:
        ck = load_checkpoint(path)
        if ref is None:
            ref = ck
            total = {k: v.detach().double().clone() if v.is_floating_point() else v.clone()
                     for k, v in ck["model"].items()}
            continue
        assert total is not None  # set with ref, on the first checkpoint
        if ck["config"]["model"] != ref["config"]["model"] or ck["vocab"] != ref["vocab"]:
            raise CheckpointError(f"{path}: architecture or vocabulary differs from {paths[0]}")
        if set(ck["model"]) != set(total):
            raise CheckpointError(f"{path}: parameter names differ from {paths[0]}")
        for k, v in ck["model"].items():
            if v.shape != total[k].shape:
                raise CheckpointError(f"{path}: {k} has shape {tuple(v.shape)}, "
                                      f"{tuple(total[k].shape)} in {paths[0]}")
            if v.is_floating_point():
                total[k] += v.double()
    assert ref is not None and total is not None
    avg = {k: (v / len(paths)).to(ref["model"][k].dtype) if v.is_floating_point() else v
           for k, v in total.items()}
    payload = {k: v for k, v in release_payload(ref).items()
               if k not in ("format", "version", "weights_sha256", "step")}
    payload["model"] = avg
    payload["averaged_from"] = [str(p) for p in paths]
    save_checkpoint(out, payload)
    return payload
