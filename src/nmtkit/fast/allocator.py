"""Keep freed CPU memory inside the process, so that a training step reuses the last one's.

PyTorch's CPU tensors come from ``malloc``. glibc serves a large block (above an adaptive
threshold of 128 KiB to 32 MiB) as fresh pages from ``mmap`` and hands them back to the
kernel when the block is freed, and it trims the top of its heap the same way. A training
step allocates and frees the same large tensors every time (the (tokens, vocab) logits
alone are 90 MB for a 4096-token batch), so every step page-faults them in again, and the
kernel zeroes each page first: ~290 MB of fresh pages per step of the small Transformer
here, a tenth or so of the step's time (``benchmarks/train_speed.py`` measures it).

:func:`retain_freed_memory` asks glibc to serve every block from its heap (``M_MMAP_MAX``
= 0) and never to trim it (``M_TRIM_THRESHOLD`` = max), so a freed block stays mapped and
later steps reuse it: after the first few steps have grown the heap (PyTorch's aligned
allocations leave holes a little too small for the next request of the same size, so
the heap grows two or three times before the holes coalesce), a step faults no page.
This is what PyTorch's CPU performance guides get by preloading jemalloc or tcmalloc,
without a preload. The price is memory: the heap keeps its high-water mark (the peak
RSS of training grows by roughly a sixth). It is process-wide, so only
:func:`nmtkit.fast.for_training` applies it, with ``train.fast`` and
``train.retain_freed_memory`` on, and a :class:`~nmtkit.decode.translator.Translator` with
``decode.fast`` on (a beam search's (rows, vocabulary) log-probabilities come and go at
every step too: ~40k page faults per 200 sentences at beam 5 without it, none with it, and
no higher peak RSS).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import sys

log = logging.getLogger(__name__)

M_TRIM_THRESHOLD = -1  # mallopt parameters, from glibc's <malloc.h>
M_MMAP_MAX = -4
_applied = False


def retain_freed_memory() -> bool:
    """Keep freed blocks in the heap for reuse (glibc on Linux; elsewhere nothing happens).

    Returns whether the setting is in effect. Process-wide and idempotent; it changes only
    where later allocations come from, never what they hold.
    """
    global _applied
    if _applied:
        return True
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # not glibc (musl has no mallopt)
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    # mallopt returns 1 on success. M_TRIM_THRESHOLD takes an int: its maximum means "never".
    _applied = bool(mallopt(M_MMAP_MAX, 0)) and bool(mallopt(M_TRIM_THRESHOLD, 2**31 - 1))
    if _applied:
        log.debug("glibc malloc: freed memory is kept for reuse (M_MMAP_MAX=0, no trimming)")
    return _applied
