"""Weights packed once for CPU decoding: the decoder's products with a few rows.

Every decoding step multiplies a few rows (the sentences or hypotheses still searched:
at most the batch for greedy, batch x beam for beam search) by each weight matrix of the
decoder and by the (vocabulary, d_model) output projection. On a CPU, ``F.linear`` hands
the weight to the GEMM library as it is, and the library copies it into its blocked
layout on every call; with so few rows that copy costs about as much as the product.
oneDNN can reorder a weight into that layout once and multiply by the reordered copy
(:mod:`nmtkit.fast.onednn`). ``benchmarks/decode_speed.py`` measures the gain.

:func:`pack_for_inference` swaps (:mod:`nmtkit.fast.swap`) every ``nn.Linear`` of a model
for :class:`PackedLinear` and every :class:`~nmtkit.models.attention.MultiHeadAttention`
for :class:`PackedAttention` (whose query projection is a row slice of ``in_proj``), and
packs their weights. A packed copy is used only while it is still the weight's value: no
autograd recording, a float32 CPU input of at most ``MAX_ROWS`` rows, and the same storage
and version counter as when packed; otherwise ``F.linear`` runs. An optimizer step may
update weights without bumping their version counter (fused optimizers do), so a model
that is trained again must be unpacked first (:func:`unpack`, or the context manager
:func:`nmtkit.fast.inference` that the trainer's validation uses).
"""

from __future__ import annotations

import threading
from typing import Any, cast

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..models.attention import MultiHeadAttention
from . import onednn
from .swap import restore_class, swap_class

ROWS_HINT = 32  # rows per product that oneDNN chooses the packed layout for (the decode batch)
MAX_ROWS = 1024  # beam 5 x the default batch of 64 = 320 rows, and most encoder products of
# a batch of 32 sentences (rows = batch x source length); larger ones pack their weight well
# enough themselves


def row_bucket(rows: int) -> int:
    """Rows a product with ``rows`` rows is padded to: exact up to 4, then multiples of 16 up
    to 64, of 32 up to 256, of 64 up to 512, then of 128 (extra rows whose products are
    dropped). oneDNN compiles one kernel per (weight shape, rows); a beam search meets every
    row count from 1 to batch x beam, and the buckets keep that number of kernels (and the
    memory they take) small."""
    if rows <= 4:
        return rows
    step = 16 if rows <= 64 else 32 if rows <= 256 else 64 if rows <= 512 else 128
    return -(-rows // step) * step


class PackedProduct:
    """``F.linear(x, weight[rows], bias[rows])`` through a packed copy while it is current."""

    def __init__(self, weight: Tensor, bias: Tensor | None, rows: slice = slice(None),
                 hint: int = ROWS_HINT):
        self.weight, self.bias, self.rows = weight, bias, rows
        self.local = threading.local()  # per thread: the buffer of padded products
        self.key = self._identity()
        w = weight.detach()[rows]
        self.packed = onednn.reorder(w, hint)
        self.packed_bias = bias.detach()[rows].contiguous() if bias is not None else None

    def _identity(self) -> tuple[Any, ...]:
        b = self.bias
        return (self.weight.data_ptr(), self.weight._version,
                (b.data_ptr(), b._version) if b is not None else None)

    def usable(self, x: Tensor) -> bool:
        return bool(self.packed is not None and x.dtype == torch.float32 and x.device.type == "cpu"
                    and not torch.is_grad_enabled() and torch.backends.mkldnn.enabled
                    and x.numel() // max(x.size(-1), 1) <= MAX_ROWS and self.key == self._identity())

    def __call__(self, x: Tensor) -> Tensor:
        if not self.usable(x):
            if self.rows == slice(None):
                return F.linear(x, self.weight, self.bias)
            b = self.bias[self.rows] if self.bias is not None else None
            return F.linear(x, self.weight[self.rows], b)
        rows = x.numel() // x.size(-1)
        flat = x.reshape(rows, x.size(-1))  # (rows, in)
        padded = row_bucket(rows)
        if padded != rows:  # the rows into a buffer of MAX_ROWS rows; those after are not read
            flat = self._staging(flat)[:padded]  # (padded, in)
        assert self.packed is not None  # usable(x) checked it
        y = onednn.packed_linear(flat, self.packed, self.packed_bias)  # (padded, out)
        return y[:rows].view(*x.shape[:-1], y.size(-1))

    def _staging(self, flat: Tensor) -> Tensor:
        """``flat`` (rows, in) copied to the top of this thread's (MAX_ROWS, in) buffer.

        The rows below it hold what an earlier call left (zeros at first): their products
        are computed and dropped, and a product's rows do not mix, so they change nothing.
        One buffer per thread, so that two threads may decode with one model at once."""
        buf: Tensor | None = getattr(self.local, "staging", None)
        if buf is None:
            buf = self.local.staging = flat.new_zeros(MAX_ROWS, flat.size(1))
        buf[: flat.size(0)].copy_(flat)
        return buf


class PackedLinear(nn.Linear):
    """``nn.Linear`` whose product goes through a :class:`PackedProduct` when it can."""

    _product: PackedProduct

    def forward(self, x: Tensor) -> Tensor:
        return self._product(x)


class PackedAttention(MultiHeadAttention):
    """Multi-head attention whose query projection (rows ``[0, d)`` of ``in_proj``) is packed;
    its ``in_proj`` and ``out_proj`` are :class:`PackedLinear` themselves."""

    _query: PackedProduct

    def project_q(self, x: Tensor) -> Tensor:
        return self._split(self._query(x))


def _fresh(module: nn.Module, attr: str) -> bool:
    """Whether ``module``'s packed product ``attr`` is still its weights' value."""
    p = module.__dict__.get(attr)
    return p is not None and p.key == p._identity()


@torch.no_grad()
def pack_for_inference(model: nn.Module) -> int:
    """Swap and pack every CPU float32 ``nn.Linear`` and multi-head attention of ``model``;
    returns how many weights were packed. Idempotent: current packs are kept. Without
    oneDNN (:func:`nmtkit.fast.onednn.available`) nothing changes and 0 is returned."""
    if not onednn.available():
        return 0
    count = 0
    for module in model.modules():
        w = getattr(module, "weight", None)
        if isinstance(module, nn.Linear) and w is not None and w.device.type == "cpu" \
                and w.dtype == torch.float32:
            swap_class(module, PackedLinear)
            if not _fresh(module, "_product"):
                product = PackedProduct(module.weight, module.bias)
                cast(PackedLinear, module)._product = product
                count += product.packed is not None
        elif isinstance(module, MultiHeadAttention) and module.in_proj.weight.device.type == "cpu" \
                and module.in_proj.weight.dtype == torch.float32:
            if not isinstance(module, PackedAttention):  # (a subclass may be installed on it)
                swap_class(module, PackedAttention)
            if not _fresh(module, "_query"):
                lin = module.in_proj
                query = PackedProduct(lin.weight, lin.bias, slice(0, module.d_model))
                cast(PackedAttention, module)._query = query
                count += query.packed is not None
    return count


def unpack(model: nn.Module) -> None:
    """Drop every packed copy of ``model`` and give its modules their classes back."""
    for module in model.modules():
        if isinstance(module, (PackedLinear, PackedAttention)):
            module.__dict__.pop("_product", None)
            module.__dict__.pop("_query", None)
            restore_class(module)
