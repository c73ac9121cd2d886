"""benchmarks/quickstart_budget.py: the quickstart's figures read from what it prints, and
the load started with its training and gone after it, run with a stand-in quickstart."""

import json
import subprocess
import sys

import pytest

from .helpers import ROOT

sys.path.insert(0, str(ROOT / "benchmarks"))
import quickstart_budget  # noqa: E402

TRAIN = {"run_dir": "runs/q", "step": 386, "epoch": 0, "valid_bleu": 4.31, "elapsed_s": 385.9,
         "stop_reason": "the budget plan's 386 updates (max_minutes=10.0)"}
EVAL = {"bleu": 5.94, "split": "test_2016_flickr", "beam": 5, "n": 1000}
TAIL = "peak rate 0.00155, then a linear decay to the last update"
LOG = "".join(f"2026-11-28 12:00:00 INFO nmtkit.train.loop: {line}\n" for line in [
    f"budget plan: 400 updates (1.500 s each, measured up to update 21), warmup 40, {TAIL}",
    "step 200: valid loss 4.0 ppl 55.0 bleu 3.1 (best)",
    f"budget plan (revision 1): 386 updates (1.600 s each, measured up to update 200), "
    f"warmup 40, {TAIL}",
    "stopped: the budget plan's 386 updates (max_minutes=10.0) (step 386, epoch 0, 6.4 min)"])


def stand_in(tmp_path, stdout_lines, log=LOG, rc=0):
    """A quickstart that prints ``stdout_lines`` (after its "quickstart:" line) and ``log`` on
    stderr, records the MINUTES and RUN it was given, and sleeps a little while the load runs."""
    script = tmp_path / "quickstart.sh"
    body = "\n".join(s if isinstance(s, str) else json.dumps(s) for s in stdout_lines)
    script.write_text("set -e\necho 'set up'\necho \"quickstart: x for $MINUTES minutes into $RUN\"\n"
                      f"echo \"$MINUTES $RUN\" > {tmp_path}/args\nsleep 1\n"
                      f"cat <<'OUT'\n{body}\nOUT\ncat <<'EOF' >&2\n{log}EOF\nexit {rc}\n",
                      encoding="utf-8")
    return script


def test_the_figures_come_from_the_summaries_the_log_and_the_lines_after_the_evaluation(tmp_path):
    script = stand_in(tmp_path, [TRAIN, EVAL, "A man rides a bike.", "Two kids play."])
    out = quickstart_budget.run_quickstart(2.5, "runs/q", 0.0, 1, script)
    assert (tmp_path / "args").read_text().split() == ["2.5", "runs/q"]
    assert (out["updates"], out["elapsed_s"], out["valid_bleu_greedy"]) == (386, 385.9, 3.1)
    assert out["stop_reason"].startswith("the budget plan's 386")
    assert out["test_2016_flickr"] == EVAL
    assert out["demo_translations"] == ["A man rides a bike.", "Two kids play."]
    assert [p.split(":")[0] for p in out["budget_plans"]] == ["budget plan", "budget plan (revision 1)"]
    assert out["validations"] == ["step 200: valid loss 4.0 ppl 55.0 bleu 3.1 (best)"]
    assert out["load"] is None


@pytest.mark.slow
def test_the_load_runs_beside_the_training_and_is_gone_after_it(tmp_path, monkeypatch):
    started = []
    real = subprocess.Popen

    def popen(args, *a, **kw):
        proc = real(args, *a, **kw)
        if "-c" in args:
            started.append(proc)
        return proc

    monkeypatch.setattr(quickstart_budget.subprocess, "Popen", popen)
    script = stand_in(tmp_path, [TRAIN, EVAL, "a", "b"])
    out = quickstart_budget.run_quickstart(1, "runs/q", 60.0, 1, script)
    assert out["load"] == {"seconds": 60.0, "threads": 1}
    assert len(started) == 1 and started[0].poll() is not None  # killed long before its 60 s


@pytest.mark.slow
def test_a_failed_or_silent_quickstart_is_an_error(tmp_path):
    with pytest.raises(RuntimeError, match="exited with 3"):
        quickstart_budget.run_quickstart(1, "r", 0.0, 1, stand_in(tmp_path, [TRAIN, EVAL], rc=3))
    with pytest.raises(ValueError, match="no training summary or no evaluation"):
        quickstart_budget.run_quickstart(1, "r", 0.0, 1, stand_in(tmp_path, [TRAIN]))


@pytest.mark.slow
def test_runs_are_added_to_one_file_with_append(tmp_path):
    """Two conditions on one host: the second run is appended, the file's note kept."""
    script, out = stand_in(tmp_path, [TRAIN, EVAL, "a", "b"]), tmp_path / "r.json"
    for condition, extra in (("alone", ["--note", "the host"]), ("beside a load", ["--append"])):
        subprocess.run([sys.executable, str(ROOT / "benchmarks" / "quickstart_budget.py"),
                        "--script", str(script), "--matmul-threads", "0", "--minutes", "1",
                        "--condition", condition, "--out", str(out), *extra],
                       check=True, capture_output=True)
    result = json.loads(out.read_text(encoding="utf-8"))
    assert result["note"] == "the host"
    assert [r["stands_for"] for r in result["runs"]] == ["alone", "beside a load"]
    assert "--append" in result["runs"][1]["command"] and result["runs"][1]["updates"] == 386
