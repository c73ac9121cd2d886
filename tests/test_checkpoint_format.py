"""nmtkit.checkpoint_format: the marker, version and weights checksum that PyTorch's reader
and writer (nmtkit.checkpoint) and numpy's reader (nmtkit.lite.checkpoint) share."""

import json
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from nmtkit import checkpoint, checkpoint_format
from nmtkit.checkpoint_format import (
    FORMAT,
    MAX_ENTRY_CHARS,
    SAFETENSORS,
    TORCH_ZIP,
    VERSION,
    WeightBytes,
    checkpoint_kind,
    decode_entries,
    encode_entries,
    weights_digest,
)
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


def test_a_newer_version_is_refused_by_both_readers_alike(tmp_path):
    ck = checkpoint.load_checkpoint(checkpoint.convert_checkpoint(OLD, tmp_path / "new.pt")["out"])
    ck["version"] = VERSION + 1
    path = tmp_path / "newer.pt"
    path.write_bytes(checkpoint.release_bytes(ck))
    with pytest.raises(checkpoint.CheckpointError, match="version 2 is newer") as torch_said:
        checkpoint.load_checkpoint(path)
    with pytest.raises(checkpoint.CheckpointError) as numpy_said:
        lite_checkpoint.load_lite_bundle(path)
    assert str(numpy_said.value) == str(torch_said.value)
    torch.save({"format": FORMAT, "version": VERSION + 1, "model": {}}, path)  # (older kind)
    with pytest.raises(checkpoint.CheckpointError, match="version"):
        checkpoint.load_checkpoint(path)


OLD = Path(__file__).parent / "data" / "copy_task_v1_b02ce64.pt"
"""A release checkpoint written by torch.save (before safetensors)."""


def test_the_kind_of_file_is_read_from_its_first_bytes_not_its_name(tmp_path):
    release = tmp_path / "weights.bin"
    checkpoint.convert_checkpoint(OLD, release)
    assert checkpoint_kind(release) == SAFETENSORS and checkpoint_kind(OLD) == TORCH_ZIP
    data = release.read_bytes()  # 8 bytes of header length, then the header: JSON
    header = json.loads(data[8:8 + struct.unpack("<Q", data[:8])[0]])
    assert json.loads(header["__metadata__"]["format"]) == FORMAT
    assert header["src_embed.lut.weight"]["dtype"] == "F32"
    for content, said in [(b"", "empty file"), (b"PK", "not an nmtkit checkpoint"),
                          (b"\x80\x02}q\x00.", "not the zip archive that torch.save writes, nor "
                           "a safetensors file")]:
        (tmp_path / "x.pt").write_bytes(content)
        with pytest.raises(checkpoint.CheckpointError, match=said):
            checkpoint_kind(tmp_path / "x.pt")
    with pytest.raises(checkpoint.CheckpointError, match="is a directory"):
        checkpoint_kind(tmp_path)


def test_entries_come_back_as_they_were_stored():
    entries = {"config": {"train": {"adam_betas": (0.9, 0.98), "lr": 1e-3, "amp": False}},
               "tokenizers": {"src": {"kind": "sentencepiece", "model_proto": bytes(range(256))}},
               "vocab": {"src": {"itos": ["<pad>", "ä", "🐕", "$tuple", "{"]}}, "step": 7,
               "averaged_from": ["a.pt"], "note": None, "nested": [[1, (2, b"3")], {"$bytes": 1}]}
    meta = encode_entries(entries)
    assert all(isinstance(v, str) for v in meta.values())
    assert decode_entries("f.pt", meta) == entries
    with pytest.raises(TypeError, match="entry config.x: set"):
        encode_entries({"config": {"x": {1}}})
    with pytest.raises(TypeError, match="entry vocab: dict"):
        encode_entries({"vocab": {1: "int keys would come back as strings"}})
    with pytest.raises(checkpoint.CheckpointError, match="f.pt: metadata entry 'step' is not "
                       "nmtkit's JSON: RecursionError"):
        decode_entries("f.pt", {"step": "[" * 100_000 + "]" * 100_000})
    with pytest.raises(checkpoint.CheckpointError, match="entry 'x' is not nmtkit's JSON"):
        decode_entries("f.pt", {"x": '{"$bytes": "not base64!"}'})
    long = "[" + '"a",' * (MAX_ENTRY_CHARS // 4) + '"a"]'  # 4 million strings, 16 MiB of JSON
    with pytest.raises(checkpoint.CheckpointError, match=f"f.pt: metadata entry 'vocab' holds "
                       f"{len(long)} characters, more than the {MAX_ENTRY_CHARS} allowed"):
        decode_entries("f.pt", {"vocab": long})
