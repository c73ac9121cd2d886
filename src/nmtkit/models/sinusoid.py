"""The fixed sinusoid position table of Vaswani et al. (2017), Sec. 3.5, in numpy: the one
table both the PyTorch model (:class:`nmtkit.models.transformer.PositionalEncoding`, a buffer
made from it) and the numpy forward pass (:mod:`nmtkit.lite.transformer`) add to their
embeddings, so the two read the same positions bit for bit.

This module imports no PyTorch (nor does ``nmtkit.models`` itself), so the cold start of
:mod:`nmtkit.lite` uses it without paying PyTorch's import.
"""

from __future__ import annotations

import math

import numpy as np


def sinusoid_table(max_len: int, d_model: int) -> np.ndarray:
    """PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(pos / 10000^(2i/d))
    (Sec. 3.5), computed in float64, then float32: (max_len, d_model)."""
    pos = np.arange(max_len, dtype=np.float64)[:, None]  # (max_len, 1)
    inv_freq = np.exp(np.arange(0, d_model, 2, dtype=np.float64) * (-math.log(10000.0) / d_model))
    pe = np.zeros((max_len, d_model), dtype=np.float64)
    pe[:, 0::2] = np.sin(pos * inv_freq)  # (max_len, ceil(d/2))
    pe[:, 1::2] = np.cos(pos * inv_freq[: d_model // 2])  # (max_len, floor(d/2))
    return pe.astype(np.float32)
