"""experiments/gpu_rerank_ensemble.sh over several calls: runs trained to their end by an
earlier call in the same work folder are kept, STAGE=train stops after training, and REV=""
trains no reverse model. Run here on the CPU with this interpreter and tiny copy-task runs."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys

import pytest

from .helpers import ROOT, tiny_copy_overrides

pytestmark = pytest.mark.slow  # trains a model or starts processes: not in the fast tier

SCRIPT = "experiments/gpu_rerank_ensemble.sh"


def call(out, work, **env):
    sets = [x for o in tiny_copy_overrides(20) if not o.startswith("train.threads")
            for x in ("--set", o)]
    return subprocess.run(
        ["bash", SCRIPT, str(out), str(work), "configs/copy_task.yaml", *sets],
        cwd=ROOT, capture_output=True, text=True,
        env={**os.environ, "PY": sys.executable, "DEVICE": "cpu", "THREADS": "1",
             "METRIC": "bleu", "TEST": "test", "PENALTIES": "0.6", "RERANK": "3",
             "MINUTES": "5", **env})


def digest(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_members_trained_by_one_call_are_kept_and_decoded_by_the_next(tmp_path):
    work = tmp_path / "work"
    first = call(tmp_path / "out1", work, STAGE="train", FWD="1", REV="")
    assert first.returncode == 0, first.stderr[-2000:]
    assert sorted(p.name for p in work.iterdir()) == ["fwd1", "fwd1.done", "fwd1.log"]
    assert "5 minutes" in (work / "fwd1.done").read_text()
    assert not (tmp_path / "out1" / "tune.json").exists()  # nothing decoded
    assert (tmp_path / "out1" / "work.tgz").exists()
    trained = digest(work / "fwd1" / "best.pt")

    second = call(tmp_path / "out2", work, FWD="1", REV="1", JOBS="1")
    assert second.returncode == 0, second.stderr[-2000:]
    log = (tmp_path / "out2" / "log.txt").read_text()
    assert "kept fwd1: trained to its end by an earlier call" in log
    trains = [line for line in log.splitlines() if line.startswith("+ nmtkit train")]
    assert len(trains) == 1 and "--run-dir " + str(work / "rev1") in trains[0]
    assert digest(work / "fwd1" / "best.pt") == trained
    assert (work / "rev1.done").exists()
    tune = json.loads((tmp_path / "out2" / "tune.json").read_text())
    assert "--reverse-model " + str(work / "rev1" / "best.pt") in \
        " ".join(line for line in log.splitlines() if line.startswith("+ nmtkit tune"))
    assert tune["flags"].startswith("--beam 5")
    for name in ("eval_ensemble_test.json", "eval_chosen_test.json"):
        assert json.loads((tmp_path / "out2" / name).read_text())["split"] == "test"
    assert (work / "eval_rev1_val.json").exists() and (work / "eval_fwd1_test.json").exists()
    # step 4 on a CPU: each decode with THREADS threads (not one per core each)
    evaluations = [line for line in log.splitlines() if line.startswith("+ nmtkit evaluate")]
    chosen = next(i for i, line in enumerate(evaluations) if "--beam 5" in line)  # step 3's
    alone = evaluations[chosen + 1:]
    assert len(alone) == 5 and all("--threads 1 " in line for line in alone), alone
    assert "--threads" not in " ".join(evaluations[:chosen + 1])  # steps 2-3: every core


def test_a_run_cut_short_is_trained_again(tmp_path):
    """Without NAME.done (its training did not end: a killed call) and without a last.pt to
    go on from, the run starts over."""
    work = tmp_path / "work"
    (work / "fwd1").mkdir(parents=True)
    (work / "fwd1.log").write_text("a call that was killed\n")
    proc = call(tmp_path / "out", work, STAGE="train", FWD="1", REV="")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "+ nmtkit train configs/copy_task.yaml --run-dir " + str(work / "fwd1") in \
        (tmp_path / "out" / "log.txt").read_text()
    assert (work / "fwd1.done").exists() and (work / "fwd1" / "best.pt").exists()
    assert "killed" not in (work / "fwd1.log").read_text()


def test_a_run_cut_short_after_a_checkpoint_goes_on_from_it(tmp_path):
    """Without NAME.done but with NAME/last.pt (a call killed after a validation) the run
    resumes from its last.pt, and its log keeps what the earlier call wrote."""
    work = tmp_path / "work"
    first = call(tmp_path / "out1", work, STAGE="train", FWD="1", REV="")
    assert first.returncode == 0, first.stderr[-2000:]
    (work / "fwd1.done").unlink()  # as if the call had been killed before it ended
    earlier = (work / "fwd1.log").read_text()
    proc = call(tmp_path / "out2", work, STAGE="train", FWD="1", REV="")
    assert proc.returncode == 0, proc.stderr[-2000:]
    log = (tmp_path / "out2" / "log.txt").read_text()
    assert "resuming fwd1: cut short by an earlier call" in log
    trains = [line for line in log.splitlines() if line.startswith("+ nmtkit train")]
    assert len(trains) == 1 and " --resume " in trains[0] and "--overwrite" not in trains[0]
    after = (work / "fwd1.log").read_text()
    assert after.startswith(earlier)  # appended, not replaced
    # it had reached its max_steps: resumed, it trains nothing more and stops as it was
    assert after[len(earlier):] == earlier.splitlines()[-1] + "\n"
    assert (work / "fwd1.done").exists()


def test_an_unknown_stage_is_refused_before_anything_runs(tmp_path):
    proc = call(tmp_path / "out", tmp_path / "work", STAGE="decode", FWD="1", REV="")
    assert proc.returncode == 2
    assert "STAGE must be all or train, not 'decode'" in proc.stderr
    assert not (tmp_path / "work" / "fwd1").exists()
