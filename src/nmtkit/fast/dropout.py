"""Dropout with a faster mask on CPU: :class:`FastDropout`, swapped for ``nn.Dropout``.

``torch.nn.functional.dropout`` on CPU draws its mask with ``bernoulli_`` in float32, one
generator call per element, and multiplies by a bool mask through a slow mixed-type loop:
a noticeable part of a small Transformer's training step. :class:`FastDropout` instead fills
int64 words with ``random_()`` (63 uniform bits per word, one 64-bit draw), reads each word
as four 16-bit lanes and keeps the low 15 bits of each: four mask entries per draw. An
element is kept when its 15-bit value is at or above ``round(p * 2^15)``, so the drop
probability is ``p`` rounded to a multiple of 2^-15 (0.3 -> 0.300018), and kept elements
are scaled by the exact inverse of the realised keep probability: the expectation of the
output equals the input, as with the standard layer. The mask is saved as one byte per
element for the backward pass (as PyTorch's own dropout) and multiplied as ``uint8``,
which PyTorch vectorises (a ``bool`` operand is ~4x slower here).

On other devices (CUDA's fused dropout kernel is already fast), in eval mode and for
``p == 0`` it is the standard function.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

_LEVELS = 1 << 15  # each mask entry is uniform over 0 .. 2^15 - 1


def keep_mask(shape: torch.Size, p: float, device: torch.device) -> tuple[Tensor, float]:
    """A (shape) uint8 mask, 1 with probability 1 - round(p * 2^15) / 2^15, and the scale
    1 / that probability. Four 15-bit uniform values per 64-bit draw (see the module doc)."""
    n = shape.numel()
    words = torch.empty((n + 3) // 4, dtype=torch.int64, device=device).random_()  # [0, 2^63)
    lanes = words.view(torch.int16)[:n].bitwise_and_(_LEVELS - 1)  # (n,) uniform 0 .. 2^15 - 1
    threshold = round(p * _LEVELS)
    keep = (lanes >= threshold).view(torch.uint8).view(shape)
    return keep, _LEVELS / (_LEVELS - threshold)


class _MaskedScale(torch.autograd.Function):
    """y = x * keep * scale; dy/dx = keep * scale (keep is a saved 0/1 uint8 mask)."""

    @staticmethod
    def forward(ctx: Any, x: Tensor, p: float) -> Tensor:  # noqa: D102
        keep, scale = keep_mask(x.shape, p, x.device)
        ctx.save_for_backward(keep)
        ctx.scale = scale
        return (x * keep).mul_(scale)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, None]:  # noqa: D102
        (keep,) = ctx.saved_tensors
        return (grad * keep).mul_(ctx.scale), None


def dropout(x: Tensor, p: float, training: bool) -> Tensor:
    """Inverted dropout: zero each element with probability ~p, scale the rest by 1/(1-p)."""
    if not training or p <= 0.0:
        return x
    if p >= 1.0:
        return torch.zeros_like(x)
    if x.device.type != "cpu" or not x.dtype.is_floating_point:
        return F.dropout(x, p, True)
    out: Tensor = _MaskedScale.apply(x, p)  # type: ignore[no-untyped-call]  # Function.apply is unannotated
    return out


class FastDropout(nn.Dropout):
    """``nn.Dropout`` drawing its mask as :func:`dropout` does (installed by
    :func:`nmtkit.fast.for_training`; same ``p``, no state)."""

    def forward(self, x: Tensor) -> Tensor:
        if self.inplace:  # not used by nmtkit's models: keep the standard semantics
            return super().forward(x)
        return dropout(x, self.p, self.training)
