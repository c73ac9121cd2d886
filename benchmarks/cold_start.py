"""Cold start of one-sentence ``nmtkit translate``: where the seconds go, in fresh processes.

A user who translates one sentence pays for the whole start: the interpreter, nmtkit's
imports, reading the checkpoint, building the translator and the first sentence's search,
and with PyTorch its import (1.4 to 2 s on a 2-core CPU, more than all the rest). Each round
runs, for each variant, two fresh processes:

- a worker that times the parts in turn: ``import nmtkit.cli`` (what every command pays),
  ``import torch`` (0 where the variant does not import it, or nmtkit.cli had already), the
  translate command's own imports, loading the model, and the first sentence (the
  translator built, the sentence translated); ``torch_imported`` (numpy and CTranslate2): 1
  where PyTorch came in all the same (the source attention that puts protected spans back,
  for a sentence with what the vocabulary cannot say);
- ``python -m nmtkit translate --model M`` (the console script's entry point) with the
  sentence on stdin, timed from outside from start to exit (the number a user sees).

The variants: ``after``, this tree with ``--engine torch`` (nmtkit's PyTorch translator:
``nmtkit.checkpoint.load_bundle``, ``nmtkit.decode.ensemble``); ``after_numpy``, this tree
as a user runs it (no ``--engine``: a few lines go to the checkpoint's Transformer in numpy,
:mod:`nmtkit.lite`, which imports no PyTorch); with ``--ctranslate2``, ``after_ctranslate2``:
this tree's ``translate --engine ctranslate2`` on an ``nmtkit export`` of the checkpoint;
with ``--baseline-src``, ``before`` (see below).

Each figure is given in wall seconds and in CPU seconds of the process (all its threads):
on a shared host the wall time of PyTorch's two threads grows with the other jobs' load
(recorded before and after the rounds): a round beside a busy job can take several times
the time of an undisturbed one, so the minimum over the rounds is given beside the median.
``--threads 1`` times translate's ``--threads 1`` (less disturbed by other jobs).

Bytecode is cached as an installed package has it (``PYTHONPYCACHEPREFIX`` in a temporary
folder, filled by one untimed round; ``PYTHONDONTWRITEBYTECODE`` is dropped), so that neither
tree pays for compiling its sources.

``--baseline-src DIR`` times an older tree (``DIR/src`` on ``PYTHONPATH``) in the same
rounds, alternating with the tree under test, each with a checkpoint its own ``nmtkit
train`` wrote (as its users would have one: before release checkpoints, ``best.pt`` carried
the optimizer state); the medians and minima over ``--runs`` rounds are reported, with the
checkpoint sizes and this CPU's matmul rate before and after the rounds (a shared host's speed drifts).

The checkpoint (unless ``--model``): by default the copy task trained for 2 updates with the
model section of ``configs/multi30k_transformer_small.yaml`` (3+3 layers, d_model 256, d_ff
1024, an 8,000-symbol joint vocabulary: the size of the README's main job) and its decoding
options (beam 5), on whitespace tokens (no data needed, no SentencePiece to load);
``--recipe configs/multi30k_transformer_small.yaml`` trains the recipe itself for 2 updates
(Multi30k from ``NMTKIT_DATA``, its SentencePiece model: the main job's checkpoint in all but
its weights' values) and translates a German sentence.

    .venv/bin/python benchmarks/cold_start.py --runs 7 --baseline-src /work/before \
        --out benchmarks/results/cold_start_cpu_X.json
    NMTKIT_DATA=../shared/data .venv/bin/python benchmarks/cold_start.py \
        --recipe configs/multi30k_transformer_small.yaml --ctranslate2
    NMTKIT_DATA=../shared/data .venv/bin/python benchmarks/cold_start.py \
        --recipe configs/multi30k_transformer_small.yaml --baseline-src /work/before
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
COPY_SENTENCE = "1 2 3 4 5 6 7 8 9 10"
GERMAN_SENTENCE = "Ein Mann fährt mit dem Fahrrad die Straße entlang."
PARTS = ("import_cli_s", "import_torch_s", "import_translate_s", "load_s", "first_sentence_s")

SHORT_RUN = ["train.max_steps=2", "train.valid_every=2", "train.valid_bleu=false",
             "train.early_stop_metric=loss", "train.keep_last=1", "train.max_minutes=0",
             "train.threads=2"]
"""Two updates, one validation (by loss): ``best.pt``, ``last.pt`` and one step file."""
# The model and decoding of configs/multi30k_transformer_small.yaml on the copy task.
COPY_SMALL = ["model.layers=3", "model.d_model=256", "model.d_ff=1024", "model.heads=4",
              "model.dropout=0.3", "data.copy_vocab=8000", "data.copy_train_size=20000",
              "data.copy_valid_size=10", "train.max_tokens=512", "decode.beam=5",
              "decode.length_penalty=0.6", "decode.max_len_a=1.2", "decode.max_len_b=10"]


def cpu_key(part: str) -> str:
    """``load_s`` -> ``load_cpu_s``."""
    return part.removesuffix("_s") + "_cpu_s"


def worker(model: str, sentence: str, threads: int, engine: str = "torch") -> dict[str, float]:
    """In a fresh process: the parts of a cold start, in the order the command meets them,
    each in wall seconds (``PART_s``) and in this process's CPU seconds (``PART_cpu_s``, all
    threads). (Nothing of nmtkit or torch may be imported before this runs: this module's top
    imports the standard library only.) ``engine`` ctranslate2: ``model`` is an export,
    ``import_torch_s`` is 0 (the engine imports no PyTorch) and the translate imports are
    the engine's."""
    times: dict[str, float] = {}
    t, cpu = time.perf_counter(), time.process_time()

    def lap(name: str) -> None:
        nonlocal t, cpu
        now, now_cpu = time.perf_counter(), time.process_time()
        times[name], times[cpu_key(name)] = now - t, now_cpu - cpu
        t, cpu = now, now_cpu

    import nmtkit.cli  # noqa: F401
    lap("import_cli_s")
    if engine == "ctranslate2":
        return ctranslate2_worker(model, sentence, threads, times, lap)
    if engine == "numpy":
        return numpy_worker(model, sentence, times, lap)
    import torch

    if threads:  # as the command's --threads
        torch.set_num_threads(threads)
    lap("import_torch_s")
    from nmtkit.checkpoint import load_bundle
    from nmtkit.decode.ensemble import ensemble_translator
    lap("import_translate_s")
    bundle = load_bundle(model)
    lap("load_s")
    out = ensemble_translator([bundle], [model]).translate_lines([sentence])
    lap("first_sentence_s")
    assert len(out) == 1
    return times


