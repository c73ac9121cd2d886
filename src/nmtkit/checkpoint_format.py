"""What an nmtkit checkpoint file says of itself, without PyTorch: its format marker and
version, and the checksum of its weights. The two readers use it, PyTorch's
(:mod:`nmtkit.checkpoint`, which also writes checkpoints) and numpy's
(:mod:`nmtkit.lite.checkpoint`, the cold start): one definition, so they accept the same
files.

It sits at the bottom of the layers (beside ``models`` and ``rules``, importing neither
PyTorch nor numpy), because the lowest reader, :mod:`nmtkit.lite`, is below
:mod:`nmtkit.checkpoint`; the checkpoint layer owns the format through it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from typing import NamedTuple

FORMAT = "nmtkit-checkpoint"
"""The marker every nmtkit checkpoint carries (written by :func:`nmtkit.checkpoint.save_checkpoint`)."""
VERSION = 1
"""The newest checkpoint version this nmtkit reads and the one it writes."""


class WeightBytes(NamedTuple):
    """One weight as the checksum reads it: its name, its dtype as PyTorch prints it
    (``torch.float32``), its shape and its bytes (C order)."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    data: bytes | memoryview


def weights_digest(weights: Iterable[WeightBytes]) -> str:
    """sha256 over the weights, given in name order (a ``ValueError`` otherwise; taken one
    at a time, so a caller may make each one's bytes as it comes): for each,
    ``name|dtype|shape|`` then its bytes. A checkpoint's ``weights_sha256`` entry."""
    h, last = hashlib.sha256(), None
    for w in weights:
        if last is not None and w.name <= last:
            raise ValueError(f"weights out of name order: {w.name!r} after {last!r}")
        h.update(f"{w.name}|{w.dtype}|{w.shape}|".encode())
        h.update(w.data)
        last = w.name
    return h.hexdigest()
