"""nmtkit.fast on and off: the same losses, gradients and translations within float tolerance
(dropout 0, so that no random mask differs), and the readable classes back when taken off."""

import copy

import pytest
import torch

from nmtkit import fast
from nmtkit.data.batching import pad_mask
from nmtkit.decode.options import TranslateOptions
from nmtkit.decode.translator import Translator
from nmtkit.fast.attention import CpuTrainingAttention
from nmtkit.fast.dropout import FastDropout
from nmtkit.models.attention import MultiHeadAttention
from nmtkit.models.loss import label_smoothed_cross_entropy
from nmtkit.train.loop import Trainer

from .helpers import make_cfg, make_rnn, make_transformer, padded_batch


def models():
    yield "transformer-pre", make_transformer(norm="pre")
    yield "transformer-post", make_transformer(norm="post")
    yield "transformer-learned", make_transformer(norm="pre", positional="learned")
    yield "transformer-rope", make_transformer(norm="post", positional="rope")
    yield "rnn", make_rnn()


def loss_and_grads(model, batch):
    model.train()
    model.zero_grad()
    src, src_mask, tgt = batch
    logits = model.logits(src, src_mask, tgt[:, :-1])
    loss, _, _ = label_smoothed_cross_entropy(logits, tgt[:, 1:], 0.1)
    loss.backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    return loss.detach(), grads


@pytest.mark.parametrize("name", ["transformer-pre", "transformer-post", "transformer-learned",
                                  "transformer-rope", "rnn"])
def test_training_speedups_change_no_loss_or_gradient(name):
    model = dict(models())[name]
    fast_model = copy.deepcopy(model)
    applied = fast.for_training(fast_model, retain_memory=False)
    assert "dropout" in applied
    assert any(isinstance(m, FastDropout) for m in fast_model.modules())
    if name.startswith("transformer"):
        assert "attention" in applied
    batch = padded_batch()
    plain_loss, plain_grads = loss_and_grads(model, batch)
    fast_loss, fast_grads = loss_and_grads(fast_model, batch)
    assert torch.allclose(plain_loss, fast_loss, atol=1e-6)
    assert plain_grads.keys() == fast_grads.keys() and plain_grads
    for n, g in plain_grads.items():
        assert torch.allclose(g, fast_grads[n], atol=1e-5), n
    assert fast_model.state_dict().keys() == model.state_dict().keys()


def test_cpu_training_attention_never_calls_the_fused_kernel_and_agrees_with_it():
    from torch.nn.attention import sdpa_kernel

    torch.manual_seed(6)
    plain = MultiHeadAttention(32, 4).train()  # dropout 0: deterministic
    quick = copy.deepcopy(plain)
    fast.for_training(quick, retain_memory=False)
    assert isinstance(quick, CpuTrainingAttention)
    x = torch.randn(3, 6, 32)
    mask = pad_mask(torch.tensor([[4] * 6, [4] * 4 + [0] * 2, [4] * 2 + [0] * 4]))
    outs = []
    for m, ctx in ((plain, None), (quick, sdpa_kernel([]))):  # sdpa_kernel([]): a fused call raises
        xi = x.clone().requires_grad_(True)
        if ctx is None:
            out, _ = m(xi, xi, xi, mask)
        else:
            with ctx:
                out, w = m(xi, xi, xi, mask)
            assert w is None
        out.pow(2).sum().backward()
        outs.append((out.detach(), xi.grad, m.in_proj.weight.grad))
    for a, b in zip(*outs, strict=True):
        assert torch.allclose(a, b, atol=1e-5)


def test_fast_dropout_keeps_the_rate_of_nn_dropout():
    torch.manual_seed(3)
    model = make_transformer(dropout=0.3)
    fast.for_training(model, retain_memory=False)
    drop = next(m for m in model.modules() if isinstance(m, FastDropout)).train()
    y = drop(torch.ones(100_000))
    assert abs((y == 0).float().mean().item() - 0.3) < 0.01


def test_plain_takes_every_speedup_off():
    model = make_transformer()
    fast.for_training(model, retain_memory=False)
    fast.for_inference(model.eval())
    assert fast.is_fast(model)
    fast.plain(model)
    assert not fast.is_fast(model)
    assert {type(m) for m in model.modules()} == {type(m) for m in make_transformer().modules()}


def test_swap_refuses_a_class_that_is_not_a_subclass():
    from nmtkit.fast.swap import swap_class

    with pytest.raises(TypeError, match="not a subclass"):
        swap_class(torch.nn.Linear(2, 2), FastDropout)


@pytest.mark.slow
@pytest.mark.parametrize("on", [True, False])
def test_the_trainer_follows_train_fast(tmp_path, on):
    trainer = Trainer(make_cfg(2, [f"train.fast={str(on).lower()}", "train.retain_freed_memory=false"]),
                      tmp_path / "run")
    assert fast.is_fast(trainer.model) is on
    trainer.validate()  # decoding packs for the validation only, and gives the classes back
    assert fast.is_fast(trainer.model) is on
    assert not any(type(m).__name__.startswith("Packed") for m in trainer.model.modules())


@pytest.mark.slow
@pytest.mark.parametrize("positional", ["sinusoidal", "learned", "rope"])
def test_translations_agree_with_fast_on_and_off(tmp_path, positional):
    """A model trained a few steps translates the same with packed weights and without."""
    trainer = Trainer(make_cfg(30, ["train.retain_freed_memory=false", f"model.positional={positional}"]),
                      tmp_path / "run")
    trainer.run()
    bundle = trainer.bundle()
    lines = [" ".join(str((i * 7 + j) % 20 + 1) for j in range(3 + i % 5)) for i in range(12)]
    off = Translator.from_bundle(bundle, fast=False).translate(lines, TranslateOptions(beam=3))
    assert not any(type(m).__name__.startswith("Packed") for m in bundle.model.modules())
    on = Translator.from_bundle(bundle, fast=True).translate(lines, TranslateOptions(beam=3))
    assert any(type(m).__name__.startswith("Packed") for m in bundle.model.modules())
    for a, b in zip(off, on, strict=True):
        assert a[0].text == b[0].text
        assert a[0].score == pytest.approx(b[0].score, abs=1e-4)


@pytest.mark.slow
def test_train_no_fast_flag_turns_both_switches_off(monkeypatch, tmp_path):
    import nmtkit.train.loop as loop
    from nmtkit.cli import main as cli_main

    from .helpers import ROOT

    seen = {}

    def fake_train(cfg, run_dir, **kw):
        seen["cfg"] = cfg
        return {}

    monkeypatch.setattr(loop, "train", fake_train)
    assert cli_main(["train", str(ROOT / "configs" / "copy_task.yaml"), "--run-dir",
                     str(tmp_path / "r"), "--no-fast"]) == 0
    assert seen["cfg"].train.fast is False and seen["cfg"].decode.fast is False
    assert cli_main(["train", str(ROOT / "configs" / "copy_task.yaml"), "--run-dir",
                     str(tmp_path / "r")]) == 0
    assert seen["cfg"].train.fast is True and seen["cfg"].decode.fast is True
