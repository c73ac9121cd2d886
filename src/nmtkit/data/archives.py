"""Text out of tar archives in one streaming pass, and the XML/SGML cleaning the recipes use.

:func:`extract` reads a (compressed) tar once, front to back, and runs each wanted member
through a *cleaner* (numbered lines in, kept lines out) into a gzip file in a scratch
directory; nothing else is unpacked.  :func:`require` picks a member that must be there and
:func:`aligned_pairs` reads two extracted members side by side.  The cleaners here are the
generic ones: :func:`clean_plain` (sentence-per-line text) and :func:`clean_segments` (the
``<seg>`` lines of IWSLT ``.xml`` and WMT ``.sgm`` files, :func:`unescape_xml` applied).
:class:`GzTextWriter` writes reproducible gzip text that is on disk once it is closed.
Used by :mod:`nmtkit.data.recipes`.
"""

from __future__ import annotations

import gzip
import logging
import os
import re
import tarfile
import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from nmtkit.data.fetch import CorpusError
from nmtkit.io import errors_naming

log = logging.getLogger(__name__)

Cleaner = Callable[[Iterator[tuple[int, str]], str], Iterator[str]]
"""(numbered lines of a member, ``archive:member`` for messages) -> the lines to keep."""


# ---------------------------------------------------------------------------
# Streaming members


def numbered_lines(f: IO[bytes], where: str, strict: bool) -> Iterator[tuple[int, str]]:
    """Numbered lines of a member, split on ``\\n`` only, without ``\\n``/``\\r\\n``; a
    leading byte-order mark is dropped.

    Invalid UTF-8 is an error in evaluation sets (``strict``); in training text
    it becomes U+FFFD and is counted, so one bad byte in millions of lines does
    not make the corpus unusable.
    """
    bad = first_bad = 0
    for number, raw in enumerate(f, start=1):
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            if strict:
                raise CorpusError(f"{where}:{number}: invalid UTF-8 (byte {raw[e.start]:#04x} "
                                  f"at column {e.start})") from None
            bad += 1
            first_bad = first_bad or number
            line = raw.decode("utf-8", "replace")
        if number == 1:
            line = line.removeprefix("\ufeff")
        yield number, line.removesuffix("\n").removesuffix("\r")
    if bad:
        log.warning("%s: %d line(s) with invalid UTF-8 (first: line %d) read with U+FFFD",
                    where, bad, first_bad)


@dataclass
class Extracted:
    """A member's kept lines, gzipped in the scratch directory."""

    path: Path
    count: int
    where: str
    """``archive:member``, for messages."""


def _normalise(name: str) -> str:
    while name.startswith("./"):
        name = name[2:]
    return name


def extract(archive: Path, label: str, wanted: dict[str, tuple[Cleaner, bool]],
            scratch: Path) -> tuple[dict[str, Extracted], list[str]]:
    """Stream ``archive`` once; run each wanted member (name -> (cleaner, strict UTF-8))
    through its cleaner into a gzip file under ``scratch``.

    Member names are compared without a leading ``./``. Returns the members found and the
    names of every file member seen (for messages); members not in the archive are simply
    absent from the result. ``label`` names the archive in messages.
    """
    found: dict[str, Extracted] = {}
    seen: list[str] = []
    try:
        with tarfile.open(archive, mode="r|*") as tar:
            for info in tar:
                name = _normalise(info.name)
                if not info.isdir():
                    seen.append(name)
                if name not in wanted or name in found:
                    continue
                where = f"{label}:{name}"
                if not info.isfile():
                    raise CorpusError(f"{where}: not a regular file in the archive")
                f = tar.extractfile(info)
                assert f is not None  # a regular file always has contents
                cleaner, strict = wanted[name]
                out = scratch / f"member{len(found)}.gz"
                count = 0
                with f, GzTextWriter(out, 1, sync=False) as w:
                    for line in cleaner(numbered_lines(f, where, strict), where):
                        w.write(line + "\n")
                        count += 1
                found[name] = Extracted(out, count, where)
                log.info("%s: %d lines", where, count)
    except (tarfile.TarError, EOFError, zlib.error, OSError) as e:
        if isinstance(e, OSError) and _names_a_file_in(e, scratch):
            raise  # writing the scratch disk (full?), not reading the archive
        raise CorpusError(f"{archive}: cannot read the archive: {e}") from None
    return found, seen


def _names_a_file_in(e: OSError, directory: Path) -> bool:
    return isinstance(e.filename, str) and Path(e.filename).parent == directory


