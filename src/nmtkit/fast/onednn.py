"""The one place nmtkit calls oneDNN's private PyTorch operators, each with a fallback.

PyTorch has no public way to keep a weight in the GEMM library's blocked layout between
calls; its CPU "freezing" pass of ``torch.compile`` uses two operators registered under
``torch.ops.mkldnn`` for that, and so does :mod:`nmtkit.fast.packing`:

- ``_reorder_linear_weight(weight, rows)``: the weight, reordered once for products of
  about ``rows`` rows;
- ``_linear_pointwise(x, packed, bias, "none", [], "")``: ``x @ weight.T + bias`` with the
  reordered weight.

They are private and may change or vanish in a PyTorch release: :func:`available` says
whether they are there (and oneDNN is enabled), :func:`reorder` returns ``None`` when the
build refuses a weight, and callers then use ``F.linear``.
"""

from __future__ import annotations

import functools
import logging
import os
from typing import Any

import torch
from torch import Tensor

log = logging.getLogger(__name__)


def _ops() -> Any:
    return getattr(torch.ops, "mkldnn", None)


def available() -> bool:
    """oneDNN is built in, not switched off (``torch.backends.mkldnn.flags``), and offers the
    reorder and the packed product."""
    ops = _ops()
    return bool(torch.backends.mkldnn.is_available()  # type: ignore[no-untyped-call]  # unannotated in torch
                and torch.backends.mkldnn.enabled
                and ops is not None and hasattr(ops, "_reorder_linear_weight")
                and hasattr(ops, "_linear_pointwise"))


INTEL = "GenuineIntel"


def _cpuinfo_field(name: str) -> str:
    """The value of the first ``name`` line of /proc/cpuinfo, "" where there is none."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith(name):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return ""


@functools.cache  # read once: it is asked at every training product
def cpu_vendor() -> str:
    """The CPU's vendor as Linux reports it ("GenuineIntel", "AuthenticAMD"), "" where unknown."""
    return _cpuinfo_field("vendor_id")


@functools.cache
def has_avx512() -> bool:
    """The CPU has AVX-512's foundation instructions (Linux's ``avx512f`` flag)."""
    return "avx512f" in _cpuinfo_field("flags").split()


def trains_faster() -> bool:
    """Training's float32 products go through oneDNN's GEMM rather than MKL's
    (:mod:`nmtkit.fast.linear`, the blocked output layer): where oneDNN is there and the CPU
    is not Intel's but has AVX-512. Measured whole training steps of the small model
    (``benchmarks/fast_ab.py --only onednn_linear``, one process, alternating pairs):

    - AMD EPYC with AVX-512: on Zen 4 MKL's rate for the model's shapes wandered between
      120 and 190 GFLOP/s while oneDNN's held 190-210, steps 1.01-1.05x faster with
      oneDNN; on Zen 5 1.33x (``fast_ab_cpu_2026-11-27_zen5_avx512bf16.json``);
    - AMD EPYC with AVX2 only (Zen 3): steps 0.93x and 0.90x as fast with oneDNN in two
      runs (pairs 0.81-1.10; oneDNN's GEMM 117-156 GFLOP/s there against MKL's 145-183,
      ``benchmarks/results/fast_ab_cpu_2026-11-28_avx2_amd*.json``);
    - Intel Xeon (AMX, AVX-512): MKL is Intel's library and the faster one there, steps
      0.91x with oneDNN (pairs 0.89-0.94,
      ``benchmarks/results/fast_ab_cpu_2026-11-26_amx_host.json``).

    Read at every product, so a benchmark can switch it."""
    return available() and cpu_vendor() != INTEL and has_avx512()


