"""Self-contained checkpoints: config, tokenizers, vocabularies and weights, so that "rebuild,
then load weights" needs no other file.

Two kinds, two formats (told apart by content, :func:`nmtkit.checkpoint_format.checkpoint_kind`,
whatever the file's name):

- a *release* checkpoint (``best.pt``, the ``step_*.pt`` kept for averaging, an average, a
  converted file) holds the weights, config, tokenizers, vocabularies and checksum only
  (:func:`release_payload`), a third of the size with Adam's two moments left out. It is a
  safetensors file: the weights are its tensors, every other entry a JSON string of its
  metadata. Nothing in it can run code, its header is bounds-checked by the safetensors
  library, and the weights' names, shapes and dtypes are checked against the stored config
  before any of them is read;
- a training run's ``last.pt`` also holds what ``--resume`` continues from (optimizer,
  schedule, loss scale, progress with the data position, RNG state: :data:`TRAINING_STATE`),
  written by ``torch.save`` and read with ``torch.load(weights_only=True)`` (pickled code is
  refused). Release checkpoints written before safetensors are such files too: they still
  load (the zip directory checked first, :func:`_check_zip_directory`) and ``nmtkit convert``
  rewrites them.

Written atomically (temporary file + rename); every failure to read is a
:class:`CheckpointError` that names the file.
"""

from __future__ import annotations

import json
import logging
import math
import os
import pickle
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import safetensors.torch
import torch
from safetensors import SafetensorError, safe_open
from torch.overrides import TorchFunctionMode

from .checkpoint_format import (
    CHECKSUM_MISMATCH,
    NOT_FINITE,
    SAFETENSORS,
    TIED,
    WeightBytes,
    check_entries,
    check_weight_table,
    checkpoint_kind,
    described,
    encode_entries,
    release_header,
    stored_config,
    stored_vocab_sizes,
    unreadable,
)
from .checkpoint_format import FORMAT as FORMAT
from .checkpoint_format import VERSION as VERSION
from .checkpoint_format import CheckpointError as CheckpointError
from .checkpoint_format import weights_digest as digest_of
from .config import Config
from .data.prepare import vocab_from_state
from .data.tokenizers import Tokenizer
from .data.vocab import Vocab
from .errors import UserError
from .io import atomic_save, atomic_write_bytes
from .models import build_model
from .models.seq2seq import Seq2Seq

log = logging.getLogger(__name__)

TRAINING_STATE = ("optimizer", "schedule", "scaler", "progress", "rng", "train_model")
"""What only ``--resume`` reads (``train_model``: the weights trained, where ``model`` holds
their ``train.ema`` average): kept in ``last.pt``, left out of release checkpoints."""


def release_payload(payload: dict[str, Any]) -> dict[str, Any]:
    """``payload`` without :data:`TRAINING_STATE`: what translating, evaluating, exporting,
    serving, averaging and fine-tuning (``--init-from``) read. The update the weights are
    from stays as ``step`` (where ``payload`` has its progress)."""
    release = {k: v for k, v in payload.items() if k not in TRAINING_STATE}
    progress = payload.get("progress")
    if isinstance(progress, dict) and "step" in progress:
        release["step"] = progress["step"]
    return release


def is_release(ckpt: dict[str, Any]) -> bool:
    """A checkpoint without the optimizer state that ``--resume`` needs."""
    return any(k not in ckpt for k in ("optimizer", "schedule", "progress", "rng"))


def weights_digest(state: dict[str, torch.Tensor]) -> str:
    """:func:`nmtkit.checkpoint_format.weights_digest` of these tensors (each copied to the
    CPU only when its turn comes)."""
    def weights() -> Iterator[WeightBytes]:
        for name in sorted(state):
            t = state[name].detach().cpu().contiguous()
            data = t.reshape(-1).view(torch.uint8).numpy().data  # (the bytes in place, no copy)
            yield WeightBytes(name, str(t.dtype), tuple(t.shape), data)
    return digest_of(weights())


# --- writing ---------------------------------------------------------------------------------------


def save_checkpoint(path: str | Path, payload: dict[str, Any]) -> None:
    """Write ``payload`` atomically, with the format marker and a checksum of the weights: a
    release payload (:func:`is_release`) as safetensors, one with the training state with
    ``torch.save``."""
    payload = {"format": FORMAT, "version": VERSION, **payload}
    if isinstance(payload.get("model"), dict):
        payload["weights_sha256"] = weights_digest(payload["model"])
        if is_release(payload):
            data = release_bytes(payload)
            atomic_write_bytes(path, data)
            return
    atomic_save(path, lambda f: torch.save(payload, f))


