"""The ablation JSON of one ``experiments/gpu_rerank_ensemble.sh`` call, from the files it
returned (no number typed): the forward runs alone, their ensemble, and the ensemble reranked
by the reverse runs as ``nmtkit tune`` chose on val (a call of one forward run: that model
alone, one row, then reranked); each row's val score against the official
lowercased tokenized references, its test score in the note (scored after the choice).
Val is scored as ``nmtkit tune`` chose (``--metric``, ``bleu_lc_tok`` for lowercased models),
test against the official references (``bleu_official_tok``, the score of issue 17's goal).

    python experiments/rerank_ensemble_report.py OUT_DIR --title ... --protocol ... \\
        --command "..." [--also LABEL TUNE.json TEST.json] --out benchmarks/results/ablation_X.json

``OUT_DIR`` holds what the call returned (``env.txt``, ``tune.json``,
``eval_ensemble_test.json``, ``eval_chosen_test.json``, ``work.tgz``, ``smi.txt``). ``--also``
adds a row for a further choice on val over the same models (a wider ``nmtkit tune`` grid,
say), with the test score of what it chose: every choice made is reported, not the best.
A call run on a CPU (``DEVICE=cpu``: env.txt names no GPU) is described by ``--cpu-machine``
and ``--matmul``.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import re
import statistics
import sys
import tarfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))  # benchmarks/_common.py

from _common import emit

TEST = "bleu_official_tok"
"""The test score: BLEU against the official lowercased tokenized references."""


def work_files(out_dir: Path) -> dict[str, str]:
    """The text files in ``work.tgz`` by their path (``fwd1.log``, ``eval_fwd1_val.json``)."""
    found: dict[str, str] = {}
    with tarfile.open(out_dir / "work.tgz") as tar:
        for m in tar.getmembers():
            f = tar.extractfile(m) if m.isfile() else None
            if f is not None:
                found[m.name.removeprefix("./")] = io.TextIOWrapper(f, encoding="utf-8").read()
    return found


def stop_line(log: str) -> dict:
    """The summary JSON line ``nmtkit train`` prints when it stops."""
    lines = [x for x in log.splitlines() if x.startswith('{"run_dir"')]
    if not lines:
        raise SystemExit("a training log without its summary line: the run did not finish")
    return json.loads(lines[-1])


def best_valid_bleu(files: dict[str, str], name: str, stop: dict) -> tuple[float, str]:
    """The highest greedy val BLEU of the run's ``NAME/metrics.csv`` (the score that chose its
    ``best.pt`` under ``train.early_stop_metric: bleu``, the default) and a word for it; a
    run without that file (no validation row) has only its last validation, from the summary
    line."""
    rows = list(csv.DictReader(io.StringIO(files.get(f"{name}/metrics.csv", ""))))
    scores = [float(r["valid_bleu"]) for r in rows if r.get("valid_bleu")]
    if scores:
        return max(scores), "best greedy val BLEU"
    return float(stop["valid_bleu"]), "greedy val BLEU at its last validation"


def runs(files: dict[str, str], prefix: str) -> list[str]:
    """The runs' names of one direction (``fwd1``, ``fwd2`` ...), from their logs."""
    return sorted((n.removesuffix(".log") for n in files
                   if re.fullmatch(prefix + r"\d+\.log", n)), key=lambda n: int(n[len(prefix):]))


def chosen_row(label: str, tune: dict, test: dict) -> dict:
    """A row for the trial ``nmtkit tune`` chose on val (its val score) and its test score."""
    best = tune["best"]
    return {"ingredient": f"{label}: {tune['flags']} (chosen on val by {tune['metric']})",
            "updates": None, "val_bleu_beam5": round(float(best[tune["metric"]]), 2),
            "note": f"test {test[TEST]:.2f}; length ratio on val {best['length_ratio']}"}


def gpu_busy(smi: str) -> str:
    """nvidia-smi's utilization samples (``timestamp, N %, M MiB``) as a phrase."""
    busy = [int(m) for m in re.findall(r", (\d+) %,", smi)]
    if not busy:
        return "not sampled"
    return (f"{len(busy)} samples every 15 s during training: median {statistics.median(busy):g}%"
            f" (the share of time some kernel ran), {min(busy)}-{max(busy)}%")


