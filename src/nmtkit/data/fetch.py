"""Raw files on the local disk: the NMTKIT_DATA mirror, else the cache, else a verified download.

:func:`fetch_file` looks for ``<collection>/<name>`` in, in order: the offline mirror
``$NMTKIT_DATA/<collection>/<name>`` (used as it is), the cache
``$NMTKIT_CACHE/<collection>/<name>`` (default ``~/.cache/nmtkit``), and last a download into
that cache.  Every file is checked against a pinned sha256 when the caller knows one; for
the others the first download records the observed hash in ``<name>.sha256`` beside it
(trust on first use) and later uses check it.  A download goes to a temporary file in the
cache and is renamed into place only once verified, so a failed or corrupted download leaves
nothing behind.  Multi30k (:mod:`nmtkit.data.corpora`) and the IWSLT14/WMT14 archives
(:mod:`nmtkit.data.recipes`) come through here.
"""

from __future__ import annotations

import contextlib
import hashlib
import http.client
import logging
import os
import tempfile
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

from tqdm import tqdm

from nmtkit.io import atomic_write_text

from ..errors import UserError

log = logging.getLogger(__name__)


class CorpusError(UserError):
    """Corpus data that cannot be fetched, read or used; the message names the file (and line).

    Raised by every module of :mod:`nmtkit.data` that reads corpora, and defined here, in the
    lowest of them; :mod:`nmtkit.data.corpora` is where callers usually import it from."""


DOWNLOAD_TIMEOUT_S = 60.0


