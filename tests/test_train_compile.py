"""train.compile: the torch.compile'd training forward trains like the eager one."""

import math

import pytest
import torch

from nmtkit.train.loop import Trainer

from .helpers import make_cfg

pytestmark = pytest.mark.slow  # trains a model or starts processes: not in the fast tier


def test_compiled_training_matches_eager(tmp_path):
    # dropout off: the compiled graph draws its random masks differently from eager mode
    extra = ["model.dropout=0.0"]
    eager = Trainer(make_cfg(3, extra), tmp_path / "eager")
    compiled = Trainer(make_cfg(3, extra + ["train.compile=true"]), tmp_path / "compiled")
    assert compiled.updater.compiled_logits is not None and eager.updater.compiled_logits is None
    model = compiled.model
    b = compiled.data.train_ids.collate(compiled.data.train_ids.batches(256, seed=0)[0])
    grads = []
    for k, forward in enumerate((model.logits, compiled.updater.compiled_logits)):
        model.zero_grad()
        logits = forward(b.src, b.src_mask, b.tgt_in)
        torch.nn.functional.cross_entropy(logits.flatten(0, 1), b.tgt_out.flatten()).backward()
        grads.append({n: p.grad.clone() for n, p in model.named_parameters()})
        if k == 0:
            reference = logits.detach()
        else:
            torch.testing.assert_close(logits.detach(), reference, rtol=1e-4, atol=1e-5)
    for name, g in grads[0].items():
        torch.testing.assert_close(grads[1][name], g, rtol=1e-3, atol=1e-6, msg=name)
    model.zero_grad(set_to_none=True)

    eager.run()
    compiled.run()
    for a, c in zip(eager.progress.history, compiled.progress.history, strict=True):
        for key in ("train_loss", "valid_loss"):
            assert math.isclose(a[key], c[key], rel_tol=2e-4), (key, a[key], c[key])
