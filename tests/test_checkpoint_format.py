"""nmtkit.checkpoint_format: the marker, version and weights checksum that PyTorch's reader
and writer (nmtkit.checkpoint) and numpy's reader (nmtkit.lite.checkpoint) share."""

import subprocess
import sys

import numpy as np
import pytest
import torch

from nmtkit import checkpoint, checkpoint_format
from nmtkit.checkpoint_format import FORMAT, VERSION, WeightBytes, weights_digest
from nmtkit.lite import checkpoint as lite_checkpoint


def test_it_imports_neither_torch_nor_numpy():
    code = "import sys, nmtkit.checkpoint_format; print(sorted({'torch', 'numpy'} & set(sys.modules)))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def test_both_readers_use_this_marker_and_version():
    assert checkpoint.FORMAT is checkpoint_format.FORMAT is lite_checkpoint.FORMAT
    assert checkpoint.VERSION == lite_checkpoint.VERSION == checkpoint_format.VERSION


def test_the_digest_is_one_layout_for_tensors_and_arrays():
    state = {"b": torch.arange(6, dtype=torch.float32).reshape(2, 3), "a": torch.ones(1)}
    want = weights_digest([WeightBytes("a", "torch.float32", (1,), np.ones(1, np.float32).tobytes()),
                           WeightBytes("b", "torch.float32", (2, 3),
                                       np.arange(6, dtype=np.float32).tobytes())])
    assert checkpoint.weights_digest(state) == want
    assert lite_checkpoint.weights_digest({k: v.numpy() for k, v in state.items()}) == want
    changed = dict(state, a=torch.zeros(1))
    assert checkpoint.weights_digest(changed) != want


def test_weights_out_of_name_order_are_refused():
    w = WeightBytes("b", "torch.float32", (1,), b"\0\0\0\0")
    with pytest.raises(ValueError, match="name order"):
        weights_digest([w, w._replace(name="a")])


def test_a_newer_version_is_refused_by_both_readers(tmp_path):
    path = tmp_path / "new.pt"
    torch.save({"format": FORMAT, "version": VERSION + 1, "model": {}}, path)
    with pytest.raises(checkpoint.CheckpointError, match="version"):
        checkpoint.load_checkpoint(path)
    with pytest.raises(lite_checkpoint.LiteUnsupported, match="newer"):
        lite_checkpoint.load_lite_bundle(path)
