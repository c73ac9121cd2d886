"""Two processes with gloo on CPU train in sync and match one process with the same global batch."""

import json
import os
import shutil
import socket
import subprocess
import sys

import pytest
import torch

from nmtkit.checkpoint import load_checkpoint

from .conftest import ROOT, tiny_copy_overrides


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def overrides(extra):
    return [a for o in tiny_copy_overrides(12) + ["model.dropout=0.0", "train.keep_last=0",
                                                   "train.valid_every=12", "train.adam_eps=1e-6", *extra]
            for a in ("--set", o)]


@pytest.mark.skipif(not torch.distributed.is_available(), reason="no torch.distributed")
def test_two_gloo_ranks_match_single_process_with_accumulation(tmp_path):
    cfg = ROOT / "configs" / "copy_task.yaml"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    single = subprocess.run(
        [sys.executable, "-m", "nmtkit.cli", "train", str(cfg), "--run-dir", str(tmp_path / "one"),
         *overrides(["train.accum=2"])], capture_output=True, text=True, env=env, cwd=ROOT)
    assert single.returncode == 0, single.stderr[-2000:]
    torchrun = shutil.which("torchrun", path=os.path.dirname(sys.executable)) or "torchrun"
    multi = subprocess.run(
        [torchrun, "--nproc_per_node", "2", "--master_port", str(free_port()), "-m", "nmtkit.cli", "train",
         str(cfg), "--run-dir", str(tmp_path / "two"), *overrides(["train.accum=1"])],
        capture_output=True, text=True, env=env, cwd=ROOT, timeout=300)
    assert multi.returncode == 0, multi.stderr[-3000:]
    assert "ranks in sync" in multi.stderr
    a = load_checkpoint(tmp_path / "one" / "last.pt")
    b = load_checkpoint(tmp_path / "two" / "last.pt")
    assert a["progress"]["step"] == b["progress"]["step"] == 12
    worst = max(float((v - b["model"][k]).abs().max()) for k, v in a["model"].items())
    # Same batches, same updates: only float summation order differs. (Adam's eps is raised
    # in this test: the key biases have an exactly-zero true gradient, and with eps=1e-9 Adam
    # would blow their rounding noise up to full-size steps.)
    assert worst < 1e-5, worst
    lines = multi.stdout.strip().splitlines()
    assert len(lines) == 1, lines  # one summary line (rank 0), not one per rank
    assert json.loads(lines[0])["step"] == 12
