"""``train.amp: bf16`` on a CPU: bfloat16 autocast where the CPU multiplies bfloat16 in
hardware (AMX), float32 elsewhere; the fast paths (oneDNN linear layers, the blocked output
loss) follow autocast, and the blocked loss in bfloat16 agrees with the readable path.

Where this host has no AMX the tests pretend it has (``onednn.bf16_matrix_units``): PyTorch
runs bfloat16 autocast on any x86 CPU, only slower."""

import pytest
import torch
import torch.nn.functional as F

from nmtkit.data.vocab import PAD
from nmtkit.fast import linear as fast_linear
from nmtkit.fast import onednn, output_loss
from nmtkit.train import loop
from nmtkit.train.loop import Trainer, effective_amp
from nmtkit.train.loss import label_smoothed_cross_entropy

from .test_train_loop import make_cfg

CPU = torch.device("cpu")


@pytest.mark.parametrize("units", [True, False])
def test_bf16_runs_on_a_cpu_only_with_bf16_matrix_units(monkeypatch, units):
    monkeypatch.setattr(onednn, "bf16_matrix_units", lambda: units)
    assert effective_amp("bf16", CPU) == ("bf16" if units else "off")
    assert effective_amp("off", CPU) == "off"
    assert effective_amp("fp16", CPU) == "fp16"  # (runs anywhere, to test its code path)
    assert effective_amp("bf16", torch.device("cuda")) == "bf16"  # (no GPU needed to ask)


def test_the_probe_answers_a_bool():
    assert isinstance(onednn.bf16_matrix_units(), bool)
    with torch.backends.mkldnn.flags(enabled=False):
        assert onednn.bf16_matrix_units() is False


def test_onednn_linear_steps_aside_under_autocast():
    torch.manual_seed(0)
    w = torch.randn(8, 16, requires_grad=True)
    x = torch.randn(5, 16, requires_grad=True)
    assert fast_linear._takes(x, w)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert not fast_linear._takes(x, w)
        y = fast_linear.linear(x, w)
    assert y.dtype == torch.bfloat16  # autocast's F.linear, not oneDNN's float32 product
    assert torch.allclose(y.float(), F.linear(x, w), rtol=2e-2, atol=5e-2)


def readable_under_autocast(h, w, b, target, eps):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logits = F.linear(h, w, b)  # (n, V) bfloat16
    return label_smoothed_cross_entropy(logits, target, eps)


@pytest.mark.parametrize("with_bias", [False, True])
def test_blocked_loss_in_bf16_agrees_with_the_readable_path_under_autocast(monkeypatch, with_bias):
    monkeypatch.setattr(output_loss, "BLOCK_ELEMENTS", 5 * 48)  # 5-row blocks: 8 of them
    torch.manual_seed(1)
    n, d, v, eps = 37, 16, 45, 0.1
    target = torch.randint(4, v, (n,))
    target[[3, 20]] = PAD
    results = []
    for blocked in (False, True):
        torch.manual_seed(2)
        h = torch.randn(n, d, requires_grad=True)
        w = (0.3 * torch.randn(v, d)).requires_grad_()
        b = torch.randn(v, requires_grad=True) if with_bias else None
        if blocked:
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss, nll, count = output_loss.projected_label_smoothed_cross_entropy(
                    h, w, b, target, eps)
        else:
            loss, nll, count = readable_under_autocast(h, w, b, target, eps)
        (loss / count).backward()
        results.append((loss.detach(), nll, h.grad, w.grad, None if b is None else b.grad))
    (l0, n0, *g0), (l1, n1, *g1) = results
    assert l1.dtype == torch.float32 and torch.allclose(l0, l1, rtol=1e-2)
    assert torch.allclose(n0, n1, rtol=1e-2)
    for a, c in zip(g0, g1, strict=True):
        if a is None:
            assert c is None
            continue
        assert c.dtype == torch.float32  # float32 gradients for the float32 weights
        assert torch.nn.functional.cosine_similarity(a.flatten(), c.flatten(), dim=0) > 0.999
        assert (a - c).norm() <= 0.03 * a.norm()
    # and it is not the float32 result: the products did run in bfloat16
    with torch.no_grad():
        exact, _, _ = output_loss.projected_label_smoothed_cross_entropy(
            h.detach(), w.detach(), None if b is None else b.detach(), target, eps)
    assert not torch.equal(exact, l1)


def test_training_with_bf16_on_a_cpu_multiplies_in_bf16_and_keeps_float32_weights(monkeypatch, tmp_path):
    monkeypatch.setattr(onednn, "bf16_matrix_units", lambda: True)
    cfg = make_cfg(steps=12, extra=["train.amp=bf16", "train.fast=true"])
    trainer = Trainer(cfg, tmp_path)
    assert trainer.amp == "bf16" and trainer._blocked_loss is not None
    seen: list[torch.dtype] = []
    ffn = trainer.model.decoder_layers[0].feed_forward.w_1
    ffn.register_forward_hook(lambda mod, inp, out: seen.append(out.dtype))
    result = trainer.run()
    assert result["step"] == 12 and torch.isfinite(torch.tensor(result["train_loss"]))
    assert torch.bfloat16 in seen  # the training products
    assert all(p.dtype == torch.float32 for p in trainer.model.parameters())
    assert all(v.dtype == torch.float32 for s in trainer.optimizer.state.values()
               for v in s.values() if torch.is_tensor(v) and v.is_floating_point())


def test_without_matrix_units_bf16_trains_in_float32_with_the_blocked_loss(monkeypatch, tmp_path, caplog):
    monkeypatch.setattr(onednn, "bf16_matrix_units", lambda: False)
    with caplog.at_level("INFO", logger=loop.__name__):
        trainer = Trainer(make_cfg(steps=2, extra=["train.amp=bf16", "train.fast=true"]), tmp_path)
    assert trainer.amp == "off" and trainer._blocked_loss is not None
    assert "no bfloat16 matrix units" in caplog.text
    seen: list[torch.dtype] = []
    ffn = trainer.model.decoder_layers[0].feed_forward.w_1
    ffn.register_forward_hook(lambda mod, inp, out: seen.append(out.dtype))
    trainer.run()
    assert seen and set(seen) == {torch.float32}
