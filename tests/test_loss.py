import math

import torch

from nmtkit.data.vocab import PAD
from nmtkit.models.loss import label_smoothed_loss, smoothed_distribution


def test_smoothed_distribution_puts_confidence_on_gold_and_nothing_on_pad():
    target = torch.tensor([5, 3, PAD])
    q = smoothed_distribution(target, vocab_size=8, eps=0.1)
    assert torch.allclose(q[0, 5], torch.tensor(0.9))
    assert torch.allclose(q[1, 3], torch.tensor(0.9))
    assert torch.all(q[:, PAD] == 0)
    assert torch.allclose(q[0, 1], torch.tensor(0.1 / 6))
    assert torch.all(q[2] == 0)  # a pad position contributes nothing
    assert torch.allclose(q[:2].sum(1), torch.ones(2))


def test_loss_equals_dense_kl_divergence():
    torch.manual_seed(0)
    v, eps = 11, 0.1
    log_probs = torch.randn(2, 5, v).log_softmax(-1)
    target = torch.randint(1, v, (2, 5))
    target[1, 3:] = PAD
    loss, nll, n = label_smoothed_loss(log_probs, target, eps)
    q = smoothed_distribution(target, v, eps)
    dense = torch.nn.functional.kl_div(log_probs.reshape(-1, v), q, reduction="sum")
    assert torch.allclose(loss, dense, atol=1e-5)
    gold = log_probs.reshape(-1, v).gather(1, target.reshape(-1, 1)).squeeze(1)
    assert torch.allclose(nll, -gold[target.reshape(-1) != PAD].sum())
    assert int(n) == 8


def test_loss_gradient_matches_dense_version():
    torch.manual_seed(1)
    v, eps = 9, 0.2
    logits = torch.randn(6, v, requires_grad=True)
    target = torch.tensor([1, 4, 5, PAD, 8, 2])
    label_smoothed_loss(logits.log_softmax(-1), target, eps)[0].backward()
    g1 = logits.grad.clone()
    logits.grad = None
    q = smoothed_distribution(target, v, eps)
    torch.nn.functional.kl_div(logits.log_softmax(-1), q, reduction="sum").backward()
    assert torch.allclose(g1, logits.grad, atol=1e-6)


def test_loss_is_zero_when_prediction_equals_smoothed_target_and_nll_without_smoothing():
    v, eps = 7, 0.1
    target = torch.tensor([3, 4])
    q = smoothed_distribution(target, v, eps)
    log_q = q.clamp_min(1e-30).log()
    loss, _, _ = label_smoothed_loss(log_q, target, eps)
    assert abs(float(loss)) < 1e-4
    lp = torch.randn(2, v).log_softmax(-1)
    loss0, nll0, _ = label_smoothed_loss(lp, target, 0.0)
    assert torch.allclose(loss0, nll0)
    assert math.isclose(float(nll0), -float(lp[0, 3] + lp[1, 4]), rel_tol=1e-6)


def test_fused_loss_on_logits_matches_reference_value_and_gradient():
    from nmtkit.models.loss import label_smoothed_cross_entropy

    torch.manual_seed(3)
    for eps in (0.0, 0.1):
        logits = torch.randn(3, 4, 13, requires_grad=True)
        target = torch.randint(1, 13, (3, 4))
        target[2, 2:] = PAD
        ref_loss, ref_nll, n = label_smoothed_loss(logits.log_softmax(-1), target, eps)
        ref_loss.backward()
        g_ref = logits.grad.clone()
        logits.grad = None
        loss, nll, n2 = label_smoothed_cross_entropy(logits, target, eps)
        (loss * 0.5).backward()
        assert torch.allclose(loss, ref_loss, atol=1e-5)
        assert torch.allclose(nll, ref_nll, atol=1e-5)
        assert n2 == int(n) == 10
        assert torch.allclose(logits.grad, 0.5 * g_ref, atol=1e-6)
        assert torch.all(logits.grad[2, 2:] == 0)
