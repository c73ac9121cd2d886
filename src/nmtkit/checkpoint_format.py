"""What an nmtkit checkpoint file says of itself, without PyTorch: its kind (read from its
first bytes), format marker and version, the checksum of its weights and, for a release
checkpoint, its safetensors header (the entries as JSON metadata, the weights' table). The
two readers use it, PyTorch's (:mod:`nmtkit.checkpoint`, which also writes checkpoints) and
numpy's (:mod:`nmtkit.lite.checkpoint`, the cold start): one definition, so they accept the
same files and refuse the others with the same message.

Two kinds of file, told apart by content, never by name (``best.pt`` is safetensors):

- a *release* checkpoint (``best.pt``, ``step_*.pt``, an average, a converted file) is a
  safetensors file: an 8-byte little-endian header length, a JSON header (``{``) naming
  each tensor's dtype, shape and byte range, then the bytes. The other entries (config,
  tokenizers, vocabularies, marker, checksum ...) are the header's ``__metadata__``, one
  JSON string each (:func:`encode_entries`). The safetensors library checks the header
  (offsets inside the file, sizes that are dtype times shape, no overlap) before any
  tensor is read, and nothing in the file can run code;
- ``last.pt`` (the resume state, optimizer included) and release checkpoints written
  before nmtkit used safetensors are ``torch.save`` zip archives (``PK``).

It sits at the bottom of the layers (beside ``models`` and ``rules``, importing neither
PyTorch nor numpy), because the lowest reader, :mod:`nmtkit.lite`, is below
:mod:`nmtkit.checkpoint`; the checkpoint layer owns the format through it.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple, Protocol

from .config import Config
from .data.vocab import Vocab
from .errors import UserError

FORMAT = "nmtkit-checkpoint"
"""The marker every nmtkit checkpoint carries (written by :func:`nmtkit.checkpoint.save_checkpoint`)."""
VERSION = 1
"""The newest checkpoint version this nmtkit reads and the one it writes."""
ENTRIES = ("config", "tokenizers", "vocab", "model")
"""What every checkpoint holds (and translating reads)."""

SAFETENSORS = "safetensors"
TORCH_ZIP = "torch zip"
TIED = "tied_weights"
"""The metadata entry of a release file that names the weights stored once under another
name (tied embeddings: ``{"tgt_embed.lut.weight": "src_embed.lut.weight"}``)."""

TORCH_DTYPES = {"F64": "torch.float64", "F32": "torch.float32", "F16": "torch.float16",
                "BF16": "torch.bfloat16", "I64": "torch.int64", "I32": "torch.int32",
                "I16": "torch.int16", "I8": "torch.int8", "U8": "torch.uint8",
                "BOOL": "torch.bool"}
"""safetensors' dtype names, as PyTorch prints them (what checksums and messages say)."""
FLOATS = frozenset({"F64", "F32", "F16", "BF16"})


class CheckpointError(UserError, RuntimeError):
    """A checkpoint that cannot be used; the message names the file and the problem."""


