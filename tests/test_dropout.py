"""The CPU fast dropout: expectation kept, mask shared by forward and backward, standard elsewhere."""

import torch

from nmtkit.models.dropout import _LEVELS, Dropout, dropout


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
    m = Dropout(0.4).eval()
    assert m(x) is x
    assert dropout(x, 0.0, training=True) is x
    assert torch.equal(dropout(x, 1.0, training=True), torch.zeros_like(x))


def test_rejects_bad_probability():
    import pytest

    with pytest.raises(ValueError, match="dropout probability"):
        Dropout(1.5)
