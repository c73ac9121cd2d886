"""The README's CPU speed table, generated from benchmark JSON files in benchmarks/results/.

Each row names the file it comes from and the command that wrote it, so every number in
the table can be rerun. Peer figures are those of ../shared/bench/PEERS.md, measured on the
same machine kind (the benchmark JSON carries them too).

    python benchmarks/report.py --train benchmarks/results/train_speed_cpu_X.json \\
        --decode benchmarks/results/decode_speed_cpu_X.json [--peers ...] [--compile ...]
        [--corpus ...]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def _load(path: str | None) -> dict | None:
    return json.loads(Path(path).read_text(encoding="utf-8")) if path else None


def _src(path: str, result: dict) -> str:
    return f"`{Path(path).name}`: `{result['command']}`"


def train_row(path: str, r: dict) -> str:
    ours, ref = r["nmtkit"], r["reference"]
    peers = r["peers_tgt_tokens_per_s_same_machine_kind"]
    rounds = r.get("rounds")
    spread = (f" (median of {len(rounds)} alternating rounds: "
              f"{min(x['ratio'] for x in rounds)}-{max(x['ratio'] for x in rounds)}x)" if rounds else "")
    return (f"| training, target tokens/s | **{ours['tgt_tokens_per_s']:,.0f}** = "
            f"**{r['speedup_vs_reference']}x** the reference ({ref['train_tgt_tokens_per_s']}) "
            f"in the same run{spread}; {r['mfu_of_measured_matmul_peak']:.0%} of this CPU's measured "
            f"matmul rate ({r['cpu_matmul_peak_gflops']} GFLOP/s); peak RSS "
            f"{ours['peak_rss_gb']:.2f} GB (reference {ref['peak_rss_gb_children_max']:.2f}) "
            f"| fairseq {peers['fairseq']:,}, OpenNMT-py {peers['OpenNMT-py']:,}, JoeyNMT "
            f"{peers['JoeyNMT']:,}; peak RSS fairseq 1.62, OpenNMT-py 2.94 GB | {_src(path, r)} |")


def peers_row(path: str, r: dict) -> str:
    ref = r["reference"]
    parts = [f"{name} {p['version'].get(name, p['version'].get(name.lower(), ''))}: "
             f"{p['tgt_tokens_per_s']:,.0f} tok/s = **{p['ratio_to_reference']}x** its "
             f"reference ({ref['train_tgt_tokens_per_s']}), peak RSS {p['peak_rss_gb']:.2f} GB"
             for name, p in r["peers"].items()]
    skipped = "; ".join(f"{k}: {v}" for k, v in r.get("not_measured", {}).items())
    return (f"| peers re-measured here, training (throwaway venvs, reference in the same run) | - "
            f"| {'; '.join(parts)}{'; not measured: ' + skipped if skipped else ''} "
            f"| {_src(path, r)} |")


def compile_row(path: str, r: dict) -> str:
    ours = r["nmtkit"]
    return (f"| training with `train.compile: true` (torch.compile, inductor) | "
            f"{ours['tgt_tokens_per_s']:,.0f} target tok/s = {r['speedup_vs_reference']}x the "
            f"reference in the same run, after {ours['warmup_s']} s of compilation "
            f"({ours['warmup_steps']} warm-up steps) | - | {_src(path, r)} |")


def decode_rows(path: str, r: dict) -> list[str]:
    ours = r["nmtkit"]
    peers = r["peers_same_machine_kind"]
    rounds = r.get("rounds")
    if rounds:  # reference and nmtkit alternating: median ratios, with their spread
        g = [x["greedy_ratio"] for x in rounds]
        b = [x["beam5_ratio"] for x in rounds]
        peer = r["peers_ratio_to_reference_greedy_PEERS_md"]
        greedy_cell = (f"**{r['greedy_speedup_vs_reference']}x** the reference's one-at-a-time "
                       f"greedy (median of {len(rounds)} alternating rounds, {min(g)}-{max(g)}x; "
                       f"reference {r['reference_one_at_a_time_greedy_sents_per_s']} sents/s in "
                       f"that round); best of the later passes {ours['greedy_sents_per_s']} "
                       f"sents/s; peak RSS {ours['peak_rss_gb']:.2f} GB")
        beam_cell = (f"**{r['beam5_speed_vs_reference_greedy']}x** the reference's greedy "
                     f"(median, {min(b)}-{max(b)}x); best pass {ours['beam5_sents_per_s']} sents/s")
        greedy_peers = (f"OpenNMT-py {peers['OpenNMT-py']['greedy']} sents/s = "
                        f"{peer['OpenNMT-py']['greedy']}x, fairseq {peers['fairseq']['greedy']} "
                        f"= {peer['fairseq']['greedy']}x")
        beam_peers = (f"OpenNMT-py {peers['OpenNMT-py']['beam5']} = {peer['OpenNMT-py']['beam5']}x, "
                      f"fairseq {peers['fairseq']['beam5']} = {peer['fairseq']['beam5']}x")
    else:  # older files: one reference run
        greedy_cell = (f"**{ours['greedy_sents_per_s']}** sents/s = "
                       f"**{r['greedy_speedup_vs_reference']}x** the reference's one-at-a-time "
                       f"greedy in the same run; peak RSS {ours['peak_rss_gb']:.2f} GB")
        beam_cell = f"**{ours['beam5_sents_per_s']}** sents/s"
        greedy_peers = f"OpenNMT-py {peers['OpenNMT-py']['greedy']}, fairseq {peers['fairseq']['greedy']}"
        beam_peers = f"OpenNMT-py {peers['OpenNMT-py']['beam5']}, fairseq {peers['fairseq']['beam5']}"
    rows = [f"| decoding {ours['n']} test sentences, batch {r['batch_size']}, greedy | {greedy_cell} "
            f"| {greedy_peers} | {_src(path, r)} |",
            f"| decoding, beam 5 | {beam_cell} | {beam_peers} | same run |"]
    if rounds and "beam5_early_stop_ratio" in rounds[0]:
        e = [x["beam5_early_stop_ratio"] for x in rounds]
        rows.append(f"| decoding, beam 5 with `decode.early_stop` (OpenNMT-py's stopping rule) | "
                    f"**{r['beam5_early_stop_speed_vs_reference_greedy']}x** the reference's greedy "
                    f"(median, {min(e)}-{max(e)}x); best pass {ours['beam5_early_stop_sents_per_s']} "
                    f"sents/s; {ours['beam5_early_stop_same_output']:.0%} of outputs equal to beam "
                    f"5's | {beam_peers} (OpenNMT-py's own rule) | same run |")
    elif "beam5_early_stop_sents_per_s" in ours:
        rows.append(f"| decoding, beam 5 with `decode.early_stop` (OpenNMT-py's stopping rule) | "
                    f"**{ours['beam5_early_stop_sents_per_s']}** sents/s; "
                    f"{ours['beam5_early_stop_same_output']:.0%} of outputs equal to beam 5's | "
                    f"OpenNMT-py {peers['OpenNMT-py']['beam5']} | same run |")
    ct2 = r.get("ctranslate2")
    if ct2:
        f32, i8 = ct2["float32"], ct2["int8"]
        alone = ""
        if "greedy_ct2_alone_sents_per_s" in f32:
            alone = (f"; CTranslate2 alone on the same model (pre-tokenized, same caps): "
                     f"greedy {f32['greedy_ct2_alone_sents_per_s']} / beam 5 "
                     f"{f32['beam5_ct2_alone_sents_per_s']} (int8 "
                     f"{i8['greedy_ct2_alone_sents_per_s']} / {i8['beam5_ct2_alone_sents_per_s']})")
        rows.append(
            f"| through `nmtkit export --format ctranslate2` ({ct2['threads']} threads) | fp32 "
            f"greedy {f32['greedy_sents_per_s']}, beam 5 {f32['beam5_sents_per_s']}; int8 greedy "
            f"{i8['greedy_sents_per_s']}, beam 5 {i8['beam5_sents_per_s']}; "
            f"{f32['beam5_same_output_as_nmtkit']:.0%} of fp32 beam outputs identical to "
            f"nmtkit's{alone} | CTranslate2 on an OpenNMT-py model: fp32 "
            f"{peers['CTranslate2 fp32']['greedy']} / {peers['CTranslate2 fp32']['beam5']} "
            f"| same run |")
    return rows


def corpus_row(path: str, r: dict) -> str:
    runs = r["runs"]
    mem, build, reuse = runs["in_memory"], runs["mmap_build"], runs["mmap_reuse"]
    return (f"| a {r['corpus_pairs']:,}-pair corpus ({r['corpus_text_mb']} MB of text), "
            f"prepare + {mem['batches']} batches | in memory: {mem['seconds_to_ids']} s, peak "
            f"RSS {mem['peak_rss_gb']:.2f} GB; `data.mmap` first run: {build['seconds_to_ids']} s,"
            f" {build['peak_rss_gb']:.2f} GB; every later run: {reuse['seconds_to_ids']} s, "
            f"{reuse['peak_rss_gb']:.2f} GB (store {r['store_mb']} MB) | - | {_src(path, r)} |")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--train", required=True)
    p.add_argument("--decode", required=True)
    p.add_argument("--compile", help="a train_speed.py --compile result")
    p.add_argument("--corpus", help="a corpus_memory.py result")
    p.add_argument("--peers", help="a peers.py result")
    a = p.parse_args()
    train, decode = _load(a.train), _load(a.decode)
    lines = ["| what | nmtkit | peers, same machine kind (PEERS.md) | file: command |",
             "|---|---|---|---|", train_row(a.train, train)]
    if a.peers:
        lines.append(peers_row(a.peers, _load(a.peers)))
    if a.compile:
        lines.append(compile_row(a.compile, _load(a.compile)))
    lines += decode_rows(a.decode, decode)
    if a.corpus:
        lines.append(corpus_row(a.corpus, _load(a.corpus)))
    print(f"Machine: {train['machine']}, {train['threads']} threads; model "
          f"{train['model']['layers']}+{train['model']['layers']} layers, d_model "
          f"{train['model']['d_model']}, {train['model']['heads']} heads, d_ff "
          f"{train['model']['d_ff']}.\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