def ctranslate2_worker(model: str, sentence: str, threads: int, times: dict[str, float],
                       lap: Callable[[str], None]) -> dict[str, float]:
    """:func:`worker`'s parts after ``import nmtkit.cli`` for a CTranslate2 export."""
    lap("import_torch_s")  # none
    from nmtkit.export.ctranslate2_engine import load_export_bundle
    lap("import_translate_s")
    bundle = load_export_bundle(model, threads=threads)
    lap("load_s")
    out = bundle.translator().translate_lines([sentence])
    lap("first_sentence_s")
    assert len(out) == 1
    # 1: PyTorch was imported after all (the attention that puts protected spans back, for a
    # sentence with words or characters the vocabulary lacks)
    times["torch_imported"] = float("torch" in sys.modules)
    return times


def numpy_worker(model: str, sentence: str, times: dict[str, float],
                 lap: Callable[[str], None]) -> dict[str, float]:
    """:func:`worker`'s parts after ``import nmtkit.cli`` for the checkpoint's Transformer in
    numpy (:mod:`nmtkit.lite`)."""
    lap("import_torch_s")  # none
    from nmtkit.decode.lite_translator import LiteTranslator
    from nmtkit.lite.checkpoint import load_lite_bundle
    lap("import_translate_s")
    bundle = load_lite_bundle(model)
    lap("load_s")

    def no_torch() -> LiteTranslator:
        raise SystemExit("the numpy translator asked for PyTorch's")

    out = LiteTranslator(bundle, bundle.cfg.decode, no_torch).translate_lines([sentence])
    lap("first_sentence_s")
    assert len(out) == 1
    times["torch_imported"] = float("torch" in sys.modules)
    return times


def export_checkpoint(env: dict[str, str], model: Path, out: Path) -> Path:
    """``nmtkit export --format ctranslate2`` of ``model`` (float32 weights; translate's
    default compute type, int8 on a CPU, converts them as it loads)."""
    done = subprocess.run([*nmtkit_command(), "export", "--format", "ctranslate2", "--model",
                           str(model), "--out", str(out)], env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"nmtkit export failed ({done.returncode}): {done.stderr[-2000:]}")
    return out


def nmtkit_command() -> list[str]:
    """``python -m nmtkit`` with this interpreter: the command of the tree that ``PYTHONPATH``
    puts first, each tree's own entry point (the console script of this environment names the
    entry point of the tree installed in it, which an older tree may lack)."""
    return [sys.executable, "-m", "nmtkit"]


