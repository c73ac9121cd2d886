"""What each CPU decoding speed-up of nmtkit.fast adds, measured in one process by alternation.

``decode_speed.py`` compares fresh processes; on this shared CPU their speed drifts by
10-30% within minutes, more than a speed-up of a few percent. Here one translator (a
trained checkpoint, its weights packed as ``decode.fast`` packs them) translates the first
``--n`` lines of test_2016_flickr in batches of ``--batch-size``, each batch once with the
speed-up and once without, in alternating order, for ``--rounds`` rounds per search; each
round gives one ratio of sentences per second, and the median is reported with the spread
and the share of translations that come out the same. Switched per batch:

- ``shared_source``: :mod:`nmtkit.fast.shared_source` (one source row per sentence in beam
  search) against the readable model's state, for beam 5, beam 5 with early stop and greedy
  (the other speed-ups on in both arms).

The allocator setting (:mod:`nmtkit.fast.allocator`, applied by a translator with
``decode.fast``) cannot be taken back inside a process: the page faults and the kernel's
CPU time of a beam-5 pass are reported before and after it is applied.

    NMTKIT_DATA=../shared/data .venv/bin/python benchmarks/decode_ab.py --model runs/x/best.pt
"""

from __future__ import annotations

import argparse
import resource
import statistics
import time

from _common import (  # benchmarks/ is the script's directory
    add_decode_setup_args,
    emit,
    machine,
    matmul_peak_gflops,
)

SEARCHES = {"beam5": (5, False), "beam5_early_stop": (5, True), "greedy": (1, False)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_decode_setup_args(p)
    p.add_argument("--rounds", type=int, default=10,
                   help="rounds per search (each: every batch with and without)")
    p.add_argument("--out", default=None, help="also write the JSON here")
    a = p.parse_args()

    import torch

    from nmtkit import fast
    from nmtkit.checkpoint import load_bundle
    from nmtkit.data.corpora import load_parallel
    from nmtkit.decode.translator import Translator
    from nmtkit.fast.allocator import retain_freed_memory
    from nmtkit.fast.shared_source import share_sources, unshare_sources

    torch.set_num_threads(a.threads)
    bundle = load_bundle(a.model)
    src = load_parallel(bundle.cfg.data, "test_2016_flickr").src[: a.n]
    batches = [src[i:i + a.batch_size] for i in range(0, len(src), a.batch_size)]
    fast.for_inference(bundle.model)  # decode.fast without its allocator setting (see below)

    def timed(tr: Translator, lines: list[str], beam: int) -> tuple[float, list[str]]:
        t0 = time.perf_counter()
        out = tr.translate_lines(lines, beam=beam, batch_size=a.batch_size)
        return time.perf_counter() - t0, out

    # First (glibc raises its thresholds after large blocks are freed, as the matmul rate's
    # own measurement frees them): one beam-5 pass before the allocator setting, one after.
    tr = Translator.from_bundle(bundle, fast=False)  # packed above
    allocator = {}
    for label in ("before", "after"):
        if label == "after":
            allocator["applied"] = retain_freed_memory()
        timed(tr, src, 5)  # the heap grows in the first pass after the setting
        r0 = resource.getrusage(resource.RUSAGE_SELF)
        seconds = timed(tr, src, 5)[0]
        r1 = resource.getrusage(resource.RUSAGE_SELF)
        allocator[label] = {"page_faults": r1.ru_minflt - r0.ru_minflt,
                            "system_cpu_s": round(r1.ru_stime - r0.ru_stime, 3),
                            "user_cpu_s": round(r1.ru_utime - r0.ru_utime, 3),
                            "wall_s": round(seconds, 3)}
    peak_before = matmul_peak_gflops(a.threads)

    switches = {
        "shared_source": lambda on: (share_sources if on else unshare_sources)(bundle.model)}

    results: dict = {name: {} for name in switches}
    for name, switch in switches.items():
        for search_name, (beam, early) in SEARCHES.items():
            tr = Translator.from_bundle(bundle, fast=True, early_stop=early)
            outputs = {}
            for on in (True, False):  # warm-up, and the outputs compared
                switch(on)
                timed(tr, src, beam)
                outputs[on] = timed(tr, src, beam)[1]
            ratios, with_s, without_s = [], [], []
            for r in range(a.rounds):
                seconds = {True: 0.0, False: 0.0}
                for j, lines in enumerate(batches):
                    for on in ((True, False) if (r + j) % 2 == 0 else (False, True)):
                        switch(on)
                        seconds[on] += timed(tr, lines, beam)[0]
                ratios.append(seconds[False] / seconds[True])
                with_s.append(len(src) / seconds[True])
                without_s.append(len(src) / seconds[False])
            switch(True)
            results[name][search_name] = {
                "speed_with_vs_without": round(statistics.median(ratios), 3),
                "rounds": [round(x, 3) for x in ratios],
                "sents_per_s_with": round(statistics.median(with_s), 1),
                "sents_per_s_without": round(statistics.median(without_s), 1),
                "same_output": round(sum(x == y for x, y in zip(outputs[True], outputs[False],
                                                                  strict=True)) / len(src), 3)}
    emit({"benchmark": "decode_ab", "machine": machine(),
          "threads": a.threads, "torch": torch.__version__, "model": a.model,
          "n": len(src), "batch_size": a.batch_size, "rounds": a.rounds,
          "cpu_matmul_gflops_before_after": [round(peak_before, 1),
                                             round(matmul_peak_gflops(a.threads), 1)],
          "speedups": results,
          "allocator_beam5_pass": allocator}, a.out)


if __name__ == "__main__":
    main()
