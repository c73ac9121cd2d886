"""Speed, applied to a built model from outside and switchable off.

:mod:`nmtkit.models` is the paper in code. This package makes the same model faster
without changing what it computes, by swapping some of its modules for subclasses that
override one method (:mod:`nmtkit.fast.swap`), by one process setting, and by one loss
function that the trainer calls instead of the model's output layer and the readable loss:

=====================  ==========================================  =====================
for                    what                                        module
=====================  ==========================================  =====================
training (CPU)         dropout masks four per random draw          :mod:`.dropout`
training (CPU)         written-out attention instead of the fused  :mod:`.attention`
training (CPU)         linear layers' products by oneDNN, padded   :mod:`.linear`
training (CPU)         encoder on real source tokens, not padding  :mod:`.unpadded_encoder`
both (CPU, glibc)      freed memory kept for the next step         :mod:`.allocator`
training (CPU)         output layer and loss in blocks of rows     :mod:`.output_loss`
decoding (CPU)         weights packed once in oneDNN's layout      :mod:`.packing`
decoding (CPU)         one source copy per sentence in beam search :mod:`.shared_source`
=====================  ==========================================  =====================

The trainer calls :func:`for_training` and :func:`training_loss` when ``train.fast`` is on
(the default), the translator :func:`for_inference` when ``decode.fast`` is on;
``--no-fast`` turns both off on the command line. With it off nothing here runs, and the numbers agree within
float tolerance (``tests/test_fast.py``; dropout masks are random either way).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from typing import cast

from torch import nn

from ..models.attention import MultiHeadAttention
from ..models.transformer import EncoderLayer, Transformer
from . import onednn
from .allocator import retain_freed_memory
from .attention import CpuTrainingAttention
from .dropout import FastDropout
from .linear import OneDnnLinear
from .output_loss import training_loss
from .packing import pack_for_inference, unpack
from .shared_source import share_sources, unshare_sources
from .swap import is_swapped, restore_class, swap_class
from .unpadded_encoder import UnpaddedEncoderTransformer, UnpaddedSelfAttention

log = logging.getLogger(__name__)

__all__ = ["for_training", "for_inference", "leave_inference", "inference", "plain", "is_fast",
           "training_loss"]


def _on_cpu(module: nn.Module) -> bool:
    p = next(module.parameters(), None)
    return p is None or p.device.type == "cpu"


def for_training(model: nn.Module, retain_memory: bool = True) -> list[str]:
    """Install the training speed-ups that fit where ``model`` lives; returns their names.

    On a CPU: :class:`~.dropout.FastDropout` for every ``nn.Dropout``,
    :class:`~.attention.CpuTrainingAttention` for every multi-head attention,
    :class:`~.linear.OneDnnLinear` for every ``nn.Linear`` where oneDNN is there, on, and
    faster than MKL on this CPU (:func:`.onednn.trains_faster`) or where the CPU multiplies
    bfloat16 in hardware (:func:`.onednn.bf16_in_hardware`: ``train.amp: bf16``'s products
    on padded rows), a Transformer's
    encoder on real source tokens only (:mod:`.unpadded_encoder`), and (with
    ``retain_memory``) the process-wide allocator setting of :mod:`.allocator`. On other
    devices PyTorch's own kernels are already the fast ones: nothing is installed.
    """
    if not _on_cpu(model):
        return []
    applied = set()
    by_onednn = onednn.trains_faster() or onednn.bf16_in_hardware()
    for module in model.modules():
        if type(module) is nn.Linear and by_onednn:
            swap_class(module, OneDnnLinear)
            applied.add("onednn linear")
        elif type(module) is nn.Dropout:
            swap_class(module, FastDropout)
            applied.add("dropout")
        elif type(module) is MultiHeadAttention:
            swap_class(module, CpuTrainingAttention)
            applied.add("attention")
    if type(model) is Transformer:
        swap_class(model, UnpaddedEncoderTransformer)
        for layer in model.encoder_layers:
            swap_class(cast(EncoderLayer, layer).self_attn, UnpaddedSelfAttention)
        applied.add("unpadded encoder")
    if retain_memory and retain_freed_memory():
        applied.add("allocator")
    names = sorted(applied)
    log.debug("nmtkit.fast for training: %s", ", ".join(names) or "nothing")
    return names


def for_inference(model: nn.Module, retain_memory: bool = False) -> int:
    """Install the decoding speed-ups on a CPU: ``model``'s weights packed
    (:func:`.packing.pack_for_inference`), for a Transformer one source row per sentence in
    beam search (:mod:`.shared_source`), and (with ``retain_memory``) the process-wide
    allocator setting of :mod:`.allocator`. Returns how many weights were packed (0 on
    other devices or without oneDNN)."""
    if not _on_cpu(model):
        return 0
    packed = pack_for_inference(model)
    share_sources(model)
    if retain_memory:
        retain_freed_memory()
    return packed


def leave_inference(model: nn.Module) -> None:
    """Undo :func:`for_inference`: the classes ``model`` had before it, no packed copies."""
    unshare_sources(model)
    unpack(model)


@contextlib.contextmanager
def inference(model: nn.Module, enabled: bool = True) -> Iterator[nn.Module]:
    """Decode with packed weights inside the block, then give the model back as it was
    (for decoding in the middle of training: the validation's translations)."""
    if enabled:
        for_inference(model)
    try:
        yield model
    finally:
        if enabled:
            leave_inference(model)


def plain(model: nn.Module) -> nn.Module:
    """Take every speed-up off ``model``: the classes of :mod:`nmtkit.models` again.
    (The allocator setting is process-wide and stays.)"""
    leave_inference(model)
    for module in model.modules():
        while restore_class(module):
            pass
    return model


def is_fast(model: nn.Module) -> bool:
    """Whether any module of ``model`` runs a fast variant."""
    return any(is_swapped(m) for m in model.modules())
