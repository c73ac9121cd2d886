"""data/archives.py: tar members streamed through cleaners, XML/SGML segment cleaning."""

from __future__ import annotations

import gzip
import io
import logging
import tarfile
from pathlib import Path

import pytest

from nmtkit.data.archives import (
    GzTextWriter,
    aligned_pairs,
    clean_plain,
    clean_segments,
    extract,
    numbered_lines,
    read_extracted,
    require,
    unescape_xml,
)
from nmtkit.data.fetch import CorpusError


def make_tar(path: Path, members: dict[str, bytes], mode: str = "w:gz") -> Path:
    with tarfile.open(path, mode) as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def numbered(*lines: str) -> list[tuple[int, str]]:
    return list(enumerate(lines, start=1))


# --- cleaning ------------------------------------------------------------------------------


def test_unescape_xml_entities_in_one_pass():
    assert unescape_xml("Tom &amp; Jerry &lt;3 &quot;x&quot; &apos;y&apos; &gt;") == \
        "Tom & Jerry <3 \"x\" 'y' >"
    assert unescape_xml("&#228; &#xE4; &#XE4;") == "ä ä ä"
    assert unescape_xml("&amp;lt;") == "&lt;"  # not unescaped twice
    assert unescape_xml("&nbsp; & &amp") == "&nbsp; & &amp"  # not XML's, or unterminated


def test_unescape_xml_keeps_what_is_not_a_character():
    assert unescape_xml("a &#xD800; b &#0; c &#x110000; d &#228;") == \
        "a &#xD800; b &#0; c &#x110000; d ä"


def test_clean_segments_takes_the_seg_text_only():
    lines = numbered('<refset setid="x">', "<doc>", "<title>Not a segment</title>",
                     '<seg id="1"> AT&amp;T&apos;s  </seg>', "<p>",
                     '  <seg id="2">x &lt; y</seg>  ', "<seg id=3></seg>", "</doc>")
    assert list(clean_segments(iter(lines), "a.tgz:m.sgm")) == ["AT&T's", "x < y", ""]


def test_clean_segments_malformed_line_names_member_and_line():
    lines = numbered("<doc>", '<seg id="1">gut</seg>', '<seg id="2">kaputt')
    with pytest.raises(CorpusError, match=r"a\.tgz:m\.xml:3: malformed segment .*kaputt"):
        list(clean_segments(iter(lines), "a.tgz:m.xml"))


def test_clean_plain_strips_each_line():
    assert list(clean_plain(iter(numbered("  eins ", "", "\tzwei")), "w")) == ["eins", "", "zwei"]


def test_numbered_lines_splits_on_newline_only(caplog):
    data = b"\xef\xbb\xbfeins\r\nzwei\xe2\x80\xa8drei\nvier"
    assert list(numbered_lines(io.BytesIO(data), "w", True)) == [
        (1, "eins"), (2, "zwei\u2028drei"), (3, "vier")]
    bad = b"ok\nschlecht \xff\nauch \xfe\n"
    with pytest.raises(CorpusError, match=r"a\.tgz:m:2: invalid UTF-8 \(byte 0xff at column 9\)"):
        list(numbered_lines(io.BytesIO(bad), "a.tgz:m", True))
    with caplog.at_level(logging.WARNING, logger="nmtkit.data.archives"):
        got = list(numbered_lines(io.BytesIO(bad), "a.tgz:m", False))
    assert got == [(1, "ok"), (2, "schlecht \ufffd"), (3, "auch \ufffd")]
    assert "2 line(s) with invalid UTF-8 (first: line 2)" in caplog.text


# --- streaming members out of a tar ----------------------------------------------------------


