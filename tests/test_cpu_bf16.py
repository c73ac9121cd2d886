"""``train.amp: bf16`` on a CPU: bfloat16 autocast where the CPU multiplies bfloat16 in
hardware (AMX, AVX512-BF16), float32 elsewhere; the fast paths (oneDNN linear layers, the blocked output
loss) follow autocast, and the blocked loss in bfloat16 agrees with the readable path.

Where this host has neither the tests pretend it has (``onednn.bf16_in_hardware``): PyTorch
runs bfloat16 autocast on any x86 CPU, only slower."""

import copy
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
import torch
import torch.nn.functional as F

from nmtkit.data.vocab import PAD
from nmtkit.fast import linear as fast_linear
from nmtkit.fast import onednn, output_loss
from nmtkit.models.loss import label_smoothed_cross_entropy
from nmtkit.train import step
from nmtkit.train.loop import Trainer
from nmtkit.train.step import effective_amp

from .helpers import make_cfg

CPU = torch.device("cpu")


@pytest.mark.parametrize("units", [True, False])
def test_bf16_runs_on_a_cpu_only_with_bf16_in_hardware(monkeypatch, units):
    monkeypatch.setattr(onednn, "bf16_in_hardware", lambda: units)
    assert effective_amp("bf16", CPU) == ("bf16" if units else "off")
    assert effective_amp("off", CPU) == "off"
    assert effective_amp("fp16", CPU) == "fp16"  # (runs anywhere, to test its code path)
    assert effective_amp("bf16", torch.device("cuda")) == "bf16"  # (no GPU needed to ask)


@pytest.mark.parametrize("amx, avx512_bf16", [(True, False), (False, True), (False, False)])
def test_bf16_in_hardware_is_amx_or_avx512_bf16(monkeypatch, amx, avx512_bf16):
    """Intel AMX tiles and the AVX512-BF16 dot products (AMD Zen 4/5) both count; a CPU
    with neither (AVX2, AVX-512 without BF16) emulates bfloat16 products."""
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: amx, raising=False)
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: avx512_bf16, raising=False)
    assert onednn.bf16_in_hardware() is ((amx or avx512_bf16) and torch.backends.mkldnn.is_available())


def test_the_probe_answers_a_bool():
    assert isinstance(onednn.bf16_in_hardware(), bool)
    with torch.backends.mkldnn.flags(enabled=False):
        assert onednn.bf16_in_hardware() is False


