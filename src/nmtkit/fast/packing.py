"""Weights packed once for CPU inference: the decoder's small matrix products, 1.2-3x faster.

Every decoding step multiplies a few rows (the sentences or hypotheses still searched:
at most 32 for greedy, 160 for beam 5, at batch 32) by each weight matrix of the decoder
and by the (vocabulary, d_model) output projection. On a CPU, ``F.linear`` hands the
weight to the GEMM library as it is, and the library copies it into its blocked layout
on every call; with so few rows that copy costs as much as the product (for the output
projection of an 8k vocabulary it is an 8 MB copy per step). oneDNN can reorder a weight
into that layout once (``torch.ops.mkldnn._reorder_linear_weight``) and multiply by the
reordered copy (``torch.ops.mkldnn._linear_pointwise``), as ``torch.compile``'s CPU
"freezing" does. Measured on the small Transformer (guide, section 18): greedy decoding
1.2-1.6x as fast, every translation of test_2016_flickr identical (greedy and beam 5).

A module that has such weights lists them in ``packable()`` (name -> (weight, bias)) and
multiplies through :func:`linear`, which uses the packed copy only when it is still the
weight's value: no autograd recording, a float32 CPU input, and the same storage and
version counter as when packed. Fused optimizers update parameters without bumping their
version counters, so any optimizer step drops every packed copy (a global step hook).
Where oneDNN is missing, :func:`pack_for_inference` packs nothing and ``F.linear`` runs.
"""

from __future__ import annotations

import logging
import weakref
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.optim.optimizer import register_optimizer_step_post_hook

log = logging.getLogger(__name__)

ROWS_HINT = 32  # rows per product that oneDNN chooses the packed layout for (the decode batch)
MAX_ROWS = 256  # larger products (the encoder's) pack their weight well enough themselves


def row_bucket(rows: int) -> int:
    """Rows a product with ``rows`` rows is padded to: exact up to 4, then multiples of 16 up
    to 64, then of 32 (zero rows, sliced off after). oneDNN compiles one kernel (~0.6 MB) per
    (weight shape, rows); a beam search meets every row count from 1 to batch x beam, and
    without buckets those kernels grew decoding's peak RSS by 0.22 GB (beam 5, 200
    sentences); with them by 0.07 GB, at the same speed."""
    if rows <= 4:
        return rows
    step = 16 if rows <= 64 else 32
    return -(-rows // step) * step


@dataclass
class PackedWeight:
    """A weight in oneDNN's blocked layout, with what identified the original when packed."""

    packed: Tensor
    bias: Tensor | None
    key: tuple  # (data_ptr, version) of the weight and of the bias

    @staticmethod
    def identity(weight: Tensor, bias: Tensor | None) -> tuple:
        b = (bias.data_ptr(), bias._version) if bias is not None else None
        return weight.data_ptr(), weight._version, b

    def matches(self, x: Tensor, weight: Tensor, bias: Tensor | None) -> bool:
        return (x.dtype == torch.float32 and x.device.type == "cpu"
                and not torch.is_grad_enabled() and self.key == self.identity(weight, bias))


def linear(owner: nn.Module, name: str, x: Tensor, weight: Tensor,
           bias: Tensor | None = None) -> Tensor:
    """``F.linear(x, weight, bias)``, through ``owner``'s packed copy ``name`` when it is current."""
    packs = owner.__dict__.get("_packed")
    p = packs.get(name) if packs else None
    rows = x.numel() // max(x.size(-1), 1)
    if (p is None or rows > MAX_ROWS or not p.matches(x, weight, bias)
            or not torch.backends.mkldnn.enabled):
        return F.linear(x, weight, bias)
    flat = x.reshape(rows, x.size(-1))  # (rows, in)
    padded = row_bucket(rows)
    if padded != rows:
        flat = torch.cat([flat, flat.new_zeros(padded - rows, flat.size(1))])  # (padded, in)
    y = torch.ops.mkldnn._linear_pointwise(flat, p.packed, p.bias, "none", [], "")
    return y[:rows].view(*x.shape[:-1], y.size(-1))


def available() -> bool:
    """oneDNN (MKL-DNN) is built in, not switched off (``torch.backends.mkldnn.flags``), and
    offers the reorder and the packed product."""
    return (torch.backends.mkldnn.is_available() and torch.backends.mkldnn.enabled
            and hasattr(torch.ops.mkldnn, "_reorder_linear_weight")
            and hasattr(torch.ops.mkldnn, "_linear_pointwise"))


_holders: weakref.WeakSet = weakref.WeakSet()  # modules that hold packed copies now
_hook = None


def _drop_all(*_args) -> None:
    for module in list(_holders):
        module.__dict__.pop("_packed", None)
    _holders.clear()


@torch.no_grad()
def pack_for_inference(model: nn.Module, rows: int = ROWS_HINT) -> int:
    """Pack every ``packable()`` weight of ``model``'s CPU float32 modules; returns how many.

    Idempotent: a weight whose packed copy is current is not packed again.
    """
    global _hook
    if not available():
        return 0
    if _hook is None:  # fused optimizers change weights without a version bump: forget all
        _hook = register_optimizer_step_post_hook(_drop_all)
    count = 0
    for module in model.modules():
        if not hasattr(module, "packable"):
            continue
        packs = module.__dict__.get("_packed") or {}
        for name, (weight, bias) in module.packable().items():
            if weight.device.type != "cpu" or weight.dtype != torch.float32:
                continue
            key = PackedWeight.identity(weight, bias)
            if name in packs and packs[name].key == key:
                continue
            try:
                packed = torch.ops.mkldnn._reorder_linear_weight(weight.contiguous(), rows)
            except RuntimeError as e:  # an unsupported build or shape: plain F.linear
                log.debug("not packing %s: %s", name, e)
                continue
            b = bias.detach().contiguous() if bias is not None else None
            packs[name] = PackedWeight(packed, b, key)
            count += 1
        if packs:
            module.__dict__["_packed"] = packs
            _holders.add(module)
    return count


def unpack(model: nn.Module) -> None:
    """Drop the packed copies held by ``model``'s modules."""
    for module in model.modules():
        if module.__dict__.pop("_packed", None) is not None:
            _holders.discard(module)
