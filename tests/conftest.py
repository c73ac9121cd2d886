"""Shared fixtures: the offline Multi30k mirror and tiny configurations."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = ROOT.parent / "shared" / "data"


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


def load_benchmark(name: str):
    """A script of benchmarks/ imported as a module (its own ``from _common import ...``
    resolved), so that tests can call its functions."""
    import importlib.util
    import sys

    script = ROOT / "benchmarks" / f"{name}.py"
    sys.path.insert(0, str(script.parent))
    try:
        spec = importlib.util.spec_from_file_location(f"benchmark_{name}", script)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(script.parent))


def tiny_copy_overrides(steps: int = 20) -> list[str]:
    """A copy-task run small enough for unit tests (seconds)."""
    return [f"train.max_steps={steps}", "train.valid_every=10", "train.keep_last=3",
            "data.copy_train_size=400", "data.copy_valid_size=20", "model.d_model=32",
            "model.d_ff=64", "model.heads=2", "model.layers=1", "model.dropout=0.1",
            "train.max_tokens=256", "train.threads=1"]


def run_until_ctrl_c(monkeypatch, trainer, at_update: int) -> None:
    """Run ``trainer`` with a Ctrl-C (KeyboardInterrupt) at its ``at_update``-th call of
    ``Trainer._update`` (its ``last.pt`` then holds the updates before it, saved by the
    interrupt handler), then put ``Trainer._update`` back as it was."""
    from nmtkit.train.loop import Trainer

    real_update, calls = Trainer._update, {"n": 0}

    def update_then_ctrl_c(self, group):
        calls["n"] += 1
        if calls["n"] == at_update:
            raise KeyboardInterrupt
        return real_update(self, group)

    monkeypatch.setattr(Trainer, "_update", update_then_ctrl_c)
    with pytest.raises(KeyboardInterrupt):
        trainer.run()
    monkeypatch.setattr(Trainer, "_update", real_update)


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


def severe_browser_errors(driver) -> list[dict]:
    """The browser log's SEVERE entries (JavaScript errors, failed loads)."""
    return [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]
