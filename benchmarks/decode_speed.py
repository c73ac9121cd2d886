"""Decoding throughput of a trained nmtkit checkpoint beside the seed's reference, in one run.

nmtkit: the first ``--n`` lines of test_2016_flickr (de), batches of ``--batch-size``
sentences, greedy, beam 5, and beam 5 with ``decode.early_stop`` (with the share of its
outputs equal to plain beam 5's), model load excluded; unless ``--no-extra-searches``, also
beam 5 with a forced prefix per sentence (the reference's first two words) and with one
constraint per sentence (the reference's longest word), whose speed beside plain beam 5 of
the same rounds is their cost (``*_speed_vs_beam5``). Reference: its one-sentence-at-a-time
``greedy_decode`` (72 steps) from ../shared/bench/reference_speed.py with the same model
size. The ratios come from ``--rounds`` rounds in which the reference and nmtkit (a fresh
process each; nmtkit one timed pass of greedy, beam 5 and beam 5 with early stop)
alternate: the median of each ratio is reported, with every round's figures. The best of
``--repeats`` passes, the outputs compared and CTranslate2 come from one more process.
Reported: sentences per second, ratios, peak RSS of the decoding process.
With ``--ct2`` the checkpoint is also exported to CTranslate2 (float32 and int8, into a
temporary directory) and decoded there on the same sentences, ``--threads`` intra-op
threads, through ``nmtkit.export.ctranslate2_engine.CTranslate2Translator`` (tokenization
included, as for nmtkit; one call per batch at its largest length cap, and
``*_exact_caps_*`` with each sentence's own cap, the default), with the share of outputs
identical to nmtkit's, and by CTranslate2 alone (pre-tokenized input, the same caps and
length penalty).

    NMTKIT_DATA=../shared/data .venv/bin/python benchmarks/decode_speed.py --model runs/x/best.pt [--ct2]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

# benchmarks/ is the script's directory
from _common import (
    add_baseline_args,
    add_decode_setup_args,
    add_source_arg,
    emit,
    machine,
    matmul_peak_gflops,
    median_round,
    worker_env,
)

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"
SEARCHES = ("greedy", "beam5", "beam5_early_stop")
# Beam 5 with a forced prefix (the first two words of each reference) and with one
# constraint (the reference's longest word) per sentence: nmtkit only (not in a baseline).
EXTRA_SEARCHES = ("beam5_prefix", "beam5_constraint")
PUNCTUATION = ".,;:!?\"'()"
# ../shared/bench/PEERS.md: decoding sents/s on this machine kind, and the reference's greedy.
PEERS_DECODE = {"OpenNMT-py": {"greedy": "172-223", "beam5": "74-79"},
                "fairseq": {"greedy": "82-88", "beam5": "69-71"},
                "CTranslate2 fp32": {"greedy": "530-575", "beam5": "134-140"}}
PEERS_REFERENCE_GREEDY = 1.92


def worker(a: argparse.Namespace) -> dict:
    import torch
    from _common import nmtkit_checkpoint_module, nmtkit_translate, nmtkit_translator

    from nmtkit.data.corpora import load_parallel

    load_bundle = nmtkit_checkpoint_module().load_bundle

    torch.set_num_threads(a.threads)
    bundle = load_bundle(a.model)
    test = load_parallel(bundle.cfg.data, "test_2016_flickr")
    src, ref = test.src[: a.n], test.tgt[: a.n]
    out, outputs = {}, {}
    runs = [("greedy", 1, False, {}), ("beam5", 5, False, {}), ("beam5_early_stop", 5, True, {})]
    if a.extra_searches:
        prefixes = [" ".join(r.split()[:2]) for r in ref]
        constraints = [[max((w.strip(PUNCTUATION) for w in r.split()), key=len)] if r.split() else []
                       for r in ref]
        runs += [("beam5_prefix", 5, False, {"prefixes": prefixes}),
                 ("beam5_constraint", 5, False, {"constraints": constraints})]
    for name, beam, early, extra in runs:
        tr = nmtkit_translator(bundle, early_stop=early, **({"fast": False} if a.no_fast else {}))

        def run(lines: list[str], tr=tr, beam: int = beam, extra: dict = extra) -> list[str]:
            if not extra:
                return tr.translate_lines(lines, beam=beam, batch_size=a.batch_size)
            cut = {k: v[: len(lines)] for k, v in extra.items()}
            return [r[0].text for r in nmtkit_translate(tr, lines, beam=beam, batch_size=a.batch_size,
                                                        **cut)]

        run(src[: a.batch_size])  # warm-up
        best = float("inf")
        for _ in range(a.repeats):
            t0 = time.perf_counter()
            hyps = run(src)
            best = min(best, time.perf_counter() - t0)
        out[f"{name}_sents_per_s"] = round(len(src) / best, 1)
        out[f"{name}_mean_output_words"] = round(sum(len(h.split()) for h in hyps) / len(hyps), 2)
        outputs[name] = hyps
    out["peak_rss_gb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6, 3)
    out["n"] = len(src)
    if a.round_only:
        return out
    out["beam5_early_stop_same_output"] = round(sum(
        x == y for x, y in zip(outputs["beam5"], outputs["beam5_early_stop"], strict=True))
        / len(src), 3)
    if a.ct2:
        out["ctranslate2"] = ct2_worker(a, src, outputs)
    return out


def ct2_worker(a: argparse.Namespace, src: list[str], nmtkit_hyps: dict[str, list[str]]) -> dict:
    """Export to CTranslate2 (float32, int8) and time greedy/beam 5 on the same sentences."""
    import tempfile

    from nmtkit.export.ctranslate2 import export_ctranslate2
    from nmtkit.export.ctranslate2_engine import CTranslate2Translator
    from nmtkit.rules import output_cap

    out: dict = {}
    with tempfile.TemporaryDirectory() as tmp:
        for quant in ("float32", "int8"):
            model_dir = export_ctranslate2(a.model, Path(tmp) / quant, quantization=quant)
            tr = CTranslate2Translator(model_dir, device="cpu", intra_threads=a.threads)
            res: dict = {}
            for name, beam in (("greedy", 1), ("beam5", 5)):
                # One CTranslate2 call per batch (every sentence capped at the batch's largest
                # length cap), as nmtkit's own batches run.
                tr.translate_lines(src[: a.batch_size], beam=beam, batch_size=a.batch_size,
                                   exact_caps=False)
                best = float("inf")
                for _ in range(a.repeats):
                    t0 = time.perf_counter()
                    hyps = tr.translate_lines(src, beam=beam, batch_size=a.batch_size,
                                              exact_caps=False)
                    best = min(best, time.perf_counter() - t0)
                res[f"{name}_sents_per_s"] = round(len(src) / best, 1)
                # The default: every sentence gets its own length cap (what `nmtkit serve
                # --engine ctranslate2` and translate_lines() without exact_caps=False run).
                best_exact = float("inf")
                for _ in range(a.repeats):
                    t0 = time.perf_counter()
                    tr.translate_lines(src, beam=beam, batch_size=a.batch_size)
                    best_exact = min(best_exact, time.perf_counter() - t0)
                res[f"{name}_exact_caps_sents_per_s"] = round(len(src) / best_exact, 1)
                # CTranslate2 alone: pre-tokenized input, the same length cap and penalty,
                # no detokenizing; what the wrapper adds is the difference.
                tokens = [tr.encode_source(line)[1] for line in src]
                cfg = tr.decode_cfg
                steps = max(output_cap(len(t) + 1, cfg.max_len_a, cfg.max_len_b) - 1 for t in tokens)
                options = dict(max_batch_size=a.batch_size, beam_size=beam,
                               max_decoding_length=steps, max_input_length=0,
                               length_penalty=tr.decode_cfg.length_penalty if beam > 1 else 0.0)
                best_raw = float("inf")
                for _ in range(a.repeats):
                    t0 = time.perf_counter()
                    tr.translator.translate_batch(tokens, **options)
                    best_raw = min(best_raw, time.perf_counter() - t0)
                res[f"{name}_ct2_alone_sents_per_s"] = round(len(src) / best_raw, 1)
                res[f"{name}_same_output_as_nmtkit"] = round(
                    sum(h == r for h, r in zip(hyps, nmtkit_hyps[name], strict=True)) / len(src), 3)
            out[quant] = res
    out["threads"] = a.threads
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_decode_setup_args(p)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--ref-decode-n", type=int, default=10)
    p.add_argument("--rounds", type=int, default=7,
                   help="the reference's greedy and nmtkit's greedy, beam 5 and beam 5 with early "
                        "stop (one timed pass each) alternate this many times; the median ratios "
                        "are reported")
    p.add_argument("--ct2", action="store_true",
                   help="also export to CTranslate2 (needs [export]) and time it, fp32 and int8")
    p.add_argument("--out", default=None)
    add_source_arg(p)
    add_baseline_args(p)
    p.add_argument("--no-extra-searches", dest="extra_searches", action="store_false",
                   help="leave out beam 5 with forced prefixes and with constraints")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--round-only", action="store_true", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.worker:
        print(json.dumps(worker(a)))
        return
    from _common import nmtkit_checkpoint_module

    load_checkpoint = nmtkit_checkpoint_module().load_checkpoint

    m = load_checkpoint(a.model)["config"]["model"]
    layers = m["enc_layers"] or m["layers"]
    ref_cmd = [sys.executable, str(SHARED / "bench" / "reference_speed.py"), "--layers", str(layers),
               "--d-model", str(m["d_model"]), "--d-ff", str(m["d_ff"]), "--heads", str(m["heads"]),
               "--steps", "1", "--decode-n", str(a.ref_decode_n), "--threads", str(a.threads)]

    def worker_json(*extra: str, src: str | None = a.src, no_fast: bool = a.no_fast,
                    extra_searches: bool = a.extra_searches) -> dict:
        cmd = [sys.executable, __file__, "--worker", "--model", a.model, "--n", str(a.n),
               "--batch-size", str(a.batch_size), "--threads", str(a.threads), *extra,
               *["--no-fast"] * no_fast, *["--no-extra-searches"] * (not extra_searches)]
        return json.loads(subprocess.run(cmd, capture_output=True, text=True, check=True,
                                         env=worker_env(src)).stdout.strip().splitlines()[-1])

    # nmtkit against the reference: the two alternate, a fresh process and one timed pass
    # each, so that both see the same drift of this shared CPU; the median ratios are reported.
    rounds, baseline_rounds = [], []
    for _ in range(a.rounds):
        ref = json.loads(subprocess.run(ref_cmd, capture_output=True, text=True, check=True)
                         .stdout.strip().splitlines()[-1])["decode_sents_per_s"]
        ours_round = worker_json("--round-only", "--repeats", "1")
        if a.baseline_src:
            base = worker_json("--round-only", "--repeats", "1", src=a.baseline_src, no_fast=False,
                               extra_searches=False)
            baseline_rounds.append({k: round(ours_round[f"{k}_sents_per_s"] / base[f"{k}_sents_per_s"], 3)
                                    for k in SEARCHES})
        searches = [k for k in (*SEARCHES, *EXTRA_SEARCHES) if f"{k}_sents_per_s" in ours_round]
        rounds.append({"reference_sents_per_s": ref,
                       **{f"nmtkit_{k}_sents_per_s": ours_round[f"{k}_sents_per_s"] for k in searches},
                       **{f"{k}_ratio": round(ours_round[f"{k}_sents_per_s"] / ref, 1)
                          for k in searches}})
    med = median_round([(r["greedy_ratio"], r) for r in rounds])[1]
    beam_ratio = median_round([(r["beam5_ratio"], r) for r in rounds])[0]
    early_ratio = median_round([(r["beam5_early_stop_ratio"], r) for r in rounds])[0]
    ours = worker_json("--repeats", str(a.repeats), *(["--ct2"] if a.ct2 else []))
    ct2 = ours.pop("ctranslate2", None)
    result = {
        "benchmark": "decode_speed", "machine": machine(),
        "model": a.model, "nmtkit_src": a.src, "nmtkit_fast": not a.no_fast,
        "model_dims": {k: m[k] for k in ("layers", "d_model", "d_ff", "heads")},
        "batch_size": a.batch_size, "nmtkit": ours,
        "cpu_matmul_peak_gflops": round(matmul_peak_gflops(a.threads), 1),
        "reference_one_at_a_time_greedy_sents_per_s": med["reference_sents_per_s"],
        "nmtkit_greedy_sents_per_s_beside_reference": med["nmtkit_greedy_sents_per_s"],
        "greedy_speedup_vs_reference": med["greedy_ratio"],
        "beam5_speed_vs_reference_greedy": beam_ratio,
        "beam5_early_stop_speed_vs_reference_greedy": early_ratio,
        # Forced prefixes / constraints against plain beam 5, per round (same process, same
        # sentences): 1.0 = no cost.
        **({f"{k}_speed_vs_beam5": median_round([(round(r[f"nmtkit_{k}_sents_per_s"]
                                                  / r["nmtkit_beam5_sents_per_s"], 3),) for r in rounds])[0]
            for k in EXTRA_SEARCHES} if a.extra_searches else {}),
        "rounds": rounds,
        # The same ratios for the peers, from PEERS.md's figures.
        "peers_ratio_to_reference_greedy_PEERS_md": {
            name: {k: "-".join(f"{float(x) / PEERS_REFERENCE_GREEDY:.1f}" for x in v.split("-"))
                   for k, v in PEERS_DECODE[name].items()}
            for name in ("OpenNMT-py", "fairseq")},
        "peers_same_machine_kind": {**PEERS_DECODE, "source": "shared/bench/PEERS.md"},
    }
    if baseline_rounds:
        result["baseline"] = {
            "src": a.baseline_src, "rounds_speed_vs_baseline": baseline_rounds,
            **{f"{k}_speed_vs_baseline": median_round([(r[k],) for r in baseline_rounds])[0]
               for k in SEARCHES}}
    if ct2 is not None:
        ct2["float32_greedy_speedup_vs_nmtkit"] = round(
            ct2["float32"]["greedy_sents_per_s"] / ours["greedy_sents_per_s"], 2)
        ct2["float32_beam5_speedup_vs_nmtkit"] = round(
            ct2["float32"]["beam5_sents_per_s"] / ours["beam5_sents_per_s"], 2)
        result["ctranslate2"] = ct2
    emit(result, a.out)


if __name__ == "__main__":
    main()
