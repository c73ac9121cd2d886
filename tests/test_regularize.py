"""train.word_dropout and train.rdrop (R-Drop): the functions, and a training run with them."""

import pytest
import torch
import torch.nn.functional as F

from nmtkit.config import load
from nmtkit.data.vocab import PAD, UNK
from nmtkit.models.loss import label_smoothed_cross_entropy
from nmtkit.train import regularize, step
from nmtkit.train.loop import Trainer
from nmtkit.train.regularize import rdrop_loss, symmetric_kl, word_dropout
from nmtkit.train.start import Start

from .helpers import ROOT, run_until_ctrl_c, tiny_copy_overrides


def test_word_dropout_replaces_ordinary_tokens_at_its_rate_and_nothing_else():
    torch.manual_seed(0)
    ids = torch.randint(4, 100, (200, 100))
    ids[:, 0], ids[:, 1], ids[:, -1], ids[:, -2] = 2, 42, 3, PAD  # <s>, a tag, </s>, <pad>
    assert word_dropout(ids, 0.0) is ids
    out = word_dropout(ids, 0.3, keep=torch.tensor([42]))
    assert out.shape == ids.shape
    assert torch.equal(out[:, [0, 1, -2, -1]], ids[:, [0, 1, -2, -1]])  # specials and tag kept
    middle, changed = ids[:, 2:-2], out[:, 2:-2] != ids[:, 2:-2]
    assert bool((out[:, 2:-2][changed] == UNK).all())
    rate = changed.float().mean().item()
    assert abs(rate - 0.3 * (middle != 42).float().mean().item()) < 0.02, rate


def test_symmetric_kl_is_both_kl_divergences_over_the_real_tokens():
    torch.manual_seed(1)
    a, b = torch.randn(2, 5, 11), torch.randn(2, 5, 11)
    target = torch.tensor([[5, 6, 7, PAD, PAD], [4, 4, 4, 4, 8]])
    keep = target.reshape(-1) != PAD
    la = a.reshape(-1, 11)[keep].log_softmax(-1)
    lb = b.reshape(-1, 11)[keep].log_softmax(-1)
    expected = (F.kl_div(lb, la, log_target=True, reduction="sum")  # KL(P_a || P_b)
                + F.kl_div(la, lb, log_target=True, reduction="sum"))
    assert symmetric_kl(a, b, target).item() == pytest.approx(expected.item(), rel=1e-5)
    assert symmetric_kl(a, a, target).item() == pytest.approx(0.0, abs=1e-6)


def test_rdrop_loss_of_two_equal_passes_is_the_plain_loss():
    torch.manual_seed(2)
    logits = torch.randn(3, 4, 9)
    target = torch.tensor([[4, 5, 6, PAD], [7, 8, 4, 5], [6, PAD, PAD, PAD]])
    loss, nll = rdrop_loss(torch.cat([logits, logits]), target, 0.1, alpha=5.0)
    plain, plain_nll, _ = label_smoothed_cross_entropy(logits, target, 0.1)
    assert loss.item() == pytest.approx(plain.item(), rel=1e-5)
    assert nll.item() == pytest.approx(plain_nll.item(), rel=1e-5)
    other = torch.randn(3, 4, 9)
    more, _ = rdrop_loss(torch.cat([logits, other]), target, 0.1, alpha=5.0)
    half, _ = rdrop_loss(torch.cat([logits, other]), target, 0.1, alpha=0.0)
    assert (more - half).item() == pytest.approx(5.0 / 4 * symmetric_kl(logits, other, target).item(),
                                                 rel=1e-5)


def copy_cfg(*extra):
    return load(ROOT / "configs" / "copy_task.yaml", tiny_copy_overrides(6) + list(extra))


NO_DROPOUT = ["model.dropout=0", "model.attention_dropout=0", "model.relu_dropout=0"]


@pytest.mark.slow
def test_rdrop_without_dropout_gives_the_plain_loss_and_gradients(tmp_path):
    """With every dropout off the two passes agree: the KL term and its gradient vanish, and
    R-Drop's loss and gradients are the plain ones (up to the rounding of a batch twice as
    large)."""
    grads, losses = [], []
    for name, extra in (("plain", []), ("rdrop", ["train.rdrop=5"])):
        trainer = Trainer(copy_cfg(*NO_DROPOUT, *extra), tmp_path / name)
        batch = trainer.data.train_ids.collate(trainer.data.train_ids.batches(256, 1234, 0)[0])
        trainer.model.train()
        loss, nll = trainer.updater.batch_loss(batch)
        loss.backward()
        losses.append((loss.item(), nll.item()))
        grads.append({k: p.grad.clone() for k, p in trainer.model.named_parameters()})
    assert losses[0] == pytest.approx(losses[1], rel=1e-5)
    for k, g in grads[0].items():
        assert torch.allclose(g, grads[1][k], rtol=1e-4, atol=1e-6), k


@pytest.mark.slow
def test_rdrop_with_dropout_adds_a_positive_kl_and_resumes_exactly(tmp_path, monkeypatch):
    seen = []
    real = regularize.symmetric_kl

    def recording(a, b, target, pad=PAD):
        value = real(a, b, target, pad)
        seen.append(value.item())
        return value

    monkeypatch.setattr(regularize, "symmetric_kl", recording)
    overrides = ["train.rdrop=1", "train.word_dropout=0.2", "train.valid_every=3"]
    straight = Trainer(copy_cfg(*overrides), tmp_path / "a")
    straight.run()
    assert len(seen) >= 6 and min(seen) > 0  # two dropout masks: two different outputs

    interrupted = Trainer(copy_cfg(*overrides), tmp_path / "b")
    run_until_ctrl_c(monkeypatch, interrupted, 5)
    resumed = Trainer(copy_cfg(*overrides), tmp_path / "b", Start.resume())
    assert resumed.progress.step == 4  # Ctrl-C saves where it stopped
    resumed.run()
    for k, v in straight.model.state_dict().items():
        assert torch.equal(v, resumed.model.state_dict()[k]), k


@pytest.mark.slow
def test_word_dropout_reaches_the_model_in_training_only(tmp_path, monkeypatch):
    trainer = Trainer(copy_cfg("train.word_dropout=0.5"), tmp_path / "r")
    inputs = []
    real = trainer.model.features  # the teacher-forced pass, both loss paths go through it

    def features(src, src_mask, tgt_in, tgt_mask=None):
        inputs.append((src.clone(), tgt_in.clone(), trainer.model.training))
        return real(src, src_mask, tgt_in, tgt_mask)

    monkeypatch.setattr(trainer.model, "features", features)
    trainer.run()
    trained = [(s, t) for s, t, training in inputs if training]
    assert trained and all(bool((s == UNK).any()) and bool((t == UNK).any()) for s, t in trained)
    assert all(bool((t[:, 0] == 2).all()) for _, t in trained)  # <s> is never dropped
    validated = [s for s, _, training in inputs if not training]
    assert all(not bool((s == UNK).any()) for s in validated)
    assert step.word_dropout is regularize.word_dropout
