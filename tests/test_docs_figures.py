"""The docs as a reader opens them: every figure that README.md and docs/*.md link to is a
real, readable PNG, and the interactive attention page renders in Chromium."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("matplotlib")

from matplotlib.image import imread  # noqa: E402

from nmtkit.cli import main  # noqa: E402
from nmtkit.config import load  # noqa: E402
from nmtkit.train.loop import Trainer  # noqa: E402

from .helpers import ROOT, severe_browser_errors, tiny_copy_overrides  # noqa: E402

DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
# ![alt](path), [text](path) and <img src="path">, for local files only
LINK = re.compile(r"\]\(\s*([^)\s]+?)(?:\s+\"[^\"]*\")?\s*\)|<img[^>]*\ssrc=\"([^\"]+)\"")


def linked_files(suffix: str) -> list[tuple[Path, Path]]:
    """(document, linked file) for every local link ending in ``suffix``."""
    found = []
    for doc in DOCS:
        for m in LINK.finditer(doc.read_text(encoding="utf-8")):
            target = (m.group(1) or m.group(2)).split("#")[0]
            if target.endswith(suffix) and "://" not in target:
                found.append((doc, (doc.parent / target).resolve()))
    return found


PNGS = sorted({p for _, p in linked_files(".png")})
HTMLS = sorted({p for _, p in linked_files(".html")})


def test_the_docs_link_figures():
    # the guide alone shows more than a dozen figures; an empty list means the regex broke
    assert len(PNGS) >= 10, PNGS


@pytest.mark.parametrize("png", PNGS, ids=lambda p: os.path.relpath(p, ROOT))
def test_linked_png_opens(png: Path):
    assert png.is_file(), f"{png} is linked from the docs but does not exist"
    assert png.is_relative_to(ROOT), f"{png} is outside the repository"
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", f"{png} is not a PNG"
    assert 2_000 < len(data) < 5_000_000, f"{png}: {len(data)} bytes"
    img = imread(png)
    assert img.ndim == 3 and img.shape[2] in (3, 4)
    h, w = img.shape[:2]
    assert 150 <= h <= 4000 and 150 <= w <= 4000, f"{png}: {w}x{h} pixels"
    assert float(img[..., :3].var()) > 1e-4, f"{png} is blank"


def test_linked_html_exists():
    for page in HTMLS:
        assert page.is_file() and page.is_relative_to(ROOT), page


@pytest.mark.slow
def test_untrained_model_snippet_runs_and_repeats_itself():
    """The guide's untrained-model example runs as printed, and says what it prints: each
    seed's output is one token repeated to the length cap, or nothing at all."""
    text = (ROOT / "docs" / "guide.src.md").read_text(encoding="utf-8")
    section = text.split("### An untrained model", 1)[1]
    code = section.split("```python\n", 1)[1].split("```", 1)[0]
    run = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    assert [ln.split(":")[0] for ln in lines] == ["seed 0", "seed 1", "seed 2"]
    for line in lines:
        tokens = line.split(":", 1)[1].strip(" []").replace(",", " ").split()
        assert len(set(tokens)) <= 1, line
        assert len(tokens) in (0, 11), line  # cap 1.0 * 10 + 2 = 12 steps, the last </s>


# --- the HTML attention page in a real browser -------------------------------------------------




def _check_page(driver, page: Path) -> dict:
    """Load ``page``, wait for the map, and return what the reader sees."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    text = page.read_text(encoding="utf-8")
    assert "http://" not in text and "https://" not in text  # self-contained: nothing to fetch
    driver.get(page.as_uri())
    WebDriverWait(driver, 10).until(lambda d: d.find_elements(By.CSS_SELECTOR, "#map td.c"))
    assert severe_browser_errors(driver) == []
    seen = driver.execute_script(
        "var m = document.getElementById('map');"
        "return {kinds: Array.from(document.getElementById('kind').options).map(o => o.value),"
        " cells: m.querySelectorAll('td.c').length,"
        " coloured: Array.from(m.querySelectorAll('td.c')).filter(td => td.style.backgroundColor).length,"
        " source: document.getElementById('source').textContent};")
    for select in ("kind", "layer", "head"):  # the reader's three choices
        assert driver.find_element(By.ID, select).tag_name == "select"
    assert seen["cells"] > 0 and seen["coloured"] == seen["cells"], seen
    return seen


@pytest.mark.slow
def test_plot_attention_html_renders_in_chromium(browser, tmp_path, capsys):
    cfg = load(ROOT / "configs" / "copy_task.yaml", tiny_copy_overrides(steps=10))
    Trainer(cfg, tmp_path / "run").run()
    capsys.readouterr()
    out = tmp_path / "figs"
    assert main(["plot", "attention", "--model", str(tmp_path / "run" / "best.pt"),
                 "--text", "1 2 3 4", "--html", "--out", str(out)]) in (0, None)
    page = out / "attention.html"
    assert page.is_file(), sorted(p.name for p in out.iterdir())
    seen = _check_page(browser, page)
    assert seen["kinds"] == ["encoder", "decoder_self", "decoder_src"]
    assert seen["source"] == "1 2 3 4"
    assert severe_browser_errors(browser) == []


@pytest.mark.slow
@pytest.mark.parametrize("page", HTMLS, ids=lambda p: os.path.relpath(p, ROOT))
def test_committed_attention_page_renders_in_chromium(browser, page: Path):
    seen = _check_page(browser, page)
    assert seen["kinds"], seen
    assert seen["source"].strip(), "the page shows no source sentence"
