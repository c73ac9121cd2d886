"""The CPU fast dropout: expectation kept, mask shared by forward and backward, standard elsewhere."""

import torch

from nmtkit.fast.dropout import _LEVELS, FastDropout, dropout, keep_mask


def test_drop_rate_and_scale_keep_the_expectation():
    torch.manual_seed(0)
    x = torch.ones(400_000)
    y = dropout(x, 0.3, training=True)
    kept = y != 0
    threshold = round(0.3 * _LEVELS)
    assert abs(kept.float().mean().item() - (1 - threshold / _LEVELS)) < 3e-3
    assert torch.allclose(y[kept], torch.full_like(y[kept], _LEVELS / (_LEVELS - threshold)))
    assert abs(y.mean().item() - 1.0) < 5e-3


def test_backward_uses_the_forward_mask():
    torch.manual_seed(1)
    x = torch.randn(64, 33, requires_grad=True)
    y = dropout(x, 0.5, training=True)
    g = torch.randn_like(y)
    y.backward(g)
    scale = y.detach()[x.detach() != 0] / x.detach()[x.detach() != 0]
    mask_scale = torch.where(y.detach() != 0, torch.full_like(y, scale.max().item()), torch.zeros_like(y))
    assert torch.allclose(x.grad, g * mask_scale)


def test_seeded_draws_repeat():
    x = torch.randn(10, 10)
    torch.manual_seed(5)
    a = dropout(x, 0.1, training=True)
    torch.manual_seed(5)
    b = dropout(x, 0.1, training=True)
    assert torch.equal(a, b)


def test_identity_in_eval_and_at_zero_and_zero_at_one():
    x = torch.randn(5, 7)
    m = FastDropout(0.4).eval()
    assert m(x) is x
    assert dropout(x, 0.0, training=True) is x
    assert torch.equal(dropout(x, 1.0, training=True), torch.zeros_like(x))


def test_rejects_bad_probability():
    import pytest

    with pytest.raises(ValueError, match="dropout probability"):
        FastDropout(1.5)


def test_every_lane_of_a_draw_is_an_independent_fair_mask():
    """Four mask entries come from one 64-bit draw: each of the four positions must drop at
    the rate asked for, and neighbours must not agree more often than chance."""
    torch.manual_seed(2)
    keep, scale = keep_mask(torch.Size([4 * 100_000]), 0.3, torch.device("cpu"))
    lanes = keep.view(-1, 4).float()  # (draws, lane)
    rate = 1 - round(0.3 * _LEVELS) / _LEVELS
    assert torch.allclose(lanes.mean(0), torch.full((4,), rate), atol=6e-3)
    for a in range(4):
        for b in range(a + 1, 4):
            both = (lanes[:, a] * lanes[:, b]).mean().item()
            assert abs(both - rate * rate) < 6e-3
    assert scale == _LEVELS / (_LEVELS - round(0.3 * _LEVELS))
    odd = dropout(torch.ones(7, 3), 0.5, training=True)  # a size that is not a multiple of 4
    assert odd.shape == (7, 3) and set(odd.unique().tolist()) <= {0.0, 2.0}