def release_bytes(payload: dict[str, Any]) -> bytes:
    """A release payload as a safetensors file: the weights (on the CPU, contiguous; a weight
    that is another's tensor under a second name stored once, the name kept in the
    :data:`~nmtkit.checkpoint_format.TIED` entry), every other entry JSON metadata."""
    if TIED in payload:
        raise ValueError(f"a checkpoint entry may not be called {TIED!r} (the release format's own)")
    stored: dict[str, torch.Tensor] = {}
    tied: dict[str, str] = {}
    views: dict[tuple[Any, ...], str] = {}
    storages: set[int] = set()
    for name in sorted(payload["model"]):
        t = payload["model"][name].detach()
        view = (t.device, t.data_ptr(), t.dtype, tuple(t.shape), t.stride())
        if view in views and t.numel():
            tied[name] = views[view]
            continue
        views[view] = name
        cpu = t.to("cpu").contiguous()
        storage = cpu.untyped_storage()
        if storage.data_ptr() in storages or storage.nbytes() != cpu.numel() * cpu.element_size():
            cpu = cpu.clone()  # a view of a tensor stored already, or of a larger one: its own bytes
        storages.add(cpu.untyped_storage().data_ptr())
        stored[name] = cpu
    metadata = encode_entries({k: v for k, v in payload.items() if k != "model"})
    if tied:
        metadata[TIED] = encode_entries({TIED: tied})[TIED]
    return _sorted_header(safetensors.torch.save(stored, metadata=metadata))


def _sorted_header(data: bytes) -> bytes:
    """``data`` (a safetensors file) with its header's keys in order (the metadata first,
    then each tensor's entry by name), where the library writes them in a hash map's order,
    which changes from run to run: the same payload gives the same bytes. The header stays
    padded with spaces to a multiple of 8 bytes, as the library writes it (the tensors'
    offsets count from the header's end)."""
    n = int.from_bytes(data[:8], "little")
    header = json.loads(data[8:8 + n])
    header["__metadata__"] = dict(sorted(header.get("__metadata__", {}).items()))
    ordered = {"__metadata__": header.pop("__metadata__"), **dict(sorted(header.items()))}
    text = json.dumps(ordered, ensure_ascii=False, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    return b"".join([len(text).to_bytes(8, "little"), text, memoryview(data)[8 + n:]])


# --- reading ---------------------------------------------------------------------------------------


def _check_state_dict(where: str, state: Any) -> None:
    if not isinstance(state, dict) or not state or not all(
            isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in state.items()):
        raise CheckpointError(f"{where}: the 'model' entry is not a state dict of named tensors")


def _check_weights(where: str, state: Any, verify: bool, digest: Any) -> None:
    """The ``model`` entry is a state dict of finite floating-point tensors (and, unless
    ``verify`` is off, the one whose checksum was stored)."""
    _check_state_dict(where, state)
    seen: set[tuple[Any, ...]] = set()  # tied weights (one tensor, several names): once
    for name, t in state.items():
        if not t.is_floating_point():
            raise CheckpointError(f"{where}: weight {name} has dtype {t.dtype}, not floating point")
        view = (t.data_ptr(), t.dtype, tuple(t.shape), t.stride())
        if view not in seen and not bool(torch.isfinite(t).all()):
            raise CheckpointError(f"{where}: weight {name} {NOT_FINITE}")
        seen.add(view)
    if verify and digest is not None and weights_digest(state) != digest:
        raise CheckpointError(f"{where}: {CHECKSUM_MISMATCH}")


def expected_weights(where: str, ckpt: dict[str, Any]) -> tuple[str, dict[str, tuple[int, ...]]]:
    """The weights the stored config describes, by name, and their shapes (the model built
    on the ``meta`` device: shapes only, nothing allocated), with the model as a weight
    error names it."""
    cfg = stored_config(where, ckpt)
    src_vocab, tgt_vocab = stored_vocab_sizes(where, ckpt)
    try:
        with torch.device("meta"), _NoInitialisation():
            model = build_model(cfg.model, src_vocab, tgt_vocab)
    except (ValueError, RuntimeError) as e:
        raise CheckpointError(f"{where}: stored config does not describe a model: {e}") from None
    return (described(cfg, src_vocab, tgt_vocab),
            {k: tuple(v.shape) for k, v in model.state_dict().items()})


def _load_release_file(path: Path, map_location: str | torch.device, verify: bool) -> dict[str, Any]:
    """A safetensors release checkpoint: its header (entries, then the weights' names, shapes
    and dtypes against the stored config) checked before any weight is read."""
    where = str(path)
    try:
        with safe_open(str(path), framework="pt", device="cpu") as f:
            header = release_header(where, f)
            what, expected = expected_weights(where, header.entries)
            check_weight_table(where, what, header.weights, expected)
            state = {name: f.get_tensor(name) for name in header.weights if name not in header.tied}
    except SafetensorError as e:
        raise unreadable(where, e) from None
    state.update({alias: state[name] for alias, name in header.tied.items()})
    model = {name: state[name] for name in expected}
    _check_weights(where, model, verify, header.entries.get("weights_sha256"))
    if torch.device(map_location).type != "cpu":
        moved: dict[int, torch.Tensor] = {}  # (tied names stay one tensor)
        model = {k: moved.setdefault(id(t), t.to(map_location)) for k, t in model.items()}
    return {**header.entries, "model": model}


def _check_zip_directory(path: Path) -> None:
    """Refuse a zip archive whose directory promises more than the file holds, before
    ``torch.load`` reads a byte of it: ``torch.save`` stores every member uncompressed, so a
    compressed member (a deflated gigabyte of zeros in a few megabytes) or one larger than the
    file is not a checkpoint's."""
    size = path.stat().st_size
    try:
        with zipfile.ZipFile(path) as archive:
            members = archive.infolist()
    except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, ValueError, EOFError) as e:
        raise CheckpointError(f"{path}: truncated or corrupted checkpoint: "
                              f"{type(e).__name__}: {e}") from None
    total = 0
    for m in members:
        if m.compress_type != zipfile.ZIP_STORED:
            raise CheckpointError(
                f"{path}: refused: archive member {m.filename!r:.100} is compressed (zip "
                f"method {m.compress_type}, {m.file_size} bytes unpacked); torch.save stores "
                "every member uncompressed")
        total += m.file_size
        if m.file_size != m.compress_size or total > size:
            raise CheckpointError(f"{path}: refused: archive member {m.filename!r:.100} claims "
                                  f"{m.file_size} bytes, more than the file's {size}")


