"""Freed memory kept for reuse: repeated steps of large tensors stop faulting in new pages."""

import json
import subprocess
import sys

import pytest

PROBE = """
import json, resource, sys, torch
from nmtkit.fast.allocator import retain_freed_memory
applied = retain_freed_memory() if sys.argv[1] == "retain" else False
faults = []
for _ in range(8):  # a training step's large tensors: allocated, written, freed
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    a = torch.empty(16 * 2**20).fill_(1.0)  # 64 MB, above glibc's largest mmap threshold
    b = torch.empty(22 * 2**20).fill_(1.0)  # 88 MB, like a step's (tokens, vocab) logits
    c = torch.empty(4 * 2**20).fill_(1.0)  # 16 MB
    del a, b, c
    faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
print(json.dumps({"applied": applied, "faults": faults}))
"""


def probe(mode: str) -> dict:
    out = subprocess.run([sys.executable, "-c", PROBE, mode], capture_output=True, text=True,
                         check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc malloc settings")
def test_retained_memory_is_reused_without_page_faults():
    pages = (64 + 88 + 16) * 2**20 // 4096
    plain, kept = probe("plain"), probe("retain")
    assert kept["applied"] is True
    # Without it every step maps fresh pages (and faults each one in) ...
    assert min(plain["faults"][5:]) > pages // 2
    # ... with it, once the first steps have grown the heap, a step reuses what they freed.
    assert max(kept["faults"][5:]) < pages // 50


def test_idempotent():
    from nmtkit.fast.allocator import retain_freed_memory

    first = retain_freed_memory()
    assert retain_freed_memory() == first
