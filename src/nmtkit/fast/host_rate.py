"""How much arithmetic this host does in a second: the float32 matrix-product rate, measured.

What a time budget buys depends on the host more than on anything in a recipe (a 2-core
AVX2 laptop and a 2-core AMX server differ by 2-3x), so the budget's size in work is
minutes x this rate (:mod:`nmtkit.config.tiers`). Measured on products of the small
Transformer's shapes (tokens x d_model by d_model x d_ff and back), the best of a few
repetitions, in about a second: the figure ``benchmarks/_common.matmul_peak_gflops``
records beside every benchmark result (there with more repetitions).
"""

from __future__ import annotations

import time

import torch

SHAPES = ((4096, 256, 1024), (4096, 1024, 256), (2048, 1024, 1024))
"""(m, k, n) of the timed products ``(m, k) @ (k, n)``: a 4096-token batch through a
d_model 256 / d_ff 1024 feed-forward layer, both ways, and a square-ish one."""


def matmul_gflops(repeats: int = 5, budget_s: float = 1.5) -> float:
    """The best float32 ``a @ b`` rate over :data:`SHAPES` (GFLOP/s, 2mkn FLOPs a product) in
    this process's threads: after one untimed product of each shape, each repetition times
    one product and the fastest counts (a busy moment of the host lowers one repetition,
    not the figure). Stops early once ``budget_s`` seconds have gone (a slow host)."""
    start, best = time.perf_counter(), 0.0
    operands = [(torch.randn(m, k), torch.randn(k, n)) for m, k, n in SHAPES]
    with torch.no_grad():
        for a, b in operands:  # untimed: first-touch of the output, library set-up
            a @ b
        for _ in range(repeats):
            for a, b in operands:
                t0 = time.perf_counter()
                a @ b
                seconds = time.perf_counter() - t0
                best = max(best, 2.0 * a.shape[0] * a.shape[1] * b.shape[1] / seconds / 1e9)
            if time.perf_counter() - start > budget_s:
                break
    return best