def train_checkpoint(env: dict[str, str], tree: Path, recipe: str, run_dir: Path) -> Path:
    """``nmtkit train`` of ``recipe`` (relative to ``tree``) for :data:`SHORT_RUN`, by the
    tree whose ``src`` ``env`` puts first (its own recipe and code); the copy task at the
    small model's size (:data:`COPY_SMALL`). Returns its ``best.pt``."""
    sets = [*(COPY_SMALL if Path(recipe).name == "copy_task.yaml" else []), *SHORT_RUN]
    args = [*nmtkit_command(), "train", str(tree / recipe), "--run-dir", str(run_dir)]
    for s in sets:
        args += ["--set", s]
    done = subprocess.run(args, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"nmtkit train failed ({done.returncode}): {done.stderr[-2000:]}")
    return run_dir / "best.pt"


def sizes_mb(run_dir: Path) -> dict[str, float]:
    return {p.name: round(p.stat().st_size / 1e6, 2) for p in sorted(run_dir.glob("*.pt"))}


def time_worker(env: dict[str, str], model: Path, sentence: str, threads: int,
                engine: str = "torch") -> dict[str, float]:
    out = subprocess.run([sys.executable, __file__, "--worker", str(model), "--sentence",
                          sentence, "--threads", str(threads), "--engine", engine], env=env,
                         check=True,
                         capture_output=True, text=True).stdout
    r: dict[str, float] = json.loads(out.strip().splitlines()[-1])
    r["in_process_total_s"] = sum(r[k] for k in PARTS)
    r["in_process_total_cpu_s"] = sum(r[cpu_key(k)] for k in PARTS)
    return r


def time_command(env: dict[str, str], model: Path, sentence: str, threads: int,
                 engine: str | None = None) -> dict[str, float]:
    """Wall and CPU seconds (user + system, all threads) of ``nmtkit translate --model M``
    (with ``--engine ENGINE`` where given) of one sentence, start to exit."""
    engine_args = ["--engine", engine] if engine is not None else []
    before, t = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
    done = subprocess.run([*nmtkit_command(), "translate", *engine_args, "--model", str(model),
                           "--threads", str(threads)], env=env, input=sentence + "\n", capture_output=True,
                          text=True)
    wall, after = time.perf_counter() - t, resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0 or len(done.stdout.splitlines()) != 1:
        raise SystemExit(f"nmtkit translate failed ({done.returncode}): {done.stderr[-2000:]}")
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    return {"command_wall_s": wall, "command_cpu_s": cpu}


