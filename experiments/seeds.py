"""One recipe trained with several seeds, each seed's checkpoint chosen on val, and their
ensemble with its length penalty tuned on val: issue 17's procedure as one command.

For every seed, one after the other (each run alone on the machine: the recipe's budget is
minutes, and a run beside another gets fewer updates), or ``--parallel N`` at a time (on a
GPU, where one small run keeps the device mostly idle, waiting on Python to launch kernels;
then the seeds' evaluations too, each command in a process of its own):

1. ``nmtkit train CONFIG --set train.seed=SEED`` into ``WORK/seedSEED`` (its output in
   ``WORK/seedSEED.log``; the matrix-product rate measured just before, in
   ``WORK/seedSEED.matmul``);
2. ``nmtkit average`` of its last ``--average`` step checkpoints into ``avg3.pt`` (for 3);
3. ``nmtkit evaluate`` of ``best.pt``, ``last.pt`` and the average on the validation split
   and on the test split (beam from ``--beam``, the recipe's length penalty); the seed's
   checkpoint is the one with the best **validation** score (``--metric``: cased sacreBLEU,
   or ``bleu_lc_tok`` for a recipe trained on lowercased text, ``data.lowercase``).

Then the chosen checkpoints decode as one ensemble (``nmtkit evaluate --model A --model B
...``: the mean of their next-token probabilities): ``nmtkit tune`` chooses the length
penalty on the validation split (extending the grid upwards while its largest value wins,
``--extend`` times at most), and the test split is translated with the recipe's penalty and
with the chosen one. The test split is scored for the record and never chooses anything.

Every step leaves its file in WORK with the command that made it (``.cmd`` beside it), and
a step whose file is there from the same command is not run again: an interrupted run
continues where it stopped, a rerun with another seed list or penalty grid redoes only the
ensemble, and runs trained elsewhere are taken in by linking them as ``WORK/seedSEED`` with
their log as ``WORK/seedSEED.log``. ``--seed-set SEED:SECTION.KEY=VALUE`` changes one seed's
recipe (a longer budget for one member, say); the JSON says so in its title, its protocol
and that run's record. A recipe of several directions (``data.directions``) is scored in
the one that ``--tgt-lang`` (and ``--src-lang``) names, its files named after it, so that a
second call with the other ``--tgt-lang`` and the same ``--work`` scores the other direction
of the same runs; with ``--rerank``, ``--reverse-members`` has the ensemble's own members
read their candidates back (a model trained both ways is its own reverse model), and
``--r2l-model`` has right-to-left models of the ensemble's direction score them as well, read
from their end (their weights tried with every reverse weight). Prints one
JSON object (the schema of ``benchmarks/results/multi30k_hour_seeds_*.json``); ``--out``
keeps it.

    NMTKIT_DATA=... python experiments/seeds.py --config configs/multi30k_transformer_hour.yaml \\
        --seeds 1234 2 3 --work runs/hour_seeds --out benchmarks/results/multi30k_hour_seeds_X.json
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import csv
import io
import json
import os
import re
import shlex
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))  # benchmarks/_common.py

from _common import emit, gemm_peaks_gflops, machine

from nmtkit.config import (
    TUNE_LENGTH_PENALTIES,
    TUNE_METRICS,
    TUNE_R2L_WEIGHTS,
    TUNE_REVERSE_WEIGHTS,
    ConfigError,
    load,
)
from nmtkit.data.directions import Direction, directions, evaluation_direction
from nmtkit.io import atomic_write_text

ROOT = Path(__file__).resolve().parents[1]
CANDIDATES = ("best.pt", "last.pt", "avg3.pt")
"""The checkpoints of a run that compete on val, in the order that wins a tie."""
METRIC_NAMES = {"bleu": "BLEU", "chrf": "chrF",
                "bleu_lc_tok": "BLEU on lowercased tokenized text (bleu_lc_tok)"}
"""How the protocol names each of ``--metric``'s scores."""
SCORES = ("bleu", "chrf", "bleu_official_tok", "bleu_lc_tok")
SUMMARY = re.compile(r'^\{"run_dir"')
"""The JSON line ``nmtkit train`` prints when it stops."""


