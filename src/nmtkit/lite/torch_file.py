"""A ``torch.save`` file read without PyTorch: its objects, with tensors as numpy arrays.

``torch.save`` writes a zip archive: ``PREFIX/data.pkl``, a pickle (protocol 2) of the saved
object, in which each tensor is a call to ``torch._utils._rebuild_tensor_v2`` on a storage
named by a *persistent id* ``("storage", torch.FloatStorage, key, location, numel)``; the
storage's bytes are the archive member ``PREFIX/data/KEY`` (little-endian,
``PREFIX/byteorder``). This module unpickles ``data.pkl`` with a :class:`pickle.Unpickler`
that knows only what a plain nmtkit checkpoint holds (dicts, lists, str, numbers, bytes,
``OrderedDict``, tensors of the storage types in :data:`STORAGES`) and refuses anything else
(:class:`UnsupportedFile`), as ``torch.load(weights_only=True)`` refuses pickled code. Tensors
that share a storage (tied weights) share the numpy buffer.

Every failure is an :class:`UnsupportedFile`: the caller then reads the file with PyTorch,
whose checks give the error a user sees (:func:`nmtkit.checkpoint.load_checkpoint`).
"""

from __future__ import annotations

import codecs
import io
import pickle
import zipfile
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

STORAGES = {"FloatStorage": np.float32, "DoubleStorage": np.float64, "HalfStorage": np.float16,
            "LongStorage": np.int64, "IntStorage": np.int32, "ShortStorage": np.int16,
            "CharStorage": np.int8, "ByteStorage": np.uint8, "BoolStorage": np.bool_}
"""torch's typed storages this reader knows, with their numpy dtypes (bfloat16 has none)."""

TORCH_DTYPE_NAMES = {np.dtype(np.float32): "torch.float32", np.dtype(np.float64): "torch.float64",
                     np.dtype(np.float16): "torch.float16", np.dtype(np.int64): "torch.int64",
                     np.dtype(np.int32): "torch.int32", np.dtype(np.int16): "torch.int16",
                     np.dtype(np.int8): "torch.int8", np.dtype(np.uint8): "torch.uint8",
                     np.dtype(np.bool_): "torch.bool"}
"""How PyTorch prints each dtype (``str(tensor.dtype)``), as checksums of weights spell it."""


class UnsupportedFile(Exception):
    """A file this reader does not read (the message says why); PyTorch may."""


class _Storage:
    """A storage type named in the pickle (``torch.FloatStorage``): its numpy dtype."""

    def __init__(self, dtype: type) -> None:
        self.dtype = np.dtype(dtype)


def _rebuild_tensor(storage: np.ndarray, offset: int, size: Sequence[int], stride: Sequence[int],
                    requires_grad: bool = False, hooks: Any = None, metadata: Any = None
                    ) -> np.ndarray:
    """``torch._utils._rebuild_tensor_v2``: the tensor's view of its storage (``offset``,
    ``size`` and ``stride`` counted in elements), as a read-only numpy array."""
    if any(int(n) == 0 for n in size):
        empty = np.empty(tuple(size), dtype=storage.dtype)
        empty.flags.writeable = False
        return empty
    last = offset + sum((int(n) - 1) * int(s) for n, s in zip(size, stride, strict=True))
    if offset < 0 or last >= storage.size:
        raise UnsupportedFile(f"a tensor reaches past its storage ({last} >= {storage.size})")
    item = storage.dtype.itemsize
    return np.lib.stride_tricks.as_strided(storage[offset:], shape=tuple(size),
                                           strides=tuple(int(s) * item for s in stride),
                                           writeable=False)


class _Unpickler(pickle.Unpickler):
    """``data.pkl``'s unpickler: the allowed globals only, storages from the archive."""

    def __init__(self, data: bytes, archive: zipfile.ZipFile, prefix: str) -> None:
        super().__init__(io.BytesIO(data))
        self.archive, self.prefix = archive, prefix
        self.storages: dict[str, np.ndarray] = {}

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) == ("torch._utils", "_rebuild_tensor_v2"):
            return _rebuild_tensor
        if (module, name) == ("collections", "OrderedDict"):
            return OrderedDict
        if (module, name) == ("_codecs", "encode"):  # how protocol 2 writes bytes
            return codecs.encode
        if module == "torch" and name in STORAGES:
            return _Storage(STORAGES[name])
        raise UnsupportedFile(f"it holds {module}.{name}, which a plain checkpoint does not")

    def persistent_load(self, pid: Any) -> np.ndarray:
        if not (isinstance(pid, tuple) and len(pid) == 5 and pid[0] == "storage"
                and isinstance(pid[1], _Storage)):
            raise UnsupportedFile(f"unknown persistent id {pid!r:.80}")
        key = str(pid[2])
        if key not in self.storages:
            raw = self.archive.read(f"{self.prefix}/data/{key}")
            if len(raw) % pid[1].dtype.itemsize:
                raise UnsupportedFile(f"storage {key} is not a whole number of elements")
            self.storages[key] = np.frombuffer(raw, dtype=pid[1].dtype)
        storage = self.storages[key]
        if storage.dtype != pid[1].dtype:
            raise UnsupportedFile(f"storage {key} is read as two types")
        return storage


def read_torch_file(path: str | Path) -> Any:
    """The object ``torch.save`` wrote to ``path``, tensors as read-only numpy arrays
    (:class:`UnsupportedFile` for whatever this reader does not read)."""
    try:
        with zipfile.ZipFile(path) as archive:
            pickles = [n for n in archive.namelist() if n.endswith("/data.pkl") and n.count("/") == 1]
            if len(pickles) != 1:
                raise UnsupportedFile("not a torch.save archive (no single PREFIX/data.pkl)")
            prefix = pickles[0].split("/")[0]
            names = set(archive.namelist())
            if f"{prefix}/byteorder" in names and archive.read(f"{prefix}/byteorder") != b"little":
                raise UnsupportedFile("its tensors are big-endian")
            return _Unpickler(archive.read(pickles[0]), archive, prefix).load()
    except UnsupportedFile:
        raise
    except (OSError, zipfile.BadZipFile, pickle.UnpicklingError, EOFError, KeyError, ValueError,
            TypeError, AttributeError, IndexError) as e:
        raise UnsupportedFile(f"{type(e).__name__}: {e}") from None
