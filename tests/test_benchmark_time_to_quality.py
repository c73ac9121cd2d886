"""benchmarks/time_to_quality.py: the figures of a run read from its own files (metrics.csv,
budget_plans.json), the minutes to each val BLEU threshold, and the fresh clone it runs in."""

import json
import subprocess
import sys

from .helpers import ROOT

sys.path.insert(0, str(ROOT / "benchmarks"))
import time_to_quality  # noqa: E402

HEADER = "step,epoch,train_loss,train_ppl,valid_loss,valid_ppl,valid_bleu,lr,tgt_tokens,elapsed_s\n"


def write_run(run_dir, rows, plans=None):
    run_dir.mkdir()
    (run_dir / "metrics.csv").write_text(HEADER + "".join(
        f"{step},0,3.0,20.0,3.1,22.0,{bleu},0.001,{tok},{secs}\n" for step, bleu, tok, secs in rows))
    if plans is not None:
        (run_dir / "budget_plans.json").write_text(json.dumps(plans))


def test_minutes_to_quality_are_those_of_the_first_validation_at_or_above_it(tmp_path):
    plans = [{"steps": 2000, "warmup": 200, "made_at": 21}, {"steps": 2100, "warmup": 210, "made_at": 41}]
    write_run(tmp_path / "r", [(400, 12.5, 190000, 130.0), (1800, 31.0, 850000, 520.2),
                               (2100, 33.4, 990000, 600.0)], plans)
    out = time_to_quality.read_run(tmp_path / "r")
    assert (out["updates"], out["tgt_tokens"], out["valid_bleu"]) == (2100, 990000, 33.4)
    assert out["minutes_to_val_bleu_20"] == out["minutes_to_val_bleu_30"] == 8.67
    assert [v["minutes"] for v in out["validations"]] == [2.17, 8.67, 10.0]
    assert out["budget_plans"] == plans


def test_a_threshold_never_reached_is_null_and_a_run_without_a_plan_has_none(tmp_path):
    write_run(tmp_path / "r", [(200, 6.0, 90000, 60.0), (400, 21.0, 180000, 120.0)])
    out = time_to_quality.read_run(tmp_path / "r")
    assert out["minutes_to_val_bleu_20"] == 2.0 and out["minutes_to_val_bleu_30"] is None
    assert out["budget_plans"] == []


def test_the_fresh_clone_holds_the_committed_quickstart(tmp_path):
    script = time_to_quality.fresh_clone(tmp_path / "clone")
    assert script == tmp_path / "clone" / "scripts" / "quickstart.sh" and script.is_file()
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True,
                          text=True, check=True).stdout
    cloned = subprocess.run(["git", "-C", str(tmp_path / "clone"), "rev-parse", "HEAD"],
                            capture_output=True, text=True, check=True).stdout
    assert cloned == head and not (tmp_path / "clone" / ".venv").exists()
