"""Time to quality: what the main job's minutes buy on this CPU, run as a new user runs it.

Runs the README's main command (``scripts/quickstart.sh``: set-up, training for ``--minutes``,
test_2016_flickr with beam 5) in a fresh run directory and, with ``--fresh-clone``, in a
fresh clone of this checkout's HEAD (its own virtual environment, nothing cached from an
earlier run: the first run a user gets). ``--load-seconds`` keeps the cores busy for the
training's first seconds (a laptop doing something else as the run starts). Prints (and
with ``--out`` writes) JSON: the host (CPU, :func:`nmtkit.fast.onednn.host_kind`, the
measured matmul rate), and per run the updates, target tokens, the budget plans as the run
made them (``budget_plans.json``), the validations (greedy val BLEU by minute), the minutes
to val BLEU 20 and 30 (the first validation at or above it; null where none was), and
test_2016_flickr's sacreBLEU. ``benchmarks/report.py`` renders the table in docs/results.md.

    python benchmarks/time_to_quality.py --fresh-clone --out benchmarks/results/time_to_quality_X.json
    python benchmarks/time_to_quality.py --fresh-clone --load-seconds 60 --append --out ...
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common  # noqa: E402
import quickstart_budget  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
THRESHOLDS = (20.0, 30.0)  # val BLEU (greedy) whose minutes are reported


def read_run(run_dir: Path) -> dict[str, Any]:
    """A finished run's own files: its validations (``metrics.csv``: step, target tokens,
    minutes, greedy val BLEU) and its budget plans (``budget_plans.json``), and the minutes
    to each of :data:`THRESHOLDS`."""
    with open(run_dir / "metrics.csv", encoding="utf-8", newline="") as f:
        rows = list(csv.DictReader(f))
    validations = [{"step": int(r["step"]), "tgt_tokens": int(r["tgt_tokens"]),
                    "minutes": round(float(r["elapsed_s"]) / 60, 2),
                    "valid_bleu": float(r["valid_bleu"]) if r["valid_bleu"] else None}
                   for r in rows]
    plans_file = run_dir / "budget_plans.json"
    plans = json.loads(plans_file.read_text(encoding="utf-8")) if plans_file.exists() else []
    to = {f"minutes_to_val_bleu_{t:g}": next(
        (v["minutes"] for v in validations if v["valid_bleu"] is not None and v["valid_bleu"] >= t),
        None) for t in THRESHOLDS}
    last = validations[-1] if validations else {}
    return {"updates": last.get("step"), "tgt_tokens": last.get("tgt_tokens"),
            "valid_bleu": last.get("valid_bleu"), **to, "validations": validations,
            "budget_plans": plans}


def fresh_clone(into: Path) -> Path:
    """A clone of this checkout's HEAD (committed work only) in ``into``: its quickstart."""
    subprocess.run(["git", "clone", "--quiet", str(ROOT), str(into)], check=True)
    return into / "scripts" / "quickstart.sh"


def host() -> dict[str, Any]:
    """The CPU, its kind for training and its measured float32 matmul rate (2 threads)."""
    sys.path.insert(0, str(ROOT / "src"))
    from nmtkit.fast import onednn

    return {"machine": _common.machine(), "host_kind": onednn.host_kind(),
            "matmul_gflops": round(_common.matmul_peak_gflops(2), 1)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--minutes", type=float, default=10.0)
    p.add_argument("--fresh-clone", action="store_true",
                   help="run the quickstart of a fresh clone of HEAD (its first run)")
    p.add_argument("--load-seconds", type=float, default=0.0,
                   help="two threads of matrix products beside the training's first seconds")
    p.add_argument("--condition", default="", help="what this run stands for")
    p.add_argument("--note", default="", help="what else was on the machine (kept with --append)")
    p.add_argument("--out")
    p.add_argument("--append", action="store_true", help="add this run to those in --out")
    a = p.parse_args()
    data = ROOT.parent / "shared" / "data"
    if "NMTKIT_DATA" not in os.environ and (data / "multi30k").is_dir():
        os.environ["NMTKIT_DATA"] = str(data)  # the offline mirror (else downloaded)
    machine = host()
    with tempfile.TemporaryDirectory(prefix="nmtkit_ttq_") as tmp:
        script = (fresh_clone(Path(tmp) / "nmtkit") if a.fresh_clone
                  else ROOT / "scripts" / "quickstart.sh")
        run_dir = script.parent.parent / "runs" / "time_to_quality"
        printed = quickstart_budget.run_quickstart(a.minutes, str(run_dir), a.load_seconds, 2,
                                                   script)
        run = {"minutes": a.minutes, "fresh_clone": a.fresh_clone,
               "condition": a.condition or (f"cores busy for the first {a.load_seconds:g} s"
                                            if a.load_seconds else "alone on the cores"),
               "command": shlex.join([Path(sys.executable).name, *sys.argv]),
               "test_2016_flickr": printed["test_2016_flickr"],
               "demo_translations": printed["demo_translations"],
               "stop_reason": printed["stop_reason"], **read_run(run_dir)}
    result = {"benchmark": "time_to_quality", **machine, "note": a.note, "runs": [run]}
    _common.emit_runs(result, a.out, a.append)


if __name__ == "__main__":
    sys.exit(main())
