"""The training forward and backward replayed from CUDA graphs, one per batch shape.

On a GPU a Transformer's training step on short sentences is launch-bound: a few thousand
kernels of microseconds each, every one issued by Python through autocast and autograd.
A CUDA graph records the kernels of one forward + backward once and replays them with a
single launch. A graph is tied to its tensors' shapes and addresses, so

- batches come in a few fixed shapes (:func:`nmtkit.data.batching.static_batches`, padded
  by ``collate(..., static_tokens=...)``): one graph per (rows, source width, target width);
- each graph reads its batch from its own input buffers (copied into before a replay) and
  the loss's normaliser from a device scalar, and writes its loss and NLL sums to its own
  outputs;
- the gradients accumulate into the parameters' ``.grad`` tensors, which exist before the
  first capture and are zeroed in place (never set to ``None``) between updates.

The optimizer step, gradient clipping and the finite-loss check stay outside the graphs
(fused Adam is a handful of kernels), so a non-finite loss skips its update exactly as on
the readable path. Where a capture fails (a kernel that synchronises with the host, or an
eager pass's autograd graph still alive, whose gradient accumulation runs on the default
stream: PyTorch warns of it), a warning says so and the run goes on without graphs.
Dropout draws new masks at each replay (PyTorch's graph-safe Philox offsets).
:class:`GraphedLoss` with ``capture=False`` runs the same buffers and calls
without graphs: the path the CPU tests check against the readable loss.

Used by :class:`nmtkit.train.loop.Trainer` with ``train.cuda_graphs``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

log = logging.getLogger(__name__)

LossFn = Callable[[Tensor, Tensor, Tensor], tuple[Tensor, Tensor]]
"""(src, tgt_in, tgt_out) -> (loss sum, NLL sum) over the batch's target tokens."""

WARMUP_RUNS = 2
"""Eager forward + backward passes on a side stream before a capture (PyTorch's advice:
lazy initialisation, e.g. cuBLAS workspaces and autograd's buffers, must not be captured)."""


@dataclass
class _Captured:
    """One shape's graph (``None`` without capture) and the tensors it reads and writes."""

    src: Tensor
    tgt_in: Tensor
    tgt_out: Tensor
    scale: Tensor  # () float32: the loss is multiplied by it before the backward
    loss: Tensor | None = None
    nll: Tensor | None = None
    graph: Any = None  # torch.cuda.CUDAGraph


class GraphedLoss:
    """Forward + backward of ``loss_fn`` per batch, replayed from one graph per shape.

    ``run(src, tgt_in, tgt_out, scale)`` returns detached (loss sum, NLL sum) tensors on the
    device (no host synchronisation) and leaves ``scale * d(loss)/d(weights)`` added to the
    gradients. New shapes are captured by :meth:`prepare`, which must run while the
    gradients may be overwritten (before an update's first batch): a capture's warm-up
    passes add to the gradients, so :meth:`prepare` zeroes them afterwards.
    """

    def __init__(self, model: nn.Module, loss_fn: LossFn,
                 autocast: Callable[[], AbstractContextManager[Any]], capture: bool = True):
        self.model, self.loss_fn, self.autocast = model, loss_fn, autocast
        self.capture = capture
        self.shapes: dict[tuple[int, ...], _Captured] = {}
        self.pool = torch.cuda.graph_pool_handle() if capture else None
        self.params = [p for p in model.parameters() if p.requires_grad]

    def zero_grad(self) -> None:
        """Zero every gradient in place (allocating the missing ones): graphs hold their
        addresses."""
        for p in self.params:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
            else:
                p.grad.zero_()

    def _pass(self, c: _Captured) -> tuple[Tensor, Tensor]:
        with self.autocast():
            loss, nll = self.loss_fn(c.src, c.tgt_in, c.tgt_out)
        (loss * c.scale).backward()  # type: ignore[no-untyped-call]  # unannotated in torch
        return loss.detach(), nll.detach()

    def _fill(self, c: _Captured, src: Tensor, tgt_in: Tensor, tgt_out: Tensor,
              scale: float) -> None:
        c.src.copy_(src, non_blocking=True)
        c.tgt_in.copy_(tgt_in, non_blocking=True)
        c.tgt_out.copy_(tgt_out, non_blocking=True)
        c.scale.fill_(scale)

    def prepare(self, batches: list[tuple[Tensor, Tensor, Tensor]]) -> int:
        """Capture a graph for every shape among ``batches`` (src, tgt_in, tgt_out) not yet
        captured, from that batch's data; then, if a shape was new, zero the gradients (the
        warm-up passes added to them). Returns the number of new shapes."""
        new = 0
        for src, tgt_in, tgt_out in batches:
            key = (*src.shape, tgt_in.shape[1])
            if key in self.shapes:
                continue
            device = next(self.model.parameters()).device
            c = _Captured(torch.empty_like(src, device=device), torch.empty_like(tgt_in, device=device),
                          torch.empty_like(tgt_out, device=device),
                          torch.ones((), dtype=torch.float32, device=device))
            self._fill(c, src, tgt_in, tgt_out, 1.0)
            if self.capture:
                self._capture(c)
            self.shapes[key] = c
            new += 1
        if new:
            self.zero_grad()
        return new

    def _capture(self, c: _Captured) -> None:
        self.zero_grad()  # the gradients' tensors exist before any graph refers to them
        side = torch.cuda.Stream()  # type: ignore[no-untyped-call]  # unannotated in torch
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(WARMUP_RUNS):
                self._pass(c)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        try:
            with torch.cuda.graph(graph, pool=self.pool):
                c.loss, c.nll = self._pass(c)
        except RuntimeError as e:  # a kernel that cannot be captured (e.g. one that syncs)
            self.capture = False
            torch.cuda.synchronize()
            log.warning("train.cuda_graphs: capture failed (%s); training goes on without "
                        "graphs, on the same fixed shapes", str(e).splitlines()[0])
            return
        c.graph = graph
        log.info("captured a CUDA graph for batches of shape (%d, %d) -> %d",
                 *c.src.shape, c.tgt_in.shape[1])

    def run(self, src: Tensor, tgt_in: Tensor, tgt_out: Tensor,
            scale: float) -> tuple[Tensor, Tensor]:
        """One batch's forward + backward (its shape prepared before): (loss, NLL) sums."""
        c = self.shapes[(*src.shape, tgt_in.shape[1])]
        self._fill(c, src, tgt_in, tgt_out, scale)
        if c.graph is None:
            return self._pass(c)
        c.graph.replay()
        assert c.loss is not None and c.nll is not None
        return c.loss.clone(), c.nll.clone()  # the next replay overwrites the outputs
