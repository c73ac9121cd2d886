"""data/fetch.py: the NMTKIT_DATA mirror, the cache, sha256 checks and verified downloads.

No test reaches the network: ``download`` is exercised on file:// URLs, and ``fetch_file``'s
downloads are replaced by a fake that counts its calls."""

import hashlib
import logging
import urllib.request
from pathlib import Path

import pytest

from nmtkit.data import fetch
from nmtkit.data.fetch import CorpusError, cache_dir, download, fetch_file, local_file, sha256_file


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.fixture(autouse=True)
def isolated_env(monkeypatch, tmp_path):
    """No test sees the user's cache or mirror, nor reaches the network."""
    monkeypatch.delenv("NMTKIT_DATA", raising=False)
    monkeypatch.setenv("NMTKIT_CACHE", str(tmp_path / "cache"))

    def refuse(*args, **kwargs):
        raise AssertionError("tests must not touch the network")

    monkeypatch.setattr(fetch.urllib.request, "urlopen", refuse)


class FakeRemote:
    """Stands in for :func:`fetch.download`: serves ``files`` by URL and counts the calls,
    checking the hash as the real one does (and leaving nothing on a mismatch)."""

    def __init__(self, monkeypatch, files: dict[str, bytes]):
        self.files = files
        self.calls: list[str] = []
        monkeypatch.setattr(fetch, "download", self)

    def __call__(self, url: str, dest, expected: str | None = None, timeout: float = 0) -> str:
        self.calls.append(url)
        data = self.files[url]
        if expected is not None and sha(data) != expected:
            raise CorpusError(f"download of {url}: sha256 mismatch (expected {expected}, "
                              f"got {sha(data)}); the file was not saved")
        Path(dest).parent.mkdir(parents=True, exist_ok=True)
        Path(dest).write_bytes(data)
        return sha(data)


URL = "https://example.invalid/col/file.gz"


@pytest.fixture
def file_urls(monkeypatch):
    """The real urlopen, for file:// URLs only."""
    opener = urllib.request.build_opener(urllib.request.FileHandler())
    monkeypatch.setattr(fetch.urllib.request, "urlopen", opener.open)


# --- download (file:// URLs) ----------------------------------------------------------


def test_download_good_checksum_and_no_checksum(tmp_path, file_urls):
    payload = b"Ein Mann.\nZwei Hunde.\n" * 100
    src = tmp_path / "remote.de.gz"
    src.write_bytes(payload)
    dest = tmp_path / "cache" / "x" / "train.de.gz"
    assert download(src.as_uri(), dest, sha(payload)) == sha(payload)
    assert dest.read_bytes() == payload
    assert sorted(p.name for p in dest.parent.iterdir()) == ["train.de.gz"]  # no .part left
    assert download(src.as_uri(), dest.with_name("other.gz")) == sha(payload)


def test_download_checksum_mismatch_leaves_nothing(tmp_path, file_urls):
    src = tmp_path / "remote.gz"
    src.write_bytes(b"tampered")
    dest = tmp_path / "cache" / "train.de.gz"
    with pytest.raises(CorpusError, match=r"remote\.gz: sha256 mismatch \(expected 0{64}, got "
                       + sha(b"tampered")):
        download(src.as_uri(), dest, "0" * 64)
    assert list(dest.parent.iterdir()) == []


def test_download_failure_leaves_nothing(tmp_path, file_urls):
    dest = tmp_path / "cache" / "train.de.gz"
    with pytest.raises(CorpusError, match=r"download of .*does-not-exist failed"):
        download((tmp_path / "does-not-exist").as_uri(), dest, None)
    assert list(dest.parent.iterdir()) == []


def test_download_keeps_previous_file_on_mismatch(tmp_path, file_urls):
    src = tmp_path / "remote.gz"
    src.write_bytes(b"new")
    dest = tmp_path / "cache" / "f.gz"
    dest.parent.mkdir()
    dest.write_bytes(b"old")
    with pytest.raises(CorpusError, match="sha256 mismatch"):
        download(src.as_uri(), dest, sha(b"something else"))
    assert dest.read_bytes() == b"old"
    assert sorted(p.name for p in dest.parent.iterdir()) == ["f.gz"]


def test_sha256_file_and_cache_dir(tmp_path, monkeypatch):
    (tmp_path / "f").write_bytes(b"abc" * 1_000_000)  # more than one read block
    assert sha256_file(tmp_path / "f") == sha(b"abc" * 1_000_000)
    assert cache_dir() == tmp_path / "cache"
    monkeypatch.delenv("NMTKIT_CACHE")
    assert cache_dir() == Path.home() / ".cache" / "nmtkit"


# --- fetch_file: mirror, cache, download --------------------------------------------------


def test_mirror_is_used_without_downloading(tmp_path, monkeypatch):
    remote = FakeRemote(monkeypatch, {URL: b"remote copy"})
    mirror = tmp_path / "mirror"
    (mirror / "col").mkdir(parents=True)
    (mirror / "col" / "file.gz").write_bytes(b"mirrored")
    monkeypatch.setenv("NMTKIT_DATA", str(mirror))
    path, digest = fetch_file("col", "file.gz", URL, sha(b"mirrored"))
    assert path == mirror / "col" / "file.gz" and digest == sha(b"mirrored")
    assert local_file("col", "file.gz") == path
    assert remote.calls == [] and not (tmp_path / "cache").exists()  # nothing copied