def nmtkit_in_process(*args: str) -> str:
    """Run an ``nmtkit`` command in this process (no interpreter start per evaluation);
    its stdout. ``SystemExit`` with the command where it fails (its message is on stderr)."""
    from nmtkit.cli import main

    print("+ nmtkit", shlex.join(args), file=sys.stderr, flush=True)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        rc = main(list(args))
    if rc != 0:
        raise SystemExit(f"nmtkit {shlex.join(args)}: exit {rc}")
    return out.getvalue()


def nmtkit_subprocess(*args: str) -> str:
    """Run an ``nmtkit`` command in a process of its own (``python -m nmtkit``); its stdout.
    What ``--parallel`` evaluates with: several at a time from threads, where the in-process
    runner's redirected stdout would be shared. ``SystemExit`` with the command where it
    fails (its message is on stderr)."""
    cmd = [sys.executable, "-m", "nmtkit", *args]
    print("+", shlex.join(cmd), file=sys.stderr, flush=True)
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"nmtkit {shlex.join(args)}: exit {proc.returncode}")
    return proc.stdout


def json_file(path: Path, command: list[str], make) -> Any:
    """``path``'s JSON if a previous run left it from the same ``nmtkit`` command, else
    ``make()``'s text, kept there. The command is kept beside it (``path`` with ``.cmd``):
    a file made by another command (other models, beam, penalties or split) is made again,
    so a rerun with a third seed or a new grid never reports the old ensemble."""
    cmd = path.with_suffix(".cmd")
    said = shlex.join(command)
    if not (path.exists() and cmd.exists() and cmd.read_text(encoding="utf-8").strip() == said):
        atomic_write_text(path, make())
        atomic_write_text(cmd, said + "\n")
    return json.loads(path.read_text(encoding="utf-8"))


def train_summary(log: Path) -> dict | None:
    """The stop line of a finished ``nmtkit train`` in ``log`` (None: not there or not done)."""
    if not log.exists():
        return None
    lines = [x for x in log.read_text(encoding="utf-8", errors="replace").splitlines()
             if SUMMARY.match(x)]
    return json.loads(lines[-1]) if lines else None


def finished(run: Path) -> dict | None:
    """The stop line of the run in ``run`` if it finished (its log says so and ``last.pt``
    is there), else None."""
    done = train_summary(run.parent / f"{run.name}.log")
    return done if done is not None and (run / "last.pt").exists() else None


def record_matmul(a: argparse.Namespace, seeds: list[int]) -> None:
    """Measure the matrix-product rate now and keep it as ``WORK/seedSEED.matmul`` of each
    seed about to train (one measurement for runs that start together)."""
    rate = repr(gemm_peaks_gflops(a.threads or os.cpu_count() or 1, bf16=a.bf16)) + "\n"
    for seed in seeds:
        atomic_write_text(a.work / f"seed{seed}.matmul", rate)


