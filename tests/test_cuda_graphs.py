"""train.cuda_graphs: fixed batch shapes (nmtkit.data.batching.static_batches) and the graphed
forward + backward (nmtkit.fast.cuda_graphs). The capture itself needs a GPU (the CUDA test
at the end); everything around it runs here, without graphs, on the same buffers and calls."""

import numpy as np
import pytest
import torch

from nmtkit.config import ConfigError, ModelConfig, load
from nmtkit.data.batching import (
    ROW_STEPS,
    SHAPE_STEPS,
    ParallelIds,
    pad_mask,
    static_batches,
    static_shape,
    static_width,
)
from nmtkit.data.multilingual import SampledIds, epoch_indices
from nmtkit.data.vocab import BOS, EOS, PAD
from nmtkit.fast.cuda_graphs import GraphedLoss
from nmtkit.models import build_model
from nmtkit.models.loss import smoothed_loss_sums
from nmtkit.train.loop import Trainer
from nmtkit.train.start import Start

from .helpers import ROOT, make_cfg, run_until_ctrl_c


def random_ids(n, rng, lo=1, hi=60, vocab=50):
    src = [rng.integers(4, vocab, size=int(k)) for k in rng.integers(lo, hi, size=n)]
    tgt = [rng.integers(4, vocab, size=int(k)) for k in rng.integers(lo, hi, size=n)]
    src = [np.append(s, EOS) for s in src]  # sources end with EOS (ParallelIds' convention)
    return ParallelIds(src, tgt)


def test_static_width_is_the_smallest_grid_width_that_fits():
    widths = sorted({static_width(n) for n in range(1, 300)})
    assert widths[:8] == [4, 8, 12, 16, 20, 24, 28, 32]
    assert widths[8:12] == [40, 48, 56, 64] and 256 in widths and 320 in widths
    for n in range(1, 600):
        w = static_width(n)
        assert w >= n and not any(n <= v < w for v in widths)
    assert all(limit % step == 0 for limit, step in SHAPE_STEPS)


