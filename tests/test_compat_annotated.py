"""Parity with The Annotated Transformer (the transcribed reference in shared/reference)."""

import importlib.util

import pytest
import torch

from nmtkit.compat.annotated import from_reference

from .helpers import ANNOTATED_REFERENCE, parity_batch, parity_models
from .helpers import PARITY_D as D
from .helpers import PARITY_D_FF as D_FF
from .helpers import PARITY_H as H
from .helpers import PARITY_N as N
from .helpers import PARITY_SRC_V as SRC_V
from .helpers import PARITY_TGT_V as TGT_V

pytestmark = pytest.mark.numerics

REF_PATH = ANNOTATED_REFERENCE
if not REF_PATH.exists():
    pytest.skip(f"reference implementation not found at {REF_PATH}", allow_module_level=True)



@pytest.fixture(scope="module")
def ref():
    spec = importlib.util.spec_from_file_location("annotated_reference", REF_PATH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)

    def standard_layer_norm(self, x):
        # nn.LayerNorm's form: biased variance, eps inside the square root.
        mean = x.mean(-1, keepdim=True)
        var = x.var(-1, keepdim=True, unbiased=False)
        return (x - mean) / torch.sqrt(var + self.eps) * self.a_2 + self.b_2

    module.LayerNorm.forward = standard_layer_norm  # a fresh module object: no global leak
    return module


@pytest.fixture(scope="module")
def models(ref):
    return parity_models(ref)


def test_teacher_forced_log_probs_match(ref, models):
    reference, ours = models
    src, tgt, batch = parity_batch(ref)
    assert torch.equal(batch.tgt, tgt)
    with torch.no_grad():
        expected = reference.generator(
            reference.decode(reference.encode(src, batch.src_mask), batch.src_mask, tgt,
                             batch.tgt_mask))
        got = ours(src, batch.src_mask, tgt, batch.tgt_mask)
    assert got.shape == expected.shape == (3, 6, TGT_V)
    assert torch.allclose(got, expected, atol=1e-5)


def test_greedy_outputs_identical(ref, models):
    reference, ours = models
    torch.manual_seed(2)
    max_len, start = 8, 0
    seen = set()
    for n in (3, 5, 7):
        src = torch.randint(3, SRC_V, (1, n))
        src_mask = torch.ones(1, 1, n, dtype=torch.bool)
        with torch.no_grad():
            expected = ref.greedy_decode(reference, src, src_mask, max_len, start)[0].tolist()
            state = ours.start(ours.encode(src, src_mask), src_mask)
            ys, prev = [start], torch.tensor([start])
            for _ in range(max_len - 1):
                log_probs, state, _ = ours.step(state, prev)
                prev = log_probs.argmax(-1)
                ys.append(int(prev))
        assert ys == expected
        seen.update(ys)
    assert len(seen) > 3  # the comparison is not between constant outputs


def test_config_of_converted_model(models):
    _, ours = models
    cfg = ours.cfg
    assert (cfg.norm, cfg.tie_output, cfg.tie_all, cfg.dropout) == ("pre", False, False, 0.0)
    assert cfg.max_positions == 5000 and not ours.training


def test_missing_key_is_named(models):
    reference, _ = models
    sd = dict(reference.state_dict())
    del sd["decoder.layers.1.src_attn.linears.2.bias"]
    with pytest.raises(ValueError, match=r"decoder\.layers\.1\.src_attn\.linears\.2\.bias"):
        from_reference(sd, SRC_V, TGT_V, N=N, d_model=D, d_ff=D_FF, h=H)


def test_unexpected_key_and_bad_shape_are_named(models):
    reference, _ = models
    sd = dict(reference.state_dict())
    sd["encoder.layers.2.feed_forward.w_1.weight"] = torch.zeros(D_FF, D)
    with pytest.raises(ValueError, match=r"encoder\.layers\.2\.feed_forward\.w_1\.weight"):
        from_reference(sd, SRC_V, TGT_V, N=N, d_model=D, d_ff=D_FF, h=H)
    sd = dict(reference.state_dict())
    sd["generator.proj.bias"] = torch.zeros(TGT_V + 1)
    with pytest.raises(ValueError, match=r"generator\.proj\.bias: shape \(12,\)"):
        from_reference(sd, SRC_V, TGT_V, N=N, d_model=D, d_ff=D_FF, h=H)
    with pytest.raises(ValueError, match=r"tgt_embed\.0\.lut\.weight"):  # wrong tgt_vocab
        from_reference(reference.state_dict(), SRC_V, TGT_V + 1, N=N, d_model=D, d_ff=D_FF, h=H)