def train_seed(a: argparse.Namespace, seed: int, run: Path, measure: bool = True) -> dict:
    """Train one seed unless its log already holds a finished run; the stop line.

    The training command is kept in ``WORK/seedSEED.cmd``. A finished run made by another
    command (another recipe or ``--set``) is refused, not reused or trained over; a finished
    run without that file is one taken in from elsewhere and is used as it is. ``measure``:
    the matrix-product rate just before (False where the runs start side by side, measured
    once before them all)."""
    log = run.parent / f"{run.name}.log"
    kept = run.parent / f"{run.name}.cmd"
    sets = [*a.set, *a.seed_set.get(seed, [])]  # the recipe's overrides, then this seed's
    args = ["train", a.config, "--run-dir", str(run), "--overwrite",
            "--set", f"train.seed={seed}", *repeated("--set", sets)]
    done = finished(run)
    if done is not None:
        said = kept.read_text(encoding="utf-8").strip() if kept.exists() else None
        if said is not None and said != shlex.join(args):
            raise SystemExit(f"{run} was trained by `nmtkit {said}`, not by `nmtkit "
                             f"{shlex.join(args)}`: give another --work or remove {run}")
        return done
    if a.matmul and measure:
        record_matmul(a, [seed])
    cmd = [sys.executable, "-m", "nmtkit", *args]
    print("+", shlex.join(cmd), file=sys.stderr, flush=True)
    kept.unlink(missing_ok=True)
    with open(log, "w", encoding="utf-8") as f:
        subprocess.run(cmd, check=True, stdout=f, stderr=subprocess.STDOUT)
    done = train_summary(log)
    if done is None:
        raise SystemExit(f"{log}: nmtkit train ended without its summary line")
    atomic_write_text(kept, shlex.join(args) + "\n")
    return done


def train_side_by_side(a: argparse.Namespace) -> None:
    """``--parallel N``: the seeds' training runs, N at a time (each waits for a free slot);
    the matrix-product rate measured once before them, kept for each. Returns when all are
    done; the first failure is raised once the others have ended."""
    runs = {seed: a.work / f"seed{seed}" for seed in a.seeds}
    todo = [seed for seed, run in runs.items() if finished(run) is None]
    if todo and a.matmul:
        record_matmul(a, todo)
    map_seeds(a, lambda seed: train_seed(a, seed, runs[seed], False))


