"""Linear layers by oneDNN for CPU training: the same outputs and gradients as ``F.linear``,
taken only while gradients are recorded, and switched off with oneDNN."""

import copy

import pytest
import torch
import torch.nn.functional as F

from nmtkit import fast
from nmtkit.fast import onednn, output_loss
from nmtkit.fast.linear import ROW_MULTIPLE, OneDnnLinear, linear
from nmtkit.models.loss import label_smoothed_cross_entropy

from .helpers import D, make_transformer, padded_batch

pytestmark = pytest.mark.skipif(not onednn.available(), reason="PyTorch built without oneDNN")


@pytest.fixture(autouse=True)
def onednn_chosen(monkeypatch):
    """The oneDNN path on any CPU (on an Intel one nmtkit would leave the products to MKL)."""
    monkeypatch.setattr(onednn, "trains_faster", lambda: True)


@pytest.mark.parametrize(("vendor", "avx512", "chosen"), [
    ("AuthenticAMD", True, True),    # Zen 4 and 5: oneDNN 1.01-1.33x
    ("AuthenticAMD", False, False),  # AVX2 only: oneDNN 0.90-0.93x
    ("GenuineIntel", True, False),   # Xeon: MKL's own CPUs, oneDNN 0.91x
    ("GenuineIntel", False, False),
    ("", True, True),
    ("", False, False),
])
def test_onednn_trains_where_the_cpu_is_not_intels_and_has_avx512(monkeypatch, vendor, avx512,
                                                                  chosen):
    monkeypatch.undo()  # the real choice, not the fixture's
    monkeypatch.setattr(onednn, "cpu_vendor", lambda: vendor)
    monkeypatch.setattr(onednn, "has_avx512", lambda: avx512)
    assert onednn.trains_faster() is chosen
    with torch.backends.mkldnn.flags(enabled=False):
        assert onednn.trains_faster() is False


def test_the_vendor_and_the_flags_are_read_from_linux(monkeypatch, tmp_path):
    assert isinstance(onednn.cpu_vendor(), str)
    assert isinstance(onednn.has_avx512(), bool)
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nvendor_id\t: AuthenticAMD\n"
                       "flags\t\t: fpu sse avx avx2 fma avx512_bf16\n")
    real_open = open
    monkeypatch.setattr("builtins.open", lambda path, *a, **k: real_open(
        cpuinfo if path == "/proc/cpuinfo" else path, *a, **k))
    onednn.cpu_vendor.cache_clear()
    onednn.has_avx512.cache_clear()
    try:
        assert onednn.cpu_vendor() == "AuthenticAMD"
        assert onednn.has_avx512() is False  # avx512_bf16 alone is not avx512f
        cpuinfo.write_text("vendor_id\t: AuthenticAMD\nflags\t\t: avx2 avx512f avx512bw\n")
        onednn.has_avx512.cache_clear()
        assert onednn.has_avx512() is True
        assert onednn._cpuinfo_field("model name") == ""
    finally:  # the real CPU's answers for the tests that follow
        onednn.cpu_vendor.cache_clear()
        onednn.has_avx512.cache_clear()


def test_on_an_intel_cpu_without_amx_nothing_is_swapped(monkeypatch):
    monkeypatch.setattr(onednn, "trains_faster", lambda: False)
    monkeypatch.setattr(onednn, "bf16_in_hardware", lambda: False)
    model = make_transformer()
    assert "onednn linear" not in fast.for_training(model, retain_memory=False)
    assert not any(isinstance(m, OneDnnLinear) for m in model.modules())


def test_on_an_intel_cpu_with_amx_the_layers_are_swapped_for_bf16s_padded_rows(monkeypatch):
    monkeypatch.setattr(onednn, "trains_faster", lambda: False)
    monkeypatch.setattr(onednn, "bf16_in_hardware", lambda: True)
    model = make_transformer()
    assert "onednn linear" in fast.for_training(model, retain_memory=False)
    assert any(isinstance(m, OneDnnLinear) for m in model.modules())
    calls = counted(monkeypatch)
    w = torch.randn(6, 4, requires_grad=True)
    linear(torch.randn(3, 4), w).sum().backward()  # float32: MKL (F.linear) on this CPU
    assert calls == []


def counted(monkeypatch) -> list:
    """Record the shapes of the products that went through oneDNN."""
    calls = []
    real = onednn.linear

    def counting(x, weight, bias):
        calls.append((tuple(x.shape), tuple(weight.shape)))
        return real(x, weight, bias)

    monkeypatch.setattr(onednn, "linear", counting)
    return calls


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("shape", [(7, 16), (3, 5, 16)])
def test_forward_and_every_gradient_agree_with_f_linear(monkeypatch, shape, bias):
    calls = counted(monkeypatch)
    torch.manual_seed(0)
    w = torch.randn(24, 16, requires_grad=True)
    b = torch.randn(24, requires_grad=True) if bias else None
    x = torch.randn(*shape, requires_grad=True)
    dy = torch.randn(*shape[:-1], 24)
    grads = []
    for f in (F.linear, linear):
        for t in (x, w, b):
            if t is not None:
                t.grad = None
        y = f(x, w, b)
        y.backward(dy)
        grads.append((y.detach(), x.grad, w.grad, None if b is None else b.grad))
    (y0, *g0), (y1, *g1) = grads
    assert y1.shape == y0.shape and torch.allclose(y0, y1, atol=1e-5)
    for a, c in zip(g0, g1, strict=True):
        assert (a is None) == (c is None)
        if a is not None:
            assert torch.allclose(a, c, atol=1e-5)
    # forward x W^T, backward dy W (the transposed weight): both by oneDNN, on rows padded
    # to ROW_MULTIPLE (one kernel shape for every row count up to it)
    assert [s[1] for s in calls] == [(24, 16), (16, 24)]
    assert [s[0][0] for s in calls] == [ROW_MULTIPLE] * 2


