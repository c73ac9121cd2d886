"""What the guide says about the annotated post's own LayerNorm is what it measures.

The post's ``LayerNorm`` divides by the unbiased standard deviation plus eps; nmtkit uses
``torch.nn.LayerNorm`` (biased variance, eps inside the square root). The parity model of
``tests/test_compat_annotated.py`` (the reference's ``make_model`` with perturbed weights,
converted by :func:`nmtkit.compat.annotated.from_reference`) is run here with the reference's
LayerNorm as written: the largest difference between its teacher-forced log-probabilities
and nmtkit's, and how many of 30 random sources greedy decoding still translates alike, are
printed (``pytest -s``) and must be the numbers in docs/guide.src.md. With the standard
form patched in, the parity test finds no difference (1e-5) and identical outputs.
"""

from __future__ import annotations

import importlib.util
import re

import pytest
import torch

from .helpers import ANNOTATED_REFERENCE, ROOT, parity_batch, parity_models
from .helpers import PARITY_D as D
from .helpers import PARITY_SRC_V as SRC_V

pytestmark = [pytest.mark.numerics, pytest.mark.slow]  # slow: not in the fast tier

REF_PATH = ANNOTATED_REFERENCE
if not REF_PATH.exists():
    pytest.skip(f"reference implementation not found at {REF_PATH}", allow_module_level=True)

CLAIM = re.compile(r"differ by at most (?P<value>[0-9.]+) in log-probability")
GREEDY_CLAIM = re.compile(r"the same tokens for (?P<same>\d+) of (?P<n>\d+) random sources")
SOURCES = 30


def measure() -> tuple[float, int]:
    """(max |log p_post - log p_nmtkit| on a padded batch, how many of :data:`SOURCES` random
    sources greedy decoding translates alike)."""
    spec = importlib.util.spec_from_file_location("annotated_reference_as_written", REF_PATH)
    ref = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ref)  # its own LayerNorm, as the post writes it
    reference, ours = parity_models(ref)  # the parity test's weights
    src, tgt, batch = parity_batch(ref)
    with torch.no_grad():
        post = reference.generator(reference.decode(
            reference.encode(src, batch.src_mask), batch.src_mask, tgt, batch.tgt_mask))
        nmtkit = ours(src, batch.src_mask, tgt, batch.tgt_mask)
        torch.manual_seed(2)
        same_greedy = 0
        for _ in range(SOURCES):
            n = int(torch.randint(3, 10, (1,)))
            s = torch.randint(3, SRC_V, (1, n))
            mask = torch.ones(1, 1, n, dtype=torch.bool)
            expected = ref.greedy_decode(reference, s, mask, 8, 0)[0].tolist()
            state, ys, prev = ours.start(ours.encode(s, mask), mask), [0], torch.tensor([0])
            for _ in range(7):
                log_probs, state, _ = ours.step(state, prev)
                prev = log_probs.argmax(-1)
                ys.append(int(prev))
            same_greedy += ys == expected
    return float((post - nmtkit).abs().max()), same_greedy


def test_the_guide_states_the_measured_layer_norm_difference():
    diff, same_greedy = measure()
    print(f"\npost's LayerNorm vs nn.LayerNorm on the parity model (d_model {D}): "
          f"max |difference of log-probabilities| = {diff:.4f}; "
          f"greedy outputs equal for {same_greedy} of {SOURCES} sources")
    text = (ROOT / "docs" / "guide.src.md").read_text(encoding="utf-8")
    claims = [m["value"] for m in CLAIM.finditer(text)]
    assert claims == [f"{diff:.2f}"], (claims, diff)
    greedy = [(int(m["same"]), int(m["n"])) for m in GREEDY_CLAIM.finditer(text)]
    assert greedy == [(same_greedy, SOURCES)], (greedy, same_greedy)
    assert 0.01 < diff < 1.0  # a real difference, far from the 1e-5 of the patched parity test
