"""The README's main command as a new user runs it, alone or beside a CPU load for its first
minutes (issue 17, goal 6: a budget-planned run must fill its minutes when the machine's
speed changes under it, as when another job ends).

Runs ``scripts/quickstart.sh`` (its own set-up, training, test evaluation with beam 5 and
the two demo translations). With ``--load-seconds S`` a load process of ``--load-threads``
threads multiplying matrices starts when training starts (the script's "quickstart:" line)
and ends S seconds later. Prints (and with ``--out`` writes) the JSON that
``benchmarks/report.py`` renders as the quickstart table: the host and its matmul rate, and
under ``runs`` this run (with ``--append``, after the runs already in ``--out``): its
condition and command, updates, training time, stop reason, every budget plan logged, the
validations, test BLEU and the demo translations.

    python benchmarks/quickstart_budget.py --minutes 10 --out benchmarks/results/X.json
    python benchmarks/quickstart_budget.py --minutes 10 --load-seconds 180 --out ...
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent

PLAN = re.compile(r"budget plan(?: \(revision \d+\))?: \d+ updates.*")  # a plan logged
VALID_BLEU = re.compile(r" bleu ([0-9.]+)")  # in a validation's line

# The load: ``threads`` threads of float32 matrix products for ``seconds``, then exit.
LOAD = """
import sys, time, torch
threads, seconds = int(sys.argv[1]), float(sys.argv[2])
torch.set_num_threads(threads)
a = torch.randn(1024, 1024)
end = time.monotonic() + seconds
while time.monotonic() < end:
    a @ a
"""


def parse_run(stdout: str, log: str) -> dict[str, Any]:
    """What the quickstart printed: the training summary (the JSON line with ``run_dir``),
    the evaluation (the JSON line with ``split``), the demo translations (the lines after
    it), and from the log every budget plan and validation line."""
    lines = stdout.splitlines()
    train = evaluation = None
    after_eval = len(lines)
    for i, line in enumerate(lines):
        if not line.startswith("{"):
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError:
            continue
        if "run_dir" in obj:
            train = obj
        elif "split" in obj:
            evaluation, after_eval = obj, i + 1
    if train is None or evaluation is None:
        raise ValueError("the quickstart printed no training summary or no evaluation "
                         f"(last lines: {lines[-5:]})")
    plans = [m.group(0) for m in PLAN.finditer(log)]
    validations = [line[line.index("step "):] for line in log.splitlines()
                   if ": valid loss " in line]
    greedy = [float(m.group(1)) for v in validations if (m := VALID_BLEU.search(v))]
    return {"updates": train["step"], "epochs": train["epoch"],
            "elapsed_s": train.get("elapsed_s"), "stop_reason": train.get("stop_reason"),
            "valid_bleu_greedy": max(greedy, default=None),  # best.pt's, which is evaluated
            "test_2016_flickr": evaluation,
            "demo_translations": [s for s in lines[after_eval:] if s.strip()],
            "budget_plans": plans, "validations": validations}


def run_quickstart(minutes: float, run_dir: str, load_seconds: float, load_threads: int,
                   script: Path) -> dict[str, Any]:
    """Run ``script`` (the quickstart) with MINUTES and RUN set; start the load when its
    "quickstart:" line appears. Returns :func:`parse_run`'s figures and the load's times."""
    env = {**os.environ, "MINUTES": f"{minutes:g}", "RUN": run_dir}
    load: dict[str, Any] = {}
    with tempfile.TemporaryFile("w+", encoding="utf-8") as log:
        proc = subprocess.Popen(["bash", str(script)], cwd=ROOT, env=env, text=True,
                                stdout=subprocess.PIPE, stderr=log)
        assert proc.stdout is not None
        out: list[str] = []
        loader: subprocess.Popen[bytes] | None = None
        try:
            for line in proc.stdout:
                out.append(line)
                if line.startswith("quickstart:") and load_seconds > 0 and loader is None:
                    loader = subprocess.Popen([sys.executable, "-c", LOAD, str(load_threads),
                                               str(load_seconds)])
                    load = {"seconds": load_seconds, "threads": load_threads}
            rc = proc.wait()
        finally:
            if loader is not None:
                if loader.poll() is None:
                    loader.kill()
                loader.wait()
        log.seek(0)
        text = log.read()
    if rc != 0:
        raise RuntimeError(f"{script} exited with {rc}; its log ends: {text[-2000:]}")
    return {**parse_run("".join(out), text), "load": load or None}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--minutes", type=float, default=10.0, help="MINUTES of the quickstart")
    p.add_argument("--load-seconds", type=float, default=0.0,
                   help="a CPU load beside the training's first seconds (0: none)")
    p.add_argument("--load-threads", type=int, default=2)
    p.add_argument("--run-dir", default="runs/quickstart_budget")
    p.add_argument("--script", type=Path, default=ROOT / "scripts" / "quickstart.sh",
                   help=argparse.SUPPRESS)  # (tests run a stand-in)
    p.add_argument("--matmul-threads", type=int, default=2,
                   help="threads of the matmul rate measured before (0: not measured)")
    p.add_argument("--condition", default="alone on the cores",
                   help="what this run stands for (the report's budget column)")
    p.add_argument("--note", default="", help="the file's note (kept from --out with --append)")
    p.add_argument("--out")
    p.add_argument("--append", action="store_true",
                   help="add this run to the runs already in --out (one host, several conditions)")
    a = p.parse_args()
    rate = (round(_common.matmul_peak_gflops(a.matmul_threads), 1) if a.matmul_threads
            else None)
    run = {"minutes": a.minutes, "stands_for": a.condition,
           "command": shlex.join([Path(sys.executable).name, *sys.argv]),
           "matmul_gflops_before": rate,
           **run_quickstart(a.minutes, a.run_dir, a.load_seconds, a.load_threads, a.script)}
    result = {"benchmark": "quickstart_budget", "machine": _common.machine(),
              "torch": torch.__version__, "matmul_gflops": rate, "note": a.note, "runs": [run]}
    _common.emit_runs(result, a.out, a.append)


if __name__ == "__main__":
    sys.exit(main())