def environment(env: str) -> tuple[str | None, str, str, str]:
    """``env.txt`` (experiments/gpu_env.sh): the GPU (nvidia-smi's row after its CSV header:
    name and memory; ``None`` where nvidia-smi was missing, a run with ``DEVICE=cpu``), then
    Python, torch and CUDA from the line ``PYTHON TORCH CUDA``."""
    lines = env.splitlines()
    gpu = next((", ".join(lines[i + 1].split(", ")[:2]) for i, x in enumerate(lines[:-1])
                if x.startswith("name, memory.total")), None)
    versions = next((x.split() for x in lines if re.fullmatch(r"\d+\.\d+\S* \S+ \S+", x)),
                    ["?"] * 3)
    return gpu, versions[0], versions[1], versions[2]


def report(out_dir: Path, title: str, protocol: str, commands: list[str],
           also: list[tuple[str, Path, Path]], cpu: tuple[str, str] | None = None) -> dict:
    """The ablation JSON; ``cpu``: (the machine in words, its matmul rate) for a call that
    ran on a CPU (``DEVICE=cpu``), whose env.txt names no GPU."""
    files = work_files(out_dir)
    tune = json.loads((out_dir / "tune.json").read_text(encoding="utf-8"))
    val = tune["metric"]
    chosen_test = json.loads((out_dir / "eval_chosen_test.json").read_text(encoding="utf-8"))
    test = chosen_test["split"]
    fwd, rev, r2l = runs(files, "fwd"), runs(files, "rev"), runs(files, "r2l")
    if not fwd or not (rev or r2l):
        raise SystemExit(f"{out_dir / 'work.tgz'}: no forward (fwdN.log) or reverse (revN.log) "
                         "or right-to-left (r2lN.log) runs")
    stops = {n: stop_line(files[f"{n}.log"]) for n in fwd + rev + r2l}
    val_test = {n: (json.loads(files[f"eval_{n}_{tune['split']}.json"]),
                    json.loads(files[f"eval_{n}_{test}.json"]))
                for n in fwd + rev + r2l if f"eval_{n}_{tune['split']}.json" in files
                and f"eval_{n}_{test}.json" in files}
    rows = []
    singles = [n for n in fwd if n in val_test] if len(fwd) > 1 else []  # one: the next row
    if singles:
        rows.append({
            "ingredient": f"one forward model alone (best.pt), mean of {len(singles)}",
            "updates": round(statistics.fmean(stops[n]["step"] for n in singles)),
            "val_bleu_beam5": round(statistics.fmean(val_test[n][0][val] for n in singles), 2),
            "note": "; ".join(f"{n}: val {val_test[n][0][val]:.2f}, test "
                              f"{val_test[n][1][TEST]:.2f}, {stops[n]['step']} updates"
                              for n in singles)})
    ensemble_test = json.loads((out_dir / "eval_ensemble_test.json").read_text(encoding="utf-8"))
    plain = [t for t in tune["trials"] if not t.get("rerank") and not t.get("mbr")
             and t["length_penalty"] == ensemble_test["length_penalty"]]
    if f"eval_ensemble_{tune['split']}.json" in files:
        ensemble_val = json.loads(files[f"eval_ensemble_{tune['split']}.json"])[val]
    elif plain:
        ensemble_val = plain[0][val]
    else:
        raise SystemExit(f"{out_dir}: no val score of the ensemble at length penalty "
                         f"{ensemble_test['length_penalty']:g} (neither step 4's nor a trial of "
                         "tune.json)")
    recipe = f"beam 5, length penalty {ensemble_test['length_penalty']:g} (the recipe's)"
    if len(fwd) > 1:
        label, updates = f"the ensemble of the {len(fwd)} forward models, {recipe}", None
    else:  # one forward run: this row is the model alone (the singles row would repeat it)
        label, updates = f"the forward model ({fwd[0]}) alone, {recipe}", stops[fwd[0]]["step"]
    rows.append({"ingredient": label, "updates": updates, "val_bleu_beam5": round(ensemble_val, 2),
                 "note": f"test {ensemble_test[TEST]:.2f}"})

    best_bleu = {n: best_valid_bleu(files, n, stops[n]) for n in fwd + rev + r2l}

    def models(names: list[str], kind: str) -> list[str]:
        if not names:
            return []
        word = best_bleu[names[0]][1]
        if len(names) == 1:
            return [f"the {kind} model ({names[0]}: {word} {best_bleu[names[0]][0]:.2f})"]
        return [f"the {len(names)} {kind} models ({', '.join(names)}: mean {word} "
                f"{statistics.fmean(best_bleu[n][0] for n in names):.2f})"]

    if r2l:  # what the right-to-left models add on val: the best choice without them
        without = [t for t in tune["trials"] if t.get("rerank") and not t.get("r2l_weight")]
        if without and rev:
            best = max(without, key=lambda t: t[val])
            rows.append({"ingredient": f"+ reranking by {models(rev, 'reverse')[0]} alone "
                                       "(right-to-left weight 0), the best of the val grid",
                         "updates": None, "val_bleu_beam5": round(float(best[val]), 2),
                         "note": f"val only (length penalty {best['length_penalty']:g}, reverse "
                                 f"weight {best['reverse_weight']:g}); test not scored"})
    rows.append(chosen_row("+ reranking by " + " and ".join(
        models(rev, "reverse") + models(r2l, "right-to-left")), tune, chosen_test))
    for label, tune_path, test_path in also:
        rows.append(chosen_row(label, json.loads(tune_path.read_text(encoding="utf-8")),
                               json.loads(test_path.read_text(encoding="utf-8"))))
    gpu, python, torch, cuda = environment((out_dir / "env.txt").read_text(encoding="utf-8"))
    smi = out_dir / "smi.txt"
    if gpu is not None:
        where = {"machine": gpu, "matmul": "not measured (a GPU run)", "gpu_utilization":
                 gpu_busy(smi.read_text(encoding="utf-8") if smi.exists() else "")}
    elif cpu is not None:
        where = {"machine": cpu[0], "matmul": cpu[1]}
    else:
        raise SystemExit(f"{out_dir / 'env.txt'} names no GPU: a run on a CPU (DEVICE=cpu) "
                         "needs --cpu-machine and --matmul")
    return {
        "benchmark": "ablation", "title": title,
        "val_score": val, "test_score": TEST, "protocol": protocol,
        "torch": torch + (f" (CUDA {cuda})" if cuda not in ("None", "?") else "")
        + f", Python {python}", **where,
        "runs": {n: {k: stops[n][k] for k in ("step", "elapsed_s", "valid_bleu", "stop_reason")}
                 | {"best_valid_bleu": best_bleu[n][0]} for n in fwd + rev + r2l},
        "val_grid": tune["trials"], "commands": commands, "rows": rows}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out_dir", type=Path, help="the files the gpu_rerank_ensemble.sh call returned")
    p.add_argument("--title", required=True)
    p.add_argument("--protocol", required=True)
    p.add_argument("--command", action="append", default=[], help="a command as run (repeat)")
    p.add_argument("--also", nargs=3, action="append", default=[],
                   metavar=("LABEL", "TUNE_JSON", "TEST_JSON"),
                   help="a further choice on val over the same models and its test score")
    p.add_argument("--cpu-machine", help="a call run on a CPU (DEVICE=cpu): the machine in "
                   "words (cores, instruction sets), for the JSON")
    p.add_argument("--matmul", help="... and its matrix-product rate (GFLOP/s, when measured)")
    p.add_argument("--out", help="also write the JSON here")
    a = p.parse_args(argv)
    if bool(a.cpu_machine) != bool(a.matmul):
        p.error("--cpu-machine and --matmul go together")
    also = [(label, Path(t), Path(e)) for label, t, e in a.also]
    cpu = (a.cpu_machine, a.matmul) if a.cpu_machine else None
    emit(report(a.out_dir, a.title, a.protocol, a.command, also, cpu), a.out)


if __name__ == "__main__":
    main()