def test_mirror_with_the_wrong_hash_is_refused_naming_the_file(tmp_path, monkeypatch):
    remote = FakeRemote(monkeypatch, {URL: b"good"})
    mirror = tmp_path / "mirror"
    (mirror / "col").mkdir(parents=True)
    (mirror / "col" / "file.gz").write_bytes(b"not the real file")
    monkeypatch.setenv("NMTKIT_DATA", str(mirror))
    with pytest.raises(CorpusError) as e:
        fetch_file("col", "file.gz", URL, sha(b"good"))
    msg = str(e.value)
    assert str(mirror / "col" / "file.gz") in msg and "sha256 mismatch" in msg
    assert sha(b"not the real file") in msg and sha(b"good") in msg
    assert remote.calls == []  # a bad mirror is an error, not a reason to download


def test_download_mismatch_names_the_file_and_leaves_no_cache(tmp_path, monkeypatch):
    FakeRemote(monkeypatch, {URL: b"evil"})
    with pytest.raises(CorpusError, match=r"Thing file\.gz: could not be fetched into the cache "
                       r".*file\.gz.*sha256 mismatch.*set NMTKIT_DATA"):
        fetch_file("col", "file.gz", URL, sha(b"good"), "Thing")
    assert not (tmp_path / "cache" / "col" / "file.gz").exists()


def test_mirror_miss_falls_through_to_the_cache(tmp_path, monkeypatch):
    remote = FakeRemote(monkeypatch, {URL: b"data"})
    (tmp_path / "mirror").mkdir()
    monkeypatch.setenv("NMTKIT_DATA", str(tmp_path / "mirror"))
    assert local_file("col", "file.gz") is None
    path, _ = fetch_file("col", "file.gz", URL, sha(b"data"))
    assert path == tmp_path / "cache" / "col" / "file.gz" and path.read_bytes() == b"data"
    assert local_file("col", "file.gz") == path
    assert remote.calls == [URL]


def test_cached_file_is_reused_and_a_corrupt_one_fetched_again(tmp_path, monkeypatch):
    remote = FakeRemote(monkeypatch, {URL: b"data"})
    path, _ = fetch_file("col", "file.gz", URL, sha(b"data"))
    assert fetch_file("col", "file.gz", URL, sha(b"data")) == (path, sha(b"data"))
    assert remote.calls == [URL]  # the second came from the cache
    path.write_bytes(b"corrupt")
    assert fetch_file("col", "file.gz", URL, sha(b"data")) == (path, sha(b"data"))
    assert remote.calls == [URL, URL] and path.read_bytes() == b"data"


def test_corrupt_cached_file_that_cannot_be_fetched_again_is_refused(tmp_path, monkeypatch):
    remote = FakeRemote(monkeypatch, {URL: b"changed upstream"})
    cached = tmp_path / "cache" / "col" / "file.gz"
    cached.parent.mkdir(parents=True)
    cached.write_bytes(b"corrupt")
    with pytest.raises(CorpusError, match=r"file\.gz.*could not be fetched.*sha256 mismatch"):
        fetch_file("col", "file.gz", URL, sha(b"data"))
    assert remote.calls == [URL]


def test_trust_on_first_use_records_and_then_checks_the_hash(tmp_path, monkeypatch, caplog):
    remote = FakeRemote(monkeypatch, {URL: b"first"})
    with caplog.at_level(logging.WARNING, logger="nmtkit.data.fetch"):
        path, digest = fetch_file("col", "file.gz", URL, None)
    assert "trust on first use" in caplog.text
    sidecar = path.with_name("file.gz.sha256")
    assert sidecar.read_text().split() == [sha(b"first"), "file.gz"] and digest == sha(b"first")
    path.write_bytes(b"tampered")  # later uses check the recorded hash
    remote.files[URL] = b"changed upstream"
    with pytest.raises(CorpusError, match="sha256 mismatch"):
        fetch_file("col", "file.gz", URL, None)
    assert remote.calls == [URL, URL]
    assert sidecar.read_text().split()[0] == sha(b"first")


def test_cached_file_without_a_record_is_trusted_and_recorded(tmp_path, monkeypatch, caplog):
    remote = FakeRemote(monkeypatch, {})
    cached = tmp_path / "cache" / "col" / "file.gz"
    cached.parent.mkdir(parents=True)
    cached.write_bytes(b"placed by hand")
    with caplog.at_level(logging.WARNING, logger="nmtkit.data.fetch"):
        assert fetch_file("col", "file.gz", URL, None) == (cached, sha(b"placed by hand"))
    assert "no recorded sha256" in caplog.text
    assert cached.with_name("file.gz.sha256").read_text().split()[0] == sha(b"placed by hand")
    assert remote.calls == []