class WeightBytes(NamedTuple):
    """One weight as the checksum reads it: its name, its dtype as PyTorch prints it
    (``torch.float32``), its shape and its bytes (C order)."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    data: bytes | memoryview


def weights_digest(weights: Iterable[WeightBytes]) -> str:
    """sha256 over the weights, given in name order (a ``ValueError`` otherwise; taken one
    at a time, so a caller may make each one's bytes as it comes): for each,
    ``name|dtype|shape|`` then its bytes. A checkpoint's ``weights_sha256`` entry."""
    h, last = hashlib.sha256(), None
    for w in weights:
        if last is not None and w.name <= last:
            raise ValueError(f"weights out of name order: {w.name!r} after {last!r}")
        h.update(f"{w.name}|{w.dtype}|{w.shape}|".encode())
        h.update(w.data)
        last = w.name
    return h.hexdigest()


# --- which kind of file ---------------------------------------------------------------------------


def checkpoint_kind(path: str | Path) -> str:
    """:data:`SAFETENSORS` or :data:`TORCH_ZIP`, from the file's first bytes; a
    :class:`CheckpointError` for a directory, a device or pipe, a missing, empty or unreadable
    file, and anything else (text, a raw pickle, torch's pre-1.6 format: handed to
    ``torch.load`` it would fail with whatever error the bytes happen to cause)."""
    path = Path(path)
    if path.is_dir():
        hint = " (a run directory? give its best.pt or last.pt)" if (path / "last.pt").is_file() else ""
        raise CheckpointError(f"{path}: is a directory, not a checkpoint file{hint}")
    if path.exists() and not path.is_file():
        raise CheckpointError(f"{path}: not a regular file (a device or a pipe), not a checkpoint")
    if not path.is_file():
        raise CheckpointError(f"{path}: checkpoint not found")
    try:
        with path.open("rb") as f:
            head = f.read(9)
    except OSError as e:
        raise CheckpointError(f"{path}: cannot read the checkpoint: {e.strerror}") from None
    if not head:
        raise CheckpointError(f"{path}: empty file, not a checkpoint")
    if head[:4] == b"PK\x03\x04":
        return TORCH_ZIP
    if len(head) == 9 and head[8:9] == b"{":
        return SAFETENSORS
    raise CheckpointError(f"{path}: not an nmtkit checkpoint (not the zip archive that "
                          "torch.save writes, nor a safetensors file)")


# --- the entries as metadata ------------------------------------------------------------------------


def _plain(value: Any, where: str) -> Any:
    """``value`` as JSON can hold it: bytes and tuples tagged (``{"$bytes": base64}``,
    ``{"$tuple": [...]}``) so that they come back as they were; a ``TypeError`` naming the
    entry for anything else than str, int, float, bool, None, list, tuple, bytes and dicts
    with str keys. (A dict whose one key is ``$bytes`` with a str, or ``$tuple`` with a list,
    would come back as bytes or a tuple: nmtkit's entries hold none.)"""
    if value is None or isinstance(value, (str, bool, int, float)):
        return value
    if isinstance(value, bytes):
        return {"$bytes": base64.b64encode(value).decode("ascii")}
    if isinstance(value, tuple):
        return {"$tuple": [_plain(v, where) for v in value]}
    if isinstance(value, list):
        return [_plain(v, where) for v in value]
    if isinstance(value, dict) and all(isinstance(k, str) for k in value):
        return {k: _plain(v, f"{where}.{k}") for k, v in value.items()}
    raise TypeError(f"checkpoint entry {where}: {type(value).__name__} cannot be stored in "
                    "a release checkpoint's metadata")


def _tagged(obj: dict[str, Any]) -> Any:
    if len(obj) == 1 and isinstance(obj.get("$bytes"), str):
        return base64.b64decode(obj["$bytes"], validate=True)
    if len(obj) == 1 and isinstance(obj.get("$tuple"), list):
        return tuple(obj["$tuple"])
    return obj


def encode_entries(entries: dict[str, Any]) -> dict[str, str]:
    """A release checkpoint's entries (all but the weights) as safetensors metadata: one JSON
    string per entry."""
    return {k: json.dumps(_plain(v, k), ensure_ascii=False) for k, v in entries.items()}


MAX_ENTRY_CHARS = 1 << 24
"""The longest entry a release file's metadata may hold (16 MiB of JSON): a SentencePiece
model of 64,000 pieces is about 2 MB in base64. (Decoded, JSON of short strings takes up to
15 times its length in memory: the bound keeps that to a few hundred MB.)"""


def decode_entries(where: str, metadata: dict[str, str]) -> dict[str, Any]:
    """Inverse of :func:`encode_entries`; a :class:`CheckpointError` naming the entry that is
    not what nmtkit writes, or longer than :data:`MAX_ENTRY_CHARS`."""
    entries = {}
    for k, text in metadata.items():
        if len(text) > MAX_ENTRY_CHARS:
            raise CheckpointError(f"{where}: metadata entry {k!r:.80} holds {len(text)} "
                                  f"characters, more than the {MAX_ENTRY_CHARS} allowed")
        try:
            entries[k] = json.loads(text, object_hook=_tagged)
        except (ValueError, binascii.Error, RecursionError) as e:
            raise CheckpointError(f"{where}: metadata entry {k!r:.80} is not nmtkit's JSON: "
                                  f"{type(e).__name__}: {str(e)[:200]}") from None
    return entries


def unreadable(where: str, e: Exception) -> CheckpointError:
    """The error of a release file the safetensors library refuses (its header: a length
    past the file, offsets outside it, sizes that are not dtype times shape ...)."""
    return CheckpointError(f"{where}: truncated or corrupted checkpoint (not a valid "
                           f"safetensors file): {str(e)[:300]}")


def check_entries(where: str, ckpt: Any) -> None:
    """The marker, a version this nmtkit reads and every entry of :data:`ENTRIES`."""
    if not isinstance(ckpt, dict) or ckpt.get("format") != FORMAT:
        raise CheckpointError(f"{where}: not an nmtkit checkpoint (no '{FORMAT}' marker)")
    version = ckpt.get("version", 0)
    if not isinstance(version, int) or isinstance(version, bool):
        raise CheckpointError(f"{where}: checkpoint version {version!r:.40} is not a number")
    if version > VERSION:
        raise CheckpointError(f"{where}: checkpoint version {version} is newer than this "
                              f"nmtkit understands ({VERSION})")
    for key in ENTRIES:
        if key not in ckpt:
            raise CheckpointError(f"{where}: checkpoint lacks '{key}'")


def stored_config(where: str, ckpt: dict[str, Any]) -> Config:
    """The checkpoint's config, checked (``CheckpointError`` naming the field otherwise)."""
    try:
        return Config.from_dict(ckpt["config"], where)
    except UserError as e:
        raise CheckpointError(f"{where}: stored config is invalid: {e}") from None


def stored_vocab_sizes(where: str, ckpt: dict[str, Any]) -> tuple[int, int]:
    """The sizes of the source and target vocabularies (checked as they are loaded)."""
    try:
        return len(Vocab.from_dict(ckpt["vocab"]["src"])), len(Vocab.from_dict(ckpt["vocab"]["tgt"]))
    except (KeyError, TypeError, ValueError) as e:
        raise CheckpointError(f"{where}: stored tokenizer or vocabulary is unreadable: "
                              f"{e}") from None


# --- a release file's header ------------------------------------------------------------------------


class SafetensorsHandle(Protocol):
    """What :func:`release_header` reads of ``safetensors.safe_open(...)``."""

    def metadata(self) -> dict[str, str] | None: ...

    def keys(self) -> list[str]: ...

    def get_slice(self, name: str) -> Any: ...


@dataclass
class ReleaseHeader:
    """A release file's header, read before any weight: its entries and its weights' table."""

    entries: dict[str, Any]
    """Everything but the weights (config, tokenizers, vocab, marker, checksum ...)."""
    weights: dict[str, tuple[str, tuple[int, ...]]]
    """Every weight's safetensors dtype and shape, by name (tied names included)."""
    tied: dict[str, str]
    """Names stored once under another: alias -> the stored name."""


def release_header(where: str, handle: SafetensorsHandle) -> ReleaseHeader:
    """The header of an open release file (marker, version and entries checked)."""
    metadata = dict(handle.metadata() or {})
    tied_text = metadata.pop(TIED, "{}")
    if "model" in metadata:
        raise CheckpointError(f"{where}: metadata entry 'model': the weights are the file's "
                              "tensors, not an entry")
    entries = decode_entries(where, metadata)
    check_entries(where, {**entries, "model": None})
    weights = {}
    for name in handle.keys():
        part = handle.get_slice(name)
        weights[name] = (str(part.get_dtype()), tuple(int(n) for n in part.get_shape()))
    tied = decode_entries(where, {TIED: tied_text})[TIED]
    if not isinstance(tied, dict) or not all(
            isinstance(a, str) and isinstance(n, str) and n in weights and a not in weights
            for a, n in tied.items()):
        raise CheckpointError(f"{where}: metadata entry '{TIED}' does not name stored weights")
    weights.update({alias: weights[name] for alias, name in tied.items()})
    return ReleaseHeader(entries, weights, tied)


def check_weight_table(where: str, described: str, weights: dict[str, tuple[str, tuple[int, ...]]],
                       expected: dict[str, tuple[int, ...]]) -> None:
    """Each weight the config expects, of its shape, and no other, every one floating point:
    checked on a header, before anything is read (``described``: the architecture and
    vocabularies, as the message names them)."""
    for name in sorted(set(expected) | set(weights)):
        shape = weights[name][1] if name in weights else None
        if shape != expected.get(name):
            raise CheckpointError(
                f"{where}: weights do not fit the stored architecture/vocabulary ({described}): "
                f"{name:.200} is {shape if shape is not None else 'missing'} in the file, "
                f"{expected.get(name, 'not expected')} by the config")
    for name, (dtype, _) in sorted(weights.items()):
        if dtype not in FLOATS:
            raise CheckpointError(f"{where}: weight {name} has dtype "
                                  f"{TORCH_DTYPES.get(dtype, dtype)}, not floating point")


def described(cfg: Config, src_vocab: int, tgt_vocab: int) -> str:
    """The model as weight errors name it: ``transformer, src 24, tgt 24``."""
    return f"{cfg.model.arch}, src {src_vocab}, tgt {tgt_vocab}"


CHECKSUM_MISMATCH = ("the weights do not match their stored checksum (the file was corrupted "
                     "or altered); --no-verify loads it anyway")
NOT_FINITE = "holds NaN or infinite values"