def test_static_batches_cover_every_pair_once_within_their_shapes():
    rng = np.random.default_rng(0)
    data = random_ids(3000, rng)
    batches = data.batches(1000, seed=3, epoch=1, static=True)
    seen = np.concatenate(batches)
    assert sorted(seen.tolist()) == list(range(len(data)))
    shapes = set()
    for idx in batches:
        s_len, t_len = int(data.src_lens[idx].max()), int(data.tgt_lens[idx].max())
        rows, s, t = static_shape(s_len, t_len, 1000, len(idx))
        full, _, _ = static_shape(s_len, t_len, 1000)
        assert len(idx) <= rows <= full and full * max(s, t) <= 1000  # the budget holds
        assert rows - len(idx) < -(-full // ROW_STEPS)  # padding rows: under a step
        shapes.add((rows, s, t))
    assert len(shapes) < 40  # few graphs: a handful of widths per side
    assert [b.tolist() for b in data.batches(1000, seed=3, epoch=1, static=True)] == \
        [b.tolist() for b in batches]  # same (seed, epoch), same batches
    assert [b.tolist() for b in data.batches(1000, seed=3, epoch=2, static=True)] != \
        [b.tolist() for b in batches]
    # ranks split the batches as token_batches does
    parts = [static_batches(data.src_lens, data.tgt_lens, 1000, 3, 1, rank=r, world=2)
             for r in range(2)]
    assert len(parts[0]) == len(parts[1]) == len(batches) // 2


def test_static_batches_of_sampled_directions_follow_the_epochs_sample():
    """data.directions: the fixed-shape batches are cut from the epoch's temperature sample,
    as the token batches are (SampledIds overrides the cut, not the sampling)."""
    rng = np.random.default_rng(5)
    base = random_ids(300, rng)
    sampled = SampledIds([base.source(i) for i in range(300)], [base.target(i) for i in range(300)],
                         sizes=[200, 100], counts=[120, 150])
    for epoch in (0, 1):
        rows = np.sort(epoch_indices(sampled.sizes, sampled.counts, 0, epoch))
        static = np.sort(np.concatenate(sampled.batches(500, 0, epoch, static=True)))
        plain = np.sort(np.concatenate(sampled.batches(500, 0, epoch)))
        assert static.tolist() == plain.tolist() == rows.tolist()


def test_static_collate_pads_rows_and_columns_and_counts_real_tokens():
    rng = np.random.default_rng(1)
    data = random_ids(50, rng, hi=9)
    idx = np.arange(7)
    plain, fixed = data.collate(idx), data.collate(idx, static_tokens=100)
    rows, s, t = static_shape(plain.src.shape[1], plain.tgt_in.shape[1], 100, len(idx))
    assert fixed.src.shape == (rows, s) and fixed.tgt_in.shape == fixed.tgt_out.shape == (rows, t)
    assert fixed.n_tokens == plain.n_tokens == int((plain.tgt_out != PAD).sum())
    n, w = plain.src.shape
    assert torch.equal(fixed.src[:n, :w], plain.src) and (fixed.src[:n, w:] == PAD).all()
    assert (fixed.src[n:, 0] == EOS).all() and (fixed.src[n:, 1:] == PAD).all()
    assert (fixed.tgt_in[n:, 0] == BOS).all() and (fixed.tgt_out[n:] == PAD).all()
    with pytest.raises(ValueError, match="do not fit the static shape"):
        data.collate(np.arange(50), static_tokens=64)


def small_model(**kw):
    cfg = ModelConfig(arch="transformer", layers=2, d_model=32, d_ff=64, heads=4, dropout=0.0,
                      **kw)
    torch.manual_seed(0)
    return build_model(cfg, 50, 50)


@pytest.mark.slow
@pytest.mark.parametrize("norm", ["pre", "post"])
def test_padding_to_a_static_shape_changes_neither_loss_nor_gradients(norm):
    model = small_model(norm=norm)
    data = random_ids(40, np.random.default_rng(2), hi=15)
    idx = np.arange(9)
    grads = []
    for b in (data.collate(idx), data.collate(idx, static_tokens=400)):
        model.zero_grad(set_to_none=True)
        loss, nll = smoothed_loss_sums(model.logits(b.src, b.src_mask, b.tgt_in), b.tgt_out, 0.1)
        loss.backward()
        grads.append((loss.detach(), nll, {k: p.grad.clone() for k, p in model.named_parameters()}))
    (l0, n0, g0), (l1, n1, g1) = grads
    torch.testing.assert_close(l1, l0, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(n1, n0, rtol=1e-5, atol=1e-5)
    for k in g0:
        torch.testing.assert_close(g1[k], g0[k], rtol=1e-4, atol=1e-5, msg=lambda m, k=k: f"{k}: {m}")


def test_graphed_loss_without_capture_adds_the_scaled_gradient():
    model = small_model()
    data = random_ids(40, np.random.default_rng(3), hi=12)
    b1, b2 = (data.collate(i, static_tokens=300) for i in (np.arange(6), np.arange(6, 14)))

    def loss_fn(src, tgt_in, tgt_out):
        return smoothed_loss_sums(model.logits(src, pad_mask(src), tgt_in), tgt_out, 0.1)

    graphed = GraphedLoss(model, loss_fn, lambda: torch.autocast("cpu", enabled=False),
                          capture=False)
    assert graphed.prepare([(b.src, b.tgt_in, b.tgt_out) for b in (b1, b2)]) == len(
        {(*b.src.shape, b.tgt_in.shape[1]) for b in (b1, b2)})
    graphed.zero_grad()
    total = b1.n_tokens + b2.n_tokens
    sums = [graphed.run(b.src, b.tgt_in, b.tgt_out, 1.0 / total) for b in (b1, b2)]
    got = {k: p.grad.clone() for k, p in model.named_parameters()}
    model.zero_grad(set_to_none=True)
    want_loss = 0.0
    for b in (b1, b2):
        loss, _ = loss_fn(b.src, b.tgt_in, b.tgt_out)
        (loss / total).backward()
        want_loss += float(loss.detach())
    assert abs(sum(float(s[0]) for s in sums) - want_loss) < 1e-4 * abs(want_loss)
    for k, p in model.named_parameters():
        torch.testing.assert_close(got[k], p.grad, rtol=1e-5, atol=1e-7, msg=lambda m, k=k: f"{k}: {m}")
    graphed.zero_grad()
    assert all(p.grad is not None and not p.grad.any() for p in model.parameters())


@pytest.mark.slow
def test_trainer_with_cuda_graphs_on_a_cpu_trains_like_the_readable_path(tmp_path):
    extra = ["model.dropout=0.0", "train.fast=false", "train.device=cpu"]
    plain = Trainer(make_cfg(6, extra), tmp_path / "plain")
    fixed = Trainer(make_cfg(6, extra + ["train.cuda_graphs=true"]), tmp_path / "fixed")
    graphs = fixed.updater.graphs
    assert plain.updater.graphs is None and graphs is not None and not graphs.capture
    assert not hasattr(fixed.updater.graphs.loss_fn, "_torchdynamo_orig_callable")  # not compiled
    fixed.model.load_state_dict(plain.model.state_dict())
    group = [fixed.epoch_batches(0)[0]]
    for step in range(1, 4):  # the same pairs through both: same losses and weights
        plain.schedule.set_step(step)
        fixed.schedule.set_step(step)
        a, b = plain._update(group), fixed._update(group)
        assert a[2] == b[2] and abs(a[0] - b[0]) < 1e-4 * a[0], (a, b)
    for (k, p), q in zip(plain.model.named_parameters(), fixed.model.parameters(), strict=True):
        if k.endswith("in_proj.bias"):  # its key part has a zero gradient (softmax ignores a
            p, q = p[:32], q[:32]       # shift of all scores), which Adam turns into noise
        torch.testing.assert_close(q, p, rtol=1e-4, atol=1e-6, msg=lambda m, k=k: f"{k}: {m}")
    assert all(p.grad is not None and not p.grad.any() for p in fixed.model.parameters())
    fixed.run()  # the whole loop: fixed-shape batches, validation, checkpoints
    assert fixed.progress.step == 6 and (tmp_path / "fixed" / "last.pt").exists()
    shapes = {(*s.src.shape, s.tgt_in.shape[1]) for s in fixed.updater.graphs.shapes.values()}
    widths = {static_width(w) for _, w, _ in shapes}
    assert shapes and all(w in widths for _, w, _ in shapes)


@pytest.mark.slow
def test_compiled_loss_with_fixed_shapes_on_a_cpu_trains_like_the_readable_path(tmp_path):
    # train.compile with train.cuda_graphs: the whole loss compiled once for symbolic shapes
    extra = ["model.dropout=0.0", "train.fast=false", "train.device=cpu"]
    plain = Trainer(make_cfg(4, extra), tmp_path / "plain")
    fixed = Trainer(make_cfg(4, extra + ["train.cuda_graphs=true", "train.compile=true"]),
                    tmp_path / "compiled")
    assert fixed.updater.compiled_logits is None and fixed.updater.graphs is not None
    assert hasattr(fixed.updater.graphs.loss_fn, "_torchdynamo_orig_callable")  # torch.compile's wrapper
    fixed.model.load_state_dict(plain.model.state_dict())
    by_shape = {static_shape_of(fixed, idx): idx for idx in fixed.epoch_batches(0)}
    shapes, batches = list(by_shape), list(by_shape.values())  # the full rows and the rest
    for step, idx in enumerate(batches, 1):  # several shapes through one compilation
        plain.schedule.set_step(step)
        fixed.schedule.set_step(step)
        a, b = plain._update([idx]), fixed._update([idx])
        assert a[2] == b[2] and abs(a[0] - b[0]) < 1e-4 * a[0], (a, b)
    assert len(fixed.updater.graphs.shapes) == len(shapes) > 1
    for (k, p), q in zip(plain.model.named_parameters(), fixed.model.parameters(), strict=True):
        if k.endswith("in_proj.bias"):  # the key part's zero gradient becomes Adam noise
            p, q = p[:32], q[:32]
        torch.testing.assert_close(q, p, rtol=1e-3, atol=1e-5, msg=lambda m, k=k: f"{k}: {m}")


def static_shape_of(trainer, idx):
    b = trainer.data.train_ids.collate(idx, static_tokens=trainer.cfg.train.max_tokens)
    return (*b.src.shape, b.tgt_in.shape[1])


@pytest.mark.parametrize("bad", ["train.rdrop=1.0", "train.word_dropout=0.1", "train.amp=fp16"])
def test_cuda_graphs_refuse_what_they_cannot_replay(bad):
    with pytest.raises(ConfigError, match="train.cuda_graphs"):
        make_cfg(2, ["train.cuda_graphs=true", bad])


def test_cuda_graphs_need_a_transformer():
    with pytest.raises(ConfigError, match="train.cuda_graphs needs model.arch: transformer"):
        load(ROOT / "configs" / "multi30k_rnn_attention.yaml", ["train.cuda_graphs=true"])


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("bf16, compiled", [(True, False), (False, False), (True, True)],
                         ids=["bf16", "fp32", "bf16-compiled"])
def test_captured_graphs_replay_the_eager_loss_and_gradients(bf16, compiled, caplog):
    # sizes where the kernels are those of a real run (64-wide heads, > 3072 tokens a batch)
    cfg = ModelConfig(arch="transformer", layers=2, d_model=128, d_ff=256, heads=2, dropout=0.0)
    torch.manual_seed(0)
    model = build_model(cfg, 50, 50).cuda()
    data = random_ids(2000, np.random.default_rng(4), hi=30)

    def loss_fn(src, tgt_in, tgt_out):
        return smoothed_loss_sums(model.logits(src, pad_mask(src), tgt_in), tgt_out, 0.1)

    def autocast():
        return torch.autocast("cuda", dtype=torch.bfloat16, enabled=bf16, cache_enabled=False)

    # compiled: train.compile's kernels (one compilation for symbolic shapes) in the graphs
    graphed = GraphedLoss(model, torch.compile(loss_fn, dynamic=True) if compiled else loss_fn,
                          autocast)
    tol = {"rtol": 2e-2, "atol": 1e-3} if bf16 else {"rtol": 1e-4, "atol": 1e-5}
    for idx in data.batches(6000, seed=0, static=True)[:6]:
        b = data.collate(idx, static_tokens=6000).to(torch.device("cuda"))
        graphed.prepare([(b.src, b.tgt_in, b.tgt_out)])
        loss, _ = graphed.run(b.src, b.tgt_in, b.tgt_out, 0.5)
        got = {k: p.grad.clone() for k, p in model.named_parameters()}
        graphed.zero_grad()
        with autocast():
            want, _ = loss_fn(b.src, b.tgt_in, b.tgt_out)
        (want * 0.5).backward()
        torch.testing.assert_close(loss, want.detach(), rtol=1e-3, atol=1e-3)
        del want  # its autograd graph (gradient accumulation on the default stream) must not
        for k, p in model.named_parameters():  # outlive the pass: it would break a capture
            torch.testing.assert_close(got[k], p.grad, **tol, msg=lambda m, k=k: f"{k}: {m}")
        graphed.zero_grad()
    captured = sum(c.graph is not None for c in graphed.shapes.values())
    if bf16:  # what train.cuda_graphs runs (with or without train.compile): every shape captured
        assert captured == len(graphed.shapes) > 1
    else:  # float32: captured, or (where a kernel cannot be) said so and run without graphs
        assert captured == len(graphed.shapes) or "capture failed" in caplog.text


@pytest.mark.slow
def test_a_run_with_fixed_shapes_resumes_exactly_and_keeps_its_batching(tmp_path, monkeypatch):
    extra = ["train.cuda_graphs=true", "train.device=cpu"]
    straight = Trainer(make_cfg(6, extra), tmp_path / "a")
    straight.run()
    first = Trainer(make_cfg(6, extra), tmp_path / "b")
    run_until_ctrl_c(monkeypatch, first, at_update=4)  # inside the first epoch
    assert first.progress.batch_in_epoch == 3
    with pytest.raises(ValueError, match="cannot resume with train.cuda_graphs=false"):
        Trainer(make_cfg(6, ["train.device=cpu"]), tmp_path / "b", Start.resume())
    resumed = Trainer(make_cfg(6, extra), tmp_path / "b", Start.resume())
    resumed.run()
    for k, v in straight.model.state_dict().items():
        assert torch.equal(v, resumed.model.state_dict()[k]), k
