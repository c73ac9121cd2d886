"""nmtkit.models.sinusoid: the one sinusoid table (Vaswani et al. 2017, Sec. 3.5) of the
PyTorch model and the numpy forward pass, importable without PyTorch."""

import math
import subprocess
import sys

import numpy as np
import torch

from nmtkit.config import ModelConfig
from nmtkit.models import build_model
from nmtkit.models.sinusoid import sinusoid_table


def test_the_table_is_the_papers_formula():
    pe = sinusoid_table(50, 6)
    assert pe.shape == (50, 6) and pe.dtype == np.float32
    for pos in (0, 1, 7, 49):
        for i in range(3):
            angle = pos / 10000 ** (2 * i / 6)
            assert pe[pos, 2 * i] == np.float32(math.sin(angle))
            assert pe[pos, 2 * i + 1] == np.float32(math.cos(angle))
    assert sinusoid_table(4, 5).shape == (4, 5)  # an odd width: one more sine column


def test_the_pytorch_models_buffer_is_this_table_bit_for_bit():
    cfg = ModelConfig(d_model=32, d_ff=64, heads=2, layers=1, max_positions=300)
    model = build_model(cfg, 11, 11)
    buffers = [b for name, b in model.named_buffers() if name.endswith("pe")]
    assert buffers and all(np.array_equal(b.numpy(), sinusoid_table(300, 32)) for b in buffers)
    assert all(b.dtype == torch.float32 for b in buffers)


def test_importing_it_imports_no_pytorch():
    code = "import sys, nmtkit.models.sinusoid; print('torch' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"
