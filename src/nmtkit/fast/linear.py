"""Linear layers for training on a CPU: the products by oneDNN instead of MKL.

A Transformer's training step is mostly the products of its linear layers (Sec. 3.3 and
3.2.2: the FFN's W_1, W_2, attention's W^Q, W^K, W^V, W^O). ``F.linear`` hands them to
MKL's sgemm. On some CPUs oneDNN's GEMM is markedly faster on the same shapes: on the AMD
EPYC (Zen 4) hosts this project trains on, about 200 GFLOP/s against MKL's 120-180 for
(4095 x 256) by (256 x 1024) with two threads (``benchmarks/train_speed.py`` measures
both); on an Intel Xeon, and on an AMD EPYC with AVX2 only, MKL is the faster one, so there
nothing here runs (:func:`.onednn.trains_faster` decides by the CPU's vendor and whether it
has AVX-512). Each layer computes, for y = x W^T + b with x flattened to (rows, in):

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

Under CPU autocast to bfloat16 (``train.amp: bf16`` on a CPU with bf16 in hardware) PyTorch hands every
product to oneDNN's bf16 GEMM, and the same cache holds its kernels: unpadded, a few dozen
batches bring more product shapes than its 1024 entries, the cache evicts and rebuilds
kernels at every step, and the process's memory grows (measured on two cores of a Xeon
with AMX: training fell from ~6,000 to ~4,000 target tokens/s within 300 updates while
its RSS grew from 2.6 to 5 GB; with the cache made large enough the same batches ran at
6,100-6,700 throughout). There the three products run in bfloat16 on rows padded to
:data:`LOW_PRECISION_ROW_MULTIPLE` (:class:`_LinearInLowPrecision`): the same casts and
products as autocast's, on a bounded set of shapes.
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


LOW_PRECISION_ROW_MULTIPLE = 128
"""Rows of the bfloat16 products under CPU autocast are padded to this multiple: at most 32
row counts for a 4096-token batch, about 20 products each (five weight shapes, three
products, with and without bias), which leaves room in oneDNN's 1024-entry kernel cache
(64 would not). The padding costs ~2% of products that are a fifth of a bf16 step."""


def rows_padded(x2: Tensor, multiple: int) -> Tensor:
    """``x2`` (rows, cols) with zero rows appended up to a multiple of ``multiple`` (itself
    where the count is one already)."""
    rows = x2.size(0)
    padded = -(-rows // multiple) * multiple
    if padded == rows:
        return x2
    staged = x2.new_empty(padded, x2.size(1))
    staged[:rows] = x2
    staged[rows:] = 0
    return staged


def _padded_product(x: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
    """``x @ weight.T + bias`` by oneDNN with ``x``'s rows padded to :data:`ROW_MULTIPLE`:
    x (..., in) -> (..., out)."""
    x2 = x.reshape(-1, x.size(-1))  # (rows, in)
    y = onednn.linear(rows_padded(x2, ROW_MULTIPLE), weight, bias)  # (padded, out)
    return y[:x2.size(0)].view(*x.shape[:-1], y.size(-1))


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


class _LinearInLowPrecision(torch.autograd.Function):
    """y = x W^T + b as CPU autocast computes it (x, W, b cast to ``dtype``; y, dx and dW
    products in ``dtype``; y in ``dtype``, dx in x's dtype, dW and db in the weight's), on
    rows padded to :data:`LOW_PRECISION_ROW_MULTIPLE`: dW's inner dimension is the rows too,
    so the padded copies of x and dy go into all three products."""

    @staticmethod
    def forward(ctx: Any, x: Tensor, weight: Tensor, bias: Tensor | None,  # noqa: D102
                dtype: torch.dtype) -> Tensor:
        x2 = x.reshape(-1, x.size(-1))  # (rows, in)
        xp = rows_padded(x2.to(dtype), LOW_PRECISION_ROW_MULTIPLE)  # (padded, in)
        w = weight.to(dtype)  # (out, in)
        y = torch.mm(xp, w.t()) if bias is None else torch.addmm(bias.to(dtype), xp, w.t())
        ctx.save_for_backward(xp, w)
        ctx.rows, ctx.x_dtype, ctx.w_dtype = x2.size(0), x.dtype, weight.dtype
        ctx.b_dtype = None if bias is None else bias.dtype
        return y[:x2.size(0)].view(*x.shape[:-1], w.size(0))  # (..., out)

    @staticmethod
    def backward(ctx: Any, dy: Tensor) -> tuple[Tensor | None, ...]:  # noqa: D102
        xp, w = ctx.saved_tensors
        dy2 = dy.reshape(-1, dy.size(-1))  # (rows, out)
        dyp = rows_padded(dy2.to(w.dtype), LOW_PRECISION_ROW_MULTIPLE)  # (padded, out)
        dx = dw = db = None
        if ctx.needs_input_grad[0]:
            dx = torch.mm(dyp, w)[:ctx.rows].to(ctx.x_dtype)  # (rows, in)
            dx = dx.view(*dy.shape[:-1], w.size(1))
        if ctx.needs_input_grad[1]:
            dw = torch.mm(dyp.t(), xp).to(ctx.w_dtype)  # (out, padded) (padded, in) -> (out, in)
        if ctx.b_dtype is not None and ctx.needs_input_grad[2]:
            db = dy2.sum(0, dtype=torch.float32).to(ctx.b_dtype)
        return dx, dw, db, None


def _low_precision(x: Tensor, weight: Tensor) -> torch.dtype | None:
    """bfloat16 where gradients are recorded under CPU autocast to it (float32 weights, not
    inside ``torch.compile``), else None: :class:`_LinearInLowPrecision` then runs the
    products that autocast would."""
    if not (x.device.type == "cpu" and torch.is_autocast_enabled("cpu")
            and torch.is_grad_enabled() and weight.requires_grad
            and weight.dtype == torch.float32 and not torch.compiler.is_compiling()):
        return None
    dtype = torch.get_autocast_dtype("cpu")
    return dtype if dtype == torch.bfloat16 else None


def _takes(x: Tensor, weight: Tensor) -> bool:
    """Gradients recorded, float32 on a CPU, not inside ``torch.compile`` (whose own CPU
    lowering of linear layers picks its GEMM; it cannot lower this private operator) and
    not under CPU autocast (``train.amp: bf16`` on a CPU with bf16 in hardware: ``F.linear`` is then
    cast to bfloat16 by autocast, which does not know this operator)."""
    return (torch.is_grad_enabled() and x.device.type == "cpu" and x.dtype == torch.float32
            and weight.dtype == torch.float32 and weight.requires_grad
            and not torch.is_autocast_enabled("cpu")
            and not torch.compiler.is_compiling())


def linear(x: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """``F.linear(x, weight, bias)``, by oneDNN while gradients are recorded on a CPU whose
    oneDNN GEMM is the faster one (:func:`.onednn.trains_faster`), and in bfloat16 on padded
    rows under CPU autocast to bfloat16 (module docstring)."""
    low = _low_precision(x, weight)
    if low is not None:
        y: Tensor = _LinearInLowPrecision.apply(x, weight, bias, low)  # type: ignore[no-untyped-call]  # unannotated in torch
        return y
    if _takes(x, weight) and onednn.trains_faster():
        out: Tensor = _LinearByOneDnn.apply(x, weight, bias)  # type: ignore[no-untyped-call]  # unannotated in torch
        return out
    return F.linear(x, weight, bias)


class OneDnnLinear(nn.Linear):
    """``nn.Linear`` whose training products go through :func:`linear`."""

    def forward(self, x: Tensor) -> Tensor:
        return linear(x, self.weight, self.bias)
