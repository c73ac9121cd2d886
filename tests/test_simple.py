"""The idea-sized code of the guide does what the production code does.

- :func:`nmtkit.train.simple.run_epoch` trains a tiny Transformer and a tiny RNN to copy;
- on those trained models :func:`nmtkit.decode.simple.greedy_decode` and
  :func:`nmtkit.decode.simple.beam_search` give the tokens of
  :func:`nmtkit.decode.search.greedy_search` and :func:`nmtkit.decode.search.beam_search`;
- :func:`nmtkit.train.simple.train_step` computes the loss and every gradient of the
  production training step (one update of :class:`nmtkit.train.loop.Trainer`) on the same
  batch from the same weights.
"""

from __future__ import annotations

import copy
import csv

import numpy as np
import pytest
import torch

from nmtkit.config import DecodeConfig, load
from nmtkit.data.batching import Batch, pad_mask
from nmtkit.data.vocab import BOS, EOS, PAD
from nmtkit.decode import simple as simple_decode
from nmtkit.decode.beams import length_caps
from nmtkit.decode.search import beam_search, greedy_search
from nmtkit.models import build_model
from nmtkit.train import simple as simple_train
from nmtkit.train.loop import Trainer
from nmtkit.train.schedule import build_optimizer, noam_rate

from .helpers import ROOT, make_rnn, make_transformer, tiny_copy_overrides

V = 14  # 4 special ids, then 10 symbols


def copy_batch(g: torch.Generator, size: int = 32) -> Batch:
    """Random symbol sequences of 3 to 10 tokens, each its own target."""
    lens = torch.randint(3, 11, (size,), generator=g).tolist()
    src = torch.full((size, max(lens) + 1), PAD)
    tgt_in, tgt_out = torch.full_like(src, PAD), torch.full_like(src, PAD)
    for i, n in enumerate(lens):
        sym = torch.randint(4, V, (n,), generator=g)
        src[i, :n], src[i, n] = sym, EOS
        tgt_in[i, 0], tgt_in[i, 1:n + 1] = BOS, sym
        tgt_out[i, :n], tgt_out[i, n] = sym, EOS
    return Batch(src, tgt_in, tgt_out, np.arange(size), sum(lens) + size)


def sources(n: int = 20) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(5)
    out = []
    for _ in range(n):
        k = int(torch.randint(3, 12, (1,), generator=g))
        out.append(torch.cat([torch.randint(4, V, (1, k), generator=g), torch.tensor([[EOS]])], 1))
    return out


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """Tiny products run fastest on one thread, and other tests may share the cores."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module", params=["transformer", "rnn"])
def trained(request):
    """A model trained to copy by the guide's run_epoch: three short epochs."""
    if request.param == "transformer":
        model, lr, epochs = make_transformer(0, vocab=(V, V)), 3e-3, 3
    else:
        model, lr, epochs = make_rnn(0, vocab=(V, V), layers=1, emb_dim=16, rnn_hidden=32), 1e-2, 2
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    g = torch.Generator().manual_seed(1)
    losses, step = [], 0
    for _ in range(epochs):
        batches = [copy_batch(g) for _ in range(50)]
        loss, step = simple_train.run_epoch(model, batches, optimizer, lambda s: lr, step,
                                            label_smoothing=0.0, clip_norm=1.0)
        losses.append(loss)
    assert step == 50 * epochs
    assert losses[-1] < 0.5 * losses[0], losses  # it learned something
    return model.eval()


@pytest.mark.slow
def test_greedy_decode_gives_the_production_tokens(trained):
    cfg = DecodeConfig(beam=1)
    right = 0
    for src in sources():
        mask = pad_mask(src)
        cap = int(length_caps(mask, cfg.max_len_a, cfg.max_len_b))
        ours = simple_decode.greedy_decode(trained, src, mask, cap)
        assert ours == greedy_search(trained, src, mask, cfg)[0].tokens
        right += ours == src[0, :-1].tolist()
    assert 0 < right < len(sources())  # a partly trained model: neither noise nor perfect