def _check_storage_bounds(where: str, state: dict[str, torch.Tensor]) -> None:
    """No weight has more elements than the bytes stored for it: a view that repeats its
    values (a stride of 0: one float seen as billions) would be materialised by the first
    check that reads it."""
    for name, t in state.items():
        held = t.untyped_storage().nbytes() // max(t.element_size(), 1)
        if t.numel() > held:
            raise CheckpointError(f"{where}: refused: weight {name:.200} has {t.numel()} "
                                  f"elements but stores {held} (a view that repeats its values)")


def _load_torch_file(path: Path, map_location: str | torch.device, verify: bool) -> dict[str, Any]:
    """A ``torch.save`` archive (``last.pt``, or a release checkpoint from before
    safetensors), read with ``weights_only`` and memory-mapped (a weight's bytes are read when
    first used): its zip directory, every weight's element count against the bytes stored
    for it and against the config (names, no more elements than the config's shape) are
    checked before any weight's values are read."""
    where = str(path)
    _check_zip_directory(path)
    try:
        ckpt = torch.load(path, map_location=map_location, weights_only=True, mmap=True)
    except pickle.UnpicklingError:
        raise CheckpointError(f"{path}: refused: not a plain nmtkit checkpoint (it carries "
                              "pickled objects that could run code when loaded)") from None
    except Exception as e:  # noqa: BLE001  # a damaged archive fails in many ways inside torch
        raise CheckpointError(f"{path}: truncated or corrupted checkpoint: "
                              f"{type(e).__name__}: {str(e)[:300]}") from None
    check_entries(where, ckpt)
    _check_state_dict(where, ckpt["model"])
    _check_storage_bounds(where, ckpt["model"])
    try:
        what, expected = expected_weights(where, ckpt)
    except CheckpointError:
        pass  # an unreadable config: named where a model is built from it (bundle_from_checkpoint)
    else:
        _check_element_counts(where, ckpt["model"], what, expected)
    _check_weights(where, ckpt["model"], verify, ckpt.get("weights_sha256"))
    return ckpt  # type: ignore[no-any-return]


