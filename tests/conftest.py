"""Shared fixtures: the offline Multi30k mirror and tiny configurations."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = ROOT.parent / "shared" / "data"


@pytest.fixture
def multi30k_mirror(monkeypatch):
    """Point NMTKIT_DATA at the offline mirror (../shared/data), or skip if it is absent."""
    data = Path(os.environ.get("NMTKIT_DATA", SHARED_DATA))
    if not (data / "multi30k" / "train.de.gz").exists():
        pytest.skip(f"no Multi30k mirror at {data}")
    monkeypatch.setenv("NMTKIT_DATA", str(data))
    return data


def tiny_copy_overrides(steps: int = 20) -> list[str]:
    """A copy-task run small enough for unit tests (seconds)."""
    return [f"train.max_steps={steps}", "train.valid_every=10", "train.keep_last=3",
            "data.copy_train_size=400", "data.copy_valid_size=20", "model.d_model=32",
            "model.d_ff=64", "model.heads=2", "model.layers=1", "model.dropout=0.1",
            "train.max_tokens=256", "train.threads=1"]