@pytest.mark.slow
def test_beam_search_gives_the_production_tokens(trained):
    differs = 0
    for beam, alpha in [(4, 0.6), (3, 0.0)]:
        cfg = DecodeConfig(beam=beam, length_penalty=alpha)
        for src in sources():
            mask = pad_mask(src)
            cap = int(length_caps(mask, cfg.max_len_a, cfg.max_len_b))
            ours = simple_decode.beam_search(trained, src, mask, cap, beam, alpha)
            assert ours == beam_search(trained, src, mask, cfg)[0][0].tokens, (beam, alpha)
            differs += ours != simple_decode.greedy_decode(trained, src, mask, cap)
    assert differs > 0  # the beam found something greedy search did not


def test_a_short_cap_forces_the_end(trained):
    src = sources()[0]
    mask = pad_mask(src)
    assert len(simple_decode.greedy_decode(trained, src, mask, 3)) <= 2
    cfg = DecodeConfig(beam=4, max_len_a=0.0, max_len_b=3)
    assert (simple_decode.beam_search(trained, src, mask, 3, 4, 0.6)
            == beam_search(trained, src, mask, cfg)[0][0].tokens)


@pytest.mark.slow
def test_train_step_matches_the_trainer(tmp_path, monkeypatch):
    """One update of the Trainer and one train_step, from the same weights on the same batch:
    the same loss and the same gradients (recorded when the Trainer's optimizer steps)."""
    cfg = load(ROOT / "configs" / "copy_task.yaml", tiny_copy_overrides(steps=1) + [
        "model.dropout=0.0", "train.label_smoothing=0.1", "train.clip_norm=0.5",
        "train.log_every=1", "train.valid_bleu=false"])
    trainer = Trainer(cfg, tmp_path / "run")
    start = copy.deepcopy(trainer.model.state_dict())
    batch = trainer.data.train_ids.collate(trainer.epoch_batches(0)[0])
    seen: dict[str, object] = {}
    real_step = torch.optim.Adam.step

    def recording_step(self, *args, **kwargs):
        seen["lr"] = self.param_groups[0]["lr"]
        seen["grads"] = {id(p): p.grad.clone() for group in self.param_groups
                         for p in group["params"] if p.grad is not None}
        return real_step(self, *args, **kwargs)

    monkeypatch.setattr(torch.optim.Adam, "step", recording_step)
    trainer.run()
    monkeypatch.undo()
    with open(tmp_path / "run" / "losses.csv") as f:
        (row,) = list(csv.DictReader(f))
    grads = {name: seen["grads"][id(p)] for name, p in trainer.model.named_parameters()}

    model = build_model(cfg.model, trainer.model.src_vocab_size, trainer.model.tgt_vocab_size)
    model.load_state_dict(start)
    optimizer = build_optimizer(model.parameters(), cfg.train)
    lr = noam_rate(1, cfg.model.d_model, cfg.train.lr, cfg.train.warmup)
    assert seen["lr"] == pytest.approx(lr)
    loss = simple_train.train_step(model, batch, optimizer, lr, cfg.train.label_smoothing,
                                   cfg.train.clip_norm)
    assert loss == pytest.approx(float(row["train_loss"]), abs=6e-5)  # losses.csv: 4 decimals
    assert sorted(grads) == sorted(n for n, _ in model.named_parameters())
    for name, p in model.named_parameters():
        torch.testing.assert_close(p.grad, grads[name], rtol=1e-4, atol=1e-6, msg=name)


def test_run_epoch_counts_updates_and_uses_the_rate():
    model = make_transformer(0, vocab=(V, V))
    optimizer = torch.optim.Adam(model.parameters())
    g = torch.Generator().manual_seed(3)
    rates = []

    def rate(step: int) -> float:
        rates.append(step)
        return 1e-3

    loss, step = simple_train.run_epoch(model, [copy_batch(g) for _ in range(3)], optimizer,
                                        rate, step=10)
    assert step == 13 and loss > 0
    assert rates == [11, 12, 13]  # each update's number, counted on from ``step``
    assert optimizer.param_groups[0]["lr"] == 1e-3