def map_seeds(a: argparse.Namespace, f) -> list:
    """``[f(seed) for seed in a.seeds]``, ``--parallel`` of them at a time (threads that wait
    on processes), in the order of the seeds; the first failure is raised."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=a.parallel) as pool:
        return list(pool.map(f, a.seeds))


def average(run: Path, n: int, nmtkit=nmtkit_in_process) -> Path | None:
    """``avg3.pt``: the mean of the run's last ``n`` step checkpoints (None with fewer than 2);
    ``nmtkit``: the runner of the command."""
    out = run / "avg3.pt"
    steps = sorted(run.glob("step_*.pt"))[-n:]
    if not out.exists():
        if len(steps) < 2:
            return None
        nmtkit("average", "--out", str(out), *map(str, steps))
    return out


def repeated(flag: str, values: Sequence[Any]) -> list[str]:
    """``flag`` before each value: ``--model a --model b``."""
    return [x for v in values for x in (flag, str(v))]


def split_name(split: str) -> str:
    """A split's name in file names (a path's last part)."""
    return Path(split).name


def evaluate(models: list[Path], split: str, beam: int, path: Path,
             length_penalty: float | None = None, nmtkit=nmtkit_in_process, mbr: int = 0,
             rerank: int = 0, reverse_weight: float | None = None,
             reverse_models: list[str] | None = None, lang: Sequence[str] = (),
             r2l_weight: float | None = None, r2l_models: list[str] | None = None) -> dict:
    """``nmtkit evaluate`` of one model or an ensemble, kept in ``path``; ``nmtkit``: the
    runner of the command; ``mbr``: minimum Bayes risk decoding over that many candidates;
    ``rerank``: that many candidates reranked with ``reverse_models`` at ``reverse_weight``
    and the right-to-left ``r2l_models`` at ``r2l_weight``; ``lang``: the direction's flags
    for a model of several (``--tgt-lang de``)."""
    args = [*repeated("--model", models), "--split", split, *lang, "--beam", str(beam)]
    if length_penalty is not None:
        args += ["--length-penalty", f"{length_penalty:g}"]
    if mbr:
        args += ["--mbr", str(mbr)]
    if rerank:
        args += ["--rerank", str(rerank), "--reverse-weight", f"{reverse_weight:g}"]
        args += repeated("--reverse-model", reverse_models or [])
        if r2l_models:
            args += ["--r2l-weight", f"{r2l_weight or 0.0:g}", *repeated("--r2l-model", r2l_models)]
    return json_file(path, ["evaluate", *args], lambda: nmtkit("evaluate", *args))


def scores(result: dict) -> dict:
    return {k: result[k] for k in SCORES if k in result}


def run_record(a: argparse.Namespace, seed: int, run: Path, valid: str, test: str) -> dict:
    """Train (or take in) one seed, evaluate its candidates, choose one on val. With
    ``--parallel`` each command runs in a process of its own, so that seeds are evaluated
    side by side (on a GPU, one evaluation keeps the device mostly idle)."""
    nmtkit = nmtkit_subprocess if a.parallel > 1 else nmtkit_in_process
    done = train_seed(a, seed, run)
    average(run, a.average, nmtkit)
    ckpts: dict[str, dict] = {}
    for name in CANDIDATES:
        if not (run / name).exists():
            continue
        stem = name.removesuffix(".pt")
        ckpts[name] = {
            key: scores(evaluate([run / name], split, a.beam,
                                 run / f"eval_{stem}_{split_name(split)}{a.suffix}.json",
                                 nmtkit=nmtkit, lang=a.lang))
            for key, split in (("val", valid), ("test", test))}
    chosen = max(ckpts, key=lambda n: (ckpts[n]["val"][a.metric], -CANDIDATES.index(n)))
    log = (run.parent / f"{run.name}.log").read_text(encoding="utf-8", errors="replace")
    plans_file = run / "budget_plans.json"  # the plans as the run made them (budget_schedule)
    plans = json.loads(plans_file.read_text(encoding="utf-8")) if plans_file.exists() else []
    tok_s = [int(x) for x in re.findall(r"tgt tok/s (\d+)", log)]
    curve = []
    metrics = run / "metrics.csv"
    if metrics.exists():
        with open(metrics, encoding="utf-8") as f:
            curve = [[int(r["step"]), float(r["valid_bleu"])] for r in csv.DictReader(f)
                     if r.get("valid_bleu")]
    matmul = run.parent / f"{run.name}.matmul"
    return {
        "seed": seed, **({"overrides": a.seed_set[seed]} if seed in a.seed_set else {}),
        "updates": done["step"], "epochs": done["epoch"],
        "elapsed_s": done["elapsed_s"], "stop_reason": done.get("stop_reason"),
        "budget_plans": plans[:1] + plans[1:][-1:],  # the first and the last
        "train_tokens_per_s_logged": {"median": statistics.median(tok_s), "min": min(tok_s),
                                      "max": max(tok_s)} if tok_s else None,
        "matmul_gflops_before": ast.literal_eval(matmul.read_text().strip())
        if matmul.exists() else None,
        "valid_bleu_greedy": curve, "checkpoints": ckpts, "chosen_on_val": chosen}


def tune_ensemble(a: argparse.Namespace, models: list[Path], valid: str) -> dict:
    """``nmtkit tune`` of the ensemble on the validation split: the length penalties of
    ``--length-penalty``, then above the largest while the largest wins (``--extend`` times
    at most, by the grid's last step). Every trial and the chosen one."""
    from nmtkit.decode.tune import Trial, at_the_edge, best_trial

    grid = sorted(set(a.length_penalty))
    mbr = list(getattr(a, "mbr", [0]))
    rerank = list(getattr(a, "rerank", [0]))
    step = grid[-1] - grid[-2] if len(grid) > 1 else 0.4
    trials: list[Trial] = []
    todo, round_ = grid, 0
    while True:
        args = [*repeated("--model", models), "--split", valid, *getattr(a, "lang", []),
                "--beam", str(a.beam)]
        if mbr != [0]:  # (the default: earlier runs' tune.json stay valid)
            args += ["--mbr", *map(str, mbr)]
        if rerank != [0]:  # (likewise)
            args += ["--rerank", *map(str, rerank), "--reverse-weight",
                     *[f"{w:g}" for w in a.reverse_weight]]
            args += repeated("--reverse-model", a.reverse_model)
            if getattr(a, "r2l_model", None):  # (likewise)
                args += ["--r2l-weight", *[f"{v:g}" for v in a.r2l_weight],
                         *repeated("--r2l-model", a.r2l_model)]
        args += ["--length-penalty", *[f"{p:g}" for p in todo]]
        if a.metric != "bleu":  # (the default: earlier runs' tune.json stay valid)
            args += ["--metric", a.metric]
        path = a.work / (f"tune{getattr(a, 'suffix', '')}"
                         + ("" if round_ == 0 else f"_{round_}") + ".json")

        def tune(args: list[str] = args, path: Path = path) -> str:
            nmtkit_in_process("tune", *args, "-o", str(path))  # -o: every trial, not only the best
            return path.read_text(encoding="utf-8")

        found = json_file(path, ["tune", *args], tune)
        trials += [Trial(**t) for t in found["trials"]]
        tried = sorted({t.length_penalty for t in trials if t.length_penalty is not None})
        best = best_trial(trials, a.metric)
        edge = at_the_edge(best, tried)
        if edge != "largest" or round_ >= a.extend:
            break
        round_ += 1
        todo = [round(tried[-1] + step * i, 3) for i in (1, 2)]
    # nmtkit tune's own edge hint speaks of one round's grid only; this is the verdict on all.
    print(f"seeds.py: length penalties tried on {valid} in {round_ + 1} round(s): "
          f"{' '.join(f'{p:g}' for p in tried)}; chosen {best.length_penalty:g}"
          + (f" with --mbr {best.mbr}" if best.mbr else "")
          + (f" with --rerank {best.rerank} --reverse-weight {best.reverse_weight:g}"
             if best.rerank else "")
          + (f" --r2l-weight {best.r2l_weight:g}" if best.rerank and best.r2l_weight else "")
          + f" ({a.metric} "
          f"{getattr(best, a.metric):g}), " + {None: "inside the grid",
                                 "largest": f"the largest tried: --extend {a.extend} reached",
                                 "smallest": "the smallest tried: the grid grows upwards only, "
                                             "give smaller values in --length-penalty"}[edge],
          file=sys.stderr, flush=True)
    return {"grid": tried, "trials": [t.as_dict() for t in trials],
            "chosen": best.as_dict(), "edge": edge}


def seed_overrides(p: argparse.ArgumentParser, given: list[str],
                   seeds: list[int]) -> dict[int, list[str]]:
    """``--seed-set`` values by seed: ``["4:train.max_minutes=120"]`` -> ``{4: [...]}``."""
    out: dict[int, list[str]] = {}
    for item in given:
        seed, sep, override = item.partition(":")
        if not sep or not seed.strip().lstrip("-").isdigit() or "=" not in override:
            p.error(f"--seed-set {item!r}: expected SEED:SECTION.KEY=VALUE")
        if int(seed) not in seeds:
            p.error(f"--seed-set {item!r}: seed {int(seed)} is not in --seeds {seeds}")
        out.setdefault(int(seed), []).append(override.strip())
    return out


def seed_set_phrase(seed_set: dict[int, list[str]]) -> str:
    """How the title and protocol name ``--seed-set``: one parenthesis per distinct list of
    overrides, with the seeds that share it: ``" (seeds 4, 5 also train.rdrop=5)"``."""
    groups: dict[tuple[str, ...], list[int]] = {}
    for seed, sets in seed_set.items():
        groups.setdefault(tuple(sets), []).append(seed)
    return "".join(f" (seed{'s' if len(seeds) > 1 else ''} {', '.join(map(str, seeds))} also "
                   f"{', '.join(sets)})" for sets, seeds in groups.items())


def mean(xs: list[float]) -> float:
    return round(statistics.fmean(xs), 2)


def commit() -> str:
    proc = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                          capture_output=True, text=True)
    return proc.stdout.strip() if proc.returncode == 0 else "unknown"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--config", default=str(ROOT / "configs" / "multi30k_transformer_hour.yaml"))
    p.add_argument("--seeds", type=int, nargs="+", default=[1234, 2, 3])
    p.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE",
                   help="override of the recipe for every seed (repeatable)")
    p.add_argument("--seed-set", action="append", default=[], metavar="SEED:SECTION.KEY=VALUE",
                   help="override for one seed only, after --set (repeatable): e.g. "
                        "4:train.max_minutes=120, a longer budget for one member")
    p.add_argument("--work", type=Path, required=True,
                   help="directory of the runs (seedSEED), their logs, evaluations and tuning")
    p.add_argument("--beam", type=int, default=None, help="beam size (default: the recipe's)")
    p.add_argument("--metric", choices=TUNE_METRICS, default="bleu",
                   help="the val score that chooses each seed's checkpoint and the ensemble's "
                        "length penalty (default bleu, cased sacreBLEU; bleu_lc_tok for a "
                        "recipe with data.lowercase)")
    p.add_argument("--average", type=int, default=3,
                   help="step checkpoints averaged into avg3.pt (default 3)")
    p.add_argument("--length-penalty", type=float, nargs="+", default=list(TUNE_LENGTH_PENALTIES),
                   help="the ensemble's length penalties tried on val")
    p.add_argument("--mbr", type=int, nargs="+", default=[0], metavar="N",
                   help="minimum Bayes risk decoding over N candidates, tried on val with "
                        "each length penalty of the ensemble (e.g. --mbr 0 20; default 0 = off)")
    p.add_argument("--rerank", type=int, nargs="+", default=[0], metavar="N",
                   help="reranking of N candidates with --reverse-model, tried on val with each "
                        "length penalty of the ensemble (e.g. --rerank 0 10; default 0 = off)")
    p.add_argument("--reverse-model", action="append", default=[], metavar="CKPT",
                   help="a checkpoint of the reverse direction for --rerank (repeat: their mean)")
    p.add_argument("--reverse-weight", type=float, nargs="+",
                   default=list(TUNE_REVERSE_WEIGHTS), metavar="W",
                   help="reranking: the reverse model's weights tried on val")
    p.add_argument("--reverse-members", action="store_true",
                   help="rerank with the ensemble's own members (a recipe of both directions, "
                        "data.directions: each model reads its output back), instead of "
                        "--reverse-model")
    p.add_argument("--r2l-model", action="append", default=[], metavar="CKPT",
                   help="a right-to-left checkpoint of the ensemble's direction (a recipe with "
                        "data.reverse_target) that also scores --rerank's candidates, read "
                        "from their end (repeat: their mean)")
    p.add_argument("--r2l-weight", type=float, nargs="+", default=list(TUNE_R2L_WEIGHTS),
                   metavar="V", help="reranking with --r2l-model: its weights tried on val, "
                   "each with every --reverse-weight")
    p.add_argument("--tgt-lang", help="a recipe of several directions (data.directions): the "
                   "direction scored, by its target language (the training is the same for "
                   "every direction: rerun with another --tgt-lang and the same --work)")
    p.add_argument("--src-lang", help="... and its source language, where several directions "
                   "go into --tgt-lang")
    p.add_argument("--extend", type=int, default=2,
                   help="times the grid is extended upwards while its largest value wins")
    p.add_argument("--threads", type=int, default=0,
                   help="threads of the matmul measurement (0: one per core)")
    p.add_argument("--parallel", type=int, default=1, metavar="N",
                   help="train N seeds at a time, side by side (default 1: one after the "
                        "other, each alone; on a GPU several small runs share the device)")
    p.add_argument("--no-matmul", dest="matmul", action="store_false",
                   help="do not measure the matrix-product rate before each run")
    p.add_argument("--note", default="",
                   help="a remark kept in the JSON (say what else ran on the machine, if anything)")
    p.add_argument("--out", help="also write the JSON here")
    a = p.parse_args()
    if len(set(a.seeds)) != len(a.seeds) or len(a.seeds) < 2:
        p.error(f"give at least two different seeds, got {a.seeds}")
    if a.parallel < 1:
        p.error(f"--parallel {a.parallel}: give 1 or more")

    if a.rerank != [0] and not (a.reverse_model or a.reverse_members):
        p.error("--rerank needs --reverse-model (a checkpoint of the reverse direction) or "
                "--reverse-members")
    if a.r2l_model and a.rerank == [0]:
        p.error("--r2l-model scores the candidates of --rerank: give --rerank too "
                "(e.g. --rerank 0 20)")
    a.seed_set = seed_overrides(p, a.seed_set, a.seeds)
    cfg = load(a.config, a.set)
    try:  # the direction scored: the recipe's own, or the one asked of a model of several
        _, asked = evaluation_direction(cfg.data, a.src_lang, a.tgt_lang)
    except ValueError as e:
        p.error(str(e))
    if a.reverse_members and Direction(asked.tgt, asked.src) not in directions(cfg.data):
        p.error(f"--reverse-members: the recipe's models do not translate {asked.tgt}->"
                f"{asked.src}, so they cannot read their output back (a recipe of both "
                "directions, data.directions, can); give --reverse-model")
    several = bool(cfg.data.directions)
    a.lang = ["--tgt-lang", asked.tgt, "--src-lang", asked.src] if several else []
    a.suffix = f"_{asked.name}" if several else ""  # one work folder serves every direction
    for seed, sets in a.seed_set.items():  # a bad key fails here, before hours of training
        try:
            load(a.config, [*a.set, *sets])
        except ConfigError as e:
            p.error(f"--seed-set for seed {seed}: {e}")
    a.beam = a.beam or cfg.decode.beam
    a.bf16 = cfg.train.amp == "bf16"  # then the bfloat16 rate too
    valid, test = cfg.data.valid, cfg.data.test
    a.work.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    if a.parallel > 1:
        train_side_by_side(a)
    runs = map_seeds(a, lambda seed: run_record(a, seed, a.work / f"seed{seed}", valid, test))
    chosen = [a.work / f"seed{r['seed']}" / r["chosen_on_val"] for r in runs]
    if a.reverse_members:  # a recipe of both directions: its members read their output back
        a.reverse_model = [str(m) for m in chosen]

    tuned = tune_ensemble(a, chosen, valid)
    alpha = tuned["chosen"]["length_penalty"]
    ensemble = {
        "models": [str(m) for m in chosen],
        "val": scores(evaluate(chosen, valid, a.beam,
                               a.work / f"ensemble_{split_name(valid)}{a.suffix}.json",
                               lang=a.lang)),
        "test": scores(evaluate(chosen, test, a.beam,
                                a.work / f"ensemble_{split_name(test)}{a.suffix}.json",
                                lang=a.lang)),
        "tuned": {**tuned, "test": scores(evaluate(
            chosen, test, a.beam, a.work / f"ensemble_{split_name(test)}{a.suffix}_tuned.json",
            length_penalty=alpha, mbr=tuned["chosen"].get("mbr", 0),
            rerank=tuned["chosen"].get("rerank", 0),
            reverse_weight=tuned["chosen"].get("reverse_weight"),
            reverse_models=a.reverse_model, lang=a.lang,
            r2l_weight=tuned["chosen"].get("r2l_weight"), r2l_models=a.r2l_model))}}

    config = Path(os.path.abspath(a.config))  # not resolve(): configs/ is a link to the recipes
    shown = config.relative_to(ROOT) if config.is_relative_to(ROOT) else a.config  # no /home/...
    picked = [r["checkpoints"][r["chosen_on_val"]] for r in runs]
    test_bleu = [c["test"]["bleu"] for c in picked]
    direction = f"{asked.src}->{asked.tgt}"
    penalty = f"the recipe's length penalty {cfg.decode.length_penalty:g}"
    per_seed = seed_set_phrase(a.seed_set)
    # --set changes the recipe for every seed: the title names it (the direction aside,
    # which the title shows as src->tgt), the protocol names all of it.
    changed = [o for o in a.set if o.split("=", 1)[0] not in ("data.src_lang", "data.tgt_lang")]
    recipe = f"{cfg.name} ({', '.join(changed)})" if changed else cfg.name
    every = f" with {', '.join(a.set)} for every seed," if a.set else ""
    emit({
        "benchmark": "seeds_ensemble",
        "title": f"{recipe} with {len(runs)} seeds{per_seed}, and their ensemble "
                 f"({direction}, beam {a.beam})",
        "protocol": f"{shown}{every} trained once per seed ({', '.join(map(str, a.seeds))}), "
                    f"changing only train.seed{per_seed}, "
                    + ("each run alone on the machine. " if a.parallel == 1 else
                       f"{a.parallel} runs at a time side by side on the machine. ") +
                    "Each run's "
                    f"{', '.join(CANDIDATES)} (the average of its last {a.average} step "
                    f"checkpoints) are scored on {valid} and {test} with {penalty}; the "
                    "checkpoint reported for a seed is the one with the best val "
                    f"{METRIC_NAMES[a.metric]}. The ensemble decodes with the mean of the "
                    "chosen checkpoints' next-token probabilities at every step; its length "
                    "penalty is chosen on val by the same score (nmtkit tune, grid "
                    f"{tuned['grid']}"
                    + (f", each with --mbr {' and '.join(map(str, a.mbr))}" if a.mbr != [0] else "")
                    + (f", each with --rerank {' and '.join(map(str, a.rerank))} at reverse "
                       f"weights {', '.join(f'{w:g}' for w in a.reverse_weight)} (reverse "
                       f"model{'s' if len(a.reverse_model) > 1 else ''}: "
                       + (f"the ensemble's own members, asked for {asked.src})"
                          if a.reverse_members else f"{', '.join(a.reverse_model)})")
                       + (f", each also with the right-to-left model"
                          f"{'s' if len(a.r2l_model) > 1 else ''} {', '.join(a.r2l_model)} at "
                          f"weights {', '.join(f'{v:g}' for v in a.r2l_weight)}"
                          if a.r2l_model else "")
                       if a.rerank != [0] else "")
                    + f"). Every choice was made on val; "
                    f"{test} was scored once per system and never used to choose.",
        "machine": machine(), "torch": __import__("torch").__version__,
        "nmtkit_commit": commit(), "overrides": a.set, "direction": asked.name,
        "metric": a.metric, "runs": runs,
        "single_model_chosen_on_val": {
            "val_mean": mean([c["val"][a.metric] for c in picked]),
            "test_mean": mean(test_bleu),
            "test_stdev": round(statistics.stdev(test_bleu), 2),
            "test_chrf_mean": mean([c["test"]["chrf"] for c in picked]),
            **({"test_official_tok_mean": mean([c["test"]["bleu_official_tok"] for c in picked])}
               if all("bleu_official_tok" in c["test"] for c in picked) else {})},
        "mean_over_seeds_by_checkpoint": {
            name: {key: mean([r["checkpoints"][name][key][a.metric] for r in runs])
                   for key in ("val", "test")}
            for name in CANDIDATES if all(name in r["checkpoints"] for r in runs)},
        "ensemble": ensemble, "seconds": round(time.time() - t0, 1),
        **({"note": a.note} if a.note else {})}, a.out)


if __name__ == "__main__":
    main()
