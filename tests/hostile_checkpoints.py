"""Hostile checkpoints, generated here and never committed as binary files (issue 74, items 1,
6 and 10): ``torch.save`` archives written by hand (a weight as a view of any offset, size and
stride of its storage; members deflated, so that a few megabytes unpack into gigabytes) and
safetensors release files with any header, for the readers' refusals.

Plain functions, imported by the test modules as ``tests/helpers.py`` is.
"""

from __future__ import annotations

import io
import pickle
import struct
import zlib
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.numpy import save as safetensors_save

from nmtkit.checkpoint import load_checkpoint, release_bytes
from nmtkit.checkpoint_format import encode_entries

# --- torch.save archives, by hand ------------------------------------------------------------------


@dataclass
class View:
    """A float32 weight as ``torch.save`` pickles it: ``size``/``stride``/``offset`` (in
    elements) of a storage of ``numel`` elements whose bytes are ``data`` (or the chunks
    ``chunks()`` gives, for storages too large to hold), stored deflated when ``deflate``."""

    numel: int
    size: tuple[int, ...]
    stride: tuple[int, ...]
    offset: int = 0
    data: bytes = b""
    chunks: Callable[[], Iterator[bytes]] | None = None
    deflate: bool = False

    @classmethod
    def of(cls, t: torch.Tensor) -> View:
        t = t.detach().to(torch.float32).contiguous()
        return cls(t.numel(), tuple(t.shape), t.stride(), data=t.numpy().tobytes())


class _Storage:
    def __init__(self, key: str, numel: int) -> None:
        self.key, self.numel = key, numel


class _Tensor:
    def __init__(self, storage: _Storage, view: View) -> None:
        self.storage, self.view = storage, view

    def __reduce__(self) -> tuple[Any, ...]:
        v = self.view
        return (torch._utils._rebuild_tensor_v2,
                (self.storage, v.offset, v.size, v.stride, False, OrderedDict()))


class _Pickler(pickle.Pickler):
    """``torch.save``'s pickle (protocol 2): storages as persistent ids."""

    def persistent_id(self, obj: Any) -> Any:
        if isinstance(obj, _Storage):
            return ("storage", torch.FloatStorage, obj.key, "cpu", obj.numel)
        return None


def _zip(path: Path, members: list[tuple[str, bytes, int, int, int]]) -> None:
    """A zip archive of ``(name, bytes as stored, method, crc32, unpacked size)`` members
    (method 0: stored, 8: deflated; no zip64: each member under 4 GiB unpacked)."""
    out, directory = io.BytesIO(), io.BytesIO()
    for name, data, method, crc, size in members:
        offset, raw = out.tell(), name.encode()
        fields = (20, 0, method, 0, 0x21, crc, len(data), size, len(raw))
        out.write(struct.pack("<IHHHHHIIIHH", 0x04034B50, *fields, 0) + raw + data)
        directory.write(struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 20, *fields, 0, 0, 0, 0,
                                    0, offset) + raw)
    start = out.tell()
    out.write(directory.getvalue())
    out.write(struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, len(members), len(members),
                          len(directory.getvalue()), start, 0))
    path.write_bytes(out.getvalue())


def _member(name: str, view: View) -> tuple[str, bytes, int, int, int]:
    if view.chunks is None:
        data = view.data
        if not view.deflate:
            return name, data, 0, zlib.crc32(data), len(data)
        c = zlib.compressobj(9, zlib.DEFLATED, -15)
        return name, c.compress(data) + c.flush(), 8, zlib.crc32(data), len(data)
    crc, size, packed, c = 0, 0, [], zlib.compressobj(9, zlib.DEFLATED, -15)
    last: tuple[bytes, bytes] | None = None
    for chunk in view.chunks():
        crc, size = zlib.crc32(chunk, crc), size + len(chunk)
        if last is None or chunk is not last[0]:  # after a full flush, the same chunk packs
            last = chunk, c.compress(chunk) + c.flush(zlib.Z_FULL_FLUSH)  # into the same block
        packed.append(last[1])
    return name, b"".join(packed) + c.flush(), 8, crc, size


def write_torch_archive(path: Path, payload: dict[str, Any]) -> Path:
    """``payload`` written as ``torch.save`` would, its ``model`` entry's tensors and
    :class:`View` s each with a storage of its own."""
    members, model = [], {}
    for i, (name, w) in enumerate(payload["model"].items()):
        view = w if isinstance(w, View) else View.of(w)
        model[name] = _Tensor(_Storage(str(i), view.numel), view)
        members.append(_member(f"archive/data/{i}", view))
    buf = io.BytesIO()
    _Pickler(buf, protocol=2).dump({**payload, "model": model})
    head = [("archive/data.pkl", buf.getvalue()), ("archive/byteorder", b"little"),
            ("archive/version", b"3\n")]
    _zip(path, [(n, d, 0, zlib.crc32(d), len(d)) for n, d in head] + members)
    return path


