import numpy as np
import pytest

from nmtkit.data.batching import ParallelIds, pad_batch, token_batches
from nmtkit.data.vocab import BOS, EOS, PAD


@pytest.fixture
def lengths():
    rng = np.random.default_rng(0)
    return rng.integers(2, 40, 500), rng.integers(2, 40, 500)


def test_each_pair_exactly_once_per_epoch_and_budget_kept(lengths):
    src, tgt = lengths
    for epoch in range(3):
        batches = token_batches(src, tgt, max_tokens=300, seed=7, epoch=epoch)
        seen = np.concatenate(batches)
        assert sorted(seen.tolist()) == list(range(500))
        for b in batches:
            padded = len(b) * max(src[b].max(), tgt[b].max())
            assert padded <= 300 or len(b) == 1


def test_batches_are_reproducible_and_shuffled_per_epoch(lengths):
    src, tgt = lengths
    a = token_batches(src, tgt, 300, seed=1, epoch=0)
    b = token_batches(src, tgt, 300, seed=1, epoch=0)
    c = token_batches(src, tgt, 300, seed=1, epoch=1)
    assert all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))
    assert [x.tolist() for x in a] != [x.tolist() for x in c]


def test_length_bucketing_keeps_padding_small(lengths):
    src, tgt = lengths
    batches = token_batches(src, tgt, 600, seed=0)
    real = sum(int(tgt[b].sum()) for b in batches)
    padded = sum(len(b) * int(tgt[b].max()) for b in batches)
    assert real / padded > 0.9


def test_ranks_partition_batches(lengths):
    src, tgt = lengths
    full = token_batches(src, tgt, 300, seed=3, epoch=0)
    r0 = token_batches(src, tgt, 300, seed=3, epoch=0, rank=0, world=2)
    r1 = token_batches(src, tgt, 300, seed=3, epoch=0, rank=1, world=2)
    assert len(r0) == len(r1) == len(full) // 2
    assert [b.tolist() for b in r0] == [b.tolist() for b in full[0:len(full) // 2 * 2:2]]


def test_collate_adds_bos_and_eos_and_pads():
    data = ParallelIds([np.array([5, 6, EOS]), np.array([7, EOS])],
                       [np.array([8, 9, 10]), np.array([11])])
    b = data.collate(np.array([0, 1]))
    assert b.src.tolist() == [[5, 6, EOS], [7, EOS, PAD]]
    assert b.tgt_in.tolist() == [[BOS, 8, 9, 10], [BOS, 11, PAD, PAD]]
    assert b.tgt_out.tolist() == [[8, 9, 10, EOS], [11, EOS, PAD, PAD]]
    assert b.n_tokens == 6
    assert b.src_mask.shape == (2, 1, 3)
    assert pad_batch([np.array([1])]).tolist() == [[1]]
