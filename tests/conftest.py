"""Shared fixtures (the offline Multi30k mirror, a synthetic IWSLT14 mirror, a tiny trained
copy model, a headless browser) and the collection order. The plain builders they use, and
that test modules import, are in ``helpers.py``."""

from __future__ import annotations

import os
from pathlib import Path

import pytest


def _share_the_cores() -> None:
    """``pytest -n N`` (pytest-xdist, the README's test command): N worker processes share
    the machine, so each one's torch, and the processes its tests start (through
    ``OMP_NUM_THREADS``), use cores/N threads: two OpenMP teams on one core slow each
    other far more than twofold. Tests that set a thread count keep it."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if workers > 1:
        import torch

        threads = max(1, (os.cpu_count() or 1) // workers)
        os.environ.setdefault("OMP_NUM_THREADS", str(threads))
        torch.set_num_threads(threads)


_share_the_cores()

from nmtkit.checkpoint import load_bundle  # noqa: E402  (after the thread count: imports torch)
from nmtkit.config import load  # noqa: E402
from nmtkit.data import recipes  # noqa: E402
from nmtkit.train.loop import Trainer  # noqa: E402

from .helpers import (  # noqa: E402
    ROOT,
    SHARED_DATA,
    iwslt_members,
    make_tgz,
    sentencepiece_copy_checkpoint,
    sha,
    tiny_copy_overrides,
)

LONGEST_FIRST = ("test_benchmark_seeds", "test_cli_e2e", "test_reliability", "test_distributed",
                 "test_copy_task", "test_multilingual", "test_cuda_graphs", "test_rnn",
                 "test_train_compile")
"""The modules that take longest (a minute or more of the suite each on a 2-core host), in
that order. Under ``-n N --dist loadfile`` each module goes whole to the next free worker in
the order collected: these go first, so that no long module starts last and runs alone."""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.module.__name__.rsplit(".", 1)[-1]
                                         if item.module else "", len(rank)))


@pytest.fixture
def multi30k_mirror(monkeypatch):
    """Point NMTKIT_DATA at the offline mirror (../shared/data), or skip if it is absent."""
    data = Path(os.environ.get("NMTKIT_DATA", SHARED_DATA))
    if not (data / "multi30k" / "train.de.gz").exists():
        pytest.skip(f"no Multi30k mirror at {data}")
    monkeypatch.setenv("NMTKIT_DATA", str(data))
    return data


@pytest.fixture
def iwslt_mirror(monkeypatch, tmp_path) -> Path:
    """NMTKIT_DATA pointed at a mirror holding a synthetic IWSLT14 de-en archive in the real
    format (:func:`helpers.iwslt_members`), its checksum pinned."""
    mirror = tmp_path / "mirror"
    archive = make_tgz(mirror / "iwslt14" / "de-en.tgz", iwslt_members())
    monkeypatch.setitem(recipes.SHA256["iwslt14"], "de-en.tgz", sha(archive))
    monkeypatch.setenv("NMTKIT_DATA", str(mirror))
    return archive


@pytest.fixture(scope="session")
def copy_run(tmp_path_factory):
    """A tiny copy-task model (2 layers so the page has layers to switch), trained briefly.
    (tests/test_viz.py trains its own ``copy_run``.)"""
    run = tmp_path_factory.mktemp("serve_copy")
    cfg = load(ROOT / "configs" / "copy_task.yaml",
               tiny_copy_overrides(30) + ["model.layers=2", "train.valid_bleu=false"])
    trainer = Trainer(cfg, run)
    trainer.run()
    return run


@pytest.fixture(scope="session")
def copy_bundle(copy_run):
    return load_bundle(copy_run / "last.pt")


@pytest.fixture(scope="session")
def sp_copy_checkpoint(tmp_path_factory) -> Path:
    """A SentencePiece model that copies German sentences of up to 12 pieces and has no
    piece for digits, emoji, € or Ø (:func:`helpers.sentencepiece_copy_checkpoint`)."""
    return sentencepiece_copy_checkpoint(tmp_path_factory.mktemp("sp_copy") / "model.pt")


# --- Chromium for the browser tests --------------------------------------------------------------

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    """Headless Debian Chromium driven by Selenium; skipped where either is missing."""
    if not (CHROMIUM.exists() and CHROMEDRIVER.exists()):
        pytest.skip("needs /usr/bin/chromium and /usr/bin/chromedriver (apt: chromium chromium-driver)")
    webdriver = pytest.importorskip("selenium.webdriver")
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    opts = Options()
    opts.binary_location = str(CHROMIUM)
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--disable-background-networking", "--disable-component-update", "--disable-sync",
                "--no-first-run", "--window-size=1200,900",
                f"--user-data-dir={tmp_path_factory.mktemp('chromium-profile')}"):
        opts.add_argument(arg)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SE_OFFLINE", "true")  # Selenium Manager must not try to download anything
        driver = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=opts)
    yield driver
    driver.quit()
