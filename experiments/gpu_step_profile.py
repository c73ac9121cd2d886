"""Where a GPU training update's time goes: torch.profiler over a few updates of the base
model, after half of two epochs of warm-up, and the wall time per update without the
profiler. The table (kernels and operators by CUDA time) is appended to ``--out``.

    NMTKIT_DATA=../shared/data python experiments/gpu_step_profile.py --lengths wmt \\
        --max-tokens 32768 --out step_profile.txt
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))  # benchmarks/gpu_speed.py

from gpu_speed import ROOT, wmt_like_corpus


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", default=str(ROOT / "configs" / "multi30k_transformer_base.yaml"))
    p.add_argument("--lengths", choices=["multi30k", "wmt"], default="multi30k")
    p.add_argument("--max-tokens", type=int, default=8192)
    p.add_argument("--cuda-graphs", action="store_true")
    p.add_argument("--updates", type=int, default=4, help="profiled (and then timed) updates")
    p.add_argument("--rows", type=int, default=35, help="rows of the table")
    p.add_argument("--out", required=True)
    a = p.parse_args()
    import torch

    from nmtkit.config import load
    from nmtkit.train.loop import Trainer

    tmp = Path(tempfile.mkdtemp())
    corpus = wmt_like_corpus(tmp, 1) if a.lengths == "wmt" else []
    cfg = load(a.config, ["train.amp=bf16", "train.device=cuda", "train.threads=4",
                          f"train.cuda_graphs={str(a.cuda_graphs).lower()}",
                          "train.valid_bleu=false", "train.keep_last=0",
                          f"train.max_tokens={a.max_tokens}", *corpus])
    tr = Trainer(cfg, tmp / "run")
    batches = tr.epoch_batches(0) + tr.epoch_batches(1)
    half = len(batches) // 2
    for i, b in enumerate(batches[:half]):  # every shape seen (and captured) first
        tr.schedule.set_step(i + 1)
        tr._update([b])
    torch.cuda.synchronize()
    rest = batches[half:half + a.updates]
    activities = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=activities) as prof:
        for b in rest:
            tr._update([b])
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    for b in rest:
        tr._update([b])
    torch.cuda.synchronize()
    ms = (time.perf_counter() - t0) / len(rest) * 1000
    with open(a.out, "a", encoding="utf-8") as f:
        f.write(f"\n### {a.lengths} graphs={a.cuda_graphs} max_tokens={a.max_tokens}: "
                f"{ms:.1f} ms per update\n")
        f.write(prof.key_averages().table(sort_by="cuda_time_total", row_limit=a.rows,
                                          max_name_column_width=70))
    print(f"{a.lengths} graphs={a.cuda_graphs}: {ms:.1f} ms per update")


if __name__ == "__main__":
    main()