def zeros(total: int, chunk: int = 1 << 22) -> Callable[[], Iterator[bytes]]:
    """``total`` zero bytes (a multiple of ``chunk``), a chunk at a time: deflated, their
    blocks repeat, so a gigabyte takes a second and a megabyte on disk."""
    def chunks() -> Iterator[bytes]:
        block = bytes(chunk)
        for _ in range(total // chunk):
            yield block
    return chunks


# --- the hostile files ------------------------------------------------------------------------------


def plain_payload(path: Path) -> dict[str, Any]:
    """A checkpoint's entries and weights (copies), as a payload to change and write back."""
    ck = load_checkpoint(path)
    return {**ck, "model": {k: v.clone() for k, v in ck["model"].items()}}


BOMB_BYTES = 3 << 29
"""1.5 GiB of zeros: the deflated member of :func:`deflated_bomb` (about 1.5 MB on disk)."""
HUGE = (50_000, 100_000)
"""Five billion elements (20 GB as float32), seen through one float."""


def negative_stride(good: Path, out: Path) -> Path:
    """Item 1: an expected weight stored as a view whose large negative stride reaches before
    its buffer, no ``weights_sha256`` (as older checkpoints were written)."""
    p = plain_payload(good)
    p.pop("weights_sha256")
    name = next(k for k, v in p["model"].items() if v.dim() == 2)
    w = p["model"][name]
    p["model"][name] = View(w.numel(), tuple(w.shape), (-(1 << 40), 1), offset=w.numel() - 1,
                            data=w.numpy().tobytes())
    return write_torch_archive(out, p)


def reversed_view(good: Path, out: Path) -> Path:
    """Item 10: an expected weight stored as a view of stride -1 that stays inside its storage
    (the weight reversed), no ``weights_sha256``. PyTorch refuses every negative stride; the
    numpy engine's own zip reader translated with it."""
    p = plain_payload(good)
    p.pop("weights_sha256")
    w = p["model"]["generator.bias"]
    p["model"]["generator.bias"] = View(w.numel(), tuple(w.shape), (-1,), offset=w.numel() - 1,
                                        data=w.flip(0).numpy().tobytes())
    return write_torch_archive(out, p)


def stride_zero(good: Path, out: Path) -> Path:
    """Item 6: a weight the config does not expect, five billion elements seen through one
    float (stride 0)."""
    p = plain_payload(good)
    p.pop("weights_sha256")
    p["model"]["evil.weight"] = View(1, HUGE, (0, 0), data=struct.pack("<f", 1.0))
    return write_torch_archive(out, p)


def deflated_bomb(good: Path, out: Path) -> Path:
    """Item 6: a weight the config does not expect whose storage is :data:`BOMB_BYTES` of
    zeros, deflated in the zip."""
    p = plain_payload(good)
    p.pop("weights_sha256")
    n = BOMB_BYTES // 4
    p["model"]["evil.weight"] = View(n, (n,), (1,), chunks=zeros(BOMB_BYTES), deflate=True)
    return write_torch_archive(out, p)


def deflated_weights(good: Path, out: Path) -> Path:
    """A checkpoint whose weights are all the right ones, deflated (not what torch.save
    writes: refused by the zip directory alone)."""
    p = plain_payload(good)
    p["model"] = {k: View(**{**View.of(v).__dict__, "deflate": True}) for k, v in p["model"].items()}
    return write_torch_archive(out, p)


# --- safetensors release files ----------------------------------------------------------------------


def write_release(path: Path, payload: dict[str, Any]) -> Path:
    """``payload`` as a release file, written as is: its ``weights_sha256`` (stale, or none)
    is not renewed, unlike :func:`nmtkit.checkpoint.save_checkpoint`."""
    path.write_bytes(release_bytes(payload))
    return path


def write_safetensors(path: Path, weights: dict[str, np.ndarray], metadata: dict[str, str]) -> Path:
    """Any safetensors file: these arrays, this metadata (strings, as the format has it)."""
    path.write_bytes(safetensors_save(weights, metadata=metadata))
    return path


def release_variants(good: Path, out: Path) -> dict[str, Path]:
    """Release files that both readers must refuse, one fault each, by name."""
    p = plain_payload(good)
    entries = {k: v for k, v in p.items() if k != "model"}
    arrays = {k: v.numpy() for k, v in p["model"].items()}
    meta = encode_entries(entries)
    name = next(k for k, v in arrays.items() if v.ndim == 2)
    files: dict[str, tuple[dict[str, np.ndarray], dict[str, str]]] = {
        "unexpected weight": ({**arrays, "evil.weight": np.zeros(3, np.float32)}, meta),
        "missing weight": ({k: v for k, v in arrays.items() if k != name}, meta),
        "wrong shape": ({**arrays, name: arrays[name][:-1]}, meta),
        "integer weight": ({**arrays, name: arrays[name].astype(np.int32)}, meta),
        "nan": ({**arrays, name: np.where(arrays[name] > 0, np.nan, 0).astype(np.float32)}, meta),
        "altered weight": ({**arrays, name: arrays[name] + 1}, meta),
        "no marker": (arrays, {k: v for k, v in meta.items() if k != "format"}),
        "newer version": (arrays, {**meta, "version": "99"}),
        "metadata not json": (arrays, {**meta, "config": "{not json"}),
        "deep metadata": (arrays, {**meta, "step": "[" * 100_000 + "]" * 100_000}),
        "bad config": (arrays, {**meta, "config": '{"model": {"d_model": "wide"}}'}),
        "model as metadata": (arrays, {**meta, "model": "{}"}),
        "tied to nothing": (arrays, {**meta, "tied_weights": '{"x": "no such weight"}'}),
    }
    paths = {what: write_safetensors(out / f"{what.replace(' ', '_')}.pt", w, m)
             for what, (w, m) in files.items()}
    data = good.read_bytes()
    paths["truncated"] = out / "truncated.pt"
    paths["truncated"].write_bytes(data[:len(data) // 2])
    length = int.from_bytes(data[:8], "little")
    paths["header past the end"] = out / "header_past_the_end.pt"
    paths["header past the end"].write_bytes((length + 10**6).to_bytes(8, "little") + data[8:])
    return paths