def test_extract_streams_only_the_wanted_members(tmp_path):
    archive = make_tar(tmp_path / "a.tgz", {
        "./corpus/train.de": b"Hallo \nWelt\n",
        "corpus/train.en": b"Hello\n World\n",
        "corpus/dev.sgm": b'<doc>\n<seg id="1">Tom &amp; Jerry</seg>\n</doc>\n',
        "corpus/other.txt": b"not wanted\n",
    })
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    found, seen = extract(archive, "a.tgz", {
        "corpus/train.de": (clean_plain, False),
        "corpus/train.en": (clean_plain, False),
        "corpus/dev.sgm": (clean_segments, True),
        "corpus/missing": (clean_plain, True),
    }, scratch)
    assert sorted(found) == ["corpus/dev.sgm", "corpus/train.de", "corpus/train.en"]  # "./" dropped
    assert seen == ["corpus/train.de", "corpus/train.en", "corpus/dev.sgm", "corpus/other.txt"]
    de, en = found["corpus/train.de"], found["corpus/train.en"]
    assert (de.count, de.where) == (2, "a.tgz:corpus/train.de")
    assert list(read_extracted(found["corpus/dev.sgm"])) == ["Tom & Jerry"]
    assert list(aligned_pairs(de, en)) == [("Hallo", "Hello"), ("Welt", "World")]
    assert len(list(scratch.iterdir())) == 3  # one gzip file a member, nothing else unpacked


def test_extract_reads_an_uncompressed_tar_too(tmp_path):
    archive = make_tar(tmp_path / "a.tar", {"x": b"eins\n"}, mode="w")
    found, _ = extract(archive, "a.tar", {"x": (clean_plain, True)}, tmp_path)
    assert list(read_extracted(found["x"])) == ["eins"]


def test_require_names_the_missing_member_and_what_the_archive_holds(tmp_path):
    archive = make_tar(tmp_path / "a.tgz", {"dev/a.sgm": b"", "dev/b.sgm": b""})
    found, seen = extract(archive, "a.tgz", {"dev/a.sgm": (clean_segments, True)}, tmp_path)
    assert require(found, seen, "a.tgz", ["dev/x.sgm", "dev/a.sgm"]) is found["dev/a.sgm"]
    with pytest.raises(CorpusError, match=r"a\.tgz: no member dev/x\.sgm \(nor dev/y\.sgm\) in the "
                       r"archive; it holds 2 entries: dev/a\.sgm, dev/b\.sgm"):
        require(found, seen, "a.tgz", ["dev/x.sgm", "dev/y.sgm"])


def test_aligned_pairs_refuses_members_of_different_lengths(tmp_path):
    archive = make_tar(tmp_path / "a.tgz", {"s": b"1\n2\n3\n", "t": b"1\n2\n"})
    found, _ = extract(archive, "a.tgz", {"s": (clean_plain, True), "t": (clean_plain, True)},
                       tmp_path)
    with pytest.raises(CorpusError, match=r"line counts differ after cleaning: a\.tgz:s has 3 "
                       r"lines, a\.tgz:t has 2"):
        aligned_pairs(found["s"], found["t"])


def test_not_an_archive_and_a_cut_archive_are_named(tmp_path):
    bad = tmp_path / "bad.tgz"
    bad.write_bytes(b"<html>login required</html>")
    with pytest.raises(CorpusError, match=r"bad\.tgz: cannot read the archive"):
        extract(bad, "bad.tgz", {}, tmp_path)
    good = make_tar(tmp_path / "good.tgz", {"x": b"eins\n" * 10_000})
    cut = tmp_path / "cut.tgz"
    cut.write_bytes(good.read_bytes()[: good.stat().st_size // 2])
    with pytest.raises(CorpusError, match=r"cut\.tgz: cannot read the archive"):
        extract(cut, "cut.tgz", {"x": (clean_plain, True)}, tmp_path)


def test_a_member_that_is_not_a_file_is_refused(tmp_path):
    archive = tmp_path / "a.tgz"
    with tarfile.open(archive, "w:gz") as tar:
        link = tarfile.TarInfo("x")
        link.type = tarfile.SYMTYPE
        link.linkname = "/etc/passwd"
        tar.addfile(link)
    with pytest.raises(CorpusError, match=r"a\.tgz:x: not a regular file"):
        extract(archive, "a.tgz", {"x": (clean_plain, True)}, tmp_path)


# --- writing --------------------------------------------------------------------------------


def test_gz_text_writer_is_reproducible(tmp_path):
    for name in ("a.gz", "b.gz"):
        w = GzTextWriter(tmp_path / name, 3)
        w.write("eins\nzwei ä\n")
        w.close()
        w.close()  # a second close does nothing
    assert (tmp_path / "a.gz").read_bytes() == (tmp_path / "b.gz").read_bytes()
    assert gzip.decompress((tmp_path / "a.gz").read_bytes()).decode() == "eins\nzwei ä\n"
