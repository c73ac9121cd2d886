"""What an ``nmtkit export --format ctranslate2`` directory says of itself, shared by the
writer (:mod:`nmtkit.export.ctranslate2`, which needs PyTorch to read the checkpoint) and the
engine that reads it (:mod:`nmtkit.export.ctranslate2_engine`, which does not)."""

from __future__ import annotations

from ..data.vocab import SPECIALS
from ..rules import NEVER as NEVER_IDS

META_FILE = "nmtkit.json"
"""nmtkit's own file in the export: format, tokenizers, decoding options, config."""
META_FORMAT = "nmtkit-ctranslate2"
META_VERSION = 1
NEVER = tuple(SPECIALS[i] for i in NEVER_IDS)
"""Tokens nmtkit's search never produces (:data:`nmtkit.rules.NEVER`; CTranslate2's must not
either)."""
NEVER_SET = frozenset(NEVER)
