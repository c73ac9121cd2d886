"""experiments/rerank_ensemble_report.py: the ablation JSON of a gpu_rerank_ensemble.sh call,
every number read from the files the call returned."""

import io
import json
import tarfile

import pytest

from .helpers import load_benchmark

report = load_benchmark("rerank_ensemble_report")


def stop(name: str, step: int, bleu: float) -> str:
    return ("2026-11-28 INFO nmtkit.train.loop: step 20 ...\n"
            + json.dumps({"run_dir": f"/tmp/g/{name}", "step": step, "valid_bleu": bleu,
                          "elapsed_s": 300.0, "stop_reason": "the budget plan's updates"}) + "\n")


def scored(val: float, official: float, **more) -> dict:
    return {"bleu_lc_tok": val, "bleu_official_tok": official, "length_ratio": 0.95, **more}


def trial(penalty: float, rerank: int, weight, score: float) -> dict:
    return {"beam": 5, "length_penalty": penalty, "rerank": rerank, "reverse_weight": weight,
            "mbr": 0, "bleu_lc_tok": score, "length_ratio": 0.97}


def write_call(out, singles=True, logs=None):
    """The files of one call: two forward runs, one reverse run."""
    out.mkdir()
    (out / "env.txt").write_text("name, memory.total [MiB], driver_version\n"
                                 "NVIDIA H200, 143771 MiB, 580.159.04\n3.12.3 2.11.0+cu130 13.0\n")
    (out / "smi.txt").write_text("t, 2 %, 10 MiB\nt, 100 %, 20 MiB\nt, 90 %, 20 MiB\n")
    trials = [trial(0.6, 0, None, 40.0), trial(0.6, 20, 1.0, 41.5), trial(0.6, 20, 2.0, 42.1)]
    (out / "tune.json").write_text(json.dumps({
        "split": "val", "metric": "bleu_lc_tok", "best": trials[2], "trials": trials,
        "flags": "--beam 5 --length-penalty 0.6 --rerank 20 --reverse-weight 2"}))
    test = {"split": "test_2016_flickr", "length_penalty": 0.6}
    (out / "eval_ensemble_test.json").write_text(json.dumps(scored(39.9, 39.8, **test)))
    (out / "eval_chosen_test.json").write_text(json.dumps(scored(41.3, 41.2, **test)))
    files = logs if logs is not None else {
        "fwd1.log": stop("fwd1", 3900, 38.5), "fwd2.log": stop("fwd2", 3950, 38.9),
        "rev1.log": stop("rev1", 3940, 41.8)}
    if singles:
        for name, val, test_ in (("fwd1", 39.0, 38.0), ("fwd2", 40.0, 39.0)):
            files[f"eval_{name}_val.json"] = json.dumps(scored(val, val - 0.1))
            files[f"eval_{name}_test_2016_flickr.json"] = json.dumps(scored(test_, test_))
        files["eval_ensemble_val.json"] = json.dumps(scored(40.5, 40.4))
    with tarfile.open(out / "work.tgz", "w:gz") as tar:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo("./" + name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


def test_rows_come_from_the_returned_files(tmp_path):
    write_call(tmp_path / "out")
    tune2 = tmp_path / "tune2.json"
    tune2.write_text(json.dumps({"split": "val", "metric": "bleu_lc_tok",
                                 "best": trial(1.4, 20, 1.0, 42.3), "trials": [],
                                 "flags": "--beam 5 --length-penalty 1.4 --rerank 20"}))
    test2 = tmp_path / "test2.json"
    test2.write_text(json.dumps(scored(40.9, 40.8)))
    r = report.report(tmp_path / "out", "T", "P", ["cmd"], [("wider", tune2, test2)])
    singles, ensemble, reranked, wider = r["rows"]
    # val as tune chose (bleu_lc_tok), test against the official references
    assert singles["val_bleu_beam5"] == 39.5 and singles["updates"] == 3925
    assert "fwd1: val 39.00, test 38.00" in singles["note"]
    assert ensemble["val_bleu_beam5"] == 40.5 and ensemble["note"] == "test 39.80"
    assert reranked["val_bleu_beam5"] == 42.1 and reranked["note"].startswith("test 41.20")
    assert ("the reverse model (rev1: greedy val BLEU at its last validation 41.80)"
            in reranked["ingredient"])  # no rev1/metrics.csv: only the summary line
    assert "--reverse-weight 2" in reranked["ingredient"]
    assert wider["val_bleu_beam5"] == 42.3 and wider["note"].startswith("test 40.80")
    assert r["torch"] == "2.11.0+cu130 (CUDA 13.0), Python 3.12.3"
    assert r["machine"] == "NVIDIA H200, 143771 MiB"
    assert r["gpu_utilization"].startswith("3 samples every 15 s during training: median 90%")
    assert r["val_score"] == "bleu_lc_tok" and r["commands"] == ["cmd"]
    assert set(r["runs"]) == {"fwd1", "fwd2", "rev1"}


def test_a_call_run_on_a_cpu_names_the_machine_it_is_given(tmp_path):
    """DEVICE=cpu: nvidia-smi was missing, env.txt has its error and the versions line."""
    write_call(tmp_path / "out")
    (tmp_path / "out" / "env.txt").write_text(
        "experiments/gpu_env.sh: line 12: nvidia-smi: command not found\n"
        "3.11.7 2.13.0+cpu None\n")
    with pytest.raises(SystemExit, match="names no GPU: a run on a CPU"):
        report.report(tmp_path / "out", "T", "P", ["cmd"], [])
    r = report.report(tmp_path / "out", "T", "P", ["cmd"], [],
                      cpu=("2-core AMD EPYC", "190 GFLOP/s"))
    assert (r["machine"], r["matmul"]) == ("2-core AMD EPYC", "190 GFLOP/s")
    assert r["torch"] == "2.13.0+cpu, Python 3.11.7" and "gpu_utilization" not in r
    assert r["rows"][-1]["val_bleu_beam5"] == 42.1


def test_a_call_cut_before_the_single_runs_still_reports_ensemble_and_reranking(tmp_path):
    write_call(tmp_path / "out", singles=False)
    rows = report.report(tmp_path / "out", "T", "P", [], [])["rows"]
    assert [r["val_bleu_beam5"] for r in rows] == [40.0, 42.1]  # the ensemble's from tune's trial
    ensemble = tmp_path / "out" / "eval_ensemble_test.json"
    ensemble.write_text(json.dumps(scored(39.9, 39.8, length_penalty=1.0)))  # not in the grid
    with pytest.raises(SystemExit, match="no val score of the ensemble at length penalty 1"):
        report.report(tmp_path / "out", "T", "P", [], [])


def test_an_unfinished_run_is_refused(tmp_path):
    write_call(tmp_path / "out", logs={"fwd1.log": "step 20\n", "rev1.log": stop("rev1", 9, 1)})
    with pytest.raises(SystemExit, match="did not finish"):
        report.report(tmp_path / "out", "T", "P", [], [])
    write_call(tmp_path / "out2", logs={"fwd1.log": stop("fwd1", 9, 1)})
    with pytest.raises(SystemExit, match="no forward"):
        report.report(tmp_path / "out2", "T", "P", [], [])


def test_right_to_left_runs_are_reported_with_what_they_add_on_val(tmp_path):
    logs = {"fwd1.log": stop("fwd1", 3900, 38.5), "rev1.log": stop("rev1", 3940, 41.8),
            "r2l1.log": stop("r2l1", 3800, 37.0)}
    write_call(tmp_path / "out", singles=False, logs=logs)
    trials = [trial(0.6, 0, None, 40.0), {**trial(0.6, 20, 2.0, 41.9), "r2l_weight": 0.0},
              {**trial(0.6, 20, 1.0, 42.4), "r2l_weight": 1.0}]
    (tmp_path / "out" / "tune.json").write_text(json.dumps({
        "split": "val", "metric": "bleu_lc_tok", "best": trials[2], "trials": trials,
        "flags": "--beam 5 --length-penalty 0.6 --rerank 20 --reverse-weight 1 --r2l-weight 1"}))
    r = report.report(tmp_path / "out", "T", "P", [], [])
    ensemble, reverse_only, both = r["rows"]
    assert reverse_only["val_bleu_beam5"] == 41.9 and "test not scored" in reverse_only["note"]
    assert "reverse weight 2" in reverse_only["note"]
    assert both["val_bleu_beam5"] == 42.4 and both["note"].startswith("test 41.20")
    assert ("the right-to-left model (r2l1: greedy val BLEU at its last validation 37.00)"
            in both["ingredient"])
    assert ensemble["ingredient"].startswith("the forward model (fwd1) alone, beam 5")
    assert set(r["runs"]) == {"fwd1", "rev1", "r2l1"}


def test_one_forward_model_is_one_row_not_an_ensemble_of_one(tmp_path):
    """FWD="1": the model alone at the recipe's decoding is one row (with its updates), not a
    row for it alone and another for an "ensemble" of it (step 4's scores of the model alone
    are the same decoding)."""
    def logs(*forward):
        return {**{f"{n}.log": stop(n, 5200, 39.5) for n in forward},
                "rev1.log": stop("rev1", 5300, 41.8)}

    write_call(tmp_path / "two", logs=logs("fwd1", "fwd2"))
    two = report.report(tmp_path / "two", "T", "P", [], [])["rows"]
    assert [r["ingredient"].split(",")[0] for r in two[:2]] == [
        "one forward model alone (best.pt)", "the ensemble of the 2 forward models"]
    write_call(tmp_path / "one", logs=logs("fwd1"))  # step 4 scored fwd1 alone too
    alone, reranked = report.report(tmp_path / "one", "T", "P", [], [])["rows"]
    assert alone["ingredient"] == ("the forward model (fwd1) alone, beam 5, length penalty 0.6 "
                                   "(the recipe's)")
    assert (alone["updates"], alone["val_bleu_beam5"], alone["note"]) == (5200, 40.5,
                                                                          "test 39.80")
    assert reranked["ingredient"].startswith("+ reranking by the reverse model (rev1: ")


def test_a_reranker_is_named_by_the_score_that_chose_its_best_pt(tmp_path):
    """The reranking uses best.pt, chosen by the highest greedy val BLEU of metrics.csv, not
    the last validation of the summary line (which can be lower)."""
    header = "step,epoch,train_loss,valid_loss,valid_bleu,lr,elapsed_s\n"
    logs = {"fwd1.log": stop("fwd1", 3900, 38.5), "fwd2.log": stop("fwd2", 3950, 38.9),
            "rev1.log": stop("rev1", 5544, 42.55),
            "rev1/metrics.csv": header + "250,1,4.9,3.4,8.28,0.0007,318.7\n"
                                         "5000,40,0.8,1.4,42.95,0.0001,6400.0\n"
                                         "5544,43,0.7,1.4,42.55,0,7187.6\n"}
    write_call(tmp_path / "out", logs=logs)
    r = report.report(tmp_path / "out", "T", "P", [], [])
    assert "the reverse model (rev1: best greedy val BLEU 42.95)" in r["rows"][-1]["ingredient"]
    assert r["runs"]["rev1"]["best_valid_bleu"] == 42.95 and r["runs"]["rev1"]["valid_bleu"] == 42.55
