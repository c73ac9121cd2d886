"""What every benchmark script does last: stamp the result, print it, and keep it."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from nmtkit.io import atomic_write_text


def emit(result: dict, out: str | None) -> None:
    """Add the command and date, print the JSON, and write it atomically to ``out`` if given."""
    result = {**result, "command": shlex.join([Path(sys.executable).name, *sys.argv]),
              "date": time.strftime("%Y-%m-%d %H:%M:%S")}
    text = json.dumps(result, indent=2)
    print(text)
    if out:
        atomic_write_text(out, text + "\n")


def emit_runs(result: dict, out: str | None, append: bool) -> None:
    """:func:`emit` a result whose ``runs`` holds one run; with ``append`` and an existing
    ``out``, that run is added after the runs already there (the file's other fields kept:
    one host, several conditions)."""
    if append and out and Path(out).exists():
        earlier = json.loads(Path(out).read_text(encoding="utf-8"))
        result = {**earlier, "runs": [*earlier["runs"], *result["runs"]]}
    emit(result, out)


def transformer_train_flops(d: int, d_ff: int, layers: int, vocab: int,
                            src_tokens: int, tgt_tokens: int) -> float:
    """FLOPs of the linear layers in one Transformer training pass (forward + backward = 3x
    forward; ``tests/test_benchmark_flops.py`` checks the count against PyTorch's).

    Per source token an encoder layer does 4 d^2 (Q, K, V, output) + 2 d d_ff multiply-adds,
    and each decoder layer projects it to source keys and values (2 d^2); per target token a
    decoder layer does 6 d^2 (self-attention's four, the source attention's query and
    output) + 2 d d_ff, plus d * vocab for the output projection. Attention's own products
    are :func:`attention_train_flops`.
    """
    enc = layers * (4 * d * d + 2 * d * d_ff) + layers * 2 * d * d
    dec = layers * (6 * d * d + 2 * d * d_ff) + d * vocab
    return 3 * 2 * (enc * src_tokens + dec * tgt_tokens)


def attention_train_flops(d: int, layers: int, src_lens: Any, tgt_lens: Any) -> float:
    """FLOPs of attention's own products (Eq. 1: Q K^T and the weighted sum of V) in one
    training pass (forward + backward = 3x forward) over sentences of these real lengths.

    Per layer and sentence: the encoder's self-attention does 2 S^2 d multiply-adds, the
    decoder's 2 T^2 d (the whole square: the kernels compute it and mask the future), the
    source attention 2 T S d. Padding is not counted (as the tokens of
    :func:`transformer_train_flops` are real ones).
    """
    import numpy as np

    s = np.asarray(src_lens, dtype=np.float64)
    t = np.asarray(tgt_lens, dtype=np.float64)
    macs = layers * 2 * d * float((s * s).sum() + (t * t).sum() + (t * s).sum())
    return 3 * 2 * macs


def machine() -> str:
    """The CPU's model name and core count (Linux), else the platform's processor; first the
    GPU's name where one is there (training and decoding run on it: ``device: auto``)."""
    import torch

    name = platform.processor() or platform.machine()
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                name = line.split(":", 1)[1].strip()
                break
    gpu = f"{torch.cuda.get_device_name()} (CUDA {torch.version.cuda}), " \
        if torch.cuda.is_available() else ""
    return f"{gpu}{name}, {os.cpu_count()} cores"


def matmul_peak_gflops(threads: int, library: str = "torch") -> float:
    """Best sgemm rate of this CPU for shapes like the model's (measured, not nominal).

    ``library``: "torch" times ``a @ b`` (MKL in PyTorch's x86 wheels: every earlier figure
    in benchmarks/results/ is against this rate); "onednn" the same products by oneDNN's
    GEMM (the private operator behind ``nmtkit.fast.onednn.linear``, which nmtkit's CPU
    training uses where it is there; 0.0 where it is not). On AMD hosts the two differ by up
    to ~1.4x. "bf16": ``a @ b`` on bfloat16 operands (oneDNN's; the products of
    ``train.amp: bf16``, 3-6x the float32 rate on a CPU with AMX, about 4.5x with
    AVX512-BF16 on an AMD Zen 5, emulated and slow without either).
    """
    import torch

    torch.set_num_threads(threads)
    onednn_product = getattr(getattr(torch.ops, "mkldnn", None), "_linear_pointwise", None)
    if library == "onednn" and (onednn_product is None or not torch.backends.mkldnn.is_available()):
        return 0.0
    best = 0.0
    for m, k, n in ((4096, 256, 1024), (4096, 1024, 256), (2048, 1024, 1024)):
        a, b = torch.randn(m, k), torch.randn(k, n)
        if library == "bf16":
            a, b = a.bfloat16(), b.bfloat16()
        w = b.t().contiguous()  # (n, k): the layout of a linear layer's weight, for oneDNN
        reps = 20
        for i in range(3 + reps):  # 3 untimed, then reps timed
            if i == 3:
                t0 = time.perf_counter()
            if library == "onednn":
                onednn_product(a, w, None, "none", [], "")
            else:
                a @ b
        best = max(best, 2 * m * k * n * reps / (time.perf_counter() - t0) / 1e9)
    return best


def gemm_peaks_gflops(threads: int, bf16: bool = False) -> dict[str, float]:
    """:func:`matmul_peak_gflops` of both float32 libraries, by name (and of bfloat16 with
    ``bf16``)."""
    libs = ("torch", "onednn", "bf16") if bf16 else ("torch", "onednn")
    return {lib: round(matmul_peak_gflops(threads, lib), 1) for lib in libs}


def add_peer_setup_args(p: argparse.ArgumentParser) -> None:
    """The model and batch of ../shared/bench/PEERS.md (3+3 layers, d_model 256, 4 heads,
    d_ff 1024, 4096-token batches, 2 threads): one place for the comparison's defaults."""
    p.add_argument("--layers", type=int, default=3)
    p.add_argument("--d-model", type=int, default=256)
    p.add_argument("--d-ff", type=int, default=1024)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--max-tokens", type=int, default=4096)
    p.add_argument("--threads", type=int, default=2)


def add_decode_setup_args(p: argparse.ArgumentParser) -> None:
    """The decoding benchmarks' checkpoint and sentences: the first ``--n`` lines of
    test_2016_flickr in batches of ``--batch-size``, ``--threads`` intra-op threads."""
    p.add_argument("--model", required=True)
    p.add_argument("--n", type=int, default=200)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--threads", type=int, default=2)


def median_round(rounds: list[tuple]) -> tuple:
    """The round whose ratio (its first item) is the median; the upper one of an even count.

    Reference and nmtkit alternate in rounds on this shared CPU, so each round's ratio
    compares the two under the same load; the median keeps one noisy round from deciding.
    """
    return sorted(rounds, key=lambda r: r[0])[len(rounds) // 2]


def add_source_arg(p: argparse.ArgumentParser) -> None:
    """``--src``: time another nmtkit tree in the worker (the reference is unchanged)."""
    p.add_argument("--src", default=None,
                   help="import nmtkit from DIR/src in the timed worker instead of the installed "
                        "one, e.g. a `git worktree add DIR <older commit>`: two runs of the "
                        "benchmark, one with --src, measure a change beside the reference")


def add_baseline_args(p: argparse.ArgumentParser) -> None:
    """``--baseline-src``: a second nmtkit tree timed in the same rounds (before/after a change);
    ``--no-fast``: time the tree under test with ``nmtkit.fast`` off."""
    p.add_argument("--baseline-src", default=None,
                   help="also time nmtkit from DIR/src (e.g. `git worktree add DIR <commit before "
                        "a change>`) in every round, alternating with the tree under test; the "
                        "median ratio of the two is reported")
    p.add_argument("--no-fast", action="store_true",
                   help="the tree under test runs with nmtkit.fast off (train.fast / decode.fast)")


def worker_env(src: str | None) -> dict:
    """The environment of the timed worker: nmtkit imported from ``src``/src if given."""
    env = dict(os.environ)
    if src:
        path = str(Path(src).resolve() / "src")
        if not (Path(path) / "nmtkit" / "__init__.py").exists():
            raise SystemExit(f"--src {src}: no src/nmtkit/__init__.py there")
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [path, env.get("PYTHONPATH")]))
    return env


