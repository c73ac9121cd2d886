"""Token <-> id mapping with fixed special ids.

The four specials always sit at the same ids, whatever the corpus, so a model,
its loss (``ignore_index=PAD``) and its search (start with ``BOS``, stop at
``EOS``) can rely on them without looking anything up.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from nmtkit.io import atomic_write_text

from ..errors import UserError

PAD, UNK, BOS, EOS = 0, 1, 2, 3
PAD_TOKEN, UNK_TOKEN, BOS_TOKEN, EOS_TOKEN = "<pad>", "<unk>", "<s>", "</s>"
SPECIALS: list[str] = [PAD_TOKEN, UNK_TOKEN, BOS_TOKEN, EOS_TOKEN]
"""Special tokens, indexed by their fixed id."""


class Vocab:
    """A list of token types (``itos``) and its inverse (``stoi``).

    ``itos[:4]`` is always :data:`SPECIALS`; everything after it is ordered by
    training frequency (descending), ties broken by the token string, so the
    same data always gives the same ids.
    """

    def __init__(self, itos: Sequence[str]):
        itos = list(itos)
        _check_itos(itos, "<Vocab>")
        self.itos: list[str] = itos
        self.stoi: dict[str, int] = {tok: i for i, tok in enumerate(itos)}

    @classmethod
    def build(
        cls,
        token_lists: Iterable[list[str]],
        min_freq: int = 1,
        max_size: int | None = None,
        keep: Iterable[str] = (),
    ) -> Vocab:
        """Count tokens and keep those seen at least ``min_freq`` times.

        ``max_size`` caps ``len(vocab)``, the four specials included; the most
        frequent types are kept.  Tokens equal to a special string are not
        counted (they already have their id). Tokens in ``keep`` (e.g. the tags
        of ``data.extra``) are kept however rarely seen, even never.
        """
        if min_freq < 1:
            raise UserError(f"min_freq must be >= 1, got {min_freq}")
        if max_size is not None and max_size < len(SPECIALS):
            raise UserError(f"max_size must be >= {len(SPECIALS)} (the specials), got {max_size}")
        counts: Counter[str] = Counter()
        for tokens in token_lists:
            counts.update(tokens)
        for special in SPECIALS:
            counts.pop(special, None)
        forced = set(keep) - set(SPECIALS)
        for tok in forced:
            counts.setdefault(tok, 0)
        kept = sorted(
            (tok for tok, n in counts.items() if n >= min_freq or tok in forced),
            key=lambda tok: (-counts[tok], tok),
        )
        if max_size is not None:
            kept = kept[: max_size - len(SPECIALS)]
        return cls(SPECIALS + kept)

    def __len__(self) -> int:
        return len(self.itos)

    def __contains__(self, token: object) -> bool:
        return token in self.stoi

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Vocab):
            return NotImplemented
        return self.itos == other.itos

    __hash__ = None  # type: ignore[assignment]  # mutable container semantics

    def __repr__(self) -> str:
        return f"Vocab(size={len(self)})"

    def encode(
        self, tokens: Iterable[str], add_bos: bool = False, add_eos: bool = True
    ) -> list[int]:
        """Tokens -> ids; unknown tokens become :data:`UNK`."""
        ids = [BOS] if add_bos else []
        get = self.stoi.get
        ids.extend(get(tok, UNK) for tok in tokens)
        if add_eos:
            ids.append(EOS)
        return ids

    def decode(self, ids: Iterable[int], strip_special: bool = True) -> list[str]:
        """Ids -> tokens.

        With ``strip_special`` the output stops at the first :data:`EOS` and
        :data:`PAD` / :data:`BOS` are dropped (:data:`UNK` stays, as ``<unk>``).
        """
        out: list[str] = []
        n = len(self.itos)
        for i in ids:
            i = int(i)
            if not 0 <= i < n:
                raise ValueError(f"id {i} out of range for a vocabulary of {n} types")
            if strip_special:
                if i == EOS:
                    break
                if i in (PAD, BOS):
                    continue
            out.append(self.itos[i])
        return out

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able form: ``{"itos": [...]}``."""
        return {"itos": list(self.itos)}

    @classmethod
    def from_dict(cls, d: Any, source: str = "<dict>") -> Vocab:
        if not isinstance(d, dict) or "itos" not in d:
            raise UserError(f"{source}: a vocabulary must be a mapping with an 'itos' list")
        itos = d["itos"]
        if not isinstance(itos, list):
            raise UserError(f"{source}: 'itos' must be a list, got {type(itos).__name__}")
        _check_itos(itos, source)
        return cls(itos)

    def save_json(self, path: str | Path) -> None:
        """Write atomically as UTF-8 JSON (readable, diffable)."""
        atomic_write_text(path, json.dumps(self.to_dict(), ensure_ascii=False, indent=0) + "\n")

    @classmethod
    def load_json(cls, path: str | Path) -> Vocab:
        path = Path(path)
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise UserError(f"{path}: vocabulary file not found") from None
        except UnicodeDecodeError as e:
            raise UserError(f"{path}: vocabulary file is not valid UTF-8: {e}") from None
        try:
            raw = json.loads(text)
        except json.JSONDecodeError as e:
            raise UserError(
                f"{path}: invalid vocabulary JSON at line {e.lineno}, column {e.colno}: {e.msg}"
            ) from None
        return cls.from_dict(raw, str(path))


def _check_itos(itos: list[Any], source: str) -> None:
    if itos[: len(SPECIALS)] != SPECIALS:
        raise UserError(
            f"{source}: the vocabulary must start with the specials {SPECIALS} at ids "
            f"0..{len(SPECIALS) - 1}, got {itos[: len(SPECIALS)]}"
        )
    seen: set[str] = set()
    for i, tok in enumerate(itos):
        if not isinstance(tok, str):
            raise UserError(f"{source}: token at id {i} is not a string: {tok!r}")
        if tok in seen:
            raise UserError(f"{source}: duplicate token {tok!r} at id {i}")
        seen.add(tok)