@contextmanager
def products() -> Iterator[list[tuple[tuple[int, ...], tuple[int, ...], torch.dtype]]]:
    """Inside the block, record (a's shape, b's shape, dtype) of every torch.mm and
    torch.addmm called."""
    calls: list[tuple[tuple[int, ...], tuple[int, ...], torch.dtype]] = []
    real_mm, real_addmm = torch.mm, torch.addmm

    def mm(a, b, **kw):
        calls.append((tuple(a.shape), tuple(b.shape), a.dtype))
        return real_mm(a, b, **kw)

    def addmm(c, a, b, **kw):
        calls.append((tuple(a.shape), tuple(b.shape), a.dtype))
        return real_addmm(c, a, b, **kw)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(torch, "mm", mm)
        mp.setattr(torch, "addmm", addmm)
        yield calls


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("shape", [(5, 16), (3, 7, 16), (130, 16)])
def test_linear_under_autocast_multiplies_in_bf16_on_padded_rows_as_autocast_does(shape, bias):
    torch.manual_seed(0)
    w = torch.randn(8, 16, requires_grad=True)
    b = torch.randn(8, requires_grad=True) if bias else None
    x = torch.randn(*shape, requires_grad=True)
    dy = torch.randn(*shape[:-1], 8)
    assert fast_linear._takes(x, w) and fast_linear._low_precision(x, w) is None
    results = []
    for f in (F.linear, fast_linear.linear):
        for t in (x, w, b):
            if t is not None:
                t.grad = None
        with products() as calls:
            with torch.autocast("cpu", dtype=torch.bfloat16):
                assert not fast_linear._takes(x, w)  # not oneDNN's float32 product
                y = f(x, w, b)
            y.backward(dy.to(y.dtype))
        results.append((y.detach(), x.grad, w.grad, None if b is None else b.grad, calls))
    (y0, *g0, _), (y1, *g1, calls) = results
    assert y1.dtype == y0.dtype == torch.bfloat16 and y1.shape == y0.shape
    assert torch.allclose(y0.float(), y1.float(), rtol=1e-2, atol=1e-2)
    for a, c in zip(g0, g1, strict=True):
        assert (a is None) == (c is None)
        if a is not None:
            assert c.dtype == a.dtype == torch.float32
            assert torch.allclose(a, c, rtol=1e-2, atol=5e-2)
    # forward, dx and dW: three bf16 products, every one on rows padded to the multiple
    rows = -(-x[..., 0].numel() // fast_linear.LOW_PRECISION_ROW_MULTIPLE)
    padded = rows * fast_linear.LOW_PRECISION_ROW_MULTIPLE
    assert [c[2] for c in calls] == [torch.bfloat16] * 3
    assert calls[0][0] == (padded, 16) and calls[1][0] == (padded, 8)  # forward, dx
    assert calls[2][1] == (padded, 16)  # dW = dy^T x: the rows are the inner dimension


def test_linear_under_autocast_without_gradients_is_autocasts_own():
    w = torch.randn(8, 16, requires_grad=True)
    x = torch.randn(5, 16)
    with products() as calls, torch.autocast("cpu", dtype=torch.bfloat16), torch.no_grad():
        assert fast_linear._low_precision(x, w) is None
        y = fast_linear.linear(x, w)
    assert y.dtype == torch.bfloat16 and calls == []  # F.linear, unpadded


def test_attention_under_autocast_keeps_its_products_in_float32():
    from nmtkit.fast.attention import CpuTrainingAttention
    from nmtkit.models.attention import MultiHeadAttention

    torch.manual_seed(3)
    plain = MultiHeadAttention(16, 4, dropout=0.0)
    fast_att = copy.deepcopy(plain)
    fast_att.__class__ = CpuTrainingAttention
    x = torch.randn(2, 5, 16, requires_grad=True)
    mask = torch.ones(2, 1, 5, dtype=torch.bool)
    mask[1, :, 3:] = False
    q = x.view(2, 5, 4, 4).transpose(1, 2).to(torch.bfloat16)  # (batch, heads, time, d_k)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out, probs = fast_att.heads_attention(q, q, q, mask.unsqueeze(1), True)
    assert out.dtype == torch.float32 and probs.dtype == torch.float32
    with torch.no_grad():
        expect, _ = plain.heads_attention(q.float(), q.float(), q.float(), mask.unsqueeze(1), True)
    assert torch.allclose(out.detach(), expect, atol=1e-5)


def readable_under_autocast(h, w, b, target, eps):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logits = F.linear(h, w, b)  # (n, V) bfloat16
    return label_smoothed_cross_entropy(logits, target, eps)


@pytest.mark.parametrize("with_bias", [False, True])
def test_blocked_loss_in_bf16_agrees_with_the_readable_path_under_autocast(monkeypatch, with_bias):
    monkeypatch.setattr(output_loss, "BLOCK_ELEMENTS", 5 * 48)  # 5-row blocks: 8 of them,
    monkeypatch.setattr(output_loss, "LOW_PRECISION_ROW_MULTIPLE", 4)  # 4 in bf16: 10, the last padded
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
            with products() as calls, torch.autocast("cpu", dtype=torch.bfloat16):
                loss, nll, count = output_loss.projected_label_smoothed_cross_entropy(
                    h, w, b, target, eps)
            # three bf16 products a block, each on rows padded to the multiple (4 here)
            assert len(calls) == 3 * 10 and {c[2] for c in calls} == {torch.bfloat16}
            assert all(c[0][0] % 4 == 0 for c in calls[0::3])  # scores = h W^T
            assert all(c[1][0] % 4 == 0 for c in calls[2::3])  # dW = g^T h
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


@pytest.mark.slow
def test_training_with_bf16_on_a_cpu_multiplies_in_bf16_and_keeps_float32_weights(monkeypatch, tmp_path):
    monkeypatch.setattr(onednn, "bf16_in_hardware", lambda: True)
    cfg = make_cfg(steps=12, extra=["train.amp=bf16", "train.fast=true"])
    trainer = Trainer(cfg, tmp_path)
    assert trainer.updater.amp == "bf16" and trainer.updater.blocked_loss is not None
    seen: list[torch.dtype] = []
    ffn = trainer.model.decoder_layers[0].feed_forward.w_1
    ffn.register_forward_hook(lambda mod, inp, out: seen.append(out.dtype))
    result = trainer.run()
    assert result["step"] == 12 and torch.isfinite(torch.tensor(result["train_loss"]))
    assert torch.bfloat16 in seen  # the training products
    assert all(p.dtype == torch.float32 for p in trainer.model.parameters())
    assert all(v.dtype == torch.float32 for s in trainer.updater.optimizer.state.values()
               for v in s.values() if torch.is_tensor(v) and v.is_floating_point())


@pytest.mark.slow
def test_without_bf16_in_hardware_bf16_trains_in_float32_with_the_blocked_loss(monkeypatch, tmp_path, caplog):
    monkeypatch.setattr(onednn, "bf16_in_hardware", lambda: False)
    with caplog.at_level("INFO", logger=step.__name__):
        trainer = Trainer(make_cfg(steps=2, extra=["train.amp=bf16", "train.fast=true"]), tmp_path)
    assert trainer.updater.amp == "off" and trainer.updater.blocked_loss is not None
    assert "no bfloat16 in hardware" in caplog.text
    seen: list[torch.dtype] = []
    ffn = trainer.model.decoder_layers[0].feed_forward.w_1
    ffn.register_forward_hook(lambda mod, inp, out: seen.append(out.dtype))
    trainer.run()
    assert seen and set(seen) == {torch.float32}


@pytest.mark.parametrize("flags,probes,env,kind", [
    ("fpu sse avx avx2 fma", (), {}, "AVX2"),
    ("fpu avx2 avx512f avx512bw", (), {}, "AVX-512"),
    ("fpu avx2 avx512f", ("_is_avx512_bf16_supported",), {}, "AVX512-BF16"),
    ("fpu avx2 avx512f", ("_is_amx_tile_supported", "_is_avx512_bf16_supported"), {}, "AMX"),
    ("fpu avx2 avx512f", ("_is_amx_tile_supported",), {"ATEN_CPU_CAPABILITY": "avx2"}, "AVX2"),
    ("fpu avx2 avx512f", (), {"ONEDNN_MAX_CPU_ISA": "AVX2"}, "AVX2"),
    ("fpu sse sse2", (), {}, "other"),
])
def test_the_host_kind_is_the_widest_the_cpu_and_the_libraries_allow(monkeypatch, flags, probes,
                                                                      env, kind):
    """``host_kind`` (logged at the start of a run: what a time budget buys differs with it)
    reads the CPU's flags and PyTorch's probes; libraries held to AVX2 make it an AVX2 host."""
    onednn.has_avx512.cache_clear()
    monkeypatch.setattr(onednn, "_cpuinfo_field",
                        lambda name: flags if name == "flags" else "Test CPU")
    for name in ("_is_amx_tile_supported", "_is_avx512_bf16_supported", "_is_avx2_supported"):
        monkeypatch.setattr(torch.cpu, name, lambda n=name: n in probes, raising=False)
    monkeypatch.delenv("ATEN_CPU_CAPABILITY", raising=False)
    monkeypatch.delenv("ONEDNN_MAX_CPU_ISA", raising=False)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    try:
        assert onednn.host_kind() == kind
        assert onednn.describe_host().startswith("Test CPU, ") and onednn.describe_host().endswith(kind)
    finally:
        onednn.has_avx512.cache_clear()
