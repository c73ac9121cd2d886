"""Transformer vs RNN with additive attention, same data, same wall-clock budget, one table.

Each architecture trains from its recipe for ``--minutes`` on Multi30k de->en, then its
best checkpoint (by validation BLEU) translates test_2016_flickr with beam 5. Reported:
test BLEU/chrF (sacreBLEU, cased, detokenized), parameters, training target tokens/s,
and decoding sentences/s. Writes JSON and a Markdown table into benchmarks/results/.

    NMTKIT_DATA=../shared/data .venv/bin/python benchmarks/compare_architectures.py --minutes 10
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
import time
from pathlib import Path

from _common import machine, run_nmtkit  # benchmarks/ is the script's directory

from nmtkit.io import atomic_write_text

ROOT = Path(__file__).resolve().parents[1]
RECIPES = {"transformer": "configs/multi30k_transformer_small.yaml",
           "rnn": "configs/multi30k_rnn_attention.yaml"}


def one(arch: str, minutes: float, runs: Path, valid_every: int, beam: int) -> dict:
    run = runs / f"{arch}_{minutes:g}min"
    run_nmtkit("train", RECIPES[arch], "--run-dir", str(run), "--overwrite",
               "--set", f"train.max_minutes={minutes}", "--set", f"train.valid_every={valid_every}",
               "--set", "train.patience=0")
    with open(run / "metrics.csv") as f:
        rows = list(csv.DictReader(f))
    last = rows[-1]
    t0 = time.perf_counter()
    ev = json.loads(run_nmtkit("evaluate", "--model", str(run / "best.pt"), "--split",
                               "test_2016_flickr", "--beam", str(beam)))
    decode_s = time.perf_counter() - t0
    from _common import nmtkit_checkpoint_module

    load_bundle = nmtkit_checkpoint_module().load_bundle

    model = load_bundle(run / "best.pt").model
    params = sum(p.numel() for p in {id(p): p for p in model.parameters()}.values())
    return {"arch": arch, "recipe": RECIPES[arch], "minutes": minutes, "steps": int(last["step"]),
            "test_bleu": ev["bleu"], "test_chrf": ev["chrf"], "bleu_signature": ev["signature"]["bleu"],
            "best_valid_bleu": max(float(r["valid_bleu"]) for r in rows if r["valid_bleu"]),
            "params": params,
            "train_tgt_tokens_per_s": round(int(last["tgt_tokens"]) / float(last["elapsed_s"]), 1),
            "decode_beam": beam,
            "decode_sents_per_s_incl_load": round(ev["n"] / decode_s, 1), "run_dir": str(run)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--minutes", type=float, default=10)
    p.add_argument("--valid-every", type=int, default=200)
    p.add_argument("--beam", type=int, default=5)
    p.add_argument("--runs", default="runs/compare")
    p.add_argument("--archs", nargs="+", default=["transformer", "rnn"])
    a = p.parse_args()
    rows = [one(arch, a.minutes, ROOT / a.runs, a.valid_every, a.beam) for arch in a.archs]
    stamp = time.strftime("%Y-%m-%d")
    result = {"benchmark": "compare_architectures", "date": time.strftime("%Y-%m-%d %H:%M:%S"),
              "machine": f"{machine()}, CPU only",
              "command": " ".join(["python", *sys.argv]), "rows": rows}
    out = ROOT / "benchmarks" / "results"
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / f"architectures_{stamp}.json", json.dumps(result, indent=2) + "\n")
    lines = ["| architecture | minutes | steps | test BLEU | chrF | params | train tgt tok/s | "
             "beam-5 sents/s (incl. load) |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['arch']} | {r['minutes']:g} | {r['steps']} | {r['test_bleu']} | "
                     f"{r['test_chrf']} | {r['params'] / 1e6:.1f}M | {r['train_tgt_tokens_per_s']} | "
                     f"{r['decode_sents_per_s_incl_load']} |")
    table = "\n".join(lines)
    atomic_write_text(out / f"architectures_{stamp}.md",
                      f"{table}\n\n{result['machine']}; `{result['command']}`\n")
    print(json.dumps(result, indent=2))
    print(table)


if __name__ == "__main__":
    main()
