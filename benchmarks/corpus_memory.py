"""Memory and time of preparing a large training corpus: in memory vs memory-mapped ids.

A corpus ``--repeat`` times the size of Multi30k's training split (its lines repeated,
numbered so that no two lines are equal) is prepared three ways, each in its own process:

- ``in_memory``: ``data.mmap: false``, what every run does by default (read, tokenize,
  hold the ids for the run);
- ``mmap_build``: ``data.mmap: true``, the first run: stream, sample, count, write the maps;
- ``mmap_reuse``: ``data.mmap: true``, every later run: map the stored ids.

Each then collates ``--batches`` token-budget batches. Reported per process: seconds to the
training ids, seconds for the batches, and peak RSS (which for the maps includes the
file pages the batches touched).

    NMTKIT_DATA=../shared/data .venv/bin/python benchmarks/corpus_memory.py --repeat 30
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import emit, machine  # benchmarks/ is the script's directory

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"


def write_corpus(data_dir: Path, out: Path, repeat: int) -> int:
    """<out>.de / <out>.en: Multi30k train ``repeat`` times, each copy's lines numbered."""
    n = 0
    for lang in ("de", "en"):
        with gzip.open(data_dir / "multi30k" / f"train.{lang}.gz", "rt", encoding="utf-8") as f:
            lines = [line.strip() for line in f]
        with open(f"{out}.{lang}", "w", encoding="utf-8") as f:
            for r in range(repeat):
                for i, line in enumerate(lines):
                    f.write(f"{line} {r * len(lines) + i}\n")
        n = repeat * len(lines)
    return n


def worker(a: argparse.Namespace) -> dict:
    import torch

    from nmtkit.config import DataConfig
    from nmtkit.data.mmap_ids import prepare_training_ids
    from nmtkit.data.prepare import build_vocabularies, encode_parallel, load_split, pairs_of

    torch.set_num_threads(1)
    cfg = DataConfig(corpus="parallel", train=a.prefix, valid=a.prefix, vocab_size=8000,
                     tokenizer_sample=a.sample, mmap=a.mode != "in_memory")
    t0 = time.perf_counter()
    if cfg.mmap:
        _, ids = prepare_training_ids(cfg)
    else:
        vocabs = build_vocabularies(cfg, pairs_of(load_split(cfg, "train")))
        ids = encode_parallel(cfg, load_split(cfg, "train"), vocabs, drop_long=True)
    t_ids = time.perf_counter() - t0
    batches = ids.batches(4096, seed=1)[: a.batches]
    t0 = time.perf_counter()
    tokens = sum(ids.collate(b).n_tokens for b in batches)
    t_batches = time.perf_counter() - t0
    return {"mode": a.mode, "pairs": len(ids), "seconds_to_ids": round(t_ids, 1),
            "batches": len(batches), "batch_tgt_tokens": tokens,
            "seconds_for_batches": round(t_batches, 2),
            "peak_rss_gb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6, 3)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeat", type=int, default=30, help="copies of Multi30k train")
    p.add_argument("--sample", type=int, default=200_000, help="data.tokenizer_sample")
    p.add_argument("--batches", type=int, default=2000)
    p.add_argument("--out", default=None, help="also write the JSON here")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--mode", help=argparse.SUPPRESS)
    p.add_argument("--prefix", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.worker:
        print(json.dumps(worker(a)))
        return
    data = Path(os.environ.get("NMTKIT_DATA", SHARED / "data"))
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        prefix = Path(tmp) / "big"
        pairs = write_corpus(data, prefix, a.repeat)
        env = {**os.environ, "NMTKIT_CACHE": str(Path(tmp) / "cache")}
        for mode in ("in_memory", "mmap_build", "mmap_reuse"):
            cmd = [sys.executable, __file__, "--worker", "--mode", mode, "--prefix", str(prefix),
                   "--sample", str(a.sample), "--batches", str(a.batches)]
            out = subprocess.run(cmd, capture_output=True, text=True, check=True, env=env)
            runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
        store = sum(f.stat().st_size for f in (Path(tmp) / "cache").rglob("*") if f.is_file())
        text = sum(Path(f"{prefix}.{lang}").stat().st_size for lang in ("de", "en"))
    result = {"benchmark": "corpus_memory", "machine": machine(),
              "corpus_pairs": pairs, "corpus_text_mb": round(text / 1e6, 1),
              "store_mb": round(store / 1e6, 1), "tokenizer_sample": a.sample,
              "runs": {r.pop("mode"): r for r in runs}}
    emit(result, a.out)


if __name__ == "__main__":
    main()
