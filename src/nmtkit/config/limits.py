"""The limits on every size a config can ask for, in one place, and the bounded formatting of
config values in error messages.

A config (a recipe, ``--set``, a checkpoint's stored config, decoding options) names sizes
that become allocations: layers, widths, vocabularies, batches. Without a bound a typo or a
hostile file (``model.layers: 3000000``) makes both engines grow to gigabytes before a
timeout or a ``MemoryError`` traceback. Each bound here is checked where the section
validates itself (:class:`~nmtkit.config.checks.Checks`), before anything is built, and the
error names the field, its value and the bound. Each bound is far above what real use asks
for (the docstrings say why), so that it only ever refuses a mistake or an attack.

The shape of a raw config (nesting, number of entries, characters) is bounded too, before
its values are read (:func:`check_shape`): a "billion laughs" of YAML aliases or pickle memo
references is small on disk and astronomically large when walked, and a list nested 200,000
deep overflows Python's stack in any recursive reader.
"""

from __future__ import annotations

import reprlib
from typing import Any

MAX_LAYERS = 1024
"""``model.layers``, ``enc_layers``, ``dec_layers``: the deepest Transformers trained for
translation have 1,000 layers in all (DeepNet, Wang et al. 2022); the usual 6 to 24."""

MAX_WIDTH = 1 << 16
"""Every model dimension (``model.d_model``, ``d_ff``, ``emb_dim``, ``rnn_hidden``,
``attention_dim``): 65,536 is the feed-forward width of T5-11B, the widest in use; model
widths of the largest language models are 12,288-18,432, of NMT models 512-4,096."""

MAX_HEADS = 1024
"""``model.heads``: T5-11B has 128; the Transformer base 8, big 16."""

MAX_VOCAB = 1 << 20
"""``data.vocab_size``, ``data.copy_vocab``, ``decode.sampling_top_k`` and the vocabulary
sizes a parameter count assumes: 1,048,576, four times the largest subword vocabularies in
use (mT5's and NLLB's 250,000-256,000); translation vocabularies are 8,000-64,000."""

MAX_PARAMETERS = 20_000_000_000
"""The most weights a config may describe (:func:`~nmtkit.config.model.parameter_count`,
with every layer and width within its own limit: 64 layers of width 65,536 are not): 20
billion, 80 GB of float32. The largest dense translation model published, M2M-100's 12
billion, fits; nmtkit builds one float32 copy of the model in one process, so a config past
this could not be built on any one machine."""

MAX_BATCH_TOKENS = 1 << 20
"""``train.max_tokens``, the tokens of one training batch: 1,048,576, far above the per-device
batches of published recipes (a few thousand to some tens of thousands of tokens; larger
batches are reached through ``train.accum``)."""

MAX_BATCH_SENTENCES = 1 << 16
"""``decode.batch_size``, sentences decoded together: 65,536 (nmtkit's default is 64)."""

MAX_LENGTH = 1 << 16
"""Sentence lengths in tokens (``data.max_len``, ``data.copy_len``): the longest position
table a model may have (:data:`~nmtkit.config.model.MAX_POSITIONS`), as no longer sentence
can be read."""

MAX_COPY_PAIRS = 1 << 24
"""``data.copy_train_size``, ``copy_valid_size``: the copy task's generated pairs, held in
memory; 16,777,216 against the 20,000 of the seed's exercise."""

MAX_SUBWORD_NBEST = 1024
"""``data.subword_nbest``: SentencePiece's n-best segmentations sampled from; Kudo (2018)
samples among 64 at most."""

MAX_THREADS = 4096
"""``train.threads``: torch's intra-op threads, each with a stack of its own; the largest
machines have a few hundred cores."""

MAX_EXTRA_WEIGHT = 1000.0
"""``data.extra[i].weight``: each pair is repeated this many times in memory; extra corpora
(back-translations) are weighted about 0.5-10 in practice."""

MAX_CONFIG_DEPTH = 32
"""Nesting of a raw config (mappings and lists within each other): the deepest valid config
has 4 levels (the config, ``data``, ``data.extra``, one of its entries); a list nested
200,000 deep overflows Python's stack in any recursive reader."""

