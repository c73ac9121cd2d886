"""Where a training step's GPU time goes (issue 18): torch.profiler over 3 updates."""
import argparse, os, sys, tempfile, time
from pathlib import Path
sys.path.insert(0, "benchmarks")
import torch
import gpu_speed
from nmtkit.config import load
from nmtkit.train.loop import Trainer

out = Path(os.environ["OUT"])
for lengths, graphs, tokens in (("wmt", False, 32768), ("multi30k", True, 8192)):
    tmp = Path(tempfile.mkdtemp())
    corpus = gpu_speed.wmt_like_corpus(tmp, 1) if lengths == "wmt" else []
    cfg = load("configs/multi30k_transformer_base.yaml", ["train.amp=bf16", "train.device=cuda",
               f"train.cuda_graphs={str(graphs).lower()}", "train.threads=4", "train.valid_bleu=false",
               "train.keep_last=0", f"train.max_tokens={tokens}", *corpus])
    tr = Trainer(cfg, tmp / "run")
    batches = tr.epoch_batches(0) + tr.epoch_batches(1)
    for i, b in enumerate(batches[:len(batches) // 2]):
        tr.schedule.set_step(i + 1); tr._update([b])
    torch.cuda.synchronize()
    rest = batches[len(batches) // 2: len(batches) // 2 + 4]
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU,
                                            torch.profiler.ProfilerActivity.CUDA]) as prof:
        for b in rest:
            tr._update([b])
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    for b in rest:
        tr._update([b])
    torch.cuda.synchronize()
    dt = (time.perf_counter() - t0) / len(rest)
    with open(out / "profile.txt", "a") as f:
        f.write(f"\n### {lengths} graphs={graphs} max_tokens={tokens}: {dt*1000:.1f} ms per update\n")
        f.write(prof.key_averages().table(sort_by="cuda_time_total", row_limit=35, max_name_column_width=70))
    print(lengths, graphs, f"{dt*1000:.1f} ms/update", flush=True)
