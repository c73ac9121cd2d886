"""benchmarks/train_speed.py's plumbing: more timed updates than one epoch has batches, and a
worker that fails says why."""

import sys

import pytest

from .helpers import load_benchmark

pytestmark = pytest.mark.slow  # trains a model or starts processes: not in the fast tier


@pytest.fixture(scope="module")
def train_speed():
    return load_benchmark("train_speed")


class ThreeBatchesAnEpoch:
    def __init__(self):
        self.epochs = []

    def batches(self, max_tokens, seed, epoch):
        self.epochs.append(epoch)
        return [f"e{epoch}b{i}" for i in range(3)]


def test_more_updates_than_an_epoch_go_on_into_the_next_epochs(train_speed):
    ids = ThreeBatchesAnEpoch()
    got = train_speed.batches_for(ids, 4096, 7)
    assert got[:4] == ["e0b0", "e0b1", "e0b2", "e1b0"] and len(got) == 9
    assert ids.epochs == [0, 1, 2]
    assert train_speed.batches_for(ThreeBatchesAnEpoch(), 4096, 2) == ["e0b0", "e0b1", "e0b2"]


def test_an_empty_corpus_is_an_error_not_a_hang(train_speed):
    class NoBatches:
        def batches(self, max_tokens, seed, epoch):
            return []

    with pytest.raises(ValueError, match="no batch"):
        train_speed.batches_for(NoBatches(), 4096, 1)


def test_a_failing_worker_shows_its_error(train_speed):
    cmd = [sys.executable, "-c", "import sys; sys.exit('worker: the corpus is missing')"]
    with pytest.raises(SystemExit, match="the corpus is missing"):
        train_speed.run_json(cmd)