def cache_dir() -> Path:
    """``$NMTKIT_CACHE`` or ``~/.cache/nmtkit``."""
    env = os.environ.get("NMTKIT_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "nmtkit"


def sha256_file(path: str | Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def download(
    url: str, dest: str | Path, sha256: str | None = None, timeout: float = DOWNLOAD_TIMEOUT_S
) -> str:
    """Fetch ``url`` to ``dest`` atomically and return the file's sha256.

    The bytes go to a temporary file beside ``dest``; it is renamed over
    ``dest`` only if the download completes and (when ``sha256`` is given) the
    hash matches.  On any failure nothing is left behind and a
    :class:`CorpusError` naming the URL is raised.
    """
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=".part", dir=dest.parent)
    h = hashlib.sha256()
    try:
        with os.fdopen(fd, "wb") as out:
            try:
                with urllib.request.urlopen(url, timeout=timeout) as resp:
                    length = resp.headers.get("Content-Length") if resp.headers else None
                    total = int(length) if length and length.isdigit() else None
                    with tqdm(
                        total=total,
                        unit="B",
                        unit_scale=True,
                        unit_divisor=1024,
                        desc=dest.name,
                        disable=None,
                        leave=False,
                    ) as bar:
                        for block in iter(lambda: resp.read(1 << 16), b""):
                            out.write(block)
                            h.update(block)
                            bar.update(len(block))
            except (urllib.error.URLError, http.client.HTTPException, OSError, ValueError) as e:
                raise CorpusError(f"download of {url} failed: {e}") from None
            out.flush()
            os.fsync(out.fileno())
        digest = h.hexdigest()
        if sha256 is not None and digest != sha256.lower():
            raise CorpusError(
                f"download of {url}: sha256 mismatch (expected {sha256}, got {digest}); "
                "the file was not saved"
            )
        os.replace(tmp, dest)
        return digest
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def _sidecar(path: Path) -> Path:
    return path.with_name(path.name + ".sha256")


def _read_sidecar(path: Path) -> str | None:
    try:
        text = _sidecar(path).read_text(encoding="utf-8").split()
    except FileNotFoundError:
        return None
    return text[0].lower() if text else None


def local_file(collection: str, name: str) -> Path | None:
    """Where :func:`fetch_file` would find ``<collection>/<name>`` now (mirror, else cache),
    without reading or checking it; ``None`` when it would have to download it."""
    data_env = os.environ.get("NMTKIT_DATA")
    if data_env:
        mirrored = Path(data_env).expanduser() / collection / name
        if mirrored.is_file():
            return mirrored
    cached = cache_dir() / collection / name
    return cached if cached.is_file() else None


def _check_mirror(root: Path, mirrored: Path) -> None:
    """A mirror that is there but cannot be what it should (``NMTKIT_DATA`` a file, the wanted
    path a directory) is an error saying so, not a "not found" and a download."""
    if root.exists() and not root.is_dir():
        raise CorpusError(f"NMTKIT_DATA={root}: is not a directory (the offline mirror is a "
                          "folder holding <collection>/<file>)")
    if mirrored.exists() and not mirrored.is_file():
        kind = "a directory" if mirrored.is_dir() else "not a regular file"
        raise CorpusError(f"{mirrored}: is {kind}, not a file (in the NMTKIT_DATA mirror)")


@contextlib.contextmanager
def writing_the_cache(target: str | Path) -> Iterator[None]:
    """Turn an ``OSError`` from writing into the cache in the block (a full disk, no
    permission) into a :class:`CorpusError` that names the file (its own name, else
    ``target``) and says that it lies in the cache, which ``NMTKIT_CACHE`` can move. An error
    naming a file outside the cache (an input) is raised as it is."""
    try:
        yield
    except OSError as e:
        root = os.path.realpath(cache_dir())
        where = os.path.realpath(e.filename if isinstance(e.filename, str) else target)
        if where != root and not where.startswith(root + os.sep):
            raise
        raise CorpusError(f"{where}: {e.strerror or e} (in nmtkit's cache {cache_dir()}; "
                          "NMTKIT_CACHE=DIR puts the cache elsewhere)") from None


def fetch_file(
    collection: str, name: str, url: str, pinned: str | None, label: str | None = None
) -> tuple[Path, str]:
    """Local copy of the raw file ``<collection>/<name>`` and its sha256, fetching it if needed.

    Looks in, in order: the offline mirror ``$NMTKIT_DATA/<collection>/<name>``
    (used as it is, after checking the pinned hash when there is one), the
    cache ``$NMTKIT_CACHE/<collection>/<name>`` (checked against the pinned
    hash, else the ``<name>.sha256`` sidecar written on first use), and last a
    download of ``url`` into the cache (:func:`download`: atomic, verified).
    Without a pinned hash the first download records the hash it saw (trust on
    first use).  ``label`` names the corpus in messages.
    """
    label = label or collection
    mirror_note = ""
    data_env = os.environ.get("NMTKIT_DATA")
    if data_env:
        mirrored = Path(data_env).expanduser() / collection / name
        _check_mirror(Path(data_env).expanduser(), mirrored)
        if mirrored.is_file():
            got = sha256_file(mirrored)
            if pinned is not None and got != pinned:
                raise CorpusError(
                    f"{mirrored}: sha256 mismatch (expected {pinned}, got {got}); "
                    f"the NMTKIT_DATA mirror holds a different file than {url}"
                )
            return mirrored, got
        mirror_note = f"not found in the mirror {mirrored} (NMTKIT_DATA) and "
        log.info("%s not in the NMTKIT_DATA mirror; using the cache", name)

    cached = cache_dir() / collection / name
    expected = pinned or _read_sidecar(cached)
    if cached.is_file():
        got = sha256_file(cached)
        if expected is None:
            log.warning("%s has no recorded sha256; trusting it and recording %s", cached, got)
            atomic_write_text(_sidecar(cached), f"{got}  {name}\n")
            return cached, got
        if got == expected:
            return cached, got
        log.warning(
            "%s: sha256 mismatch (expected %s, got %s); downloading again", cached, expected, got
        )

    log.info("downloading %s to %s", url, cached)
    try:
        got = download(url, cached, expected)
    except CorpusError as e:
        hint = (
            ""
            if data_env
            else f" (set NMTKIT_DATA to a folder holding {collection}/ to work offline)"
        )
        raise CorpusError(
            f"{label} {name}: {mirror_note}could not be fetched into the cache {cached}: {e}{hint}"
        ) from None
    if expected is None:
        log.warning(
            "%s has no pinned sha256; recording the downloaded file's %s (trust on first use)",
            name,
            got,
        )
        atomic_write_text(_sidecar(cached), f"{got}  {name}\n")
    return cached, got
