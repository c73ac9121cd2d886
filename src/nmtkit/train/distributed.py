"""Data-parallel training on PyTorch's own engine (``torchrun``; NCCL on GPUs, gloo on CPU).

Each rank takes every ``world``-th token-budget batch (see :mod:`nmtkit.data.batching`),
computes the gradient of its *summed* loss, and the ranks add their gradients and target
token counts with one all-reduce; dividing by the global count gives exactly the gradient
of a single process that accumulated the same batches (up to summation order). Only rank 0
writes checkpoints, metrics and logs.

    torchrun --nproc_per_node 2 -m nmtkit.cli train configs/x.yaml
"""

from __future__ import annotations

import os

import torch
import torch.distributed as dist


def world_info() -> tuple[int, int, int]:
    """(rank, world size, local rank) from torchrun's environment; (0, 1, 0) otherwise."""
    return (int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1)),
            int(os.environ.get("LOCAL_RANK", 0)))


_joined_here = False  # the group was made by init() (a caller's own group is left alone)


def init(device: torch.device) -> None:
    """Join the process group once (backend by device)."""
    global _joined_here
    if dist.is_initialized():
        return
    dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    _joined_here = True


def shutdown(sync: bool = False) -> None:
    """Leave the process group. A process that exits without this can abort at interpreter
    shutdown ("terminate called without an active exception": gloo's threads still hold
    work), so the training entry point calls it however training ends. ``sync`` (after a
    run that ended normally on every rank): wait at a barrier first, so that no rank tears
    its connections down while another is still finishing the last collective. After an
    error it is not used: a peer may be gone, and the barrier would wait for it."""
    global _joined_here
    if _joined_here and dist.is_initialized():
        if sync:
            dist.barrier()
        dist.destroy_process_group()
    _joined_here = False


def all_reduce_grads(params: list[torch.nn.Parameter], extras: list[float]) -> list[float]:
    """Sum gradients (flattened into one buffer) and a few scalars (token count, loss) over ranks.

    Returns the summed scalars; gradients are left summed (the caller divides).
    """
    grads = [p.grad for p in params if p.grad is not None]
    ref = grads[0]
    flat = torch.cat([g.reshape(-1) for g in grads] +
                     [torch.tensor(extras, device=ref.device, dtype=torch.float64).to(ref.dtype)])
    dist.all_reduce(flat)
    offset = 0
    for g in grads:
        g.copy_(flat[offset:offset + g.numel()].view_as(g))
        offset += g.numel()
    return flat[offset:].tolist()


def agree(flag: bool, device: torch.device) -> bool:
    """True on every rank if rank 0 says so (e.g. "the time budget is spent")."""
    t = torch.tensor([1.0 if flag else 0.0], device=device)
    dist.broadcast(t, src=0)
    return bool(t.item())


def broadcast_floats(values: list[float], device: torch.device) -> list[float]:
    """Rank 0's ``values`` on every rank (e.g. a measurement all ranks must act on alike)."""
    t = torch.tensor(values, dtype=torch.float64, device=device)
    dist.broadcast(t, src=0)
    return [float(v) for v in t.tolist()]


def params_checksum(model: torch.nn.Module) -> torch.Tensor:
    with torch.no_grad():
        return torch.stack([p.double().sum() for p in model.parameters()]).sum().reshape(1)


def assert_in_sync(model: torch.nn.Module) -> float:
    """All-gather a checksum of the weights and fail loudly if the ranks diverged."""
    mine = params_checksum(model)
    every = [torch.zeros_like(mine) for _ in range(dist.get_world_size())]
    dist.all_gather(every, mine)
    values = [float(v) for v in every]
    if max(values) - min(values) > 1e-6 * max(1.0, abs(values[0])):
        raise RuntimeError(f"ranks out of sync: weight checksums {values}")
    return values[0]
