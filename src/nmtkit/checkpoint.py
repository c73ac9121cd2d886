"""Self-contained checkpoints: config, tokenizers, vocabularies and weights, so that "rebuild,
then load weights" needs no other file.

Two kinds, one format: a training run's ``last.pt`` also holds what ``--resume`` continues
from (optimizer, schedule, loss scale, progress with the data position, RNG state:
:data:`TRAINING_STATE`); a *release* checkpoint (``best.pt``, the ``step_*.pt`` kept for
averaging, an average) holds the weights, config, tokenizers, vocabularies and checksum
only (:func:`release_payload`), a third of the size with Adam's two moments left out.

Written atomically (temporary file + rename), loaded with ``torch.load(weights_only=True)``:
a file that carries pickled code is refused, and every failure is a :class:`CheckpointError`
that names the file.
"""

from __future__ import annotations

import logging
import os
import pickle
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import torch
from torch.overrides import TorchFunctionMode

from .checkpoint_format import FORMAT, VERSION, WeightBytes
from .checkpoint_format import weights_digest as digest_of
from .config import Config, ConfigError
from .data.prepare import vocab_from_state
from .data.tokenizers import Tokenizer
from .data.vocab import Vocab
from .errors import UserError
from .io import atomic_save
from .models import build_model
from .models.seq2seq import Seq2Seq

log = logging.getLogger(__name__)



class CheckpointError(UserError, RuntimeError):
    """A checkpoint that cannot be used; the message names the file and the problem."""


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


def save_checkpoint(path: str | Path, payload: dict[str, Any]) -> None:
    """Write ``payload`` atomically, with the format marker and a checksum of the weights."""
    payload = {"format": FORMAT, "version": VERSION, **payload}
    if isinstance(payload.get("model"), dict):
        payload["weights_sha256"] = weights_digest(payload["model"])
    atomic_save(path, lambda f: torch.save(payload, f))


def _check_weights(where: str, state: Any, verify: bool, digest: Any) -> None:
    """The ``model`` entry is a state dict of finite floating-point tensors (and, unless
    ``verify`` is off, the one whose checksum was stored)."""
    if not isinstance(state, dict) or not state or not all(
            isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in state.items()):
        raise CheckpointError(f"{where}: the 'model' entry is not a state dict of named tensors")
    seen: set[tuple[Any, ...]] = set()  # tied weights (one tensor, several names): once
    for name, t in state.items():
        if not t.is_floating_point():
            raise CheckpointError(f"{where}: weight {name} has dtype {t.dtype}, not floating point")
        view = (t.data_ptr(), t.dtype, tuple(t.shape), t.stride())
        if view not in seen and not bool(torch.isfinite(t).all()):
            raise CheckpointError(f"{where}: weight {name} holds NaN or infinite values")
        seen.add(view)
    if verify and digest is not None and weights_digest(state) != digest:
        raise CheckpointError(f"{where}: the weights do not match their stored checksum (the file "
                              "was corrupted or altered); --no-verify loads it anyway")


def _check_zip_signature(path: Path) -> None:
    """nmtkit writes checkpoints with ``torch.save``, whose files are zip archives. Anything
    else (an empty file, text, a raw pickle, torch's pre-1.6 format) is refused here: handed
    to ``torch.load`` it would be read as a legacy pickle and fail with whatever error the
    bytes happen to cause (KeyError, IndexError, struct.error ...)."""
    try:
        with path.open("rb") as f:
            head = f.read(4)
    except OSError as e:
        raise CheckpointError(f"{path}: cannot read the checkpoint: {e.strerror}") from None
    if not head:
        raise CheckpointError(f"{path}: empty file, not a checkpoint")
    if head != b"PK\x03\x04":
        raise CheckpointError(f"{path}: not an nmtkit checkpoint (not the zip archive that "
                              "torch.save writes)")


def load_checkpoint(path: str | Path, map_location: str | torch.device = "cpu",
                    verify: bool = True) -> dict[str, Any]:
    """Read a checkpoint safely (no pickled code) and check its format and weights.

    ``verify``: compare the weights with their stored sha256 (checkpoints written before the
    checksum was introduced have none and load without the comparison).
    """
    path = Path(path)
    if path.is_dir():
        hint = " (a run directory? give its best.pt or last.pt)" if (path / "last.pt").is_file() else ""
        raise CheckpointError(f"{path}: is a directory, not a checkpoint file{hint}")
    if path.exists() and not path.is_file():
        raise CheckpointError(f"{path}: not a regular file (a device or a pipe), not a checkpoint")
    if not path.is_file():
        raise CheckpointError(f"{path}: checkpoint not found")
    _check_zip_signature(path)
    try:
        ckpt = torch.load(path, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError:
        raise CheckpointError(f"{path}: refused: not a plain nmtkit checkpoint (it carries "
                              "pickled objects that could run code when loaded)") from None
    except Exception as e:  # noqa: BLE001  # a damaged archive fails in many ways inside torch
        raise CheckpointError(f"{path}: truncated or corrupted checkpoint: "
                              f"{type(e).__name__}: {e}") from None
    if not isinstance(ckpt, dict) or ckpt.get("format") != FORMAT:
        raise CheckpointError(f"{path}: not an nmtkit checkpoint (no '{FORMAT}' marker)")
    if ckpt.get("version", 0) > VERSION:
        raise CheckpointError(f"{path}: checkpoint version {ckpt['version']} is newer than this "
                              f"nmtkit understands ({VERSION})")
    for key in ("config", "tokenizers", "vocab", "model"):
        if key not in ckpt:
            raise CheckpointError(f"{path}: checkpoint lacks '{key}'")
    _check_weights(str(path), ckpt["model"], verify, ckpt.get("weights_sha256"))
    return ckpt


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
    try:
        cfg = Config.from_dict(ckpt["config"], where)
    except ConfigError as e:
        raise CheckpointError(f"{where}: stored config is invalid: {e}") from None
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
                              f"({cfg.model.arch}, src {len(src_vocab)}, tgt {len(tgt_vocab)}): "
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
    stored = {k: tuple(v.shape) for k, v in state.items()}
    for name in sorted(set(shapes) | set(stored)):
        if shapes.get(name) != stored.get(name):
            raise CheckpointError(
                f"{where}: weights do not fit the stored architecture/vocabulary "
                f"({cfg.model.arch}, src {src_vocab}, tgt {tgt_vocab}): {name} is "
                f"{stored.get(name, 'missing')} in the file, {shapes.get(name, 'not expected')} "
                "by the config")


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
