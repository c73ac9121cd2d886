"""The one interface every nmtkit model implements.

One training loop and one search serve all architectures through these methods,
never through ``isinstance`` branches::

    forward(src, src_mask, tgt_in, tgt_mask) -> log-probabilities   # teacher forcing
    logits(src, src_mask, tgt_in, tgt_mask) -> scores                # same, before log-softmax
    encode(src, src_mask) -> memory
    start(memory, src_mask, need_attention=False) -> state           # decoder state / KV cache
    step(state, prev_tokens) -> (log_probs, state, attention)        # one target position
    reorder(state, index, same_source=False) -> state                # beam search
    set_train_step(step)                                             # before each update
    attention_maps(src, tgt_in) -> maps                              # every layer and head

Incremental decoding through ``step`` gives the same log-probabilities as
``forward`` on the same prefix (``tests/test_transformer.py`` asserts it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from torch import Tensor, nn

from ..data.batching import pad_mask
from ..data.vocab import PAD

if TYPE_CHECKING:
    import torch


class Seq2Seq(nn.Module):
    """The interface above as a base class: :class:`~nmtkit.models.transformer.Transformer`
    and :class:`~nmtkit.models.rnn.RNNSeq2Seq` subclass it, :func:`nmtkit.models.build_model`
    returns it, and the training loop and search take it. Each method here only documents
    the contract (shapes in the docstrings)."""

    src_vocab_size: int
    tgt_vocab_size: int

    def forward(
        self, src: Tensor, src_mask: Tensor, tgt_in: Tensor, tgt_mask: Tensor | None = None
    ) -> Tensor:
        """src: (batch, S) ids; src_mask: (batch, 1, S) bool; tgt_in: (batch, T) ids starting
        with BOS; tgt_mask: (batch, T, T) bool or None for plain causal. -> (batch, T, V) log-probs."""
        raise NotImplementedError

    def logits(
        self, src: Tensor, src_mask: Tensor, tgt_in: Tensor, tgt_mask: Tensor | None = None
    ) -> Tensor:
        """Like ``forward`` before the log-softmax (the training loss fuses it)."""
        raise NotImplementedError

    def encode(self, src: Tensor, src_mask: Tensor) -> Any:
        """The encoder's output for the source (the model's own type: memory, states...)."""
        raise NotImplementedError

    def start(self, memory: Any, src_mask: Tensor, need_attention: bool = False) -> Any:
        """The decoder state before the first target position (e.g. projected memory, caches)."""
        raise NotImplementedError

    def step(self, state: Any, prev_tokens: Tensor) -> tuple[Tensor, Any, Tensor | None]:
        """prev_tokens: (batch,) -> log-probs (batch, V), new state, source attention
        (batch, S) averaged over heads of the last layer (or None if not requested)."""
        raise NotImplementedError

    def reorder(self, state: Any, index: Tensor, same_source: bool = False) -> Any:
        """Gather batch rows ``index`` of the state; with ``same_source`` the source-side
        tensors are left alone (every row keeps its sentence)."""
        raise NotImplementedError

    def set_train_step(self, step: int) -> None:
        """Called by the trainer before each optimizer update with the number of updates done
        so far (schedules inside the model, e.g. the RNN's teacher-forcing ratio); may do
        nothing."""

    def attention_maps(self, src: Tensor, tgt_in: Tensor) -> dict[str, list[Tensor]]:
        """Every attention probability of one teacher-forced pass, by kind ("encoder",
        "decoder_self", "decoder_src"): per layer, (batch, heads, queries, keys)."""
        raise NotImplementedError


def subsequent_mask(size: int, device: torch.device | str | None = None) -> Tensor:
    """(1, size, size) bool, True on and below the diagonal: position i sees positions <= i."""
    import torch

    return torch.ones(1, size, size, dtype=torch.bool, device=device).tril()


def target_mask(tgt_in: Tensor, pad: int = PAD) -> Tensor:
    """Padding and future positions hidden: (batch, T, T) bool."""
    return pad_mask(tgt_in, pad) & subsequent_mask(tgt_in.size(1), tgt_in.device)