def host_kind() -> str:
    """What kind of x86 CPU this is for training, the widest first: ``AMX`` (Intel Xeons
    since Sapphire Rapids: bfloat16 tiles), ``AVX512-BF16`` (AMD Zen 4/5, Intel Cooper
    Lake), ``AVX-512``, ``AVX2`` (most laptops and cloud VMs), else ``other``. The same
    recipe trains 2-3x faster on the first two (bf16 products) than on an AVX2-only host of
    as many cores; the figure a time budget buys differs with it (README, "what to expect")."""
    def supported(name: str) -> bool:
        probe = getattr(torch.cpu, name, None)  # private probes of torch.cpu, absent in old builds
        return bool(probe is not None and probe())
    flags = _cpuinfo_field("flags").split()
    held = (os.environ.get("ATEN_CPU_CAPABILITY", "").lower() in ("avx2", "default")
            or os.environ.get("ONEDNN_MAX_CPU_ISA", "").upper().startswith("AVX2"))
    if held:  # the libraries held to AVX2 (how CI and the benchmarks emulate such a host)
        return "AVX2"
    if supported("_is_amx_tile_supported"):
        return "AMX"
    if supported("_is_avx512_bf16_supported"):
        return "AVX512-BF16"
    if has_avx512():
        return "AVX-512"
    return "AVX2" if "avx2" in flags or supported("_is_avx2_supported") else "other"


def describe_host() -> str:
    """One line for the start of a run: the CPU's model, cores and :func:`host_kind`."""
    model = _cpuinfo_field("model name") or "unknown CPU"
    return f"{model}, {os.cpu_count()} cores, {host_kind()}"


def bf16_in_hardware() -> bool:
    """This CPU multiplies bfloat16 in hardware, so that oneDNN's bf16 GEMM, which PyTorch's
    CPU autocast calls, runs several times faster than float32 products:

    - Intel AMX tiles (Xeons since Sapphire Rapids): 3-8x the float32 rate (1.0-2.6 TFLOP/s
      by shape against 250-340 GFLOP/s on two cores, measured for the small model's shapes);
    - AVX512-BF16 dot products (AMD Zen 4 and 5, Intel Cooper Lake): on two cores of an AMD
      EPYC Zen 5, 931 against 203 GFLOP/s for a 2048x1024 by 1024x1024 product, and whole
      training steps of the small model 1.66x float32's
      (``benchmarks/results/fast_ab_cpu_2026-11-27_zen5_avx512bf16.json``).

    Without either, bf16 products are emulated and slower than float32: ``train.amp: bf16``
    then keeps float32 (:mod:`nmtkit.train.loop`). oneDNN must be there and on."""
    def supported(name: str) -> bool:
        probe = getattr(torch.cpu, name, None)  # private probes of torch.cpu, absent in old builds
        return bool(probe is not None and probe())
    in_hardware = supported("_is_amx_tile_supported") or supported("_is_avx512_bf16_supported")
    return bool(in_hardware and torch.backends.mkldnn.is_available()  # type: ignore[no-untyped-call]  # unannotated in torch
                and torch.backends.mkldnn.enabled)


def reorder(weight: Tensor, rows: int) -> Tensor | None:
    """``weight`` (out, in) in oneDNN's layout for products of ~``rows`` rows, or ``None``
    where this build cannot (then multiply with ``F.linear``)."""
    if not available():
        return None
    try:
        packed: Tensor = _ops()._reorder_linear_weight(weight.detach().contiguous(), rows)
        return packed
    except RuntimeError as e:  # an unsupported build, dtype or shape
        log.debug("oneDNN cannot reorder a %s weight: %s", tuple(weight.shape), e)
        return None


def packed_linear(x: Tensor, packed: Tensor, bias: Tensor | None) -> Tensor:
    """``x`` (rows, in) times a weight reordered by :func:`reorder`, plus ``bias`` -> (rows, out)."""
    out: Tensor = _ops()._linear_pointwise(x, packed, bias, "none", [], "")
    return out


def linear(x: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
    """``x @ weight.T + bias`` by oneDNN's GEMM, ``weight`` as it is (out, in), unreordered:
    ``x`` (..., in) -> (..., out). Plain tensors, no autograd (see :mod:`.linear`)."""
    out: Tensor = _ops()._linear_pointwise(x, weight, bias, "none", [], "")
    return out
