"""The documentation is a site: ``mkdocs build --strict`` of mkdocs.yml succeeds and every page
of its nav is built (a page missing from docs/, a broken nav entry or a bad anchor fails)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]


def nav_pages() -> list[str]:
    cfg = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))
    return [page for entry in cfg["nav"] for page in entry.values()]


def test_every_nav_page_exists_in_docs():
    pages = nav_pages()
    assert {"index.md", "guide.md", "handbook.md", "results.md", "reliability.md",
            "design.md"} <= set(pages)
    assert [p for p in pages if not (ROOT / "docs" / p).is_file()] == []


@pytest.mark.slow
def test_site_builds_strictly(tmp_path):
    exe = shutil.which("mkdocs", path=str(Path(sys.executable).parent))
    if exe is None:
        pytest.skip("mkdocs is not installed (the dev extra)")
    run = subprocess.run([exe, "build", "--strict", "-f", str(ROOT / "mkdocs.yml"),
                          "-d", str(tmp_path / "site")], cwd=tmp_path, capture_output=True,
                         text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-4000:]
    for page in nav_pages():
        built = tmp_path / "site" / ("index.html" if page == "index.md"
                                     else f"{page.removesuffix('.md')}/index.html")
        assert built.is_file(), page
    assert not (tmp_path / "site" / "guide.src").exists()  # sources are not pages