MAX_CONFIG_ITEMS = 100_000
"""Entries of a raw config (every key, value and list element, counted each time it is
reached: a shared value counts at every place it is used, as any reader walks it): the
packaged recipes have at most 140, a whole config with every default about 280; a "billion
laughs" of aliases in a recipe of 500 bytes has 10**9 and would never finish printing."""

MAX_CONFIG_CHARS = 1 << 20
"""Characters of all the strings of a raw config together (keys and values, again counted at
every use): a mebibyte, a thousand times a recipe's."""

MAX_RECIPE_BYTES = 1 << 20
"""The size of a recipe file (a YAML config read whole): a mebibyte, nearly 200 times the
largest packaged recipe; it must be a regular file (not ``/dev/zero``, a FIFO, a socket)."""

MAX_INTEGER = 1 << 128
"""The largest integer (either sign) a config field is read with, checked as the value is
read, so that no message ever writes out an integer of thousands of digits (Python refuses
to, past 4,300): far past every field's own bound (the largest, a 64-bit seed), which is then
checked by the section and named in its message."""

MAX_SHOWN = 80
"""The most characters of a config value an error message shows (:func:`brief`)."""


class _Brief(reprlib.Repr):
    """``repr`` cut short at every level: a few entries of a list or mapping, a few levels
    deep, the ends of a long string; an integer too long for ``repr`` (Python refuses to
    write one of over 4,300 digits) by its size."""

    def __init__(self) -> None:
        super().__init__()
        self.maxlevel, self.maxdict, self.maxlist, self.maxtuple = 3, 4, 6, 6
        self.maxset, self.maxstring, self.maxother, self.maxlong = 6, MAX_SHOWN, MAX_SHOWN, 40

    def repr_int(self, x: int, level: int) -> str:
        if x.bit_length() > 129:
            return f"<an integer of about {int(x.bit_length() * 0.30103) + 1} digits>"
        return repr(x)


_BRIEF = _Brief()


def brief(value: Any) -> str:
    """``repr(value)`` in at most :data:`MAX_SHOWN` characters (and time to match): what an
    error message shows of a config value, which may be a string of a mebibyte, a billion
    laughs or an integer of 5,000 digits."""
    text = _BRIEF.repr(value)
    return text if len(text) <= MAX_SHOWN else text[:MAX_SHOWN - 3] + "..."


def check_shape(raw: Any, source: str) -> str | None:
    """The first way in which the raw config ``raw`` (mappings, lists and scalars, as YAML or
    a checkpoint gives them) is too big, or ``None``: nested deeper than
    :data:`MAX_CONFIG_DEPTH`, more than :data:`MAX_CONFIG_ITEMS` entries, or strings of more
    than :data:`MAX_CONFIG_CHARS` characters. The walk is iterative and stops at the first
    bound passed, so it takes at most that many steps whatever the structure (shared values,
    cycles, depth)."""
    too_many = (f"{source}: the config has more than {MAX_CONFIG_ITEMS:,} entries (values "
                "used again through aliases or references counted at each use): not a config")
    stack: list[tuple[Any, int]] = [(raw, 1)]
    items = chars = 0
    while stack:
        node, depth = stack.pop()
        items += 1
        if items > MAX_CONFIG_ITEMS:
            return too_many
        if isinstance(node, str):
            chars += len(node)
            if chars > MAX_CONFIG_CHARS:
                return (f"{source}: the config's strings have more than {MAX_CONFIG_CHARS:,} "
                        "characters together: not a config")
            continue
        if not isinstance(node, (dict, list, tuple)) or not node:
            continue
        if depth >= MAX_CONFIG_DEPTH:
            return (f"{source}: the config is nested more than {MAX_CONFIG_DEPTH} levels deep "
                    "(mappings and lists within each other): not a config")
        if items + len(node) > MAX_CONFIG_ITEMS:  # (before a list of millions is copied)
            return too_many
        pairs = node.items() if isinstance(node, dict) else ((x,) for x in node)
        stack.extend((child, depth + 1) for pair in pairs for child in pair)
    return None
