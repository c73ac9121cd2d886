"""The k largest entries of each row, found through the maxima of column blocks (CPU decoding).

Every step of a beam search ranks each live hypothesis's next tokens: ``topk`` over
(rows, V) log-probabilities for a handful of winners. PyTorch's CPU ``topk`` walks each row
with a selection algorithm, several times slower than a plain reduction (``amax``) over
the same numbers. :func:`row_top_k` uses that:

1. cut each row into whole blocks of ``BLOCK`` columns (the last ``V % BLOCK`` columns
   are left over) and take every block's maximum (one reduction over the whole tensor);
2. the row's k largest entries lie in the k blocks with the largest maxima or among the
   left-over columns: a block outside those k has k blocks above it, each holding an entry
   at least as large as any of its own;
3. ``topk`` over those ``k * BLOCK`` entries and the left-over columns only.

The values are exactly ``torch.topk``'s, best first; among equal values the chosen index
may differ (``torch.topk`` leaves that order unspecified too). On other devices, and for
rows too short to gain, it is ``torch.topk``. ``decode.fast`` switches it on
(:func:`nmtkit.decode.search.best_tokens`); ``tests/test_fast_top_k.py`` checks it against
``torch.topk``.
"""

from __future__ import annotations

import torch
from torch import Tensor

BLOCK = 64  # columns per block (an 8k vocabulary on 2 cores: fastest of 32, 64, 128)


def row_top_k(x: Tensor, k: int) -> tuple[Tensor, Tensor]:
    """(values, indices) of the ``k`` largest entries of each row of ``x`` (rows, V),
    each (rows, k), sorted from the largest: ``x.topk(k, dim=1)``."""
    rows, width = x.shape
    blocks = width // BLOCK  # whole blocks; the last width % BLOCK columns are left over
    if x.device.type != "cpu" or blocks < 4 * k:
        return x.topk(k, dim=1)
    whole = blocks * BLOCK
    maxima = x[:, :whole].view(rows, blocks, BLOCK).amax(dim=2)  # (rows, blocks)
    top_blocks = maxima.topk(k, dim=1).indices  # (rows, k)
    offsets = torch.arange(BLOCK, device=x.device)
    cols = (top_blocks.unsqueeze(2) * BLOCK + offsets).view(rows, k * BLOCK)  # (rows, k*BLOCK)
    if whole < width:  # the columns after the last whole block are candidates as they are
        tail = torch.arange(whole, width, device=x.device).expand(rows, width - whole)
        cols = torch.cat([cols, tail], dim=1)  # (rows, k*BLOCK + width - whole)
    best, at = x.gather(1, cols).topk(k, dim=1)  # (rows, k)
    return best, cols.gather(1, at)
