"""Linear layers for training on a CPU: the products by oneDNN instead of MKL.

A Transformer's training step is mostly the products of its linear layers (Sec. 3.3 and
3.2.2: the FFN's W_1, W_2, attention's W^Q, W^K, W^V, W^O). ``F.linear`` hands them to
MKL's sgemm. On some CPUs oneDNN's GEMM is markedly faster on the same shapes: on the AMD
EPYC (Zen 4) hosts this project trains on, about 200 GFLOP/s against MKL's 120-180 for
(4095 x 256) by (256 x 1024) with two threads (``benchmarks/train_speed.py`` measures
both); on an Intel Xeon MKL is the faster one, so there nothing here runs
(:func:`.onednn.trains_faster` decides by the CPU's vendor). Each layer computes, for
y = x W^T + b with x flattened to (rows, in):

- forward       y    = x W^T + b       oneDNN (:func:`.onednn.linear`), rows padded
- input grad    dx   = dy W            oneDNN, with W^T as the "weight", rows padded
- weight grad   dW   = dy^T x          ``torch.mm`` (a long inner dimension: MKL is fast)
- bias grad     db   = sum of dy's rows

oneDNN builds (and caches: up to 1024 entries, each holding memory) one kernel per
product shape, which takes milliseconds; a training run's products have as many row counts
as its batches have token counts. The two oneDNN products therefore run on rows padded with
zeros to a multiple of :data:`ROW_MULTIPLE`, which bounds the shapes to a few dozen per
layer; the padding's rows are cut off the result and add nothing to any gradient.

The same sums as ``F.linear`` and its backward, so the results agree within float
rounding (``tests/test_fast_linear.py``). :class:`OneDnnLinear` swaps in for ``nn.Linear``
(:mod:`.swap`) and runs this only where gradients are recorded on float32 CPU tensors;
:func:`linear` is the function for weight slices (the decoder's cross-attention).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from . import onednn

ROW_MULTIPLE = 64
"""oneDNN's products take rows padded to this multiple: at most 65 row counts for a
4096-token batch, each seen again and again, where unpadded every batch brings new ones.
(Decoding's :func:`.packing.row_bucket` pads coarser, by 128 beyond 512 rows: its products
are small and many; here 128 would waste ~2% of products that are most of a step.)"""


def _padded_product(x: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
    """``x @ weight.T + bias`` by oneDNN with ``x``'s rows padded to :data:`ROW_MULTIPLE`:
    x (..., in) -> (..., out)."""
    x2 = x.reshape(-1, x.size(-1))  # (rows, in)
    rows = x2.size(0)
    padded = -(-rows // ROW_MULTIPLE) * ROW_MULTIPLE
    if padded != rows:
        staged = x2.new_empty(padded, x2.size(1))
        staged[:rows] = x2
        staged[rows:] = 0
        x2 = staged
    y = onednn.linear(x2, weight, bias)  # (padded, out)
    return y[:rows].view(*x.shape[:-1], y.size(-1))


class _LinearByOneDnn(torch.autograd.Function):
    """y = x W^T + b with oneDNN's products forward and for dx; see the module's table."""

    @staticmethod
    def forward(ctx: Any, x: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
        ctx.save_for_backward(x, weight)
        ctx.has_bias = bias is not None
        return _padded_product(x, weight, bias)

    @staticmethod
    def backward(ctx: Any, dy: Tensor) -> tuple[Tensor | None, Tensor | None, Tensor | None]:
        x, weight = ctx.saved_tensors
        dy2 = dy.reshape(-1, dy.size(-1))  # (rows, out)
        dx = dw = db = None
        if ctx.needs_input_grad[0]:
            dx = _padded_product(dy, weight.t(), None)  # dy W: (..., in)
        if ctx.needs_input_grad[1]:
            dw = torch.mm(dy2.t(), x.reshape(-1, x.size(-1)))  # (out, rows) (rows, in) -> (out, in)
        if ctx.has_bias and ctx.needs_input_grad[2]:
            db = dy2.sum(0)
        return dx, dw, db


def _takes(x: Tensor, weight: Tensor) -> bool:
    """Gradients recorded, float32 on a CPU, not inside ``torch.compile`` (whose own CPU
    lowering of linear layers picks its GEMM; it cannot lower this private operator) and
    not under CPU autocast (``train.amp: bf16`` on a CPU with AMX: ``F.linear`` is then
    cast to bfloat16 by autocast, which does not know this operator)."""
    return (torch.is_grad_enabled() and x.device.type == "cpu" and x.dtype == torch.float32
            and weight.dtype == torch.float32 and weight.requires_grad
            and not torch.is_autocast_enabled("cpu")
            and not torch.compiler.is_compiling())


def linear(x: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """``F.linear(x, weight, bias)``, by oneDNN while gradients are recorded on a CPU whose
    oneDNN GEMM is the faster one (:func:`.onednn.trains_faster`)."""
    if _takes(x, weight) and onednn.trains_faster():
        out: Tensor = _LinearByOneDnn.apply(x, weight, bias)  # type: ignore[no-untyped-call]  # unannotated in torch
        return out
    return F.linear(x, weight, bias)


class OneDnnLinear(nn.Linear):
    """``nn.Linear`` whose training products go through :func:`linear`."""

    def forward(self, x: Tensor) -> Tensor:
        return linear(x, self.weight, self.bias)
