"""Training throughput of nmtkit beside the seed's reference, in one run, on this machine.

Both train the same model (3+3 layers, d_model 256, 4 heads, d_ff 1024 by default) on
Multi30k de->en tokenized with the same regex (``\\w+|[^\\w\\s]``, vocabulary min_freq 2),
as in ../shared/bench/PEERS.md. The reference uses its own recipe (fixed padding, batches
of 32 sentences); nmtkit uses 4096-token length-bucketed batches. Reported: real target
tokens per second and their ratio (the two alternate for ``--rounds`` rounds, a fresh
process each; the median round is reported, and every round's ratio), peak RSS of each
process, and the fraction of this CPU's measured matmul FLOP/s that nmtkit's training
step reaches (model FLOPs: the linear layers and attention's own products, on real
tokens; in each round against the matmul rate measured in the worker right before and
after its timed steps, the higher of the two; the median round is reported): against
torch's ``a @ b`` (MKL; every earlier file's figure) and, stricter, against the faster of
that and oneDNN's GEMM (which nmtkit's training uses for its linear layers where oneDNN
is there: ``nmtkit.fast.linear``).

    NMTKIT_DATA=../shared/data .venv/bin/python benchmarks/train_speed.py --steps 30

``--amp bf16`` trains with ``train.amp: bf16`` (bfloat16 autocast where the CPU has AMX,
float32 where it has not: the JSON says which ran); its fraction of the matmul rate is then
also given against the bfloat16 rate (``mfu_of_bf16_matmul_rate``), the one its products
can reach. ``--compile`` times the ``torch.compile``'d training forward (``train.compile``; its
compilation is reported apart and not counted); ``--mmap`` reads the batches from
memory-mapped token ids (``data.mmap``, built in a temporary cache first).
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# benchmarks/ is the script's directory
from _common import (
    add_baseline_args,
    add_peer_setup_args,
    add_source_arg,
    attention_train_flops,
    emit,
    gemm_peaks_gflops,
    machine,
    matmul_peak_gflops,
    median_round,
    transformer_train_flops,
    worker_env,
)

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"
TOKEN = re.compile(r"\w+|[^\w\s]")


def regex_tokenized_corpus(data_dir: Path, out: Path) -> Path:
    """Write train/val as whitespace-joined regex tokens: <out>/{train,val}.{de,en}."""
    out.mkdir(parents=True, exist_ok=True)
    for split in ("train", "val"):
        for lang in ("de", "en"):
            with gzip.open(data_dir / "multi30k" / f"{split}.{lang}.gz", "rt", encoding="utf-8") as f:
                lines = [" ".join(TOKEN.findall(line.strip())) for line in f]
            (out / f"{split}.{lang}").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return out


def batches_for(ids, max_tokens: int, n: int) -> list:
    """At least ``n`` batches of ``ids`` in training order: epoch 0's, then epoch 1's ... (a
    timing of more updates than one epoch has batches goes on into the next epoch)."""
    batches: list = []
    epoch = 0
    while len(batches) < n:
        more = ids.batches(max_tokens, seed=1, epoch=epoch)
        if not more:
            raise ValueError("the corpus makes no batch")
        batches += more
        epoch += 1
    return batches


def peer_config(corpus: Path, dims: argparse.Namespace, output_bias: bool = False,
                **train: object) -> dict:
    """nmtkit's config for the peer benchmark's model and batches (../shared/bench/PEERS.md) on
    ``corpus`` (:func:`regex_tokenized_corpus`'s directory): ``dims`` has the
    :func:`_common.add_peer_setup_args` fields; ``train`` adds or overrides train keys. One
    place for train_speed.py, fast_ab.py and experiments/cpu_step_profile.py."""
    return {
        "name": "bench",
        "data": {"corpus": "parallel", "train": str(corpus / "train"), "valid": str(corpus / "val"),
                 "tokenizer": "whitespace", "min_freq": 2, "joint_vocab": False},
        "model": {"layers": dims.layers, "d_model": dims.d_model, "d_ff": dims.d_ff,
                  "heads": dims.heads, "dropout": 0.1, "norm": "pre", "tie_all": False,
                  "tie_output": True, "output_bias": output_bias},
        "train": {"max_tokens": dims.max_tokens, "label_smoothing": 0.1, "warmup": 300,
                  "lr": 1.0, "threads": dims.threads, "valid_bleu": False, "keep_last": 0,
                  **train},
    }


def nmtkit_worker(args: argparse.Namespace) -> dict:
    """Runs in its own process: build the trainer, time ``steps`` real optimizer updates."""
    import numpy as np
    import torch

    from nmtkit.config import Config
    from nmtkit.train.loop import Trainer

    torch.set_num_threads(args.threads)
    corpus = Path(args.corpus)
    cfg = Config.from_dict(peer_config(
        corpus, args, output_bias=args.output_bias, compile=args.compile, amp=args.amp,
        **({"fast": False} if args.no_fast else {})))
    cfg.data.mmap = args.mmap
    with tempfile.TemporaryDirectory() as run_dir:
        os.environ["NMTKIT_CACHE"] = run_dir  # a --mmap store is built here, then removed
        t_setup = time.perf_counter()
        tr = Trainer(cfg, run_dir)
        setup_s = time.perf_counter() - t_setup
        batches = batches_for(tr.data.train_ids, args.max_tokens, args.warmup_steps + args.steps + 3)
        # Steady state, as a run of thousands of steps sees it: the first steps grow the heap
        # that nmtkit.fast.allocator keeps (to the largest batch so far: they page-fault), and a
        # compiled forward builds one static, then one dynamic-shape graph.
        warm = max(args.warmup_steps, 3 if args.compile else 1)
        t_warm = time.perf_counter()
        for i in range(warm):  # warm-up, not counted
            tr.schedule.set_step(i + 1)
            tr._update([batches[i]])
        warm_s = time.perf_counter() - t_warm
        # This CPU's matmul rate right before and after the timed steps, in this process: the
        # host's speed drifts within minutes, so the fraction below compares like with like.
        amp = tr.updater.amp  # train.amp as it runs on this CPU (nmtkit.train.loop)
        bf16 = amp == "bf16"
        peaks = [gemm_peaks_gflops(args.threads, bf16)]
        tokens, t0 = 0, time.perf_counter()
        for i in range(warm, warm + args.steps):
            tr.schedule.set_step(i + 1)
            tokens += tr._update([batches[i]])[2]
        dt = time.perf_counter() - t0
        peaks.append(gemm_peaks_gflops(args.threads, bf16))
        model = tr.model
        n_params = sum(p.numel() for p in {id(p): p for p in model.parameters()}.values())
        timed = np.concatenate(batches[warm:warm + args.steps])
        src_lens, tgt_lens = tr.data.train_ids.src_lens[timed], tr.data.train_ids.tgt_lens[timed]
    V = len(tr.data.vocabs.tgt_vocab)
    flops = transformer_train_flops(args.d_model, args.d_ff, args.layers, V,
                                    int(src_lens.sum()), tokens)
    flops += attention_train_flops(args.d_model, args.layers, src_lens, tgt_lens)
    return {"tgt_tokens_per_s": round(tokens / dt, 1), "steps": args.steps,
            "tokens": tokens, "seconds": round(dt, 2), "params": n_params,
            "src_vocab": len(tr.data.vocabs.src_vocab), "tgt_vocab": V,
            "model_gflops_per_s": round(flops / dt / 1e9, 1),
            "matmul_gflops_before_after": [x["torch"] for x in peaks],
            "mfu_of_matmul_rate_around": round(flops / dt / 1e9 / max(x["torch"] for x in peaks), 3),
            "onednn_gflops_before_after": [x["onednn"] for x in peaks],
            "mfu_of_best_gemm_rate_around": round(
                flops / dt / 1e9 / max(max(x["torch"], x["onednn"]) for x in peaks), 3),
            "amp": amp,
            **({"bf16_gflops_before_after": [x["bf16"] for x in peaks],
                "mfu_of_bf16_matmul_rate_around": round(
                    flops / dt / 1e9 / max(x["bf16"] for x in peaks), 3)} if bf16 else {}),
            "compile": args.compile, "mmap": args.mmap, "setup_s": round(setup_s, 1),
            "warmup_steps": warm, "warmup_s": round(warm_s, 1),
            "peak_rss_gb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6, 3)}


def run_json(cmd: list[str], env: dict | None = None) -> dict:
    out = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if out.returncode != 0:  # the worker's own error, not only its exit status
        raise SystemExit(f"{' '.join(cmd[:3])} ... exited {out.returncode}:\n{out.stderr[-3000:]}")
    rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1e6
    res = json.loads(out.stdout.strip().splitlines()[-1])
    res.setdefault("peak_rss_gb_children_max", round(rss, 3))
    return res


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--ref-steps", type=int, default=10)
    p.add_argument("--warmup-steps", type=int, default=10,
                   help="nmtkit steps before the timed ones (the reference's recipe has fixed "
                        "shapes and takes 1)")
    p.add_argument("--rounds", type=int, default=3,
                   help="reference and nmtkit alternate this many times (median ratio reported)")
    add_peer_setup_args(p)
    p.add_argument("--output-bias", action="store_true",
                   help="bias before the softmax (off by default: as in the small recipe and fairseq)")
    p.add_argument("--compile", action="store_true", help="torch.compile the training forward")
    p.add_argument("--mmap", action="store_true", help="batches from memory-mapped token ids")
    p.add_argument("--amp", choices=("off", "bf16"), default="off",
                   help="train.amp (bf16: bfloat16 autocast where the CPU has AMX)")
    p.add_argument("--out", default=None, help="also write the JSON here")
    add_source_arg(p)
    add_baseline_args(p)
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--corpus", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.worker:
        print(json.dumps(nmtkit_worker(a)))
        return
    data = Path(os.environ.get("NMTKIT_DATA", SHARED / "data"))
    rounds, baseline_rounds = [], []
    with tempfile.TemporaryDirectory() as tmp:
        corpus = regex_tokenized_corpus(data, Path(tmp) / "regex")
        dims = ["--layers", str(a.layers), "--d-model", str(a.d_model), "--d-ff", str(a.d_ff),
                "--heads", str(a.heads), "--threads", str(a.threads)]
        bias = ["--output-bias"] if a.output_bias else []
        bias += ["--compile"] * a.compile + ["--mmap"] * a.mmap
        bias += ["--warmup-steps", str(a.warmup_steps), "--amp", a.amp]
        # The two alternate, a fresh process each, so that both see the same drift of this
        # shared CPU; every round gives one ratio, and the median round is reported.
        for _ in range(a.rounds):
            ref = run_json([sys.executable, str(SHARED / "bench" / "reference_speed.py"), *dims,
                            "--steps", str(a.ref_steps), "--decode-n", "5"])
            worker = [sys.executable, __file__, "--worker", "--corpus", str(corpus), *dims,
                      "--steps", str(a.steps), "--max-tokens", str(a.max_tokens), *bias]
            ours = run_json(worker + ["--no-fast"] * a.no_fast, env=worker_env(a.src))
            rounds.append((ours["tgt_tokens_per_s"] / ref["train_tgt_tokens_per_s"], ref, ours))
            if a.baseline_src:
                base = run_json(worker, env=worker_env(a.baseline_src))
                baseline_rounds.append((ours["tgt_tokens_per_s"] / base["tgt_tokens_per_s"], base))
    ratio, ref, ours = median_round(rounds)
    peak = matmul_peak_gflops(a.threads)
    # Each round's fraction of the matmul rate measured around its own timed steps (the higher
    # of before and after, so that a slow moment does not flatter it); the median is reported.
    mfus = sorted(o["mfu_of_matmul_rate_around"] for _, _, o in rounds)
    best_mfus = sorted(o["mfu_of_best_gemm_rate_around"] for _, _, o in rounds)
    result = {
        "benchmark": "train_speed", "machine": machine(),
        "threads": a.threads, "nmtkit_src": a.src, "nmtkit_fast": not a.no_fast,
        "model": {"layers": a.layers, "d_model": a.d_model, "d_ff": a.d_ff, "heads": a.heads,
                  "nmtkit_output_bias": a.output_bias, "nmtkit_compile": a.compile,
                  "nmtkit_mmap": a.mmap, "nmtkit_amp_asked": a.amp,
                  "nmtkit_amp_ran": ours.get("amp", "off")},
        "reference": ref, "nmtkit": ours,
        "speedup_vs_reference": round(ratio, 2),
        "rounds": [{"reference_tgt_tokens_per_s": r["train_tgt_tokens_per_s"],
                    "nmtkit_tgt_tokens_per_s": o["tgt_tokens_per_s"], "ratio": round(x, 2)}
                   for x, r, o in rounds],
        "cpu_matmul_peak_gflops": round(peak, 1),
        "cpu_onednn_gemm_peak_gflops": round(matmul_peak_gflops(a.threads, "onednn"), 1),
        "flops_counted": "linear layers (6 x weights x tokens) + attention's Q K^T and "
                         "weighted sum of V on real lengths (benchmarks/_common.py)",
        "mfu_of_measured_matmul_peak": mfus[len(mfus) // 2],
        "rounds_mfu": [o["mfu_of_matmul_rate_around"] for _, _, o in rounds],
        # the same against the faster of torch's matmul (MKL) and oneDNN's GEMM, which nmtkit's
        # CPU training uses for its linear layers (nmtkit.fast.linear): the stricter figure
        "mfu_of_best_gemm_rate": best_mfus[len(best_mfus) // 2],
        "rounds_mfu_best_gemm": [o["mfu_of_best_gemm_rate_around"] for _, _, o in rounds],
        **({"mfu_of_bf16_matmul_rate": sorted(
                o["mfu_of_bf16_matmul_rate_around"] for _, _, o in rounds)[len(rounds) // 2],
            "rounds_mfu_bf16": [o["mfu_of_bf16_matmul_rate_around"] for _, _, o in rounds]}
           if ours.get("amp") == "bf16" else {}),
        "peers_tgt_tokens_per_s_same_machine_kind": {"fairseq": 2244, "OpenNMT-py": 2217,
                                                     "JoeyNMT": 768, "source": "shared/bench/PEERS.md"},
    }
    if baseline_rounds:
        x, base = median_round(baseline_rounds)
        result["baseline"] = {"src": a.baseline_src, "median_round": base,
                              "speed_vs_baseline": round(x, 3),
                              "rounds_speed_vs_baseline": [round(r[0], 3) for r in baseline_rounds]}
    emit(result, a.out)


if __name__ == "__main__":
    main()
