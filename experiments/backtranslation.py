"""What back-translation gains or costs on Multi30k, with no data beyond Multi30k.

The training corpus is cut in two halves, A and B. Half A is the parallel data; half B
stands in for monolingual text in the target language (its source side is thrown away):

1. reverse model: ``tgt -> src`` trained on A;
2. ``nmtkit backtranslate`` turns B's target side into synthetic sources;
3. baseline: ``src -> tgt`` trained on A alone;
4. back-translation: ``src -> tgt`` trained on A plus the synthetic pairs (``data.extra``,
   tagged ``<bt>``, Caswell et al. 2019), the same number of steps;
5. both evaluated with sacreBLEU on ``val`` and ``test_2016_flickr`` (beam from the recipe).

Every run trains the recipe for ``--steps`` updates (not minutes: a shared CPU's minutes
differ between runs) with ``--set`` overrides applied to all three. The directions come
from ``--src-lang``/``--tgt-lang``. Prints one JSON object; ``--out`` keeps it.

    NMTKIT_DATA=... python experiments/backtranslation.py --steps 600 --work /tmp/bt \\
        --out benchmarks/results/backtranslation_cpu_DATE.json
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))  # benchmarks/_common.py

from _common import emit

from nmtkit.config import load
from nmtkit.data.corpora import load_parallel

ROOT = Path(__file__).resolve().parents[1]


def write_lines(path: Path, lines: list[str]) -> None:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")


def nmtkit(*args: str) -> str:
    """Run the ``nmtkit`` CLI of this interpreter; its stdout (stderr goes to ours)."""
    cmd = [str(Path(sys.executable).parent / "nmtkit"), *args]
    print("+", " ".join(cmd), file=sys.stderr, flush=True)
    return subprocess.run(cmd, check=True, stdout=subprocess.PIPE, text=True).stdout


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--config", default=str(ROOT / "configs" / "multi30k_transformer_small.yaml"))
    p.add_argument("--src-lang", default="de")
    p.add_argument("--tgt-lang", default="en")
    p.add_argument("--steps", type=int, default=600, help="updates of each of the three runs")
    p.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE",
                   help="override of the recipe for all three runs (repeatable)")
    p.add_argument("--work", required=True, help="directory for the halves, runs and synthetic data")
    p.add_argument("--mono-lines", type=int, default=0,
                   help="use only this many lines of half B (0: all of it)")
    p.add_argument("--splits", nargs="+", default=["val", "test_2016_flickr"])
    p.add_argument("--out", help="also write the JSON here")
    a = p.parse_args()

    work = Path(a.work)
    work.mkdir(parents=True, exist_ok=True)
    s, t = a.src_lang, a.tgt_lang
    cfg = load(a.config, [f"data.src_lang={s}", f"data.tgt_lang={t}"])
    train = load_parallel(cfg.data, cfg.data.train)
    half = len(train) // 2
    write_lines(work / f"A.{s}", train.src[:half])
    write_lines(work / f"A.{t}", train.tgt[:half])
    mono = train.tgt[half:][:a.mono_lines or None]
    write_lines(work / f"B.{t}", mono)  # the "monolingual" target text
    for split in a.splits:
        par = load_parallel(cfg.data, split)
        write_lines(work / f"{split}.{s}", par.src)
        write_lines(work / f"{split}.{t}", par.tgt)

    common = ["--set", "data.corpus=parallel", "--set", f"data.train={work / 'A'}",
              "--set", f"data.valid={work / a.splits[0]}", "--set", f"data.test={work / a.splits[-1]}",
              "--set", f"train.max_steps={a.steps}", "--set", f"train.valid_every={a.steps}",
              "--set", "train.max_minutes=0", "--set", "train.keep_last=0",
              *[x for o in a.set for x in ("--set", o)]]
    t0 = time.time()
    timings: dict[str, float] = {}

    def train_run(name: str, src: str, tgt: str, *extra: str) -> Path:
        start = time.time()
        run = work / name
        nmtkit("train", a.config, "--run-dir", str(run), "--overwrite", *common,
               "--set", f"data.src_lang={src}", "--set", f"data.tgt_lang={tgt}", *extra)
        timings[name] = round(time.time() - start, 1)
        return run / "best.pt"

    reverse = train_run("reverse", t, s)
    start = time.time()
    nmtkit("backtranslate", "--model", str(reverse), "-i", str(work / f"B.{t}"),
           "-o", str(work / "synth"))
    timings["backtranslate"] = round(time.time() - start, 1)
    baseline = train_run("baseline", s, t)
    extra = json.dumps([{"path": str(work / "synth"), "weight": 1.0, "tag": "<bt>"}])
    bt = train_run("backtranslation", s, t, "--set", f"data.extra={extra}")

    def evaluate(model: Path) -> dict[str, dict[str, float]]:
        out = {}
        for split in a.splits:
            r = json.loads(nmtkit("evaluate", "--model", str(model), "--split", str(work / split)))
            out[split] = {"bleu": r["bleu"], "chrf": r["chrf"]}
        return out

    scores = {"reverse": evaluate(reverse), "baseline": evaluate(baseline),
              "backtranslation": evaluate(bt)}
    gain = {split: {m: round(scores["backtranslation"][split][m] - scores["baseline"][split][m], 2)
                    for m in ("bleu", "chrf")} for split in a.splits}
    emit({"benchmark": "backtranslation", "direction": f"{s}-{t}", "recipe": a.config,
          "overrides": a.set, "steps_per_run": a.steps, "parallel_pairs": half,
          "monolingual_lines": len(mono), "scores": scores,
          "gain_of_backtranslation": gain, "seconds": {**timings, "total": round(time.time() - t0, 1)},
          "note": "one seed; val is the validation split of every run, test_2016_flickr only "
                  "reported (nothing was tuned on it)"}, a.out)


if __name__ == "__main__":
    main()
