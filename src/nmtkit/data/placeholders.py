"""What the vocabulary cannot say, carried over: protected spans, left out and put back.

A model writes only what its vocabulary has and reads badly what its training text never
held: an emoji, a currency sign or a letter never seen in training is ``<unk>`` (or, with
``data.byte_fallback``, byte pieces the model never learned to read), and a model trained
on one-sentence captions garbles the words around it and drops it ("Der Preis ist 5 € für Ø
3 cm." -> "The puble is in the proppting."). The field keeps such spans out of the model's
hands and puts them back after the search:

- Luong et al. (2015), "Addressing the Rare Word Problem in Neural Machine Translation", and
  Jean et al. (2015), "On Using Very Large Target Vocabulary for Neural Machine
  Translation": each ``<unk>`` of the output is replaced by the source word it is aligned
  to, the alignment read from the attention (OpenNMT-py's ``replace_unk``);
- Marian's placeholders: spans such as numbers and URLs are taken out before translation
  and put back afterwards.

nmtkit does both, for any model, with no retraining and no special token. :func:`find_spans`
finds URLs, e-mail addresses, numbers (decimals and thousands included), emoji and what the
tokenizer and vocabulary cannot say (:func:`unknown_spans`); :func:`group_spans` merges the
spans that only whitespace separates ("5 €", "Ø 3") and keeps the groups with something the
model should not read: what it cannot say, URLs and e-mail addresses (:data:`LEFT_OUT`;
numbers and emoji it can say are its own to translate). :func:`protect` cuts those groups out
of the text the model reads, remembering the text before each. After the search
:func:`restore` puts every group back once: in place of an ``<unk>`` the model wrote (the
group whose position that token attends to most, Jean et al.), the others next to the output
word aligned to the group's neighbour in the source (after the output word attending most to
the source word before the group; before the one attending most to the word after it, for a
group that begins the sentence), or, without attention, at the same relative position. No
``<unk>``/``⁇`` remains.

Why cut rather than write a placeholder token in the source: a model trained without
placeholders has never read one (an ``<unk>`` in the source is what garbles its neighbours
above), while the words around the group are words it knows, and its attention to them says
where the group goes. The translator does the bookkeeping (:mod:`nmtkit.decode.lines`);
``decode.protect_spans`` switches it off (``--no-protect-spans``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from .tokenizers import Tokenizer
from .vocab import SPECIALS as VOCAB_SPECIALS
from .vocab import UNK, UNK_TOKEN, Vocab

KINDS = ("url", "email", "number", "emoji", "unknown")
"""What a :class:`Span` is, in the order overlapping finds are preferred."""

_URL = re.compile(r"(?:\b(?:https?|ftp)://|\bwww\.)[^\s<>\"'`]+", re.IGNORECASE)
_URL_TAIL = ".,;:!?)]}»”’'\""
"""Characters that end a sentence or a bracket rather than the URL before them."""
_EMAIL = re.compile(r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+")
_NUMBER = re.compile(r"(?<![^\W_])\d+(?:[.,:\u00a0\u202f]\d+)*")
"""Digits that start a word (not glued to a letter or digit before them: "A380" and "XR41"
hold no number, where a search that began at the second digit would cut "80" out of the
word), with decimal/thousands/time separators between digit groups ("5", "3,5",
"1.000.000", "10:30", "1 000" with a no-break space); a final "." stays outside ("am 3.
Mai")."""
_UNSPACED = re.compile("[\u0e00-\u0eff\u0f00-\u0fff\u1000-\u109f\u1780-\u17ff\u3040-\u30ff"
                       "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0003ffff]")
"""Letters of scripts written without spaces (Thai, Lao, Tibetan, Burmese, Khmer, kana, CJK
ideographs): a run of them is a clause, not a word, and a group is never widened over it
(:func:`_whole_word`)."""
_EMOJI_CHAR = "\U0001F000-\U0001FAFF\u2600-\u27BF\u2B00-\u2BFF\u2300-\u23FF"
_EMOJI_MOD = "\uFE0F\U0001F3FB-\U0001F3FF\u20E3"
_EMOJI = re.compile(f"[{_EMOJI_CHAR}][{_EMOJI_MOD}]*(?:\u200D[{_EMOJI_CHAR}][{_EMOJI_MOD}]*)*")
"""An emoji with its modifiers (skin tone, variation selector, keycap) and zero-width-joined
sequences (👩‍👩‍👧)."""
_BYTE_PIECE = re.compile(r"<0x([0-9A-F]{2})>")
_SPACE_MARK = "\u2581"  # SentencePiece's word-boundary mark "▁"
_CLOSING = set(".,;:!?)]}%»”’…")
_OPENING = set("([{«„“‘¿¡")


@dataclass(frozen=True)
class Span:
    """``text[start:end]`` of a source sentence, of kind ``kind`` (one of :data:`KINDS`)."""

    start: int
    end: int
    kind: str
    text: str


def vocabulary_characters(vocab: Vocab) -> frozenset[str]:
    """Every character that some token of ``vocab`` holds (SentencePiece's "▁", the special
    tokens and the byte pieces of its byte fallback left out): what the vocabulary can say.
    A SentencePiece model has a piece for every character of its training text; a word
    vocabulary, the characters of its words."""
    chars: set[str] = set()
    for token in vocab.itos[len(VOCAB_SPECIALS):]:
        if not _BYTE_PIECE.fullmatch(token):
            chars.update(token)
    chars.discard(_SPACE_MARK)
    return frozenset(chars)


def unknown_spans(text: str, tokenizer: Tokenizer, vocab: Vocab,
                  chars: frozenset[str] | None = None) -> list[tuple[int, int]]:
    """(start, end) of the parts of ``text`` that ``tokenizer`` and ``vocab`` cannot say: the
    surface of every token that the vocabulary maps to ``<unk>`` or that is a byte piece of
    SentencePiece's byte fallback, and that holds a character none of the vocabulary's
    tokens has (``chars``: :func:`vocabulary_characters`, given to save its work). A
    ``<unk>`` of known characters (a piece the vocabulary lacks in the middle of a known
    word, or a word-level vocabulary's rare word) is the model's to read, as before. Each
    whitespace-separated word is encoded alone (SentencePiece, spaCy and ``str.split``
    tokens never cross a space); a token whose surface cannot be found in its word (a
    tokenizer that rewrites text) is skipped."""
    if not _unsayable([*tokenizer.encode(text)], vocab):  # the common case: all known
        return []
    known = vocabulary_characters(vocab) if chars is None else chars
    spans: list[tuple[int, int]] = []
    for word in re.finditer(r"\S+", text):
        tokens = tokenizer.encode(word.group())
        if not _unsayable(tokens, vocab):
            continue
        haystack, pos = word.group().lower(), 0
        for surface, bad in _surfaces(tokens, vocab):
            at = haystack.find(surface.lower(), pos) if surface else -1
            if at < 0:
                continue
            if bad and any(c not in known and c.lower() not in known for c in surface):
                spans.append((word.start() + at, word.start() + at + len(surface)))
            pos = at + len(surface)
    return spans


def _unsayable(tokens: Sequence[str], vocab: Vocab) -> bool:
    return any(t not in vocab or t == UNK_TOKEN or _BYTE_PIECE.fullmatch(t) for t in tokens)


def _surfaces(tokens: Sequence[str], vocab: Vocab) -> list[tuple[str, bool]]:
    """(surface text, whether the vocabulary maps it to ``<unk>`` or bytes) of each token; a
    run of byte pieces becomes the characters its bytes spell. A token that only looks like
    a byte piece (the text "<0x41>" that a tokenizer without byte fallback passes on as an
    unknown piece) is the text it holds: a byte piece is one the vocabulary has."""
    out: list[tuple[str, bool]] = []
    raw = bytearray()
    for t in [*tokens, ""]:
        byte = _BYTE_PIECE.fullmatch(t) if t in vocab else None
        if byte:
            raw.append(int(byte.group(1), 16))
            continue
        if raw:
            out.append((raw.decode("utf-8", errors="ignore"), True))
            raw.clear()
        if t:
            out.append((t.replace(_SPACE_MARK, ""), vocab.encode([t], add_eos=False)[0] == UNK))
    return out


def find_spans(text: str, unknown: Callable[[str], Sequence[tuple[int, int]]] | None = None
               ) -> list[Span]:
    """The spans of ``text`` to protect, in order, none overlapping: URLs, e-mail addresses,
    numbers, emoji and (``unknown``: a function of the text that gives (start, end) ranges,
    e.g. :func:`unknown_spans`) what the vocabulary cannot say. Where two overlap, the kind
    first in :data:`KINDS` wins (a URL's digits stay in the URL), except that a span with
    something unsayable in it is of kind ``unknown`` (an emoji the vocabulary lacks)."""
    bad = [(a, b) for a, b in (unknown(text) if unknown is not None else []) if b > a]
    found: list[Span] = []
    for m in _URL.finditer(text):
        url = m.group().rstrip(_URL_TAIL)
        found.append(Span(m.start(), m.start() + len(url), "url", url))
    found += [Span(m.start(), m.end(), "email", m.group()) for m in _EMAIL.finditer(text)]
    found += [Span(m.start(), m.end(), "number", m.group()) for m in _NUMBER.finditer(text)]
    found += [Span(m.start(), m.end(), "emoji", m.group()) for m in _EMOJI.finditer(text)]
    found = [Span(s.start, s.end, "unknown", s.text) if s.kind in ("number", "emoji")
             and any(a < s.end and s.start < b for a, b in bad) else s for s in found]
    found += [Span(a, b, "unknown", text[a:b]) for a, b in bad]
    taken: list[Span] = []
    for span in sorted(found, key=lambda s: (KINDS.index(s.kind), s.start)):
        if all(span.end <= t.start or span.start >= t.end for t in taken):
            taken.append(span)
    return sorted(taken, key=lambda s: s.start)


LEFT_OUT = frozenset({"url", "email", "unknown"})
"""Kinds the model never reads: what the vocabulary cannot say, and URLs and e-mail
addresses, which it would spell and translate piece by piece. Numbers and emoji that the
vocabulary has are the model's to translate (it reads "93" in 'die Nummer "93"', and may
write "two" for "2"); they are protected only beside something left out ("5 €")."""


@dataclass(frozen=True)
class Group:
    """Protected spans that only whitespace separates ("5 €", "Ø 3"), left out of what the
    model reads and moved as one: its ``text`` (the source's, spacing kept) and ``before``,
    the text the model reads before it in its sentence (its source position is that text's
    token count)."""

    text: str
    before: str


def group_spans(text: str, spans: Sequence[Span]) -> list[tuple[int, int]]:
    """(start, end) of the groups of ``spans`` (in order, not overlapping) to leave out: spans
    that only whitespace separates are merged, and a group is left out if one of its spans is
    of a kind in :data:`LEFT_OUT` (the others are the model's to read)."""
    groups: list[tuple[int, int, bool]] = []
    for span in spans:
        out = span.kind in LEFT_OUT
        if groups and not text[groups[-1][1]:span.start].strip():
            start, _, was_out = groups[-1]
            groups[-1] = (start, span.end, was_out or out)
        else:
            groups.append((span.start, span.end, out))
    merged: list[tuple[int, int]] = []
    for start, end in (_whole_word(text, a, b) for a, b, out in groups if out):
        if merged and start <= merged[-1][1]:  # widened into the group before it
            merged[-1] = (merged[-1][0], max(end, merged[-1][1]))
        else:
            merged.append((start, end))
    return merged


def _wordy(c: str) -> bool:
    """A letter or digit of a script written with spaces (:data:`_UNSPACED`)."""
    return c.isalnum() and not _UNSPACED.match(c)


def _whole_word(text: str, start: int, end: int) -> tuple[int, int]:
    """``text[start:end]``, a group to leave out, widened to the word it is glued into where
    that word holds a digit or the group ends in the word's own letters or digits: "€" of
    "A380€" becomes "A380€", "380€" of "A380€" too, "<" and ">" of "<0x41>" become
    "<0x41>". Cutting such a word would leave the model a fragment ("A", "0x41") and the
    restored group a wrong neighbour ("80€"); carried over whole it comes out as it went in.
    A symbol between words that hold no digit stays alone ("Hund🐕läuft": the model reads
    "Hund läuft")."""
    left = start
    while left > 0 and _wordy(text[left - 1]):
        left -= 1
    right = end
    while right < len(text) and _wordy(text[right]):
        right += 1
    if left < start and not (_wordy(text[start]) or any(c.isdigit() for c in text[left:start])):
        left = start
    if right > end and not (_wordy(text[end - 1]) or any(c.isdigit() for c in text[end:right])):
        right = end
    return left, right


@dataclass(frozen=True)
class Protected:
    """A sentence as the model reads it: ``text``, the source without its groups; ``groups``,
    the groups left out, in order (:class:`Group`)."""

    text: str
    groups: tuple[Group, ...] = ()


def protect(text: str, unknown: Callable[[str], Sequence[tuple[int, int]]] | None = None
            ) -> Protected:
    """``text`` with its protected spans found (:func:`find_spans`), grouped
    (:func:`group_spans`) and the groups cut out (each replaced by one space, spaces
    collapsed)."""
    groups = group_spans(text, find_spans(text, unknown))
    if not groups:
        return Protected(text)
    read, pos, out = "", 0, []
    for start, end in groups:
        read = _join(read, text[pos:start])
        out.append(Group(text[start:end], read))
        pos = end
    return Protected(_join(read, text[pos:]), tuple(out))


def _join(a: str, b: str) -> str:
    """``a`` then ``b``, the text on both sides of a group: a space between them where one
    of them had one there or both are letters or digits there ("Hund🐕läuft": "Hund läuft"),
    none between punctuation ("(🐕)": "()"); runs of whitespace made one space."""
    glued = bool(a and b) and not (a[-1].isspace() or b[0].isspace()
                                   or (a[-1].isalnum() and b[0].isalnum()))
    return " ".join((a + b if glued else f"{a} {b}").split())


def source_anchor(n_before: int, n_source: int) -> tuple[int, bool]:
    """(source token position, after): where a group stood in the source the model read,
    from ``n_before``, the number of source tokens before it (of ``n_source``): after the
    token before it (``after`` True), or, for a group that starts the sentence, before the
    first token after it (``after`` False); (-1, True) for a sentence of nothing but groups."""
    if n_source == 0:
        return -1, True
    if n_before == 0:
        return 0, False
    return min(n_before, n_source) - 1, True


@dataclass(frozen=True)
class Restored:
    """An output with its groups back: ``items`` holds, in output order, ``("token", j)`` for
    the model's output token ``j`` and ``("group", k)`` for group ``k``; ``replaced[j] = k``
    where group ``k`` took the place of the ``<unk>`` the model wrote at ``j``."""

    items: tuple[tuple[str, int], ...]
    replaced: dict[int, int]


def restore(tokens: Sequence[str], anchors: Sequence[tuple[int, bool]],
            attention: Sequence[Sequence[float]] | None, is_unknown: Callable[[str], bool],
            starts_word: Callable[[int], bool], end: int | None = None,
            at_end: Sequence[bool] = (), n_source: int | None = None) -> Restored:
    """Where each group left out of a source (``anchors[k]``: (source position, after) of
    group ``k``, :func:`source_anchor`) goes in an output of ``tokens``.

    ``attention``: (at least len(tokens), source positions) weights of each output token
    over the source (``None``: not given); ``is_unknown``: an output token the model wrote
    for what it could not say (``<unk>``); ``starts_word(j)``: output token ``j`` begins a
    word (a group is put only between words, never inside one); ``end``: where the output's
    final punctuation starts, which a group goes after only if ``at_end[k]`` (it came after
    the source's last word); ``n_source``: the source's length (for the relative position
    without attention; default: past the last anchor).

    1. Each ``<unk>`` of the output takes the unplaced group whose anchor its attention
       weighs most (Jean et al. 2015), in order when there is no attention; an ``<unk>``
       with no group left is dropped.
    2. Each group still unplaced goes after the output word holding the token that attends
       most to its anchor (before it for a group that began the sentence); without
       attention, at the same relative position in the output as in the source.
    """
    n = len(tokens)
    free = list(range(len(anchors)))
    replaced: dict[int, int] = {}
    for j, tok in enumerate(tokens):
        if not is_unknown(tok) or not free:
            continue
        if attention is not None:
            row = attention[j]
            k = max(free, key=lambda g: _weight(row, anchors[g][0]))
        else:
            k = free[0]
        free.remove(k)
        replaced[j] = k
    inserts: dict[int, list[int]] = {}  # output position -> groups put before token there
    for k in free:
        pos, after = anchors[k]
        if pos < 0 or n == 0:
            at = n
        elif attention is not None:
            j = max(range(n), key=lambda t: _weight(attention[t], pos))
            at = j + 1 if after else j
        else:
            total = max(1, n_source or max(a for a, _ in anchors) + 1)
            at = round((pos + (1 if after else 0)) / total * n)
        at = min(max(at, 0), n if end is None or (k < len(at_end) and at_end[k]) else end)
        while 0 < at < n and not starts_word(at):  # never inside a word: to its end
            at += 1
        inserts.setdefault(at, []).append(k)
    items: list[tuple[str, int]] = []
    for j in range(n + 1):
        items += [("group", k) for k in inserts.get(j, [])]
        if j < n:
            if j in replaced:
                items.append(("group", replaced[j]))
            elif not is_unknown(tokens[j]):
                items.append(("token", j))
    return Restored(tuple(items), replaced)


def _weight(row: Sequence[float], pos: int) -> float:
    return float(row[pos]) if 0 <= pos < len(row) else 0.0


def assemble(pieces: Sequence[tuple[bool, str]], separator: str = " ") -> str:
    """The output text from its pieces in order: (is a group, text), the model's text (each
    run of model tokens detokenized) and the groups. Pieces are joined with ``separator``,
    except before closing punctuation and after opening brackets."""
    out = ""
    for _, piece in pieces:
        piece = piece.strip()
        if not piece:
            continue
        glue = not out or piece[0] in _CLOSING or out[-1] in _OPENING
        out += piece if glue else separator + piece
    return out
