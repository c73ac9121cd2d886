"""docs/results.md: every benchmark figure of nmtkit, generated from the JSON in benchmarks/results/.

Each row names the file it comes from and the command that wrote it, so every number can be
rerun. Peer figures are those of the project's peer measurements (PEERS.md, kept beside the
repository and copied into each benchmark JSON), taken on the same machine kind.

    python benchmarks/report.py --out docs/results.md          # the whole page
    python benchmarks/report.py --train benchmarks/results/train_speed_cpu_X.json \\
        --decode benchmarks/results/decode_speed_cpu_X.json [--peers ...] [--compile ...]
        [--corpus ...]                                          # only the CPU speed table
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"


def _load(path: str | None) -> dict | None:
    return json.loads(Path(path).read_text(encoding="utf-8")) if path else None


def clean(text: str) -> str:
    """A command as recorded, with the paths of the machine it ran on made repository-relative.

    ``NMTKIT_DATA=../shared/data`` (the offline mirror) becomes ``NMTKIT_DATA=MIRROR``, the
    old tree of ``--src`` becomes ``OLD_TREE`` (``NEW_TREE`` beside ``--baseline-src OLD_TREE``),
    a run directory becomes ``runs/...``, and ``/tmp/...`` or the checkout's absolute
    path are dropped, so the page names no file outside the repository.
    """
    text = re.sub(r"NMTKIT_DATA=\S+", "NMTKIT_DATA=MIRROR", text)
    text = re.sub(r"(?:\.\./)+shared/data", "MIRROR", text)
    new_old = "--baseline-src" in text  # then --src is the new tree, --baseline-src the old one
    text = re.sub(r"--baseline-src \S+", "--baseline-src OLD_TREE", text)
    text = re.sub(r"--src \S+", "--src NEW_TREE" if new_old else "--src OLD_TREE", text)
    text = re.sub(r"(?<![\w.])/work/(?:[\w.-]+/)*?(runs/)", r"\1", text)
    text = re.sub(r"(?<![\w.])/(?:work/main|tmp)/", "", text)
    return text


def _src(path: str, result: dict) -> str:
    return f"`{Path(path).name}`: `{clean(result['command'])}`"


def _share(r: dict) -> str:
    """The training step's share of this CPU's matmul rate, as the file measured it."""
    if "rounds_mfu" in r:
        text = (f"{r['mfu_of_measured_matmul_peak']:.0%} of this CPU's matmul rate measured around "
                f"the timed steps (median round; rounds {min(r['rounds_mfu']):.0%}-"
                f"{max(r['rounds_mfu']):.0%}; model FLOPs with attention)")
        if "mfu_of_best_gemm_rate" in r:
            text += (f"; {r['mfu_of_best_gemm_rate']:.0%} of the faster of that rate and "
                     f"oneDNN's GEMM rate ({r['cpu_onednn_gemm_peak_gflops']} GFLOP/s at the end)")
        return text
    return (f"{r['mfu_of_measured_matmul_peak']:.0%} of this CPU's measured matmul rate "
            f"({r['cpu_matmul_peak_gflops']} GFLOP/s)")


def train_row(path: str, r: dict) -> str:
    ours, ref = r["nmtkit"], r["reference"]
    peers = r["peers_tgt_tokens_per_s_same_machine_kind"]
    rounds = r.get("rounds")
    spread = (f" (median of {len(rounds)} alternating rounds: "
              f"{min(x['ratio'] for x in rounds)}-{max(x['ratio'] for x in rounds)}x)" if rounds else "")
    return (f"| training, target tokens/s | **{ours['tgt_tokens_per_s']:,.0f}** = "
            f"**{r['speedup_vs_reference']}x** the reference ({ref['train_tgt_tokens_per_s']}) "
            f"in the same run{spread}; {_share(r)}; peak RSS "
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
            f"outputs identical to nmtkit's: fp32 greedy {f32['greedy_same_output_as_nmtkit']:.1%}, "
            f"beam 5 {f32['beam5_same_output_as_nmtkit']:.1%}, int8 greedy "
            f"{i8['greedy_same_output_as_nmtkit']:.1%}, beam 5 {i8['beam5_same_output_as_nmtkit']:.1%}"
            f"{alone} | CTranslate2 on an OpenNMT-py model: fp32 "
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


def speed_table(train_path: str, decode_path: str, compile_path: str | None = None,
                corpus_path: str | None = None, peers_path: str | None = None) -> list[str]:
    """The CPU speed table (training, decoding, export, corpus) with its machine line."""
    train, decode = _load(train_path), _load(decode_path)
    lines = [f"Machine: {train['machine']}, {train['threads']} threads; model "
             f"{train['model']['layers']}+{train['model']['layers']} layers, d_model "
             f"{train['model']['d_model']}, {train['model']['heads']} heads, d_ff "
             f"{train['model']['d_ff']}.", "",
             "| what | nmtkit | peers, same machine kind (PEERS.md) | file: command |",
             "|---|---|---|---|", train_row(_rel(train_path), train)]
    if peers_path:
        lines.append(peers_row(_rel(peers_path), _load(peers_path)))
    if compile_path:
        lines.append(compile_row(_rel(compile_path), _load(compile_path)))
    lines += decode_rows(_rel(decode_path), decode)
    if corpus_path:
        lines.append(corpus_row(_rel(corpus_path), _load(corpus_path)))
    return lines


def _rel(path: str | Path) -> str:
    p = Path(path).resolve()
    return str(p.relative_to(ROOT)) if p.is_relative_to(ROOT) else str(path)


def _res(name: str) -> str:
    return str(RESULTS / name)


def _bleu_cell(r: dict, key: str) -> str:
    v = r.get(key)
    return "-" if not v else f"{v['bleu']:.2f} (chrF {v['chrf']:.1f})"


def quality_section() -> list[str]:
    """Multi30k test BLEU: the 1-hour CPU runs, the GPU runs, and the architecture comparison."""
    run1 = _load(_res("multi30k_small_1h_cpu_2026-11-22.json"))
    run2 = _load(_res("multi30k_small_1h_cpu_2026-11-22_run2.json"))
    gpu = _load(_res("gpu_h100_2026-11-22/summary.json"))
    arch = _load(_res("architectures_2026-11-22.json"))
    sig = run2["bleu_signature"]
    out = ["## Quality: Multi30k de->en, test_2016_flickr", "",
           f"sacreBLEU on detokenized, cased output (`{sig}`), 1,000 sentences, one reference.", "",
           "### One hour on a 2-core CPU with the Noam schedule "
           "(`configs/multi30k_transformer_small.yaml`, beam 5)", "",
           "| run | updates (epochs) | best.pt | last.pt | average of the last 3 | peer, same budget "
           "| file |",
           "|---|---|---|---|---|---|---|"]
    t2, peer = run2["test_2016_flickr_beam5"], run2["peer_same_budget"]["fairseq 0.12.2"]
    best2 = next(v for k, v in t2.items() if k.startswith("best"))
    last2 = next(v for k, v in t2.items() if k.startswith("last"))
    avg2 = next(v for k, v in t2.items() if k.startswith("avg"))
    out.append(f"| second run (quiet machine; the Noam schedule) | {run2['training']['steps']:,} "
               f"({run2['training']['epochs_completed']}) | **{best2['bleu']:.2f}** (chrF "
               f"{best2['chrf']:.1f}) | {last2['bleu']:.2f} | {avg2['bleu']:.2f} | fairseq 0.12.2: "
               f"{peer['bleu']:.2f} best checkpoint ({peer['epochs']} epochs) | "
               f"`{Path(_res('multi30k_small_1h_cpu_2026-11-22_run2.json')).name}` |")
    t1 = run1["test_2016_flickr"]
    out.append(f"| first run (cores shared with other work; the guide's figures) | "
               f"{run1['training']['steps']:,} ({run1['training']['epochs_completed']}) | "
               f"{_bleu_cell(t1, 'best.pt_beam5')} | - | {_bleu_cell(t1, 'average_last3_beam5')} "
               f"| - | `{Path(_res('multi30k_small_1h_cpu_2026-11-22.json')).name}` |")
    out += ["", "Commands of the second run:", "", "```bash"]
    out += [clean(c) for c in run2["commands"]] + ["```", "",
            f"Machine: {run2['machine']}. Other processes used the same cores during part of "
            "both hours (the files' `training.note`), the first run's more.", ""]
    out += ["### Five minutes on one GPU", "",
            f"{gpu['device']}, torch {gpu['torch']}. {clean(gpu['how'])}", "",
            "| run | config | overrides | updates (epochs) | beam | best.pt | average of the last 5 |",
            "|---|---|---|---|---|---|---|"]
    for name, r in gpu["runs"].items():
        out.append(f"| `{name}` | {clean(r['config'])} | {', '.join(f'`{o}`' for o in r['overrides'])} "
                   f"| {r['steps']:,} ({r['epochs']}) | {r['test_2016_flickr_best']['beam']} "
                   f"| {_bleu_cell(r, 'test_2016_flickr_best')} | {_bleu_cell(r, 'test_2016_flickr_avg')} |")
    out += ["", "File: `gpu_h100_2026-11-22/summary.json` (each run's `metrics.csv` beside it). "
            "The paper's own base settings (post-norm, dropout 0.1, `run1_base_paper_values`) "
            "overfit this small corpus, which is why the base recipe is pre-norm with dropout 0.3 "
            "(`run3_base`).", "",
            "### Transformer against the recurrent model, same CPU budget", "",
            "Same data, same wall-clock budget, best checkpoint by validation BLEU, beam 5, "
            f"{arch['machine']} (`{Path(_res('architectures_2026-11-22.json')).name}`: "
            f"`NMTKIT_DATA=MIRROR {clean(arch['command'])}`):", "",
            "| architecture | recipe | minutes | updates | test BLEU | chrF | parameters "
            "| train target tok/s | beam-5 sents/s (incl. load) |",
            "|---|---|---|---|---|---|---|---|---|"]
    for r in arch["rows"]:
        out.append(f"| {r['arch']} | `{r['recipe']}` | {r['minutes']:g} | {r['steps']} "
                   f"| {r['test_bleu']:.2f} "
                   f"| {r['test_chrf']:.2f} | {r['params'] / 1e6:.1f}M | {r['train_tgt_tokens_per_s']:,} "
                   f"| {r['decode_sents_per_s_incl_load']} |")
    rnn = gpu["runs"]["run1_rnn"]["test_2016_flickr_best"]["bleu"]
    small = gpu["runs"]["run1_small"]["test_2016_flickr_avg"]["bleu"]
    out += ["", "At 12 CPU minutes the recurrent decoder, which runs one target position at a time "
            "in training too, makes fewer updates than the Transformer and is far from trained. "
            f"Trained to a plateau on one GPU (5 minutes each, side by side, table above): "
            f"Transformer small {small:.2f}, recurrent model with concat attention {rnn:.2f}.", ""]
    return out


def budget_hour_section() -> list[str]:
    """One hour on the CPU with the schedule planned from the budget: every
    multi30k_1h_budget file, each direction with best.pt, last.pt and the average of the
    last three checkpoints; the checkpoint reported is the one with the best val BLEU."""
    out = []
    for f in sorted(RESULTS.glob("multi30k_1h_budget*.json")):
        r = json.loads(f.read_text(encoding="utf-8"))
        out += [f"### {clean(r['title'])}", "", clean(r["protocol"]), "",
                "| direction | updates (epochs) | checkpoint | val BLEU (beam 5) | test_2016_flickr "
                "sacreBLEU | chrF | BLEU vs official lc.norm.tok | file |",
                "|---|---|---|---|---|---|---|---|"]
        for run in r["runs"]:
            for name, c in run["checkpoints"].items():
                chosen = name == run["chosen_on_val"]
                bleu = f"**{c['test']['bleu']:.2f}**" if chosen else f"{c['test']['bleu']:.2f}"
                out.append(f"| {run['direction']} | {run['updates']:,} ({run['epochs']}) "
                           f"| {name}{' (chosen on val)' if chosen else ''} "
                           f"| {c['val']['bleu']:.2f} | {bleu} | {c['test']['chrf']:.1f} "
                           f"| {c['test']['bleu_official_tok']:.2f} | `{f.name}` |")
        out += ["", "Validation BLEU (greedy) during training, beside the same recipe with the "
                "Noam schedule (de->en, `multi30k_small_1h_cpu_2026-11-22_run2.json`):", "",
                "| step | " + " | ".join(run["direction"] + " budget" for run in r["runs"])
                + " | de->en Noam |", "|---" * (len(r["runs"]) + 2) + "|"]
        noam = {int(v["step"]): float(v["valid_bleu"]) for v in
                _load(_res("multi30k_small_1h_cpu_2026-11-22_run2.json"))["validation_curve"]}
        curves = [dict(run["valid_bleu_greedy"]) for run in r["runs"]]
        for step in sorted(set().union(*curves)):
            cells = [f"{c[step]:.2f}" if step in c else "-" for c in curves]
            cells.append(f"{noam[step]:.2f}" if step in noam else "-")
            out.append(f"| {step:,} | " + " | ".join(cells) + " |")
        out += ["", "Commands:", "", "```bash"]
        for run in r["runs"]:
            out += [clean(c) for c in run["commands"]]
        out += ["```", "", f"Machine: {r['machine']}, torch {r['torch']}, matmul "
                f"{r['matmul_gflops']:.0f} GFLOP/s. {clean(r['note'])}", ""]
    return out


def bold(x: float, emphasised: bool) -> str:
    """A score with two decimals, in bold where it is the one to read."""
    return f"**{x:.2f}**" if emphasised else f"{x:.2f}"


def hour_seeds_section() -> list[str]:
    """The hour recipe with several seeds and their ensemble: every multi30k_hour_seeds file.
    One row per seed (val / test BLEU of each checkpoint; bold: the one chosen on val), the
    mean over seeds of each checkpoint, and the ensemble of the chosen checkpoints."""
    out = []
    ckpts = ("best.pt", "last.pt", "avg3.pt")
    for f in sorted(RESULTS.glob("multi30k_hour_seeds*.json")):
        r = json.loads(f.read_text(encoding="utf-8"))
        # benchmarks/seeds.py --metric: the score that chose; a lowercased model's (not
        # "bleu") has no cased sacreBLEU worth reading, so its official score is in bold.
        m = r.get("metric", "bleu")
        shown = {"bleu": ("val BLEU", "test_2016_flickr sacreBLEU"),
                 "chrf": ("val chrF", "test_2016_flickr chrF"),
                 "bleu_lc_tok": ("val bleu_lc_tok", "test_2016_flickr bleu_lc_tok")}[m]
        out += [f"### {clean(r['title'])}", "", clean(r["protocol"]), "",
                f"Each cell: {shown[0]} / {shown[1]} (beam 5); bold: the "
                "checkpoint chosen on val.", "",
                "| seed | updates (epochs) | " + " | ".join(ckpts) + " |", "|---|---|---|---|---|"]
        for run in r["runs"]:
            cells = []
            for name in ckpts:
                c = run["checkpoints"][name]
                cell = f"{c['val'][m]:.2f} / {c['test'][m]:.2f}"
                cells.append(f"**{cell}**" if name == run["chosen_on_val"] else cell)
            seed = f"{run['seed']} ({', '.join(run['overrides'])})" if run.get("overrides") \
                else run["seed"]  # benchmarks/seeds.py --seed-set: this seed's own overrides
            out.append(f"| {seed} | {run['updates']:,} ({run['epochs']}) | "
                       + " | ".join(cells) + " |")
        mean = r["mean_over_seeds_by_checkpoint"]
        out.append(f"| mean of {len(r['runs'])} | | " + " | ".join(
            f"{mean[name]['val']:.2f} / {mean[name]['test']:.2f}" for name in ckpts) + " |")
        single, ens = r["single_model_chosen_on_val"], r["ensemble"]
        out += ["", f"| system | {shown[0]} | test_2016_flickr sacreBLEU | chrF | BLEU vs official "
                "lc.norm.tok |", "|---|---|---|---|---|",
                f"| one model (chosen on val), mean of {len(r['runs'])} seeds | "
                f"{single['val_mean']:.2f} | {single['test_mean']:.2f} "
                f"(s.d. {single['test_stdev']:.2f}) | {single['test_chrf_mean']:.1f} "
                f"| {single['test_official_tok_mean']:.2f} |",
                f"| ensemble of the {len(ens['models'])} chosen checkpoints | "
                f"{ens['val'][m]:.2f} | {bold(ens['test']['bleu'], m == 'bleu')} | "
                f"{ens['test']['chrf']:.1f} | {bold(ens['test']['bleu_official_tok'], m != 'bleu')} |"]
        if "tuned" in ens:  # benchmarks/seeds.py: the penalty chosen on val by nmtkit tune
            t = ens["tuned"]
            out.append(f"| the same ensemble, length penalty {t['chosen']['length_penalty']:g} "
                       f"chosen on val (grid {', '.join(f'{x:g}' for x in t['grid'])}) | "
                       f"{t['chosen'][m]:.2f} | {bold(t['test']['bleu'], m == 'bleu')} | "
                       f"{t['test']['chrf']:.1f} | {bold(t['test']['bleu_official_tok'], m != 'bleu')} |")
        commands = r.get("commands") or [r["command"]]
        matmul = r.get("matmul") or "; ".join(  # benchmarks/seeds.py: measured before each run
            f"seed {run['seed']}: " + ", ".join(f"{k} {v:g}" for k, v in
                                                run["matmul_gflops_before"].items())
            for run in r["runs"] if run.get("matmul_gflops_before")) + " GFLOP/s"
        out += ["", "Commands:", "", "```bash", *[clean(c) for c in commands], "```", "",
                f"Machine: {r['machine']}, torch {r['torch']}, matmul "
                f"{clean(matmul)} (`{f.name}`). {clean(r.get('note', ''))}".rstrip(), ""]
    return out


def quickstart_section() -> list[str]:
    """``scripts/quickstart.sh`` at short budgets (``train.budget_schedule``): every
    quickstart_budget file."""
    out = ["### The quickstart's minutes on a 2-core CPU (`configs/multi30k_transformer_quick.yaml`)",
           "", "The schedule is planned from the budget and the measured time of an update "
           "(`train.budget_schedule`, guide section 14); test BLEU with beam 5.", "",
           "| budget | updates (epochs) | val BLEU (greedy) | test BLEU | chrF | demo translations "
           "| host: matmul, s per update of 4096 tokens | file |",
           "|---|---|---|---|---|---|---|---|"]
    for f in sorted(RESULTS.glob("quickstart_budget*.json")):
        r = json.loads(f.read_text(encoding="utf-8"))
        per_update = r.get("s_per_update_small_recipe_4096_tokens")  # (not timed by every file)
        host = f"{r['matmul_gflops']:.0f} GFLOP/s, " + (f"{per_update:.2f} s" if per_update else "-")
        for run in r["runs"]:
            test = run["test_2016_flickr"]
            demo = " / ".join(run["demo_translations"])
            out.append(f"| {run['minutes']:g} min ({clean(run['stands_for'])}) | {run['updates']:,} "
                       f"({run['epochs']}) | {run['valid_bleu_greedy']:.2f} | **{test['bleu']:.2f}** "
                       f"| {test['chrf']:.1f} | {demo} | {host} | `{f.name}` |")
        out += ["", "Commands:", "", "```bash"] + [clean(run["command"]) for run in r["runs"]]
        out += ["```", "", f"Machine: {r['machine']}, torch {r['torch']}. {clean(r['note'])}", ""]
    return out


def ablation_section() -> list[str]:
    """What each training ingredient adds: every ablation file (validation BLEU only; the
    recipes are tuned on val, never on a test set)."""
    out = []
    for f in sorted(RESULTS.glob("ablation_*.json")):
        r = json.loads(f.read_text(encoding="utf-8"))
        score = r.get("val_score", "BLEU")  # which BLEU compared the rows, where not sacreBLEU
        out += [f"### Ablation: {clean(r['title'])}", "", clean(r["protocol"]), "",
                f"| ingredient | updates | val {clean(score)} (beam 5) | vs. the base | note |",
                "|---|---|---|---|---|"]
        base = r["rows"][0]["val_bleu_beam5"]
        for row in r["rows"]:
            delta = row["val_bleu_beam5"] - base
            out.append(f"| {clean(row['ingredient'])} | {row['updates'] or '-'} "
                       f"| {row['val_bleu_beam5']:.2f} | {delta:+.2f} | {clean(row.get('note', ''))} |")
        out += ["", "Commands:", "", "```bash", *[clean(c) for c in r["commands"]], "```", "",
                f"Machine: {r['machine']}, torch {r['torch']}, matmul "
                # a GPU run says why it has no CPU rate ("matmul"), a CPU run gives the rate
                f"{clean(r.get('matmul') or format(r['matmul_gflops'], '.0f') + ' GFLOP/s')} "
                f"(`{f.name}`).", ""]
    return out


def decode_tuning_section() -> list[str]:
    """Beam search's length penalty chosen on val (nmtkit tune): every decode_tuning file.
    One row per system: val BLEU of each setting tried, the choice, and test_2016_flickr with
    the recipe's setting and with the choice (scored once each, never used to choose)."""
    out = []
    for f in sorted(RESULTS.glob("decode_tuning_*.json")):
        r = json.loads(f.read_text(encoding="utf-8"))
        settings = sorted({(t["beam"], t["length_penalty"]) for sys_ in r["systems"]
                           for t in sys_["trials"]}, key=lambda k: (k[0], k[1] or 0.0))
        head = " | ".join("greedy" if p is None else f"α {p:g}" if b == r["beam"]
                          else f"beam {b}, α {p:g}" for b, p in settings)
        out += [f"### {clean(r['title'])}", "", clean(r["protocol"]), "",
                f"| system | val BLEU: {head} | chosen on val | test sacreBLEU (official "
                "lc.norm.tok): recipe's α | test: chosen α |",
                "|---|" + "---|" * (len(settings) + 3)]
        for sys_ in r["systems"]:
            trials = {(t["beam"], t["length_penalty"]): t for t in sys_["trials"]}
            chosen = sys_["chosen"]
            cells = []
            for key in settings:
                if key not in trials:
                    cells.append("-")
                    continue
                t = trials[key]
                cell = f"{t['bleu']:.2f} ({t['length_ratio']:.3f})"
                same = (chosen["beam"], chosen["length_penalty"]) == key
                cells.append(f"**{cell}**" if same else cell)
            default, tuned = sys_["test_recipe"], sys_["test_chosen"]
            out.append(f"| {clean(sys_['name'])} | " + " | ".join(cells)
                       + f" | α {chosen['length_penalty']:g} | {default['bleu']:.2f} "
                       f"({default['bleu_official_tok']:.2f}) | {tuned['bleu']:.2f} "
                       f"({tuned['bleu_official_tok']:.2f}) |")
        out += ["", "In brackets after a val BLEU: output length / reference length; bold: the "
                "setting chosen on val.", ""]
        for direction, m in r.get("single_model_means", {}).items():
            out.append(f"- {direction}, single models (mean of the seeds): val "
                       f"{m['val_recipe']:.2f} -> {m['val_chosen']:.2f}, test "
                       f"{m['test_recipe']:.2f} -> {m['test_chosen']:.2f} sacreBLEU "
                       f"({m['test_chosen_official_tok']:.2f} official lc.norm.tok).")
        out += ["",
                "Commands:", "", "```bash", *[clean(c) for c in r["commands"]], "```", "",
                f"Machine: {r['machine']}, torch {r['torch']} (`{f.name}`). {clean(r['note'])}",
                ""]
    return out