def summary(rounds: list[dict[str, float]], of: Callable[[list[float]], float]
            ) -> dict[str, float]:
    """``of`` (the median, the minimum) of each figure over the rounds."""
    return {k: round(of([r[k] for r in rounds]), 3) for k in rounds[0]}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--worker", metavar="MODEL", help=argparse.SUPPRESS)
    p.add_argument("--model", help="checkpoint to time (default: one trained by --recipe)")
    p.add_argument("--recipe", default="configs/copy_task.yaml",
                   help="recipe (relative to each tree) trained for 2 updates; the copy task "
                   "at the size of configs/multi30k_transformer_small.yaml")
    p.add_argument("--sentence", help="the sentence translated (default: one of the recipe's "
                   "kind: ten copy-task symbols, or a German caption)")
    p.add_argument("--runs", type=int, default=7, help="rounds (each tree once a round)")
    p.add_argument("--baseline-src", metavar="DIR",
                   help="also time the nmtkit tree DIR (DIR/src, DIR/configs) in every round")
    p.add_argument("--baseline-model",
                   help="the checkpoint the baseline tree loads (default: one it trains)")
    p.add_argument("--threads", type=int, default=0,
                   help="translate's --threads (0: PyTorch's default, one per core, as a user "
                   "gets it; 1 keeps a busy host's other jobs from stalling the timed threads)")
    p.add_argument("--ctranslate2", action="store_true",
                   help="also time this tree's `translate --engine ctranslate2` on an export "
                   "of its checkpoint (tree 'after_ctranslate2'), in every round")
    p.add_argument("--engine", default="torch", help=argparse.SUPPRESS)  # the worker's
    p.add_argument("--out", help="also write the JSON here")
    a = p.parse_args()
    copy = Path(a.recipe).name == "copy_task.yaml"
    sentence = a.sentence or (COPY_SENTENCE if copy and not a.model else GERMAN_SENTENCE)
    if a.worker:
        print(json.dumps(worker(a.worker, sentence, a.threads, a.engine)))
        return
    # benchmarks/ is the script's directory; imported here, not at the top: a worker (this
    # same file) must import nothing of nmtkit before it times nmtkit's import.
    from _common import emit, machine, matmul_peak_gflops, worker_env

    trees = {"after": (worker_env(None), ROOT, a.model)}
    if a.baseline_src:
        trees["before"] = (worker_env(a.baseline_src), Path(a.baseline_src), a.baseline_model)
    matmul_threads = a.threads or os.cpu_count() or 1
    peak_before = round(matmul_peak_gflops(matmul_threads), 1)
    result: dict = {"machine": machine(), "sentence": sentence, "runs": a.runs,
                    "threads": a.threads, "load_average_before": os.getloadavg(), "trees": {}}
    with tempfile.TemporaryDirectory() as tmp:
        for env, _, _ in trees.values():  # bytecode cached, as an installed package has it
            env.pop("PYTHONDONTWRITEBYTECODE", None)
            env["PYTHONPYCACHEPREFIX"] = str(Path(tmp) / "pycache")
        models = {}
        for name, (env, tree, model) in trees.items():
            entry: dict = {"src": str(tree / "src") if name == "before" else "this tree"}
            if model is None:
                run_dir = Path(tmp) / name
                model = str(train_checkpoint(env, tree, a.recipe, run_dir))
                entry["recipe"] = a.recipe
                entry["checkpoint_sizes_mb"] = sizes_mb(run_dir)
            else:
                entry["model"] = model
            entry["model_mb"] = round(Path(model).stat().st_size / 1e6, 2)
            models[name] = Path(model)
            result["trees"][name] = entry
        # (env, model, the worker's engine, translate's --engine: None = none given)
        variants = {name: (env, models[name], "torch", None if name == "before" else "torch")
                    for name, (env, _, _) in trees.items()}
        result["trees"]["after"]["engine"] = "torch (--engine torch)"
        env = trees["after"][0]
        variants["after_numpy"] = (env, models["after"], "numpy", None)
        result["trees"]["after_numpy"] = {
            "src": "this tree", "engine": "numpy (no --engine: translate's default for a few lines)",
            "model": "the 'after' checkpoint"}
        if a.ctranslate2:
            ct2 = export_checkpoint(env, models["after"], Path(tmp) / "ct2")
            variants["after_ctranslate2"] = (env, ct2, "ctranslate2", "ctranslate2")
            result["trees"]["after_ctranslate2"] = {
                "src": "this tree", "engine": "ctranslate2 (translate's default compute type)",
                "model": "an export of the 'after' checkpoint (float32 weights)",
                "model_mb": round((ct2 / "model.bin").stat().st_size / 1e6, 2)}
        for env, model, engine, _ in variants.values():  # untimed: fills the bytecode cache
            time_worker(env, model, sentence, a.threads, engine)
        rounds: dict[str, list[dict[str, float]]] = {name: [] for name in variants}
        for i in range(a.runs):
            order = list(variants) if i % 2 == 0 else list(variants)[::-1]  # alternate who goes first
            for name in order:
                env, model, engine, flag = variants[name]
                r = time_worker(env, model, sentence, a.threads, engine)
                rounds[name].append({**r, **time_command(env, model, sentence, a.threads, flag)})
    for name in variants:
        result["trees"][name]["median"] = summary(rounds[name], statistics.median)
        result["trees"][name]["min"] = summary(rounds[name], min)
        result["trees"][name]["rounds"] = [{k: round(v, 3) for k, v in r.items()}
                                           for r in rounds[name]]

    def median_wall(name: str) -> float:
        wall: float = result["trees"][name]["median"]["command_wall_s"]
        return wall

    if "before" in trees:
        result["command_wall_speedup"] = round(median_wall("before") / median_wall("after"), 2)
        after, before = (result["trees"][n]["min"]["command_wall_s"] for n in ("after", "before"))
        result["command_wall_speedup_of_min"] = round(before / after, 2)
    result["numpy_command_wall_speedup"] = round(median_wall("after") / median_wall("after_numpy"), 2)
    if "after_ctranslate2" in variants:
        result["ctranslate2_command_wall_speedup"] = round(
            median_wall("after") / median_wall("after_ctranslate2"), 2)
    result["load_average_after"] = os.getloadavg()
    result["matmul_gflops"] = {"before_rounds": peak_before,
                               "after_rounds": round(matmul_peak_gflops(matmul_threads), 1),
                               "threads": matmul_threads}
    emit(result, a.out)


if __name__ == "__main__":
    main()
