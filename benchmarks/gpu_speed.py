"""GPU training and decoding throughput of nmtkit: absolute figures, on the device it runs on.

Training: ``--steps`` real optimizer updates of ``--config`` (default the paper's base
model) on Multi30k de->en after ``--warmup`` untimed ones, with bf16 autocast unless
``--fp32``, optionally ``--compile``. Reported: target tokens/s, model TFLOP/s (linear
layers and attention, see ``_common.transformer_train_flops`` and
``_common.attention_train_flops``), its fraction of this GPU's measured bf16 matmul
rate (MFU), and peak GPU memory. Decoding (``--model CKPT``): test_2016_flickr, greedy and
beam, sentences/s, model load excluded.

    NMTKIT_DATA=../shared/data python benchmarks/gpu_speed.py --model runs/base/best.pt \\
        --out benchmarks/results/gpu_speed_h100.json
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from _common import (  # benchmarks/ is the script's directory
    attention_train_flops,
    emit,
    transformer_train_flops,
)

ROOT = Path(__file__).resolve().parents[1]


def bf16_matmul_tflops(torch) -> float:
    """Measured rate of an 8192^3 bf16 matrix product (the GPU's practical peak)."""
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    for _ in range(3):
        a @ b
    torch.cuda.synchronize()
    t0, reps = time.perf_counter(), 10
    for _ in range(reps):
        a @ b
    torch.cuda.synchronize()
    return 2 * 8192 ** 3 * reps / (time.perf_counter() - t0) / 1e12


def train_speed(a: argparse.Namespace, torch) -> dict:
    import numpy as np

    from nmtkit.config import load as load_config
    from nmtkit.train.loop import Trainer

    cfg = load_config(a.config, [f"train.amp={str(not a.fp32).lower()}",
                                 f"train.compile={str(a.compile).lower()}", "train.device=cuda",
                                 f"train.threads={a.threads}", "train.valid_bleu=false",
                                 "train.keep_last=0", *a.set])
    m, t = cfg.model, cfg.train
    with tempfile.TemporaryDirectory() as run_dir:
        tr = Trainer(cfg, run_dir)
        batches = tr.train_ids.batches(t.max_tokens, seed=1, epoch=0)
        need = a.warmup + a.steps
        while len(batches) < need:
            batches += tr.train_ids.batches(t.max_tokens, seed=1, epoch=len(batches))
        for i in range(a.warmup):
            tr.schedule.set_step(i + 1)
            tr._update([batches[i]])
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        timed = batches[a.warmup:need]
        tokens, t0 = 0, time.perf_counter()
        for i, b in enumerate(timed):
            tr.schedule.set_step(a.warmup + i + 1)
            tokens += tr._update([b])[2]
        torch.cuda.synchronize()
        dt = time.perf_counter() - t0
        index = np.concatenate(timed)
        src_lens, tgt_lens = tr.train_ids.src_lens[index], tr.train_ids.tgt_lens[index]
        vocab = len(tr.vocabs.tgt_vocab)
        n_params = tr.n_params
    flops = transformer_train_flops(m.d_model, m.d_ff, m.layers, vocab,
                                    int(src_lens.sum()), tokens)
    flops += attention_train_flops(m.d_model, m.layers, src_lens, tgt_lens)
    peak = bf16_matmul_tflops(torch)
    return {"config": a.config, "overrides": a.set, "params": n_params, "amp_bf16": not a.fp32,
            "compile": a.compile,
            "max_tokens": t.max_tokens, "steps": a.steps, "tgt_tokens": tokens,
            "seconds": round(dt, 3), "tgt_tokens_per_s": round(tokens / dt),
            "model_tflops_per_s": round(flops / dt / 1e12, 2),
            "bf16_matmul_peak_tflops": round(peak, 1), "mfu": round(flops / dt / 1e12 / peak, 4),
            "peak_gpu_mem_gb": round(torch.cuda.max_memory_allocated() / 1e9, 2)}


def decode_speed(a: argparse.Namespace, torch) -> dict:
    from _common import nmtkit_checkpoint_module

    from nmtkit.data.corpora import load_parallel

    load_bundle = nmtkit_checkpoint_module().load_bundle

    bundle = load_bundle(a.model, "cuda")
    src = load_parallel(bundle.cfg.data, "test_2016_flickr").src
    tr = bundle.translator()
    out = {"model": a.model, "n": len(src), "batch_size": a.batch_size}
    for name, beam in (("greedy", 1), (f"beam{a.beam}", a.beam)):
        tr.translate_lines(src[: a.batch_size], beam=beam, batch_size=a.batch_size)  # warm-up
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        tr.translate_lines(src, beam=beam, batch_size=a.batch_size)
        torch.cuda.synchronize()
        out[f"{name}_sents_per_s"] = round(len(src) / (time.perf_counter() - t0), 1)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", default=str(ROOT / "configs" / "multi30k_transformer_base.yaml"))
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--warmup", type=int, default=50)
    p.add_argument("--threads", type=int, default=4, help="CPU threads (batching, collation)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="config override, as for nmtkit train (repeatable)")
    p.add_argument("--fp32", action="store_true", help="no bf16 autocast")
    p.add_argument("--compile", action="store_true", help="torch.compile the training forward")
    p.add_argument("--model", help="a checkpoint to time decoding with")
    p.add_argument("--beam", type=int, default=4)
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--skip-train", action="store_true")
    p.add_argument("--out", default=None)
    a = p.parse_args()
    import torch

    if not torch.cuda.is_available():
        raise SystemExit("gpu_speed.py needs a CUDA device")
    result = {"benchmark": "gpu_speed", "device": torch.cuda.get_device_name(),
              "torch": torch.__version__}
    if not a.skip_train:
        result["train"] = train_speed(a, torch)
    if a.model:
        result["decode"] = decode_speed(a, torch)
    emit(result, a.out)


if __name__ == "__main__":
    main()
