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
    from nmtkit.config import load as load_config

    with tempfile.TemporaryDirectory() as tmp:
        corpus = wmt_like_corpus(Path(tmp), a.seed) if a.lengths == "wmt" else []
        cfg = load_config(a.config, [f"train.amp={'off' if a.fp32 else 'bf16'}",
                                     f"train.compile={str(a.compile).lower()}", "train.device=cuda",
                                     f"train.cuda_graphs={str(a.cuda_graphs).lower()}",
                                     f"train.threads={a.threads}", "train.valid_bleu=false",
                                     "train.keep_last=0", *corpus, *a.set])
        return _timed_training(a, torch, cfg, Path(tmp) / "run")


def wmt_like_corpus(folder: Path, seed: int) -> list[str]:
    """Sentences of WMT-like lengths made of Multi30k's: each line joins 1 + Poisson(1)
    consecutive training pairs (at most 8), which doubles the mean length (about 28 subword
    tokens instead of 14) and gives a long tail; written as a ``parallel`` corpus, the
    validation split left as is. Returns the config overrides that read it."""
    import numpy as np

    from nmtkit.config import DataConfig
    from nmtkit.data.corpora import load_parallel

    rng = np.random.default_rng(seed)
    for split, name in (("train", "train"), ("val", "valid")):
        par = load_parallel(DataConfig(), split)
        src, tgt, i = [], [], 0
        while i < len(par.src):
            k = 1 if split == "val" else min(8, 1 + int(rng.poisson(1.0)))
            src.append(" ".join(par.src[i:i + k]))
            tgt.append(" ".join(par.tgt[i:i + k]))
            i += k
        (folder / f"{name}.de").write_text("\n".join(src) + "\n", encoding="utf-8")
        (folder / f"{name}.en").write_text("\n".join(tgt) + "\n", encoding="utf-8")
    return ["data.corpus=parallel", f"data.train={folder / 'train'}",
            f"data.valid={folder / 'valid'}", "data.max_len=256"]


def _timed_training(a: argparse.Namespace, torch, cfg, run_dir: Path) -> dict:
    import numpy as np

    from nmtkit.train.loop import Trainer
    from nmtkit.train.setup import parameter_count

    m, t = cfg.model, cfg.train
    tr = Trainer(cfg, run_dir)
    per_epoch = len(tr.epoch_batches(0))
    warmup = a.warmup if a.warmup >= 0 else min(per_epoch, 80)  # -1: one epoch (every shape)
    steps = a.steps if a.steps > 0 else max(3 * per_epoch, 60)
    batches: list = []
    epoch = 0
    while len(batches) < warmup + steps:
        batches += tr.epoch_batches(epoch)
        epoch += 1
    t_start = time.perf_counter()
    for i in range(warmup):
        tr.schedule.set_step(i + 1)
        tr._update([batches[i]])
    torch.cuda.synchronize()
    warmup_s = time.perf_counter() - t_start
    torch.cuda.reset_peak_memory_stats()
    timed = batches[warmup:warmup + steps]
    tokens, t0 = 0, time.perf_counter()
    for i, b in enumerate(timed):
        tr.schedule.set_step(warmup + i + 1)
        tokens += tr._update([b])[2]
    torch.cuda.synchronize()
    dt = time.perf_counter() - t0
    index = np.concatenate(timed)
    src_lens, tgt_lens = tr.data.train_ids.src_lens[index], tr.data.train_ids.tgt_lens[index]
    padded = sum(_padded_target_tokens(tr, b) for b in timed)
    vocab = len(tr.data.vocabs.tgt_vocab)
    n_params = parameter_count(tr.model)
    shapes = tr.updater.graphs.shapes.values() if tr.updater.graphs is not None else []
    graphs = sum(c.graph is not None for c in shapes)
    flops = transformer_train_flops(m.d_model, m.d_ff, m.layers, vocab,
                                    int(src_lens.sum()), tokens)
    flops += attention_train_flops(m.d_model, m.layers, src_lens, tgt_lens)
    peak = bf16_matmul_tflops(torch)
    return {"config": a.config, "lengths": a.lengths, "overrides": a.set, "params": n_params,
            "vocab": vocab, "amp_bf16": not a.fp32, "compile": a.compile,
            "cuda_graphs": a.cuda_graphs, "batch_shapes": len(shapes), "graphs_captured": graphs,
            "max_tokens": t.max_tokens, "warmup_steps": warmup, "warmup_s": round(warmup_s, 1),
            "steps": steps, "tgt_tokens": tokens,
            "mean_tgt_len": round(float(tgt_lens.mean()), 1),
            "tgt_real_of_padded": round(tokens / padded, 3),
            "seconds": round(dt, 3), "tgt_tokens_per_s": round(tokens / dt),
            "model_tflops_per_s": round(flops / dt / 1e12, 2),
            "bf16_matmul_peak_tflops": round(peak, 1), "mfu": round(flops / dt / 1e12 / peak, 4),
            "peak_gpu_mem_gb": round(torch.cuda.max_memory_allocated() / 1e9, 2)}


def _padded_target_tokens(tr, index) -> int:
    """Target positions the model computes for one batch (padding included)."""
    static = tr.cfg.train.max_tokens if tr.cfg.train.cuda_graphs else 0
    return int(tr.data.train_ids.collate(index, static_tokens=static).tgt_out.numel())


def decode_speed(a: argparse.Namespace, torch) -> dict:
    from _common import nmtkit_checkpoint_module, nmtkit_translator

    from nmtkit.data.corpora import load_parallel

    load_bundle = nmtkit_checkpoint_module().load_bundle

    bundle = load_bundle(a.model, "cuda")
    src = load_parallel(bundle.cfg.data, "test_2016_flickr").src
    tr = nmtkit_translator(bundle)
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
    p.add_argument("--steps", type=int, default=0, help="timed updates (0: 3 epochs, >= 60)")
    p.add_argument("--warmup", type=int, default=-1,
                   help="untimed updates first (-1: one epoch, at most 80: every batch shape)")
    p.add_argument("--lengths", choices=["multi30k", "wmt"], default="multi30k",
                   help="wmt: Multi30k pairs joined to WMT-like lengths (see wmt_like_corpus)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--threads", type=int, default=4, help="CPU threads (batching, collation)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="config override, as for nmtkit train (repeatable)")
    p.add_argument("--fp32", action="store_true", help="no bf16 autocast")
    p.add_argument("--compile", action="store_true", help="torch.compile the training forward")
    p.add_argument("--cuda-graphs", action="store_true",
                   help="train.cuda_graphs: fixed batch shapes, forward + backward from CUDA graphs")
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
