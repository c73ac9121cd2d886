"""How fast a CPU training update could be if it were only its matrix products.

One update of train_speed.py's model and batch (3+3 layers, d_model 256, 4096-token batches
of Multi30k de->en) is recorded operator by operator; every matrix product in it (``mm``,
``addmm``, ``bmm``, ``baddbmm``, in place or not, forward and backward) is then replayed
alone on tensors of the same shapes and strides, ``--reps`` times, and the fastest time of
each is summed. Printed as JSON: the step's own time (median of ``--steps``), the products'
time alone, their FLOPs, and the matmul rate of benchmarks/_common.py measured right
before and after. Read together:

- products' time / step time: the share of the step that is products at their isolated speed;
- products' FLOP/s / matmul rate: how near the products themselves run to the peak at these
  shapes (short inner dimensions, a 6,208-column output layer, attention's small batches);
- the step's fraction of the matmul rate (train_speed.py's figure) can reach at most the
  second figure even with everything else free.

    NMTKIT_DATA=../shared/data python experiments/gemm_ceiling.py [--threads 2]
"""

from __future__ import annotations

import argparse
import collections
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))  # train_speed.py

from _common import matmul_peak_gflops  # noqa: E402
from train_speed import SHARED, batches_for, regex_tokenized_corpus  # noqa: E402

PRODUCTS = {"mm", "addmm", "addmm_", "bmm", "baddbmm", "baddbmm_", "addbmm"}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--reps", type=int, default=5)
    a = p.parse_args()
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    from nmtkit.config import Config
    from nmtkit.train.loop import Trainer

    torch.set_num_threads(a.threads)
    tmp = Path(tempfile.mkdtemp())
    corpus = regex_tokenized_corpus(SHARED / "data", tmp / "corpus")
    cfg = Config.from_dict({
        "name": "ceiling",
        "data": {"corpus": "parallel", "train": str(corpus / "train"),
                 "valid": str(corpus / "val"), "tokenizer": "whitespace", "min_freq": 2,
                 "joint_vocab": False},
        "model": {"layers": 3, "d_model": 256, "d_ff": 1024, "heads": 4, "dropout": 0.1,
                  "norm": "pre", "tie_all": False, "tie_output": True, "output_bias": False},
        "train": {"max_tokens": 4096, "label_smoothing": 0.1, "warmup": 300, "lr": 1.0,
                  "threads": a.threads, "valid_bleu": False, "keep_last": 0},
    })
    tr = Trainer(cfg, tmp / "run")
    batches = batches_for(tr.data.train_ids, 4096, a.warmup + a.steps + 1)
    for i in range(a.warmup):
        tr.schedule.set_step(i + 1)
        tr._update([batches[i]])
    rate_before = matmul_peak_gflops(a.threads, "torch")
    step_s = []
    for i in range(a.warmup, a.warmup + a.steps):
        t = time.perf_counter()
        tr._update([batches[i]])
        step_s.append(time.perf_counter() - t)
    recorded: list[tuple] = []

    class Record(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
            if func.overloadpacket.__name__ in PRODUCTS:
                spec = [(x.shape, x.stride(), x.dtype) if isinstance(x, torch.Tensor) else x
                        for x in args]
                recorded.append((func, spec, dict(kwargs or {})))
            return func(*args, **(kwargs or {}))

    with Record():
        tr._update([batches[a.warmup + a.steps]])
    by_kind: collections.Counter[str] = collections.Counter()
    flops_kind: collections.Counter[str] = collections.Counter()
    total_s = total_flops = 0.0
    for func, spec, kwargs in recorded:
        args = [_like(torch, s) for s in spec]
        mats = [x for x in args if isinstance(x, torch.Tensor) and x.dim() >= 2]
        a_, b_ = mats[-2], mats[-1]
        flops = 2.0 * a_.shape[-2] * a_.shape[-1] * b_.shape[-1] * (a_.shape[0] if a_.dim() == 3 else 1)
        func(*args, **kwargs)
        best = float("inf")
        for _ in range(a.reps):
            t = time.perf_counter()
            func(*args, **kwargs)
            best = min(best, time.perf_counter() - t)
        name = func.overloadpacket.__name__
        key = f"{name} {tuple(a_.shape)}x{tuple(b_.shape)}"
        by_kind[key] += best
        flops_kind[key] += flops
        total_s += best
        total_flops += flops
    rate_after = matmul_peak_gflops(a.threads, "torch")
    peak = max(rate_before, rate_after)
    step = statistics.median(step_s)
    print(json.dumps({
        "threads": a.threads, "step_s_median": round(step, 4),
        "products": len(recorded), "products_s_alone": round(total_s, 4),
        "products_share_of_step": round(total_s / step, 3),
        "products_gflops": round(total_flops / 1e9, 2),
        "products_gflop_per_s_alone": round(total_flops / total_s / 1e9, 1),
        "matmul_rate_before_after": [round(rate_before, 1), round(rate_after, 1)],
        "products_fraction_of_matmul_rate": round(total_flops / total_s / 1e9 / peak, 3),
        "slowest": [{"product": k, "s": round(v, 4),
                     "gflop_per_s": round(flops_kind[k] / v / 1e9, 1)}
                    for k, v in by_kind.most_common(12)],
    }, indent=1))


def _like(torch, s):  # noqa: ANN001, ANN202
    """A tensor of a recorded (shape, stride, dtype), random values; other arguments as they
    were."""
    if not (isinstance(s, tuple) and len(s) == 3 and isinstance(s[0], torch.Size)):
        return s
    shape, stride, dtype = s
    span = 1 + sum((n - 1) * st for n, st in zip(shape, stride, strict=True))
    return torch.randn(span, dtype=dtype).as_strided(shape, stride)


if __name__ == "__main__":
    main()
