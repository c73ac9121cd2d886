"""Two processes with gloo on CPU train in sync and match one process with the same global batch;
two torchrun "nodes" on localhost (c10d rendezvous) train in sync, write each checkpoint once,
fail cleanly when one node dies, and resume."""

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from nmtkit.checkpoint import load_checkpoint

from .helpers import ROOT, tiny_copy_overrides

pytestmark = pytest.mark.slow  # trains a model or starts processes: not in the fast tier


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


@pytest.mark.skipif(not torch.distributed.is_available(), reason="no torch.distributed")
def test_two_gloo_ranks_follow_one_budget_plan(tmp_path):
    """train.budget_schedule under torchrun: each rank times its own updates, but all take
    rank 0's figures (the first plan, the warmup's revisions, those every
    budget_revise_every after it, the validations'), so they keep one schedule and stop at
    the same update; ranks on plans of their own would diverge (the end-of-run checksum
    fails) or wait for each other at a collective forever (the timeout)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    torchrun = shutil.which("torchrun", path=os.path.dirname(sys.executable)) or "torchrun"
    budget = ["train.max_steps=100000", "train.max_minutes=0.2", "train.budget_schedule=true",
              "train.budget_probe_steps=4", "train.budget_revise_every=0.05",
              "train.lr_schedule=inverse_sqrt", "train.lr=0.003", "train.warmup=30",
              "train.valid_every=50"]
    multi = subprocess.run(
        [torchrun, "--nproc_per_node", "2", "--master_port", str(free_port()), "-m", "nmtkit.cli",
         "--verbose", "train", str(ROOT / "configs" / "copy_task.yaml"),
         "--run-dir", str(tmp_path / "two"), *overrides(budget)],
        capture_output=True, text=True, env=env, cwd=ROOT, timeout=300)
    assert multi.returncode == 0, multi.stderr[-3000:]
    assert "ranks in sync" in multi.stderr
    summary = json.loads(multi.stdout.strip().splitlines()[-1])
    assert summary["stop_reason"].startswith(("the budget plan's", "max_minutes"))
    revisions = [line for line in multi.stderr.splitlines() if "budget plan (revision" in line]
    assert len(revisions) >= 5, multi.stderr[-3000:]  # the routine ones too (at DEBUG)
    plan = load_checkpoint(tmp_path / "two" / "last.pt")["schedule"]["budget_plan"]
    assert plan["revisions"] >= 5 and summary["step"] <= plan["steps"]


# --- two "nodes" on localhost: c10d rendezvous, two processes each ---------------------------------

# Run by each rank in place of `-m nmtkit.cli`: notes every checkpoint write and, at the end,
# the rank's own weight checksum (one JSON line each, appended to $NMTKIT_TEST_RECORD).
RECORDING_LAUNCHER = '''
import json, os, sys

from nmtkit.cli import main
from nmtkit.train import distributed, run_dir

RANK = int(os.environ["RANK"])


def note(**event):
    with open(os.environ["NMTKIT_TEST_RECORD"], "a") as f:
        f.write(json.dumps({"rank": RANK, **event}) + "\\n")


save = run_dir.save_checkpoint


def recorded_save(path, payload, *args, **kwargs):
    step = payload["progress"]["step"] if "progress" in payload else payload["step"]  # (release)
    note(event="save", file=os.path.basename(str(path)), step=step)
    return save(path, payload, *args, **kwargs)


in_sync = distributed.assert_in_sync


def recorded_in_sync(model):
    note(event="checksum", value=float(distributed.params_checksum(model)))
    return in_sync(model)


run_dir.save_checkpoint, distributed.assert_in_sync = recorded_save, recorded_in_sync
code = main(sys.argv[1:])
note(event="returned", code=code)  # the process group is destroyed by now
sys.exit(code)
'''


GLOO_EXIT_ABORT = "terminate called without an active exception"


def descendants(pid: int) -> list[int]:
    """Every living process below ``pid`` (torchrun starts its workers in sessions of their own,
    so killing torchrun's process group would leave them running)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def kill_node(proc: subprocess.Popen) -> None:
    """SIGKILL a torchrun and every process it started: a machine that disappears."""
    for pid in [*descendants(proc.pid), proc.pid]:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    proc.wait(30)


class TwoNodes:
    """Two torchrun agents on localhost (``--nnodes 2 --nproc-per-node 2``, c10d rendezvous,
    gloo): four ranks training one copy-task run into one run directory."""

    def __init__(self, tmp: Path, name: str, args: list[str]) -> None:
        self.tmp, self.name = tmp, name
        self.record = tmp / f"{name}.jsonl"
        port = free_port()
        torchrun = shutil.which("torchrun", path=os.path.dirname(sys.executable)) or "torchrun"
        launcher = tmp / "launcher.py"
        launcher.write_text(RECORDING_LAUNCHER)
        env = {**os.environ, "OMP_NUM_THREADS": "1", "NMTKIT_TEST_RECORD": str(self.record),
               "PYTHONUNBUFFERED": "1"}
        self.procs = []
        for node in range(2):
            cmd = [torchrun, "--nnodes", "2", "--nproc-per-node", "2", "--rdzv-backend", "c10d",
                   "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", name,
                   "--rdzv-conf", f"is_host={int(node == 0)},join_timeout=60",
                   "--local-addr", "127.0.0.1", "--max-restarts", "0", "--monitor-interval", "0.5",
                   str(launcher), *args]
            out = open(tmp / f"{name}.node{node}.out", "w")  # noqa: SIM115 - closed in wait()
            err = open(tmp / f"{name}.node{node}.err", "w")  # noqa: SIM115
            self.procs.append((subprocess.Popen(cmd, stdout=out, stderr=err, env=env, cwd=ROOT),
                               out, err))

    def wait(self, node: int, timeout: float) -> int:
        proc, out, err = self.procs[node]
        try:
            return proc.wait(timeout)
        finally:
            out.close()
            err.close()

    def output(self, node: int, stream: str = "err") -> str:
        return (self.tmp / f"{self.name}.node{node}.{stream}").read_text()

    def events(self, kind: str) -> list[dict]:
        if not self.record.exists():
            return []
        lines = self.record.read_text().splitlines()
        return [e for e in map(json.loads, lines) if e["event"] == kind]

    def close(self) -> None:
        """Leave nothing running, whatever the test did."""
        for proc, out, err in self.procs:
            if proc.poll() is None:
                kill_node(proc)
            else:
                for pid in descendants(proc.pid):
                    os.kill(pid, signal.SIGKILL)
            out.close()
            err.close()


@pytest.mark.skipif(not torch.distributed.is_available(), reason="no torch.distributed")
@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="finds torchrun's workers in /proc")
def test_two_nodes_train_in_sync_survive_losing_a_node_and_resume(tmp_path):
    run_dir = tmp_path / "run"
    train = ["train", str(ROOT / "configs" / "copy_task.yaml"), "--run-dir", str(run_dir)]
    sets = [a for o in tiny_copy_overrides(1000) + ["train.valid_every=5", "train.keep_last=0",
                                                   "train.valid_bleu=false"]
            for a in ("--set", o)]
    # 1. Both nodes train; once the first checkpoint is written, node 1 dies.
    first = TwoNodes(tmp_path, "first", [*train, *sets])
    try:
        deadline = time.monotonic() + 120
        while not (first.events("save") and (run_dir / "last.pt").exists()):
            assert all(p.poll() is None for p, _, _ in first.procs), (first.output(0)[-3000:],
                                                                       first.output(1)[-3000:])
            assert time.monotonic() < deadline, "no checkpoint within 120 s"
            time.sleep(0.05)
        kill_node(first.procs[1][0])
        # 2. The surviving node notices (its collectives fail) and exits with an error.
        try:
            rc = first.wait(0, timeout=120)
        except subprocess.TimeoutExpired:
            pytest.fail("the surviving node hangs after the other node was killed")
        assert rc != 0
    finally:
        first.close()
    assert {e["rank"] for e in first.events("save")} == {0}  # only rank 0 writes
    step = load_checkpoint(run_dir / "last.pt")["progress"]["step"]
    assert step % 5 == 0 and step < 1000
    # 3. Both nodes again, with --resume: they continue from last.pt and finish.
    resumed = TwoNodes(tmp_path, "resumed", [*train, "--resume", *sets, "--set",
                                              f"train.max_steps={step + 10}"])
    try:
        codes = [resumed.wait(node, timeout=180) for node in (0, 1)]
    finally:
        resumed.close()
    assert f"resumed from step {step}" in resumed.output(0) + resumed.output(1)
    # every rank ends with the same weights, and they are the checkpoint's
    checksums = {e["rank"]: e["value"] for e in resumed.events("checksum")}
    assert sorted(checksums) == [0, 1, 2, 3]
    assert max(checksums.values()) - min(checksums.values()) <= 1e-9 * abs(checksums[0])
    ckpt = load_checkpoint(run_dir / "last.pt")
    assert ckpt["progress"]["step"] == step + 10
    from nmtkit.checkpoint import load_bundle
    from nmtkit.train.distributed import params_checksum

    assert float(params_checksum(load_bundle(run_dir / "last.pt").model)) == pytest.approx(
        checksums[0], rel=1e-12)
    # each checkpoint is written once, by rank 0: at steps step+5 and step+10, last.pt and best.pt
    saves = [(e["rank"], e["file"], e["step"]) for e in resumed.events("save")]
    assert len(saves) == len(set(saves)) and {r for r, _, _ in saves} == {0}
    assert {(f, s) for _, f, s in saves if f == "last.pt"} == {("last.pt", step + 5),
                                                                ("last.pt", step + 10)}
    summaries = [line for node in (0, 1) for line in resumed.output(node, "out").splitlines()
                 if line.startswith("{")]
    assert len(summaries) == 1 and json.loads(summaries[0])["step"] == step + 10
    assert not list(run_dir.glob(".*.tmp"))
    if codes != [0, 0] and any(GLOO_EXIT_ABORT in resumed.output(node) for node in (0, 1)):
        # Seen once in a dozen runs on a loaded 2-core machine: a rank that has finished (in
        # sync, checkpoint written, process group destroyed) aborts in gloo's C++ teardown,
        # and torchrun reports the job failed. Everything above held; the exit code did not.
        returned = sorted(e["rank"] for e in resumed.events("returned") if e["code"] == 0)
        pytest.xfail(f"a rank aborted in gloo's teardown after training finished (ranks that "
                     f"returned from training, process group destroyed: {returned})")
    assert codes == [0, 0], [resumed.output(node)[-3000:] for node in (0, 1)]
