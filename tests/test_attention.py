import math

import pytest
import torch

from nmtkit.data.batching import pad_mask
from nmtkit.data.vocab import PAD
from nmtkit.models.attention import MultiHeadAttention, scaled_dot_product_attention
from nmtkit.models.seq2seq import subsequent_mask, target_mask


def test_scaled_dot_product_matches_hand_computation():
    # Eq. 1 on one query row by hand: softmax(q.k_j / sqrt(d_k)) weighted sum of v_j.
    q = torch.tensor([[[1.0, 0.0], [0.5, -1.0]]])  # (1, 2, 2)
    k = torch.tensor([[[1.0, 1.0], [0.0, 2.0], [-1.0, 0.5]]])  # (1, 3, 2)
    v = torch.tensor([[[1.0, 2.0], [3.0, -1.0], [0.0, 4.0]]])  # (1, 3, 2)
    out, probs = scaled_dot_product_attention(q, k, v)
    for i, qi in enumerate(q[0].tolist()):
        scores = [sum(a * b for a, b in zip(qi, kj, strict=True)) / math.sqrt(2)
                  for kj in k[0].tolist()]
        z = sum(math.exp(s) for s in scores)
        p = [math.exp(s) / z for s in scores]
        expected = [sum(p[j] * v[0, j, c].item() for j in range(3)) for c in range(2)]
        assert probs[0, i].tolist() == pytest.approx(p, abs=1e-6)
        assert out[0, i].tolist() == pytest.approx(expected, abs=1e-6)


def test_masked_keys_get_exactly_zero_probability():
    torch.manual_seed(0)
    q, k, v = torch.randn(2, 3, 4, 8), torch.randn(2, 3, 5, 8), torch.randn(2, 3, 5, 8)
    mask = torch.tensor([[True, True, False, True, False],
                         [True, False, False, False, False]]).view(2, 1, 1, 5)
    out, probs = scaled_dot_product_attention(q, k, v, mask)
    assert probs.shape == (2, 3, 4, 5) and out.shape == (2, 3, 4, 8)
    assert torch.all(probs.masked_select(~mask.expand_as(probs)) == 0)
    assert torch.allclose(probs.sum(-1), torch.ones(2, 3, 4), atol=1e-6)
    # A single visible key takes all the weight: the output is its value.
    assert torch.allclose(out[1], v[1, :, :1].expand(3, 4, 8), atol=1e-6)


@pytest.fixture
def mha():
    torch.manual_seed(1)
    m = MultiHeadAttention(32, 4)
    m.reset_parameters()
    with torch.no_grad():  # non-zero biases too
        m.in_proj.bias.normal_(0, 0.1)
        m.out_proj.bias.normal_(0, 0.1)
    return m.eval()


def _both(mha, *args, **kw):
    fused, none = mha(*args, need_attention=False, **kw)
    readable, w = mha(*args, need_attention=True, **kw)
    assert none is None and w is not None
    return fused, readable, w


def test_fused_equals_readable_self_attention(mha):
    torch.manual_seed(2)
    x = torch.randn(2, 5, 32)
    fused, readable, w = _both(mha, x, x, x, None)
    assert torch.allclose(fused, readable, atol=1e-5)
    assert w.shape == (2, 4, 5, 5)


def test_fused_equals_readable_with_padding_and_target_masks(mha):
    torch.manual_seed(3)
    ids = torch.tensor([[5, 6, 7, 8, 9], [5, 6, 7, PAD, PAD]])
    x = torch.randn(2, 5, 32)
    for mask in (pad_mask(ids), target_mask(ids)):
        fused, readable, w = _both(mha, x, x, x, mask)
        assert torch.allclose(fused, readable, atol=1e-5)
        assert torch.all(w[1, :, :, 3:] == 0)  # padded keys unseen by every head


def test_fused_equals_readable_cross_attention(mha):
    torch.manual_seed(4)
    x, mem = torch.randn(2, 3, 32), torch.randn(2, 6, 32)
    mask = pad_mask(torch.tensor([[4] * 6, [4, 4, PAD, PAD, PAD, PAD]]))
    fused, readable, w = _both(mha, x, mem, mem, mask)
    assert torch.allclose(fused, readable, atol=1e-5)
    assert w.shape == (2, 4, 3, 6)
    assert torch.allclose(w.sum(-1), torch.ones(2, 4, 3), atol=1e-6)


def test_fused_equals_readable_causal(mha):
    torch.manual_seed(5)
    x = torch.randn(2, 5, 32)
    q, k, v = mha.project_qkv(x)
    fused, _ = mha.attend(q, k, v, causal=True, need_attention=False)
    readable, w = mha.attend(q, k, v, causal=True, need_attention=True)
    assert torch.allclose(fused, readable, atol=1e-5)
    assert torch.all(w.triu(1) == 0)
    # causal=True is the same as an explicit subsequent mask
    explicit, _ = mha(x, x, x, subsequent_mask(5).expand(2, 5, 5))
    assert torch.allclose(fused, explicit, atol=1e-5)
    # with a cache (more keys than queries) the last queries see every earlier key
    fused_tail, _ = mha.attend(q[:, :, 3:], k, v, causal=True)
    assert torch.allclose(fused_tail, fused[:, 3:], atol=1e-5)


def test_subsequent_mask_is_lower_triangular():
    m = subsequent_mask(4)
    assert m.dtype == torch.bool and m.shape == (1, 4, 4)
    assert torch.equal(m[0], torch.tensor([[1, 0, 0, 0], [1, 1, 0, 0],
                                           [1, 1, 1, 0], [1, 1, 1, 1]], dtype=torch.bool))


def test_target_mask_hides_future_and_padding():
    tgt = torch.tensor([[2, 5, 6, 7], [2, 5, PAD, PAD]])
    m = target_mask(tgt)
    assert m.shape == (2, 4, 4) and m.dtype == torch.bool
    assert torch.equal(m[0], subsequent_mask(4)[0])
    assert not m[1, :, 2:].any()  # padded keys hidden from every query
    assert torch.equal(m[1, :, :2], subsequent_mask(4)[0, :, :2])
    assert torch.all(m.triu(1) == 0)