def require(found: dict[str, Extracted], seen: list[str], label: str,
            candidates: Iterable[str]) -> Extracted:
    """The first candidate member present, else an error naming what was looked for and
    listing (the first few of) what the archive holds."""
    candidates = list(candidates)
    for name in candidates:
        if name in found:
            return found[name]
    also = f" (nor {', '.join(candidates[1:])})" if len(candidates) > 1 else ""
    files = [s for s in seen if not s.endswith("/")]
    sample = ", ".join(files[:8]) + (", ..." if len(files) > 8 else "")
    raise CorpusError(f"{label}: no member {candidates[0]}{also} in the archive; it holds "
                      f"{len(files)} entries: {sample or 'none'}")


def read_extracted(member: Extracted) -> Iterator[str]:
    """The kept lines of an extracted member, without their ``\\n``."""
    with gzip.open(member.path, "rt", encoding="utf-8", newline="\n") as f:
        for line in f:
            yield line[:-1]


def aligned_pairs(a: Extracted, b: Extracted) -> Iterator[tuple[str, str]]:
    """Line pairs of two members, which must hold the same number of kept lines."""
    if a.count != b.count:
        raise CorpusError(f"line counts differ after cleaning: {a.where} has {a.count} lines, "
                          f"{b.where} has {b.count}")
    return zip(read_extracted(a), read_extracted(b), strict=True)


# ---------------------------------------------------------------------------
# Cleaning

_SEG = re.compile(r"<seg\b[^>]*>(.*?)</seg>")
_ENTITY = re.compile(r"&(?:#([0-9]+)|#[xX]([0-9a-fA-F]+)|(amp|lt|gt|quot|apos));")
_NAMED = {"amp": "&", "lt": "<", "gt": ">", "quot": '"', "apos": "'"}


def unescape_xml(text: str) -> str:
    """Replace XML's five named entities and numeric character references, in one pass
    (``&amp;lt;`` becomes ``&lt;``); anything else, e.g. an invalid code point, is kept."""

    def sub(m: re.Match[str]) -> str:
        if m.group(3):
            return _NAMED[m.group(3)]
        code = int(m.group(1)) if m.group(1) else int(m.group(2), 16)
        valid = 0 < code <= 0x10FFFF and not 0xD800 <= code <= 0xDFFF  # no lone surrogates
        return chr(code) if valid else m.group(0)

    return _ENTITY.sub(sub, text)


def clean_segments(lines: Iterator[tuple[int, str]], where: str) -> Iterator[str]:
    """IWSLT ``.xml`` / WMT ``.sgm``: the text of each ``<seg ...>...</seg>`` line,
    entities unescaped, surrounding whitespace removed; other lines are skipped. A ``<seg``
    line without its ``</seg>`` is an error naming the member and line."""
    for number, line in lines:
        if "<seg" not in line:
            continue
        m = _SEG.search(line)
        if m is None:
            raise CorpusError(f"{where}:{number}: malformed segment (expected "
                              f"'<seg id=...>text</seg>' on one line): {line[:80]!r}")
        yield unescape_xml(m.group(1)).strip()


def clean_plain(lines: Iterator[tuple[int, str]], where: str) -> Iterator[str]:
    """Plain sentence-per-line text: surrounding whitespace removed."""
    for _, line in lines:
        yield line.strip()


# ---------------------------------------------------------------------------
# Writing


class GzTextWriter:
    """UTF-8 text into a new gzip file with no name or time in its header (the same text
    gives the same bytes); :meth:`close` flushes and (unless ``sync`` is off, for scratch
    files) fsyncs the file before closing it. A write error (a full disk) names the file,
    or ``name`` where the file is written under a temporary name."""

    def __init__(self, path: Path, compresslevel: int, sync: bool = True,
                 name: Path | None = None):
        self.name, self.sync = name or path, sync
        with errors_naming(self.name):
            self.raw = open(path, "wb")  # noqa: SIM115 (closed by close())
        self.gz = gzip.GzipFile(fileobj=self.raw, mode="wb", filename="", mtime=0,
                                compresslevel=compresslevel)

    def write(self, text: str) -> None:
        with errors_naming(self.name):
            self.gz.write(text.encode("utf-8"))

    def close(self) -> None:
        if not self.raw.closed:
            with errors_naming(self.name):
                try:
                    self.gz.close()
                    self.raw.flush()
                    if self.sync:
                        os.fsync(self.raw.fileno())
                finally:
                    self.raw.close()

    def __enter__(self) -> GzTextWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
