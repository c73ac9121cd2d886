"""What each CPU training speed-up of nmtkit.fast adds, measured in one process by alternation.

The benchmark of ``train_speed.py`` compares fresh processes, minutes apart; on this shared
CPU their speed drifts by 10-30% within minutes, more than a speed-up of a few percent. Here
one trainer (the peer benchmark's model and batches, as in ``train_speed.py``) runs pairs of
``--chunk`` updates, one with the speed-up and one without, in alternating order, for
``--pairs`` pairs per speed-up; each pair gives one ratio of target tokens per second, and the
median is reported with the spread. Switched per chunk:

- ``output_loss``: :mod:`nmtkit.fast.output_loss` (the output layer and the loss in blocks)
  against the readable ``logits`` then ``label_smoothed_cross_entropy``;
- ``unpadded_encoder``: :mod:`nmtkit.fast.unpadded_encoder` against the readable encoder;
- ``onednn_linear``: the linear layers' products and the blocked output layer's by oneDNN
  (:mod:`nmtkit.fast.linear`) against MKL's (``torch.mm``/``F.linear``);
- ``amp_bf16``: ``train.amp: bf16`` (bfloat16 autocast, products in bfloat16) against
  float32, on a CPU with bfloat16 in hardware only (AMX or AVX512-BF16; skipped elsewhere,
  where it would not run: the JSON says so). Not a speed-up that keeps the numbers: a
  precision, whose quality is measured by training runs (``docs/results.md``).

    NMTKIT_DATA=../shared/data .venv/bin/python benchmarks/fast_ab.py --pairs 10
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

from _common import (  # benchmarks/ is the script's directory
    add_peer_setup_args,
    emit,
    machine,
    matmul_peak_gflops,
)
from train_speed import peer_config, regex_tokenized_corpus

SHARED = Path(__file__).resolve().parents[2] / "shared"
SPEEDUPS = ("output_loss", "unpadded_encoder", "onednn_linear", "amp_bf16")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_peer_setup_args(p)
    p.add_argument("--pairs", type=int, default=10, help="pairs of chunks per speed-up")
    p.add_argument("--chunk", type=int, default=6, help="updates per chunk")
    p.add_argument("--warmup-steps", type=int, default=10)
    p.add_argument("--only", nargs="+", choices=SPEEDUPS, default=list(SPEEDUPS),
                   help="measure these speed-ups only")
    p.add_argument("--out", default=None, help="also write the JSON here")
    a = p.parse_args()

    import torch

    from nmtkit.config import Config
    from nmtkit.fast import onednn
    from nmtkit.fast.unpadded_encoder import UnpaddedEncoderTransformer
    from nmtkit.models.transformer import Transformer
    from nmtkit.train.loop import Trainer

    torch.set_num_threads(a.threads)
    data = Path(os.environ.get("NMTKIT_DATA", SHARED / "data"))
    peak_before = matmul_peak_gflops(a.threads)
    with tempfile.TemporaryDirectory() as tmp:
        corpus = regex_tokenized_corpus(data, Path(tmp) / "regex")
        cfg = Config.from_dict(peer_config(corpus, a))
        os.environ["NMTKIT_CACHE"] = tmp
        # oneDNN's products where this CPU would have them (onednn.trains_faster: not on
        # Intel's), but its layers installed everywhere, so that onednn_linear can switch them.
        chosen = onednn.trains_faster()
        onednn.trains_faster = lambda: True  # type: ignore[assignment]
        tr = Trainer(cfg, Path(tmp) / "run")
        onednn.trains_faster = lambda: chosen  # type: ignore[assignment]
        blocked = tr.updater.blocked_loss
        assert blocked is not None and type(tr.model) is UnpaddedEncoderTransformer


        def switch(name: str, on: bool) -> None:
            if name == "output_loss":
                tr.updater.blocked_loss = blocked if on else None
            elif name == "onednn_linear":  # every oneDNN product asks this at each call
                onednn.trains_faster = lambda: on  # type: ignore[assignment]
            elif name == "amp_bf16":  # what the trainer's autocast reads at each batch
                tr.updater.amp = "bf16" if on else "off"
            else:
                tr.model.__class__ = UnpaddedEncoderTransformer if on else Transformer

        batches: list = []
        epoch = 0
        need = a.warmup_steps + 2 * a.pairs * a.chunk
        while len(batches) < need:
            batches += tr.data.train_ids.batches(a.max_tokens, seed=1, epoch=epoch)
            epoch += 1
        step = 0

        def chunk(first: int) -> float:
            """Target tokens/s over batches[first : first + chunk] (both halves of a pair take
            the same batches, so that their lengths do not differ)."""
            nonlocal step
            tokens, t0 = 0, time.perf_counter()
            for i in range(first, first + a.chunk):
                tr.schedule.set_step(step + 1)
                tokens += tr._update([batches[i]])[2]
                step += 1
            return tokens / (time.perf_counter() - t0)

        for _ in range(a.warmup_steps):
            tr.schedule.set_step(step + 1)
            tr._update([batches[step]])
            step += 1
        results: dict[str, dict] = {}
        first = step
        for name in a.only:
            if name == "amp_bf16" and not onednn.bf16_in_hardware():
                results[name] = {"skipped": "this CPU has no bfloat16 in hardware (AMX or AVX512-BF16)"}
                continue
            ratios, on_speeds, off_speeds = [], [], []
            for i in range(a.pairs):
                speeds = {}
                for on in ((True, False) if i % 2 == 0 else (False, True)):
                    switch(name, on)
                    speeds[on] = chunk(first)
                first += a.chunk
                # back to the trainer's own setting
                switch(name, {"amp_bf16": False, "onednn_linear": chosen}.get(name, True))
                ratios.append(speeds[True] / speeds[False])
                on_speeds.append(speeds[True])
                off_speeds.append(speeds[False])
            results[name] = {"speed_with_vs_without": round(statistics.median(ratios), 3),
                             "pairs": [round(x, 3) for x in ratios],
                             "tgt_tokens_per_s_with": round(statistics.median(on_speeds)),
                             "tgt_tokens_per_s_without": round(statistics.median(off_speeds))}
    emit({"benchmark": "fast_ab", "machine": machine(),
          "threads": a.threads, "torch": torch.__version__,
          "model": {"layers": a.layers, "d_model": a.d_model, "d_ff": a.d_ff, "heads": a.heads,
                    "max_tokens": a.max_tokens},
          "chunk_updates": a.chunk, "pairs": a.pairs,
          "onednn_chosen_for_training": chosen,
          "bf16_in_hardware": onednn.bf16_in_hardware(),
          "cpu_matmul_gflops_bf16": round(matmul_peak_gflops(a.threads, "bf16"), 1),
          "cpu_matmul_gflops_before_after": [round(peak_before, 1),
                                             round(matmul_peak_gflops(a.threads), 1)],
          "speedups": results}, a.out)


if __name__ == "__main__":
    main()