def _check_element_counts(where: str, state: dict[str, torch.Tensor], what: str,
                          expected: dict[str, tuple[int, ...]]) -> None:
    """No weight the config does not expect, none larger than the config's (exact shapes are
    :func:`bundle_from_checkpoint`'s to check, where a model is built)."""
    for name, t in state.items():
        if name not in expected:
            raise CheckpointError(f"{where}: weight {name:.200} has shape {tuple(t.shape)}, a "
                                  f"weight the stored config does not expect ({what})")
        want = math.prod(expected[name])
        if t.numel() > want:
            raise CheckpointError(f"{where}: weight {name} has shape {tuple(t.shape)} "
                                  f"({t.numel()} elements), more than the {want} of the stored "
                                  f"config's {expected[name]} ({what})")


_SAFETENSORS_NAME = {torch.float64: "F64", torch.float32: "F32", torch.float16: "F16",
                     torch.bfloat16: "BF16", torch.int64: "I64", torch.int32: "I32",
                     torch.int16: "I16", torch.int8: "I8", torch.uint8: "U8", torch.bool: "BOOL"}


def load_checkpoint(path: str | Path, map_location: str | torch.device = "cpu",
                    verify: bool = True) -> dict[str, Any]:
    """Read a checkpoint safely (no pickled code) and check its format and weights: a
    safetensors release file, or a ``torch.save`` archive (``last.pt``, older release files),
    told apart by their first bytes.

    ``verify``: compare the weights with their stored sha256 (checkpoints written before the
    checksum was introduced have none and load without the comparison).
    """
    path = Path(path)
    if checkpoint_kind(path) == SAFETENSORS:
        return _load_release_file(path, map_location, verify)
    return _load_torch_file(path, map_location, verify)


def convert_checkpoint(src: str | Path, out: str | Path) -> dict[str, Any]:
    """``nmtkit convert``: the checkpoint ``src`` (any kind: an older release checkpoint,
    ``torch.save``'s zip; a ``last.pt``, whose weights, config, tokenizers and vocabularies
    are kept and its training state left out; a release checkpoint) written to ``out`` as a
    release checkpoint (safetensors, checksum renewed), after every check of
    :func:`load_checkpoint` (the stored checksum included). ``out`` may be ``src``: it is
    replaced only once the new file is complete. Returns what the command prints."""
    ckpt = load_checkpoint(src)
    kind = checkpoint_kind(src)
    payload = {k: v for k, v in release_payload(ckpt).items()
               if k not in ("format", "version", "weights_sha256")}
    save_checkpoint(out, payload)
    return {"out": str(out), "from": str(src), "was": kind, "format": SAFETENSORS,
            "weights": len(payload["model"])}


@dataclass
class Bundle:
    """Everything needed to translate: config, model, tokenizers and vocabularies (a
    translator of it: :meth:`nmtkit.decode.translator.Translator.from_bundle`)."""

    cfg: Config
    model: Seq2Seq
    src_tok: Tokenizer
    tgt_tok: Tokenizer
    src_vocab: Vocab
    tgt_vocab: Vocab
    path: Path | None = None
    engine: ClassVar[str] = "torch"
    """What runs the search (``nmtkit serve --engine``): nmtkit's own PyTorch model."""


def bundle_from_checkpoint(ckpt: dict[str, Any], path: str | Path | None = None,
                           device: str | torch.device = "cpu") -> Bundle:
    """Rebuild the model from the stored config, then load its weights."""
    where = str(path) if path is not None else "<checkpoint>"
    cfg = stored_config(where, ckpt)
    try:
        v = vocab_from_state(ckpt)
        src_tok, tgt_tok, src_vocab, tgt_vocab = v.src_tok, v.tgt_tok, v.src_vocab, v.tgt_vocab
    except (KeyError, TypeError, ValueError) as e:  # e.g. a corrupted SentencePiece model
        raise CheckpointError(f"{where}: stored tokenizer or vocabulary is unreadable: {e}") from None
    _check_bounds(where, cfg, ckpt["model"], len(src_vocab), len(tgt_vocab))
    with _NoInitialisation():  # every weight is loaded below (strictly): no random fills first
        model = build_model(cfg.model, len(src_vocab), len(tgt_vocab))
    try:
        model.load_state_dict(ckpt["model"])
    except RuntimeError as e:
        raise CheckpointError(f"{where}: weights do not fit the stored architecture/vocabulary "
                              f"({described(cfg, len(src_vocab), len(tgt_vocab))}): "
                              f"{str(e).splitlines()[0]}") from None
    model.to(device).eval()
    return Bundle(cfg, model, src_tok, tgt_tok, src_vocab, tgt_vocab,
                  Path(path) if path is not None else None)


