"""nmtkit.fast.output_loss: the output layer and the loss in blocks of rows give the loss and
every gradient of the readable path (``generator`` then ``label_smoothed_cross_entropy``)."""

import copy

import pytest
import torch
import torch.nn.functional as F

from nmtkit import fast
from nmtkit.data.vocab import PAD
from nmtkit.fast import output_loss
from nmtkit.models.loss import label_smoothed_cross_entropy
from nmtkit.train.loop import Trainer

from .helpers import make_cfg, make_rnn, make_transformer, padded_batch


def readable(features, weight, bias, target, eps):
    return label_smoothed_cross_entropy(F.linear(features, weight, bias), target, eps)


@pytest.mark.parametrize("v", [37, 48])  # padded to 48 columns, and already a multiple of 16
@pytest.mark.parametrize("with_bias", [False, True])
@pytest.mark.parametrize("eps", [0.0, 0.1])
def test_blocked_loss_and_gradients_equal_the_readable_ones(monkeypatch, v, with_bias, eps):
    # blocks of 3 rows at 48 columns: 23 rows give 7 full blocks and a ragged one
    monkeypatch.setattr(output_loss, "BLOCK_ELEMENTS", 3 * 48)
    torch.manual_seed(1)
    n, d = 23, 8
    target = torch.randint(4, v, (n,))
    target[[2, 9, 22]] = PAD
    grads = []
    for fn in (readable, output_loss.projected_label_smoothed_cross_entropy):
        torch.manual_seed(2)
        h = torch.randn(n, d, requires_grad=True)
        w = torch.randn(v, d, requires_grad=True)
        b = torch.randn(v, requires_grad=True) if with_bias else None
        loss, nll, count = fn(h, w, b, target, eps)
        (loss / 7.0).backward()  # a scaled loss, as the trainer's division by the token count
        grads.append((loss.detach(), nll, count, h.grad, w.grad, None if b is None else b.grad))
    (l0, n0, c0, *g0), (l1, n1, c1, *g1) = grads
    assert c0 == c1 == n - 3
    assert torch.allclose(l0, l1, rtol=1e-5) and torch.allclose(n0, n1, rtol=1e-5)
    for a, b in zip(g0, g1, strict=True):
        assert (a is None) == (b is None)
        if a is not None:
            assert torch.allclose(a, b, atol=1e-6), (a - b).abs().max()


def test_scores_far_apart_give_the_readable_loss_and_gradient():
    """Rows whose scores span hundreds (a confident model, or a diverging one): the blocked
    loss takes log p from the scores' log-sum-exp, not from a log-softmax, and clamps
    exp(s - max) at e^-80; the loss and the gradients must still be the readable ones."""
    torch.manual_seed(3)
    n, d, v = 12, 8, 40
    target = torch.randint(4, v, (n,))
    target[5] = PAD
    features, weight = torch.randn(n, d) * 30, torch.randn(v, d)  # scores of ~100-500
    results = []
    for fn in (readable, output_loss.projected_label_smoothed_cross_entropy):
        h, w = features.clone().requires_grad_(), weight.clone().requires_grad_()
        loss, nll, _ = fn(h, w, None, target, 0.1)
        loss.backward()
        results.append((loss.detach(), nll, h.grad, w.grad))
    (l0, n0, *g0), (l1, n1, *g1) = results
    assert torch.isfinite(l1) and torch.allclose(l0, l1, rtol=1e-5), (l0, l1)
    assert torch.allclose(n0, n1, rtol=1e-5)
    for a, b in zip(g0, g1, strict=True):
        assert torch.allclose(a, b, atol=1e-4 * a.abs().max()), (a - b).abs().max()


def test_no_gradient_is_computed_where_none_is_wanted():
    h, w = torch.randn(5, 4), torch.randn(10, 4, requires_grad=True)
    target = torch.randint(4, 10, (5,))
    loss, _, _ = output_loss.projected_label_smoothed_cross_entropy(h, w, None, target, 0.1)
    loss.backward()
    assert h.grad is None and w.grad is not None
    with torch.no_grad():
        again, _, _ = output_loss.projected_label_smoothed_cross_entropy(h, w, None, target, 0.1)
    assert not again.requires_grad and torch.allclose(again, loss.detach())


def test_training_loss_applies_to_cpu_transformers_only():
    assert output_loss.training_loss(make_transformer()) is not None
    assert output_loss.training_loss(make_rnn()) is None  # no features()


@pytest.mark.parametrize("tie", [False, True])
def test_a_transformer_gets_the_same_gradients_through_the_blocked_loss(tie):
    model = make_transformer(tie_output=tie, output_bias=not tie).train()
    src, src_mask, tgt = padded_batch()
    results = []
    for blocked in (False, True):
        m = copy.deepcopy(model)
        if blocked:
            loss, nll, n = fast.training_loss(m)(src, src_mask, tgt[:, :-1], tgt[:, 1:], 0.1)
        else:
            loss, nll, n = label_smoothed_cross_entropy(m.logits(src, src_mask, tgt[:, :-1]),
                                                        tgt[:, 1:], 0.1)
        (loss / n).backward()
        results.append((loss.detach(), {k: p.grad for k, p in m.named_parameters()}))
    (l0, g0), (l1, g1) = results
    assert torch.allclose(l0, l1, rtol=1e-5)
    assert g0.keys() == g1.keys()
    for k in g0:
        assert torch.allclose(g0[k], g1[k], atol=1e-6), k


@pytest.mark.slow
@pytest.mark.parametrize("sets, blocked", [
    ([], True),
    (["train.fast=false"], False),
    (["train.amp=fp16"], False),
])
def test_the_trainer_takes_the_blocked_loss_with_train_fast_only(tmp_path, sets, blocked):
    cfg = make_cfg(2, ["train.retain_freed_memory=false", *sets])
    trainer = Trainer(cfg, tmp_path / "run")
    assert (trainer.updater.blocked_loss is not None) is blocked
    b = trainer.data.train_ids.collate(trainer.data.train_ids.batches(cfg.train.max_tokens, seed=1)[0])
    trainer.model.eval()  # no dropout: both paths must give the same number
    loss, nll = trainer.updater.batch_loss(b)
    with trainer.updater.autocast():  # fp16: the readable path in float16, as the trainer runs it
        logits = trainer.model.logits(b.src, b.src_mask, b.tgt_in)
    ref, ref_nll, _ = label_smoothed_cross_entropy(logits, b.tgt_out, cfg.train.label_smoothing)
    assert torch.allclose(loss, ref, rtol=1e-5) and torch.allclose(nll, ref_nll, rtol=1e-5)