def nmtkit_checkpoint_module():
    """``nmtkit.checkpoint`` (``nmtkit.train.checkpoint`` before the "readable core" layout),
    so that ``--src`` can time a tree from before that change."""
    try:
        from nmtkit import checkpoint
    except ImportError:
        from nmtkit.train import checkpoint  # type: ignore[no-redef]
    return checkpoint


def nmtkit_translator(bundle, **decode_overrides):
    """A translator of a loaded checkpoint: ``Translator.from_bundle`` (``bundle.translator()``
    in trees before the CLI and translator options of issue 63), so that ``--src`` can time
    such a tree."""
    if hasattr(bundle, "translator"):  # a tree before issue 63
        return bundle.translator(**decode_overrides)
    from nmtkit.decode.translator import Translator

    return Translator.from_bundle(bundle, **decode_overrides)


def nmtkit_translate(tr, lines, **options):
    """``tr.translate(lines, TranslateOptions(**options))`` (keyword arguments in trees before
    issue 63), so that ``--src`` can time such a tree."""
    try:
        from nmtkit.decode.options import TranslateOptions
    except ImportError:  # a tree before issue 63
        return tr.translate(lines, **options)
    return tr.translate(lines, TranslateOptions(**options))


def run_nmtkit(*args: str) -> str:
    """Run ``python -m nmtkit.cli ARGS`` from the repository root with this interpreter and
    environment; its stdout (the log goes to stderr). A failure stops the script with the
    command and the end of its stderr."""
    out = subprocess.run([sys.executable, "-m", "nmtkit.cli", *args], capture_output=True,
                         text=True, cwd=Path(__file__).resolve().parents[1], env=os.environ)
    if out.returncode != 0:
        raise SystemExit(f"nmtkit {' '.join(args)} failed:\n{out.stderr[-3000:]}")
    return out.stdout