def test_a_weight_slice_gets_its_gradient_in_place_of_the_whole(monkeypatch):
    calls = counted(monkeypatch)
    w = torch.randn(12, 8, requires_grad=True)
    x = torch.randn(4, 8)
    linear(x, w[4:], None).sum().backward()
    expect = torch.zeros(12, 8)
    expect[4:] = x.sum(0)  # d/dW of sum(x W^T) is a row of column sums per output
    assert torch.allclose(w.grad, expect, atol=1e-6)
    assert len(calls) == 1  # x needs no gradient: no input product in the backward pass


def test_without_gradients_or_oneDNN_it_is_f_linear(monkeypatch):
    calls = counted(monkeypatch)
    w = torch.randn(6, 4, requires_grad=True)
    x = torch.randn(2, 4)
    with torch.no_grad():
        linear(x, w)
    linear(x, w.detach())  # a frozen weight
    linear(x.double(), w.double())
    monkeypatch.setattr(onednn, "trains_faster", lambda: False)
    linear(x, w)
    assert calls == []


def test_for_training_swaps_every_linear_layer_and_plain_takes_them_back():
    model = make_transformer()
    n_linear = sum(type(m) is torch.nn.Linear for m in model.modules())
    applied = fast.for_training(model, retain_memory=False)
    assert "onednn linear" in applied
    assert sum(type(m) is OneDnnLinear for m in model.modules()) == n_linear > 0
    fast.plain(model)
    assert not any(isinstance(m, OneDnnLinear) for m in model.modules())


def test_with_onednn_switched_off_nothing_is_swapped(monkeypatch):
    monkeypatch.undo()  # the real choice, on a CPU where oneDNN would be chosen
    monkeypatch.setattr(onednn, "cpu_vendor", lambda: "AuthenticAMD")
    monkeypatch.setattr(onednn, "has_avx512", lambda: True)
    model = make_transformer()
    with torch.backends.mkldnn.flags(enabled=False):
        applied = fast.for_training(model, retain_memory=False)
    assert "onednn linear" not in applied
    assert not any(isinstance(m, OneDnnLinear) for m in model.modules())


def test_a_training_step_of_the_model_goes_through_onednn_and_agrees(monkeypatch):
    model = make_transformer(norm="pre")
    fast_model = copy.deepcopy(model)
    fast.for_training(fast_model, retain_memory=False)
    calls = counted(monkeypatch)
    src, src_mask, tgt = padded_batch()
    losses = []
    for m in (model, fast_model):
        m.train()
        logits = m.logits(src, src_mask, tgt[:, :-1])
        losses.append(F.cross_entropy(logits.flatten(0, 1), tgt[:, 1:].flatten()))
        losses[-1].backward()
    assert torch.allclose(losses[0], losses[1], atol=1e-6)
    for (n, p), q in zip(model.named_parameters(), fast_model.parameters(), strict=True):
        assert torch.allclose(p.grad, q.grad, atol=1e-5), n
    weights = {w for _, w in calls}
    d = D
    assert (3 * d, d) in weights  # self-attention's [W^Q; W^K; W^V]
    assert (2 * d, d) in weights  # the cross-attention's slice [W^K; W^V]
    assert (d, 3 * d) in weights  # ... and the input gradient through the transposed weight


def test_padded_rows_add_nothing_and_row_counts_share_shapes(monkeypatch):
    calls = counted(monkeypatch)
    w = torch.randn(5, 3, requires_grad=True)
    b = torch.randn(5, requires_grad=True)
    for rows in (1, ROW_MULTIPLE - 1, ROW_MULTIPLE, ROW_MULTIPLE + 1):
        x = torch.randn(rows, 3, requires_grad=True)
        w.grad = b.grad = None
        linear(x, w, b).square().sum().backward()
        gx, gw, gb = x.grad, w.grad, b.grad
        x.grad = w.grad = b.grad = None
        F.linear(x, w, b).square().sum().backward()
        assert torch.allclose(gx, x.grad, atol=1e-5)
        assert torch.allclose(gw, w.grad, atol=1e-4) and torch.allclose(gb, b.grad, atol=1e-4)
    assert [c[0][0] for c in calls[::2]] == [ROW_MULTIPLE, ROW_MULTIPLE, ROW_MULTIPLE, 2 * ROW_MULTIPLE]


def test_the_blocked_output_layer_multiplies_full_blocks_by_onednn(monkeypatch):
    calls = counted(monkeypatch)
    monkeypatch.setattr(output_loss, "BLOCK_ELEMENTS", 8 * output_loss.padded_width(50))  # 8 rows
    torch.manual_seed(0)
    h = torch.randn(20, 16, requires_grad=True)  # blocks of 8, 8 and 4 rows
    w = torch.randn(50, 16, requires_grad=True)
    target = torch.randint(1, 50, (20,))
    loss, _, _ = output_loss.projected_label_smoothed_cross_entropy(h, w, None, target, 0.1)
    loss.backward()
    gh, gw = h.grad, w.grad
    h.grad = w.grad = None
    ref, _, _ = label_smoothed_cross_entropy(F.linear(h, w), target, 0.1)
    ref.backward()
    assert torch.allclose(loss, ref, atol=1e-4)
    assert torch.allclose(gh, h.grad, atol=1e-5) and torch.allclose(gw, w.grad, atol=1e-5)
    # scores and G W of the two full blocks; the last, shorter block by torch.mm (one kernel
    # shape per run)
    assert [c[0][0] for c in calls] == [8, 8, 8, 8]
