"""The FLOP count of the benchmarks (benchmarks/_common.py) equals PyTorch's own count of a
Transformer training pass (forward and backward), so that MFU figures mean what they say."""

import sys
from pathlib import Path

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from nmtkit import fast
from nmtkit.config import ModelConfig
from nmtkit.data.batching import pad_mask
from nmtkit.models.transformer import Transformer

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from _common import attention_train_flops, transformer_train_flops  # noqa: E402


@pytest.mark.slow
@pytest.mark.parametrize("src_len, tgt_len", [(7, 7), (9, 5), (4, 11)])
def test_counted_flops_equal_pytorchs_count_of_a_training_pass(src_len, tgt_len):
    d, d_ff, layers, v_src, v_tgt, batch = 32, 48, 2, 40, 50, 3
    torch.manual_seed(0)
    model = Transformer(ModelConfig(layers=layers, d_model=d, d_ff=d_ff, heads=4, dropout=0.0,
                                    tie_output=False, tie_all=False), v_src, v_tgt).train()
    fast.for_training(model, retain_memory=False)  # the written-out attention: plain bmm
    src = torch.randint(4, v_src, (batch, src_len))  # no padding: every position is real
    tgt_in = torch.randint(4, v_tgt, (batch, tgt_len))
    # oneDNN off: PyTorch's counter knows mm/addmm, not the private operator of nmtkit.fast.linear
    with torch.backends.mkldnn.flags(enabled=False), FlopCounterMode(display=False) as counter:
        model.logits(src, pad_mask(src), tgt_in).sum().backward()
    expected = (transformer_train_flops(d, d_ff, layers, v_tgt, batch * src_len, batch * tgt_len)
                + attention_train_flops(d, layers, [src_len] * batch, [tgt_len] * batch))
    assert counter.get_total_flops() == expected