_RANDOM_FILLS = frozenset({torch.Tensor.uniform_, torch.Tensor.normal_})


class _NoInitialisation(TorchFunctionMode):
    """``torch.nn.init``'s fills and the random fills of tensors skipped (the tensor returned
    as it is) while a model is built whose every weight is then loaded (or, on ``meta``,
    that has no values to fill: its random fills would run as Python reference kernels that
    import ``torch._dynamo``, see :func:`nmtkit.models.positions.shapes_only`). Tables
    computed at construction (non-persistent buffers: positions) are built as usual."""

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        if getattr(func, "__module__", None) == "torch.nn.init" or func in _RANDOM_FILLS:
            return args[0] if args else kwargs["tensor"]
        return func(*args, **kwargs)


def _check_bounds(where: str, cfg: Config, state: dict[str, torch.Tensor], src_vocab: int,
                  tgt_vocab: int) -> None:
    """Refuse a stored config that asks for more than the file holds, before allocating it:
    the model is built on the ``meta`` device (shapes only) and compared with the weights."""
    try:
        with torch.device("meta"), _NoInitialisation():
            shapes = {k: tuple(v.shape) for k, v in
                      build_model(cfg.model, src_vocab, tgt_vocab).state_dict().items()}
    except (ValueError, RuntimeError) as e:
        raise CheckpointError(f"{where}: stored config does not describe a model: {e}") from None
    check_weight_table(where, described(cfg, src_vocab, tgt_vocab),
                       {k: (_SAFETENSORS_NAME.get(v.dtype, str(v.dtype)), tuple(v.shape))
                        for k, v in state.items()}, shapes)


def check_device(device: str | torch.device) -> None:
    """``ValueError`` unless ``device`` is a torch device this machine has, and one nmtkit runs
    on (cpu, cuda, mps): a clear message, where torch would fail with a traceback from deep
    inside the first tensor moved there. ``nmtkit ... --device`` and :func:`load_bundle`
    both check with it."""
    text = str(device)
    try:
        d = torch.device(device)
    except (RuntimeError, ValueError, TypeError):
        raise UserError(f"{text!r} is not a torch device (cpu, cuda, cuda:1, mps ...)") from None
    if d.type == "cuda" and not torch.cuda.is_available():
        raise UserError(f"{text}: this machine has no CUDA device (or torch was built without "
                         "CUDA)")
    if d.type == "cuda" and d.index is not None and d.index >= torch.cuda.device_count():
        raise UserError(f"{text}: this machine has {torch.cuda.device_count()} CUDA device(s), "
                         "counted from 0")
    if d.type == "mps" and not torch.backends.mps.is_available():
        raise UserError(f"{text}: MPS is not available on this machine")
    if d.type not in ("cpu", "cuda", "mps"):
        raise UserError(f"{text}: nmtkit runs on cpu, cuda or mps")


def load_bundle(path: str | Path, device: str | torch.device = "cpu", verify: bool = True) -> Bundle:
    """The one door for readers: checkpoint -> config, model (weights loaded), tokenizers,
    vocabularies. Its arguments are checked first: ``TypeError`` for a ``path`` that is not a
    str or path, a ``device`` that is not a str or ``torch.device``, a ``verify`` that is not
    a bool; ``ValueError`` for a device this machine lacks (:func:`check_device`)."""
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"load_bundle: path must be a str or os.PathLike (a checkpoint file), "
                        f"got {type(path).__name__}")
    if not isinstance(device, (str, torch.device)):
        raise TypeError(f"load_bundle: device must be a str or torch.device, got "
                        f"{type(device).__name__}")
    if not isinstance(verify, bool):
        raise TypeError(f"load_bundle: verify must be a bool, got {type(verify).__name__}")
    try:
        check_device(device)
    except ValueError as e:
        raise UserError(f"load_bundle: device {e}") from None
    return bundle_from_checkpoint(load_checkpoint(path, verify=verify), path, device)