def val_grid_table(grid: dict, metric: str) -> list[str]:
    """``nmtkit tune``'s trials on val (``grid``: its ``trials`` and the ``command`` that
    wrote them) as one row per length penalty: beam search alone, MBR alone, then each
    reranking (candidates, reverse weight) tried, alone and followed by MBR among its best;
    the best cell bold."""
    trials = grid["trials"]

    def column(t: dict) -> tuple[int, float | None, int]:
        return t.get("rerank", 0), t.get("reverse_weight"), t.get("mbr", 0)

    def name(n: int, w: float | None, m: int) -> str:
        parts = ([f"rerank {n}, w {w:g}"] if n else []) + ([f"MBR {m}"] if m else [])
        return ", then ".join(parts) or "beam alone"

    cols = sorted({column(t) for t in trials},
                  key=lambda c: (c[0], c[1] if c[1] is not None else -1.0, c[2]))
    best = max(t[metric] for t in trials)
    head = ["length penalty"] + [name(*c) for c in cols]
    out = [f"Val {metric} of every setting `nmtkit tune` tried (`{clean(grid['command'])}`):", "",
           "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for alpha in sorted({t["length_penalty"] for t in trials}):
        cells = []
        for c in cols:
            found = [t[metric] for t in trials if t["length_penalty"] == alpha and column(t) == c]
            cells.append("-" if not found else
                         (f"**{found[0]:.2f}**" if found[0] == best else f"{found[0]:.2f}"))
        out.append(f"| {alpha:g} | " + " | ".join(cells) + " |")
    return out


def matmul_rates(rates: dict | float) -> str:
    """A result's measured matmul rates: ``torch 120, onednn 75`` (or one number)."""
    if isinstance(rates, dict):
        return ", ".join(f"{k} {v:.0f}" for k, v in rates.items())
    return f"{rates:.0f}"


def mbr_section() -> list[str]:
    """Minimum Bayes risk decoding against beam search (benchmarks/mbr.py): every mbr file.
    One row per setting with its val scores; test scores only for the baseline and the
    setting chosen on val (scored after the choice, never used to make it)."""
    out = []
    for f in sorted(RESULTS.glob("mbr_*.json")):
        r = json.loads(f.read_text(encoding="utf-8"))
        official = any("bleu_official_tok" in row["val"] for row in r["rows"])
        extra = " | val BLEU vs official lc.norm.tok" if official else ""
        out += [f"### {clean(r['title'])}", "", clean(r["protocol"]), "",
                f"| decoding | val sacreBLEU | val bleu_lc_tok{extra} | val length ratio "
                "| seconds (val) | test sacreBLEU | test bleu_lc_tok"
                + (" | test BLEU vs official lc.norm.tok |" if official else " |"),
                "|---|---|---|---|---|---|---|" + ("---|---|" if official else "")]
        for i, row in enumerate(r["rows"]):
            v, t = row["val"], row.get("test")
            name = clean(row["setting"]) + (" (baseline)" if i == 0 else "") \
                + (" **(chosen on val)**" if i == r["chosen"] else "")
            cells = [f"{v['bleu']:.2f}", f"{v['bleu_lc_tok']:.2f}"]
            if official:
                cells.append(f"{v['bleu_official_tok']:.2f}")
            cells += [f"{v['length_ratio']:.3f}", f"{v['seconds']:.0f}"]
            if t is None:
                cells += ["-", "-"] + (["-"] if official else [])
            else:
                cells += [f"{t['bleu']:.2f}", f"{t['bleu_lc_tok']:.2f}"]
                if official:
                    cells.append(f"{t['bleu_official_tok']:.2f}")
            out.append(f"| {name} | " + " | ".join(cells) + " |")
        if "val_grid" in r:
            out += ["", *val_grid_table(r["val_grid"], r["metric"])]
        rate = matmul_rates(r["matmul_gflops"])
        commands = r.get("commands") or [r["command"]]
        out += ["", "Commands:", "", "```bash", *[clean(c) for c in commands], "```", "",
                f"Machine: {r['machine']}, {r['threads']} threads, torch {r['torch']}, matmul "
                f"{rate} GFLOP/s (`{f.name}`). {clean(r.get('note', ''))}", ""]
    return out


def rerank_seeds_section() -> list[str]:
    """What right-to-left models add to reranking, seed by seed (benchmarks/rerank_seeds.py):
    every rerank_seeds file. One row per arm with its choice on val and that choice's test
    scores; each seed's gain over the reverse model alone, then their mean and s.d."""
    out = []
    for f in sorted(RESULTS.glob("rerank_seeds_*.json")):
        out += rerank_seeds_table(json.loads(f.read_text(encoding="utf-8")), f.name)
    return out


def rerank_seeds_table(r: dict, name: str) -> list[str]:
    """One rerank_seeds result (file ``name``) as :func:`rerank_seeds_section` shows it."""
    m = r["metric"]
    rev = next(a for a in r["arms"] if a["kind"] == "reverse")
    out = [f"### {clean(r['title'])}", "", clean(r["protocol"]), "",
           f"| arm | chosen on val (α, reverse w, right-to-left v) | val {m} | test {m} "
           "| test sacreBLEU | vs. the reverse model: val | test |",
           "|---|---|---|---|---|---|---|"]
    for a in r["arms"]:
        c = a["chosen"]
        gain = ("- | -" if a["kind"] == "reverse" else
                f"{a['val'][m] - rev['val'][m]:+.2f} | {a['test'][m] - rev['test'][m]:+.2f}")
        out.append(f"| {clean(a['name'])} | {c['length_penalty']:g}, {c['reverse_weight']:g}, "
                   f"{c['r2l_weight']:g} | {a['val'][m]:.2f} | {a['test'][m]:.2f} "
                   f"| {a['test']['bleu']:.2f} | {gain} |")
    mean, sd = r["gain_mean"], r["gain_sd"]

    def spread(k: str) -> str:
        return f"{mean[k]:+.2f}" + ("" if sd[k] is None else f" (s.d. {sd[k]:.2f})")

    rate = matmul_rates(r["matmul_gflops"])
    out += ["", f"Over {len(r['gains'])} right-to-left seeds, the gain over the reverse "
            f"model alone: val {spread('val')}, test {spread('test')} {m}.", "",
            "Command:", "", "```bash", clean(r["command"]), "```", "",
            f"Machine: {r['machine']}, {r['threads']} threads, torch {r['torch']}, matmul "
            f"{rate} GFLOP/s (`{name}`). {clean(r.get('note', ''))}", ""]
    return out


def _share_cell(r: dict) -> str:
    """The share of the matmul rate, and where measured (from 2026-11-26's oneDNN change on)
    the share of the faster of MKL's and oneDNN's GEMM rates."""
    cell = f"{r['mfu_of_measured_matmul_peak']:.0%}"
    if "mfu_of_best_gemm_rate" in r:
        cell += f" ({r['mfu_of_best_gemm_rate']:.0%} of the best GEMM)"
    if "mfu_of_bf16_matmul_rate" in r:  # train.amp: bf16 on a CPU with AMX
        cell += f"; bf16 products: {r['mfu_of_bf16_matmul_rate']:.0%} of the bf16 matmul rate"
    return cell


def train_history() -> list[str]:
    """Every train_speed file: the ratio to the reference and the measured CPU matmul rate."""
    out = ["### Every CPU training measurement", "",
           "Each file also records the matrix-multiplication rate measured on the CPU in the same "
           "run, so that a slower figure on a busier machine can be told apart from a slower "
           "nmtkit.", "",
           "Model FLOPs: up to 2026-11-25 the linear layers only (with the source keys and values "
           "charged to target tokens); from 2026-11-26 on the linear layers and attention's own "
           "products, counted as PyTorch counts them (`tests/test_benchmark_flops.py`), and the "
           "share is the median round's, each round against the matmul rate measured in its "
           "own process right before and after its timed steps. From the change that moved the "
           "linear layers' products to oneDNN (`nmtkit.fast.linear`) on, a file also has the share "
           "of the faster of MKL's and oneDNN's GEMM rates, in brackets: on the AMD hosts of "
           "these runs oneDNN's is the higher, so that share is the stricter one.", "",
           "| file | date | nmtkit target tok/s | reference tok/s | ratio | model GFLOP/s "
           "| FLOPs counted | measured CPU matmul GFLOP/s | share | peak RSS GB | command |",
           "|---|---|---|---|---|---|---|---|---|---|---|"]
    for f in sorted(RESULTS.glob("train_speed*.json")):
        r = _load(str(f))
        ours = r["nmtkit"]
        out.append(f"| `{f.name}` | {r['date'][:10]} | {ours['tgt_tokens_per_s']:,.0f} "
                   f"| {r['reference']['train_tgt_tokens_per_s']} | {r['speedup_vs_reference']}x "
                   f"| {ours.get('model_gflops_per_s', '-')} "
                   f"| {'linear + attention' if 'flops_counted' in r else 'linear'} "
                   f"| {r.get('cpu_matmul_peak_gflops', '-')} "
                   f"| {_share_cell(r)} | {ours['peak_rss_gb']:.2f} "
                   f"| `{clean(r['command'])}` |")
    return out + [""]


def decode_history() -> list[str]:
    out = ["### Every CPU decoding measurement", "",
           "| file | date | model | greedy sents/s | ratio to the reference's greedy | beam 5 sents/s "
           "| command |",
           "|---|---|---|---|---|---|---|"]
    for f in sorted(RESULTS.glob("decode_speed*.json")):
        r = _load(str(f))
        ours = r["nmtkit"]
        out.append(f"| `{f.name}` | {r['date'][:10]} | `{clean(r['model'])}` | {ours['greedy_sents_per_s']} "
                   f"| {r['greedy_speedup_vs_reference']}x | {ours['beam5_sents_per_s']} "
                   f"| `{clean(r['command'])}` |")
    return out + [""]


def history_section(title: str, intro: str, columns: list[str], rows: list[str]) -> list[str]:
    """A titled table of result files (nothing when there are no rows)."""
    if not rows:
        return []
    return [f"### {title}", "", intro, "", "| " + " | ".join(columns) + " |",
            "|" + "---|" * len(columns), *rows, ""]


def baseline_history() -> list[str]:
    """Files measured with ``--baseline-src``: the tree under test against an older tree,
    alternating in the same rounds (the median ratio, and every round's)."""
    rows = []
    for f in sorted([*RESULTS.glob("train_speed*.json"), *RESULTS.glob("decode_speed*.json")]):
        r = _load(str(f))
        base = r.get("baseline")
        if not base:
            continue
        if r["benchmark"] == "train_speed":
            what = f"training: **{base['speed_vs_baseline']}x** (rounds {base['rounds_speed_vs_baseline']})"
        else:
            what = "; ".join(f"{k}: **{base[f'{k}_speed_vs_baseline']}x**"
                             for k in ("greedy", "beam5", "beam5_early_stop"))
        if r.get("change"):
            what = f"{clean(r['change'])}. {what}"
        rows.append(f"| `{f.name}` | {r['date'][:10]} | {what} "
                    f"| {r.get('cpu_matmul_peak_gflops', '-')} | `{clean(r['command'])}` |")
    return history_section(
        "Before and after a change, in the same rounds",
        "`--baseline-src OLD_TREE` times an older commit's tree in the same alternating rounds "
        "as the tree under test; the ratio is new / old (1.0 = unchanged).",
        ["file", "date", "new / old", "measured CPU matmul GFLOP/s", "command"], rows)


def fast_ab_history() -> list[str]:
    """Files of ``benchmarks/fast_ab.py``: each training speed-up on and off in one process."""
    rows = []
    for f in sorted(RESULTS.glob("fast_ab*.json")):
        r = _load(str(f))
        for name, x in r["speedups"].items():
            if "skipped" in x:  # (amp_bf16 on a CPU without AMX)
                continue
            what = {"amp_bf16": "`train.amp: bf16` (CPU, bf16 in hardware)",
                    "onednn_linear": "`nmtkit.fast.linear`"}.get(name, f"`nmtkit.fast.{name}`")
            rows.append(f"| `{f.name}` | {r['date'][:10]} | {what} "
                        f"| **{x['speed_with_vs_without']}x** ({min(x['pairs'])}-{max(x['pairs'])}) "
                        f"| {x['tgt_tokens_per_s_with']:,} / {x['tgt_tokens_per_s_without']:,} "
                        f"| {r['cpu_matmul_gflops_before_after']} | `{clean(r['command'])}` |")
    return history_section(
        "One training speed-up on and off, in one process",
        "Pairs of chunks of updates on the same batches, one with the speed-up and one "
        "without, in alternating order: the host's drift between processes (10-30% within "
        "minutes) does not enter the ratio. Median of the pairs (their range).",
        ["file", "date", "speed-up", "with / without", "target tok/s with / without",
         "CPU matmul GFLOP/s before, after", "command"], rows)


def decode_ab_history() -> list[str]:
    """Files of ``benchmarks/decode_ab.py``: each decoding speed-up on and off in one process."""
    rows = []
    for f in sorted(RESULTS.glob("decode_ab*.json")):
        r = _load(str(f))
        for name, searches in r["speedups"].items():
            for search, x in searches.items():
                rows.append(f"| `{f.name}` | {r['date'][:10]} | `nmtkit.fast.{name}`, {search} "
                            f"| **{x['speed_with_vs_without']}x** ({min(x['rounds'])}-{max(x['rounds'])}) "
                            f"| {x['sents_per_s_with']} / {x['sents_per_s_without']} "
                            f"| {x['same_output']:.0%} | {r['cpu_matmul_gflops_before_after']} "
                            f"| `{clean(r['command'])}` |")
        alloc = r["allocator_beam5_pass"]
        rows.append(f"| `{f.name}` | {r['date'][:10]} | `nmtkit.fast.allocator` (process-wide: "
                    f"one beam-5 pass before and after) | page faults {alloc['before']['page_faults']:,}"
                    f" -> {alloc['after']['page_faults']:,}; kernel CPU {alloc['before']['system_cpu_s']}"
                    f" -> {alloc['after']['system_cpu_s']} s | wall {alloc['before']['wall_s']} -> "
                    f"{alloc['after']['wall_s']} s | - | {r['cpu_matmul_gflops_before_after']} "
                    f"| `{clean(r['command'])}` |")
    return history_section(
        "One decoding speed-up on and off, in one process",
        "Each batch of test sentences translated once with the speed-up and once without, in "
        "alternating order; one ratio per round over all batches, the median of the rounds "
        "(their range), and the share of translations that came out the same.",
        ["file", "date", "speed-up, search", "with / without", "sents/s with / without",
         "same output", "CPU matmul GFLOP/s before, after", "command"], rows)


def gpu_speed_section() -> list[str]:
    s = _load(_res("gpu_h100_2026-11-22/summary.json"))["speed"]
    t, d = s["train"], s["decode"]
    return ["## Speed on a GPU", "",
            f"{s['device']}, torch {s['torch']}, bf16 autocast "
            f"(`gpu_h100_2026-11-22/summary.json`, key `speed`: `{clean(s['command'])}`):", "",
            f"- training `{clean(t['config'])}` ({t['params'] / 1e6:.1f}M parameters), "
            f"{t['max_tokens']}-token batches: **{t['tgt_tokens_per_s']:,}** target tokens/s, "
            f"{t['model_tflops_per_s']} model TFLOP/s = {t['mfu']:.1%} of the measured "
            f"{t['bf16_matmul_peak_tflops']} TFLOP/s bf16 matmul rate (Multi30k's short sentences "
            f"and small batches leave the GPU waiting on kernel launches); peak memory "
            f"{t['peak_gpu_mem_gb']} GB;",
            f"- translating the {d['n']:,} test sentences, batch {d['batch_size']}: "
            f"{d['greedy_sents_per_s']:,} sentences/s greedy, {d['beam4_sents_per_s']:,} with beam 4.", ""
            ] + cuda_graphs_section()


def cuda_graphs_section() -> list[str]:
    """The 2026-11-26 GPU runs: eager vs train.cuda_graphs, Multi30k and WMT-like lengths."""
    g = _load(_res("gpu_h100_2026-11-26/summary.json"))
    out = ["### Fixed batch shapes and CUDA graphs (`train.cuda_graphs`)", "",
           f"{g['device']}, torch {g['torch']}, {g['date']}. {g['how']}", "",
           "| run | lengths | tokens/batch | path | target tok/s | MFU | real/padded targets | command |",
           "|---|---|---|---|---|---|---|---|"]
    for name, r in g["runs"].items():
        if "tgt_tokens_per_s" not in r:
            continue
        path = "CUDA graphs" if r["cuda_graphs"] else "eager"
        out.append(f"| {name.split('_')[0]} | {r['lengths']} | {r['max_tokens']:,} | {path} | "
                   f"{r['tgt_tokens_per_s']:,} | {r['mfu']:.1%} | {r['tgt_real_of_padded']} | "
                   f"`{clean(r['command'])}` |")
    dec = g["results_in_brief"]["decoding_small_model_test_2016_batch128"]
    failed = [n for n, r in g["runs"].items() if r.get("rc")]
    return out + ["", f"Goal of issue 18: {g['results_in_brief']['issue_18_goal']}.", "",
                  f"Where the time goes: {g['where_the_time_goes']}", "",
                  f"Decoding (the small model, test_2016_flickr, batch 128): "
                  f"{dec['greedy_sents_per_s']:,} sentences/s greedy, {dec['beam5_sents_per_s']:,} "
                  f"beam 5; {dec['note']}.", "",
                  f"Runs that did not finish: {', '.join(failed) or 'none'}. "
                  f"{g['correctness_on_the_gpu']}", ""]


def serve_section() -> list[str]:
    path = _res("serve_load_cpu_2026-11-22.json")
    r = _load(path)
    out = ["## Serving on a CPU", "",
           f"`nmtkit serve` on {r['machine']['cpus']} cores (torch {r['machine']['torch']}), "
           f"{r['requests_per_level']} one-sentence requests per level, beam {r['beam']} "
           f"(`{Path(path).name}`: `{clean(r['command'])}`). Concurrent requests are merged into "
           "one model call:", "",
           "| concurrency | requests/s | p50 ms | p95 ms | sentences per model call | failed |",
           "|---|---|---|---|---|---|"]
    for run in r["runs"]:
        out.append(f"| {run['concurrency']} | {run['requests_per_s']} | {run['latency_ms']['p50']} "
                   f"| {run['latency_ms']['p95']} | {run['sentences_per_call']} | {run['failed']} |")
    return out + [""] + serve_engines_section()


def serve_engines_section() -> list[str]:
    """``serve_load.py --engine both``: the checkpoint and its CTranslate2 export, one run."""
    path = _res("serve_load_cpu_2026-11-26.json")
    r = _load(path)
    ct2 = r["engines"]["ctranslate2"]
    out = ["### Both engines in one run", "",
           f"The same server, API and request batcher over the PyTorch checkpoint and over its "
           f"CTranslate2 export ({ct2['model']['device']}), on {r['machine']['cpus']} cores, "
           f"{r['requests_per_level']} one-sentence requests per level, beam {ct2['beam']}, each "
           f"level measured on one engine after the other (`{Path(path).name}`: "
           f"`{clean(r['command'])}`):", "",
           "| engine | concurrency | requests/s | p50 ms | p95 ms | sentences per model call | failed |",
           "|---|---|---|---|---|---|---|"]
    for name, e in r["engines"].items():
        for run in e["runs"]:
            out.append(f"| {name} | {run['concurrency']} | {run['requests_per_s']} | "
                       f"{run['latency_ms']['p50']} | {run['latency_ms']['p95']} | "
                       f"{run['sentences_per_call']} | {run['failed']} |")
    ratios = ", ".join(f"{x['requests_per_s_ratio']}x at {x['concurrency']}"
                       for x in r["ctranslate2_vs_torch"])
    return out + ["", f"CTranslate2 / PyTorch requests/s: {ratios}.", ""]


CPU_PROTOCOL = """\
This project's CPU is a shared 2-core machine whose speed drifts by 30% within minutes, so
every CPU speed figure is a ratio to the seed's reference implementation timed in the same
run; the newest files alternate reference and nmtkit in fresh processes and report the
median round with the spread of all rounds. The peers' ratios use PEERS.md's reference on the
same machine kind (1.92 greedy sents/s, 305 tok/s) or, for OpenNMT-py's training, a
re-measurement beside the reference (`peers_cpu_*.json`). Same model and regex tokens as the
peers; decoding (test_2016_flickr) uses a model of the same size: until 2026-11-24 a
`multi30k_transformer_small` model trained for 25 minutes, from 2026-11-25 the 10-minute
quickstart's (`runs/qs10_compat.pt`, `multi30k_transformer_quick`). What changed between
the `*_before_ca84e2d` files and the newest ones is explained in
[engineering.md](engineering.md), section 3."""


def page(train: str, decode: str, compile_: str | None, corpus: str | None, peers: str | None) -> str:
    out = ["# Results", "",
           "<!-- Generated by benchmarks/report.py from benchmarks/results/*.json: run "
           "`python benchmarks/report.py --out docs/results.md`; do not edit by hand. -->", "",
           "Every figure of nmtkit's benchmarks, each with the file in `benchmarks/results/` it "
           "is read from and the command that wrote that file. Paths of the machine a command ran "
           "on are shown repository-relative; `MIRROR` is the offline data mirror "
           "(`$NMTKIT_DATA`) and `OLD_TREE` a `git worktree` of the older commit being timed.", ""]
    out += quality_section() + budget_hour_section() + hour_seeds_section()
    out += decode_tuning_section() + mbr_section() + rerank_seeds_section()
    out += quickstart_section() + ablation_section()
    out += ["## Speed on a CPU", "", CPU_PROTOCOL, ""]
    out += speed_table(train, decode, compile_, corpus, peers) + [""]
    out += train_history() + decode_history() + baseline_history() + fast_ab_history()
    out += decode_ab_history()
    out += gpu_speed_section() + serve_section()
    return "\n".join(out).rstrip() + "\n"


# The files of the page's CPU speed table (also what tests/test_docs.py rebuilds the page from).
DEFAULT_FILES = {"train": "train_speed_cpu_2026-11-26.json",
                 "decode": "decode_speed_cpu_2026-11-26.json",
                 "compile_": "train_speed_compile_cpu_2026-11-22.json",
                 "corpus": "corpus_memory_cpu_2026-11-22.json",
                 "peers": "peers_cpu_2026-11-23.json"}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    d = {k: _res(v) for k, v in DEFAULT_FILES.items()}
    p.add_argument("--train", default=d["train"], help="a train_speed.py result (default: the newest)")
    p.add_argument("--decode", default=d["decode"],
                   help="a decode_speed.py result (default: the newest)")
    p.add_argument("--compile", default=d["compile_"], help="a train_speed.py --compile result")
    p.add_argument("--corpus", default=d["corpus"], help="a corpus_memory.py result")
    p.add_argument("--peers", default=d["peers"], help="a peers.py result")
    p.add_argument("--out", help="write the whole results page here (docs/results.md); "
                   "without it, print only the CPU speed table")
    a = p.parse_args()
    if a.out:
        Path(a.out).write_text(page(a.train, a.decode, a.compile, a.corpus, a.peers), encoding="utf-8")
        print(f"wrote {a.out}")
    else:
        print("\n".join(speed_table(a.train, a.decode, a.compile, a.corpus, a.peers)))


if __name__ == "__main__":
    main()
