"""nmtkit.fast.top_k.row_top_k: torch.topk's values through the maxima of column blocks."""

import dataclasses

import pytest
import torch

from nmtkit.config import DecodeConfig
from nmtkit.fast import top_k
from nmtkit.fast.top_k import BLOCK, row_top_k


def check(x, k):
    values, idx = row_top_k(x, k)
    want = x.topk(k, dim=1).values
    assert torch.equal(values, want)
    assert idx.shape == (x.size(0), k) and bool((idx >= 0).all()) and bool((idx < x.size(1)).all())
    assert torch.equal(x.gather(1, idx), values)  # each index holds its value
    assert all(len(set(row)) == k for row in idx.tolist())  # no column twice


@pytest.mark.parametrize("width", [7794, 64 * 40, 64 * 40 + 1, 8000])
@pytest.mark.parametrize("k", [1, 5, 8])
def test_values_equal_torch_topk(width, k):
    torch.manual_seed(width + k)
    x = torch.randn(37, width).log_softmax(1)
    check(x, k)


def test_winners_in_the_left_over_columns_and_in_one_block():
    width = 64 * 30 + 17
    x = torch.randn(4, width)
    x[0, -5:] = 10.0 + torch.arange(5.0)  # all in the columns after the last whole block
    x[1, 128:133] = 20.0 + torch.arange(5.0)  # all in one block
    x[2, ::BLOCK] = 5.0 + torch.arange(x[2, ::BLOCK].numel()) / 100  # one per block
    check(x, 5)


def test_rows_with_fewer_finite_entries_than_k():
    """A forced prefix leaves one finite entry per row: the rest of the k are -inf, at valid,
    distinct columns."""
    width = 64 * 20 + 3
    x = torch.full((3, width), float("-inf"))
    x[0, 7] = -0.5
    x[1, width - 1] = -1.0
    x[2, 700], x[2, 701] = -2.0, -3.0
    check(x, 5)


def test_short_rows_and_other_devices_use_torch_topk(monkeypatch):
    calls = []
    real = torch.Tensor.topk

    def counting(self, *a, **kw):
        calls.append(tuple(self.shape))
        return real(self, *a, **kw)

    monkeypatch.setattr(torch.Tensor, "topk", counting)
    x = torch.randn(3, 4 * 5 * BLOCK - 1)  # fewer than 4k whole blocks
    row_top_k(x, 5)
    assert calls == [tuple(x.shape)]


def test_beam_search_uses_it_with_decode_fast(monkeypatch):
    from nmtkit.decode import search as search_module

    from .test_search import mixed_batch, tiny_model

    used = []
    monkeypatch.setattr(search_module, "row_top_k",
                        lambda x, k: used.append(k) or top_k.row_top_k(x, k))
    model = tiny_model("transformer")
    src, mask = mixed_batch()
    cfg = DecodeConfig(beam=3, n_best=3, max_len_a=1.5, max_len_b=2)
    plain = search_module.search(model, src, mask, dataclasses.replace(cfg, fast=False))
    assert used == []
    fast = search_module.search(model, src, mask, cfg)
    assert used and set(used) == {3}
    assert [[h.tokens for h in hs] for hs in plain] == [[h.tokens for h in hs] for hs in fast]
