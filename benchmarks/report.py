"""docs/results.md and docs/ablations.md, made from the JSON in benchmarks/results/ by one
declarative table.

``SECTIONS`` says, for each kind of results file (a glob in benchmarks/results/), which part
of the page it goes under, its heading, and its blocks: prose, tables whose rows come from a
JSON path and whose columns are JSON key paths with a format, commands. ``HEADLINES`` is the
summary table that opens the page (figure, machine, command, JSON); ``ABLATIONS`` and
``FINDINGS`` make docs/ablations.md, one line per ablation or negative finding. A new file
that matches a glob appears in its section; a new kind of file needs an entry, not code.
A key that a file lacks is an error naming the file, the section and the path, unless the
path says it is optional.

The template language (key paths, filters, formats) is described in ``_tables.py``.

    python benchmarks/report.py --out docs/results.md --ablations docs/ablations.md
"""

from __future__ import annotations

import argparse
from pathlib import Path

from _tables import (  # benchmarks/ is the script's directory
    RESULTS,
    Code,
    Grid,
    Headline,
    Line,
    Pivot,
    Section,
    Table,
    Text,
    ablation_lines,
    render_section,
    summary_table,
)

QUALITY = "Quality: Multi30k, test_2016_flickr"
DECODING = "Choosing how to decode: length penalty, MBR, reranking"
ABLATION = "Ablations"
CPU = "Speed on a CPU"
GPU = "Speed on a GPU"
SERVING = "Serving"

PARTS = {
    QUALITY: "sacreBLEU on detokenized, cased output (`nrefs:1|case:mixed|eff:no|tok:13a|"
             "smooth:exp|version:2.6.0`), 1,000 sentences, one reference, unless a table says "
             "otherwise; `bleu_official_tok` is BLEU against the official lowercased tokenized "
             "references (`lc.norm.tok`), the score of the Multi30k literature. Every choice "
             "(checkpoint, length penalty, weights) is made on val; test is scored for the "
             "record and never chooses anything.",
    DECODING: "",
    ABLATION: "What each ingredient adds, compared on val (test only where a note says so). "
              "One line each: [ablations.md](ablations.md).",
    CPU: """\
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
[engineering.md](engineering.md), section 3.""",
    GPU: "",
    SERVING: "",
}

MACHINE = Text("Machine: {machine}, torch {torch} (`{~}`). {note?|clean}")
BEST_AVG = ("{test_2016_flickr_best.bleu:.2f} (chrF {test_2016_flickr_best.chrf:.1f})",
            "{test_2016_flickr_avg.bleu:.2f} (chrF {test_2016_flickr_avg.chrf:.1f})")
M = "[$.metric?bleu]"  # the score a file chose by (seeds.py --metric), cased BLEU by default
CKPT_CELL = ("{{checkpoints[{0}].val{1}|bold_if('{0}'==chosen_on_val):.2f}} / "
             "{{checkpoints[{0}].test{1}|bold_if('{0}'==chosen_on_val):.2f}}")

SECTIONS: tuple[Section, ...] = (
    Section(QUALITY, "multi30k_small_1h_cpu_2026-11-22_run2.json",
            "One hour on a 2-core CPU with the Noam schedule (`configs/multi30k_transformer_"
            "small.yaml`, de->en, beam 5), second run", (
                Table("test_2016_flickr_beam5.*", (
                    ("checkpoint", "{@}"), ("test sacreBLEU", "{bleu:.2f}"), ("chrF", "{chrf:.1f}"))),
                Text("Updates: {training.steps:,} ({training.epochs_completed} epochs), "
                     "{training.mean_tgt_tokens_per_s:,} target tokens/s. The same budget gave "
                     "fairseq 0.12.2 {peer_same_budget[fairseq 0.12.2].bleu:.2f} (chrF "
                     "{peer_same_budget[fairseq 0.12.2].chrf:.1f}, {peer_same_budget[fairseq "
                     "0.12.2].checkpoint} checkpoint, {peer_same_budget[fairseq 0.12.2].epochs} "
                     "epochs; PEERS.md)."),
                Table("validation_curve[*]", (
                    ("step", "{step}"), ("epoch", "{epoch}"), ("valid loss", "{valid_loss}"),
                    ("valid BLEU (greedy)", "{valid_bleu}"), ("lr", "{lr}"))),
                Code(("commands",)),
                Text("Machine: {machine} (`{~}`). {training.note|clean}"))),
    Section(QUALITY, "multi30k_small_1h_cpu_2026-11-22.json",
            "The same, first run (cores shared with other work; the guide's figures)", (
                Table("test_2016_flickr.*", (
                    ("checkpoint", "{@}"), ("test sacreBLEU", "{bleu:.2f}"), ("chrF", "{chrf:.1f}"))),
                Text("Updates: {training.steps:,} ({training.epochs_completed} epochs)."),
                Code(("commands",)),
                Text("Machine: {machine} (`{~}`). {training.note|clean}"))),
    Section(QUALITY, "gpu_h100_2026-11-22/summary.json", "Five minutes on one GPU", (
        Text("{device}, torch {torch}. {how|clean}"),
        Table("runs.*", (
            ("run", "`{@}`"), ("config", "{config|clean}"), ("overrides", "`{overrides|join(`, `)}`"),
            ("updates (epochs)", "{steps:,} ({epochs})"), ("minutes", "{train_minutes}"),
            ("beam", "{test_2016_flickr_best.beam}"), ("best val BLEU", "{best_valid_bleu:.2f}"),
            ("best.pt", BEST_AVG[0]), ("average of the last 5", BEST_AVG[1]))),
        Text("File: `{~}` (each run's `metrics.csv` beside it). The paper's own base settings "
             "(post-norm, dropout 0.1, `run1_base_paper_values`) overfit this small corpus, "
             "which is why the base recipe is pre-norm with dropout 0.3 (`run3_base`)."))),
    Section(QUALITY, "architectures_*.json",
            "Transformer against the recurrent model, same CPU budget", (
                Text("Same data, same wall-clock budget, best checkpoint by validation BLEU, "
                     "beam 5, {machine} (`{~}`: `NMTKIT_DATA=MIRROR {command|clean}`):"),
                Table("rows[*]", (
                    ("architecture", "{arch}"), ("recipe", "`{recipe}`"), ("minutes", "{minutes:g}"),
                    ("updates", "{steps}"), ("test BLEU", "{test_bleu:.2f}"), ("chrF", "{test_chrf:.2f}"),
                    ("best val BLEU", "{best_valid_bleu:.2f}"), ("parameters", "{params|millions:.1f}M"),
                    ("train target tok/s", "{train_tgt_tokens_per_s:,}"),
                    ("beam-5 sents/s (incl. load)", "{decode_sents_per_s_incl_load}"))),
                Text("At 12 CPU minutes the recurrent decoder, which runs one target position at "
                     "a time in training too, makes fewer updates than the Transformer and is far "
                     "from trained; trained to a plateau on one GPU (`run1_small` and `run1_rnn` "
                     "in the table above) the two are 4 BLEU apart."))),
    Section(QUALITY, "multi30k_1h_budget*.json", "{title|clean}", (
        Text("{protocol|clean}"),
        Table("runs[*].checkpoints.*", (
            ("direction", "{^.direction}"), ("updates (epochs)", "{^.updates:,} ({^.epochs})"),
            ("checkpoint (bold: chosen on val)", "{@|bold_if(@==^.chosen_on_val)}"),
            ("val BLEU (beam 5)", "{val.bleu:.2f}"),
            ("test sacreBLEU", "{test.bleu|bold_if(@==^.chosen_on_val):.2f}"),
            ("chrF", "{test.chrf:.1f}"),
            ("test BLEU vs official lc.norm.tok", "{test.bleu_official_tok:.2f}"))),
        Text("Validation BLEU (greedy) during training (the Noam schedule's, de->en: the "
             "validation curve of `multi30k_small_1h_cpu_2026-11-22_run2.json` above):"),
        Pivot("runs[*].valid_bleu_greedy[*]", "step", "{[0]:,}", "{^.direction} budget", "{[1]:.2f}"),
        Code(("runs[*].commands",)),
        Text("Machine: {machine}, torch {torch}, matmul {matmul_gflops:.0f} GFLOP/s (`{~}`). "
             "{note|clean}"))),
    Section(QUALITY, "multi30k_hour_seeds*.json", "{title|clean}", (
        Text("{protocol|clean}"),
        Text("Each cell: val / test_2016_flickr `{metric?bleu}` (beam 5); bold: the checkpoint "
             "chosen on val."),
        Table("runs[*]", (
            ("seed", "{seed}{overrides?|join|paren}"), ("updates (epochs)", "{updates:,} ({epochs})"),
            ("best.pt", CKPT_CELL.format("best.pt", M)), ("last.pt", CKPT_CELL.format("last.pt", M)),
            ("avg3.pt", CKPT_CELL.format("avg3.pt", M)),
            ("matmul GFLOP/s before", "{matmul_gflops_before?|items(g)}"))),
        Table("mean_over_seeds_by_checkpoint.*", (
            ("checkpoint", "{@}"), ("mean of the seeds: val", "{val:.2f}"), ("test", "{test:.2f}"))),
        Grid(("system", "val `{metric?bleu}`", "test sacreBLEU", "chrF",
              "BLEU vs official lc.norm.tok"), (
            ("one model (chosen on val), mean of {runs|len} seeds",
             "{single_model_chosen_on_val.val_mean:.2f}",
             "{single_model_chosen_on_val.test_mean:.2f} (s.d. {single_model_chosen_on_val.test_stdev:.2f})",
             "{single_model_chosen_on_val.test_chrf_mean:.1f}",
             "{single_model_chosen_on_val.test_official_tok_mean:.2f}"),
            ("ensemble of the {ensemble.models|len} chosen checkpoints", "{ensemble.val" + M + ":.2f}",
             "{ensemble.test.bleu|bold_if($.metric?bleu=='bleu'):.2f}", "{ensemble.test.chrf:.1f}",
             "{ensemble.test.bleu_official_tok|bold_if($.metric?bleu!='bleu'):.2f}"),
            ("?the same ensemble, length penalty {ensemble.tuned.chosen.length_penalty:g} chosen "
             "on val (grid {ensemble.tuned.grid|join})", "{ensemble.tuned.chosen" + M + ":.2f}",
             "{ensemble.tuned.test.bleu|bold_if($.metric?bleu=='bleu'):.2f}",
             "{ensemble.tuned.test.chrf:.1f}",
             "{ensemble.tuned.test.bleu_official_tok|bold_if($.metric?bleu!='bleu'):.2f}"))),
        Code(("commands", "command")),
        Text("Machine: {machine}, torch {torch}, matmul {matmul?measured per run, in the seeds' table} "
             "(`{~}`). {note?|clean}"))),
    Section(QUALITY, "backtranslation_*.json",
            "Back-translation with Multi30k alone ({direction}, {steps_per_run} updates per run)", (
                Text("Half the training corpus ({parallel_pairs:,} pairs) as parallel data, the "
                     "other half's target side ({monolingual_lines:,} lines) back-translated by "
                     "the reverse model; `{recipe|clean}` with `{overrides|join(`, `)}`."),
                Table("scores.*", (
                    ("model", "{@}"), ("val BLEU", "{val.bleu:.2f}"), ("val chrF", "{val.chrf:.2f}"),
                    ("test BLEU", "{test_2016_flickr.bleu:.2f}"),
                    ("test chrF", "{test_2016_flickr.chrf:.2f}"), ("seconds", "{$.seconds[@]?}"))),
                Text("Back-translation against the baseline: val {gain_of_backtranslation.val.bleu:+.2f} "
                     "BLEU, test {gain_of_backtranslation.test_2016_flickr.bleu:+.2f}. {note|clean}"),
                Code(("command",), "Command:"))),
    Section(QUALITY, "multilingual_*.json", "One model of both directions against one per direction", (
        Table("scores.*", (
            ("model", "{@}"), ("val BLEU", "{val.bleu:.2f}"),
            ("val BLEU vs official lc.norm.tok", "{val.bleu_official_tok:.2f}"),
            ("test BLEU", "{test_2016_flickr.bleu:.2f}"), ("test chrF", "{test_2016_flickr.chrf:.2f}"),
            ("test BLEU vs official lc.norm.tok", "{test_2016_flickr.bleu_official_tok:.2f}"))),
        Code(("commands.*",)), Text("Machine: {machine} (`{~}`). {note|clean}"))),
    Section(QUALITY, "curves_*/summary.json", "Training curves: the Transformer and the recurrent model", (
        Table("scores.*", (
            ("model", "{@}"), ("val BLEU", "{val.bleu:.2f}"), ("test BLEU", "{test_2016_flickr.bleu:.2f}"),
            ("test chrF", "{test_2016_flickr.chrf:.2f}"),
            ("test BLEU vs official lc.norm.tok", "{test_2016_flickr.bleu_official_tok:.2f}"))),
        Code(("commands.*",)), Text("Machine: {machine} (`{~}`). {note|clean}"))),
    Section(QUALITY, "homework_rnn_vs_transformer_*/summary.json",
            "The homework's recipe against the Transformer, same CPU budget", (
                Text("`configs/multi30k_homework_rnn.yaml` (the seq2seq homework's model, "
                     "optimiser, schedule, lowercased word tokens, early stopping, greedy "
                     "decoding) and `configs/multi30k_transformer_hour.yaml`, de->en, "
                     "{minutes:g} minutes each, one after the other, {machine} (`{~}`: "
                     "`NMTKIT_DATA=MIRROR {command|clean}`). `bleu_lc_tok` is the homework's "
                     "BLEU (lowercased WordPunct tokens): the homework's model writes "
                     "lowercase, so its cased `bleu` is low by construction."),
                Table("runs.*", (
                    ("recipe", "`{@}`"), ("updates", "{train.step:,}"), ("epochs", "{train.epoch}"),
                    ("stopped by", "{train.stop_reason|clean}"),
                    ("best val BLEU (greedy)", "{best_valid_bleu:.2f}"),
                    ("test bleu_lc_tok, greedy", "**{greedy.test_2016_flickr.bleu_lc_tok:.2f}**"),
                    ("test sacreBLEU, greedy", "{greedy.test_2016_flickr.bleu:.2f}"),
                    ("test chrF, greedy", "{greedy.test_2016_flickr.chrf:.2f}"),
                    ("recipe's beam", "{recipe_beam}"),
                    ("test bleu_lc_tok, recipe's decoding",
                     "{recipe_decoding.test_2016_flickr.bleu_lc_tok:.2f}"),
                    ("test sacreBLEU, recipe's decoding",
                     "{recipe_decoding.test_2016_flickr.bleu:.2f}"))),
                Text("Curves: `compare.png` and `curves_<recipe>.png` beside the JSON; each run's "
                     "`metrics.csv`, `losses.csv` and `samples.txt` in its folder."))),
    Section(QUALITY, "multi30k_small_*_eval_*.json", "An evaluation: `{result.model|clean}`", (
        Text("test_2016_flickr, beam {result.beam}: sacreBLEU {result.bleu:.2f}, chrF "
             "{result.chrf:.2f}, bleu_lc_tok {result.bleu_lc_tok:.2f}, BLEU vs official "
             "lc.norm.tok {result.bleu_official_tok:.2f}; the model: `{model_trained_by|clean}`; "
             "{machine} (`{~}`: `{command|clean}`)."),)),
    Section(DECODING, "decode_tuning_*.json", "{title|clean}", (
        Text("{protocol|clean}"),
        Text("Val BLEU of each setting (in brackets: output length / reference length); bold: "
             "the setting chosen on val."),
        Pivot("systems[*].trials[*]", "system", "{^.name|clean}",
              "beam {beam}, α {length_penalty?:g}",
              "{bleu|bold_if(length_penalty==^.chosen.length_penalty):.2f} ({length_ratio:.3f})"),
        Table("systems[*]", (
            ("system", "{name|clean}"), ("chosen on val", "α {chosen.length_penalty:g}"),
            ("test sacreBLEU (official lc.norm.tok): recipe's α",
             "{test_recipe.bleu:.2f} ({test_recipe.bleu_official_tok:.2f})"),
            ("test: chosen α", "{test_chosen.bleu:.2f} ({test_chosen.bleu_official_tok:.2f})"))),
        Table("single_model_means.*", (
            ("single models, mean of the seeds", "{@}"),
            ("val: recipe's α -> chosen", "{val_recipe:.2f} -> {val_chosen:.2f}"),
            ("test sacreBLEU: recipe's α -> chosen", "{test_recipe:.2f} -> {test_chosen:.2f}"),
            ("test official lc.norm.tok, chosen", "{test_chosen_official_tok:.2f}"))),
        Code(("commands",)), MACHINE)),
    Section(DECODING, "mbr_*.json", "{title|clean}", (
        Text("{protocol|clean}"),
        Table("rows[*]", (
            ("decoding (first row: the baseline; bold: chosen on val)",
             "{setting|clean|bold_if(@==$.chosen)}"),
            ("val sacreBLEU", "{val.bleu:.2f}"), ("val bleu_lc_tok", "{val.bleu_lc_tok:.2f}"),
            ("val BLEU vs official lc.norm.tok", "{val.bleu_official_tok?:.2f}"),
            ("val length ratio", "{val.length_ratio:.3f}"), ("seconds (val)", "{val.seconds:.0f}"),
            ("test sacreBLEU", "{test.bleu?:.2f}"), ("test bleu_lc_tok", "{test.bleu_lc_tok?:.2f}"),
            ("test BLEU vs official lc.norm.tok", "{test.bleu_official_tok?:.2f}"))),
        Text("Val {metric} of every setting `nmtkit tune` tried "
             "(`{val_grid.command|clean}`):", optional=True),
        Pivot("val_grid.trials[*]?", "length penalty", "{length_penalty:g}",
              "{rerank?|label(rerank)} {reverse_weight?|tag(w)} {r2l_weight?|tag(r2l w)} "
              "{mbr?|label(MBR)}", "{[$.metric]:.2f}", empty="beam alone"),
        Code(("commands", "command")),
        Text("Machine: {machine}, {threads} threads, torch {torch}, matmul "
             "{matmul_gflops|items(.0f)} GFLOP/s (`{~}`). {note?|clean}"))),
    Section(DECODING, "val_grid_*.json", "A val grid of `nmtkit tune`: `{flags}`", (
        Text("`nmtkit tune` on {split} for {model|join( + )|clean}, by `{metric}` (chosen: "
             "`{flags}`):"),
        Pivot("trials[*]", "length penalty", "{length_penalty:g}",
              "{rerank?|label(rerank)} {reverse_weight?|tag(w)} {r2l_weight?|tag(r2l w)} "
              "{mbr?|label(MBR)}", "{[$.metric]:.2f}", empty="beam alone"),
        Text("File: `{~}`."))),
    Section(DECODING, "rerank_seeds_*.json", "{title|clean}", (
        Text("{protocol|clean}"),
        Table("arms[*]", (
            ("arm", "{name|clean}"),
            ("chosen on val (α, reverse w, right-to-left v)",
             "{chosen.length_penalty:g}, {chosen.reverse_weight:g}, {chosen.r2l_weight:g}"),
            ("val {metric}", "{val[$.metric]:.2f}"), ("test {metric}", "{test[$.metric]:.2f}"),
            ("test sacreBLEU", "{test.bleu:.2f}"),
            ("vs. the reverse model: val", "{val[$.metric]|minus($.arms[kind=reverse].val[$.metric]):+.2f}"),
            ("test", "{test[$.metric]|minus($.arms[kind=reverse].test[$.metric]):+.2f}"))),
        Text("Over {gains|len} right-to-left seeds, the gain over the reverse model alone: val "
             "{gain_mean.val:+.2f}{gain_sd.val?|fmt(.2f)|join|paren(s.d. )}, test "
             "{gain_mean.test:+.2f}{gain_sd.test?|fmt(.2f)|join|paren(s.d. )} {metric}."),
        Code(("command",), "Command:"),
        Text("Machine: {machine}, {threads} threads, torch {torch}, matmul "
             "{matmul_gflops|items(.0f)} GFLOP/s (`{~}`). {note?|clean}"))),
    Section(QUALITY, "quickstart_budget*.json",
            "The quickstart's minutes (`configs/multi30k_transformer_quick.yaml`, de->en): {machine}", (
                Text("The schedule is planned from the budget and the measured time of an update "
                     "(`train.budget_schedule`, guide section 14); test BLEU with beam 5. Host: "
                     "matmul {matmul_gflops:.0f} GFLOP/s"
                     "{s_per_update_small_recipe_4096_tokens?|suffix( s per update of 4096 tokens)|paren}."),
                Table("runs[*]", (
                    ("budget", "{minutes:g} min ({stands_for|clean})"),
                    ("updates (epochs)", "{updates:,} ({epochs})"),
                    ("val BLEU (greedy)", "{valid_bleu_greedy:.2f}"),
                    ("test BLEU", "**{test_2016_flickr.bleu:.2f}**"), ("chrF", "{test_2016_flickr.chrf:.1f}"),
                    ("demo translations", "{demo_translations|join( / )}"),
                    ("matmul GFLOP/s before", "{matmul_gflops_before?:.0f}"))),
                Code(("runs[*].command",)),
                Text("Machine: {machine}, torch {torch} (`{~}`). {note|clean}"))),
    Section(QUALITY, "time_to_quality*.json",
            "Time to quality: the main job as a user runs it, on {host_kind} ({machine})", (
                Text("`bash scripts/quickstart.sh` (`configs/multi30k_transformer_quick.yaml`, "
                     "de->en) in a fresh clone where the row says so: its first run. Val BLEU is "
                     "greedy, at the run's validations (their minutes include them); test with "
                     "beam 5. Host kind {host_kind}, float32 matmul {matmul_gflops:.0f} GFLOP/s "
                     "on 2 threads."),
                Table("runs[*]", (
                    ("budget", "{minutes:g} min ({condition|clean})"),
                    ("fresh clone", "{fresh_clone}"),
                    ("updates", "{updates:,}"), ("target tokens", "{tgt_tokens:,}"),
                    ("plans made", "{budget_plans|len}"),
                    ("min to val 20", "{minutes_to_val_bleu_20?}"),
                    ("min to val 30", "{minutes_to_val_bleu_30?}"),
                    ("val BLEU", "{valid_bleu:.2f}"),
                    ("test BLEU", "**{test_2016_flickr.bleu:.2f}**"),
                    ("chrF", "{test_2016_flickr.chrf:.1f}"))),
                Code(("runs[*].command",)))),
    Section(ABLATION, "ablation_*.json", "Ablation: {title|clean}", (
        Text("{protocol|clean}"),
        Table("rows[*]", (
            ("ingredient", "{ingredient|clean}"), ("updates", "{updates?}"),
            ("val {val_score?BLEU|clean} (beam 5)", "{val_bleu_beam5:.2f}"),
            ("vs. the first row", "{val_bleu_beam5|minus($.rows[0].val_bleu_beam5):+.2f}"),
            ("note", "{note?|clean}"))),
        Code(("commands",)),
        Text("Machine: {machine}, torch {torch}, matmul {matmul?}"
             "{matmul_gflops?|round|suffix( GFLOP/s)} (`{~}`)."))),
    Section(CPU, "train_speed*.json", "Every CPU training measurement", (
        Text("Target tokens/s of nmtkit's training beside the seed's reference in the same run "
             "(3+3 layers, d_model 256, 4 heads, d_ff 1024, 4096-token batches, regex tokens). "
             "Each file also records the matrix-multiplication rate measured on the CPU in the "
             "same run, so that a slower figure on a busier machine can be told apart from a "
             "slower nmtkit. Model FLOPs: up to 2026-11-25 the linear layers only; from "
             "2026-11-26 on the linear layers and attention's own products, counted as PyTorch "
             "counts them (`tests/test_benchmark_flops.py`), the share being the median "
             "round's; where measured, the share of the faster of MKL's and oneDNN's GEMM "
             "rates is given too (the stricter one on these AMD hosts)."),
        Table("", (
            ("file", "`{~}`"), ("date", "{date|date}"),
            ("nmtkit target tok/s", "**{nmtkit.tgt_tokens_per_s:,.0f}**"),
            ("reference tok/s", "{reference.train_tgt_tokens_per_s}"),
            ("ratio", "**{speedup_vs_reference}x**"),
            ("rounds", "{rounds[*].ratio?|range}"),
            ("model GFLOP/s", "{nmtkit.model_gflops_per_s?}"),
            ("measured CPU matmul GFLOP/s", "{cpu_matmul_peak_gflops?}"),
            ("share of matmul", "{mfu_of_measured_matmul_peak:.0%}"),
            ("share, rounds", "{rounds_mfu?|range(.0%)}"),
            ("share of the best GEMM", "{mfu_of_best_gemm_rate?:.0%}"),
            ("bf16 products: share of the bf16 rate", "{mfu_of_bf16_matmul_rate?:.0%}"),
            ("peak RSS GB (reference)",
             "{nmtkit.peak_rss_gb:.2f} ({reference.peak_rss_gb_children_max?:.2f})"),
            ("command", "`{command|clean}`"))),
    ), per_file=False),
    Section(CPU, "train_speed_compile*.json",
            "Training with `train.compile: true` (torch.compile, inductor)", (
        Table("", (
            ("file", "`{~}`"), ("target tok/s", "{nmtkit.tgt_tokens_per_s:,.0f}"),
            ("ratio to the reference", "**{speedup_vs_reference}x**"),
            ("compilation: warm-up s (steps), not counted", "{nmtkit.warmup_s} ({nmtkit.warmup_steps})"),
            ("command", "`{command|clean}`"))),
    ), per_file=False),
    Section(CPU, "decode_speed*.json", "Every CPU decoding measurement", (
        Text("Test sentences of test_2016_flickr translated in batches of 32 beside the "
             "reference's one-at-a-time greedy decoding in the same run; where a file has "
             "rounds, the median ratio with the range of the rounds. Peers: PEERS.md's "
             "sentences/s (and ratio to its reference) on the same machine kind."),
        Table("", (
            ("file", "`{~}`"), ("date", "{date|date}"), ("model", "`{model|clean}`"),
            ("greedy sents/s", "{nmtkit.greedy_sents_per_s}"),
            ("greedy: ratio to the reference", "**{greedy_speedup_vs_reference}x**"),
            ("greedy rounds", "{rounds[*].greedy_ratio?|range}"),
            ("reference sents/s", "{reference_one_at_a_time_greedy_sents_per_s}"),
            ("beam 5 sents/s", "{nmtkit.beam5_sents_per_s}"),
            ("beam 5: ratio", "{beam5_speed_vs_reference_greedy?|suffix(x)}"),
            ("beam 5 rounds", "{rounds[*].beam5_ratio?|range}"),
            ("beam 5, `decode.early_stop` sents/s", "{nmtkit.beam5_early_stop_sents_per_s?}"),
            ("early stop: ratio", "{beam5_early_stop_speed_vs_reference_greedy?|suffix(x)}"),
            ("early stop rounds", "{rounds[*].beam5_early_stop_ratio?|range}"),
            ("early stop: outputs equal to beam 5's", "{nmtkit.beam5_early_stop_same_output?:.0%}"),
            ("peak RSS GB", "{nmtkit.peak_rss_gb:.2f}"),
            ("command", "`{command|clean}`"))),
    ), per_file=False),
    Section(CPU, "train_speed_cpu_2026-11-26.json", "Peers on the same machine kind", (
        Text("PEERS.md (the peers' own measurements on a machine of this kind, copied into each "
             "benchmark file): training target tok/s fairseq "
             "{peers_tgt_tokens_per_s_same_machine_kind.fairseq:,}, OpenNMT-py "
             "{peers_tgt_tokens_per_s_same_machine_kind[OpenNMT-py]:,}, JoeyNMT "
             "{peers_tgt_tokens_per_s_same_machine_kind.JoeyNMT:,} (peak RSS fairseq 1.62, "
             "OpenNMT-py 2.94 GB; nmtkit's, with the reference's, in the training table)."),
        Text("Decoding sentences/s greedy / beam 5: OpenNMT-py "
             "{peers_same_machine_kind[OpenNMT-py].greedy} / "
             "{peers_same_machine_kind[OpenNMT-py].beam5} "
             "({peers_ratio_to_reference_greedy_PEERS_md[OpenNMT-py].greedy}x / "
             "{peers_ratio_to_reference_greedy_PEERS_md[OpenNMT-py].beam5}x its reference's greedy), "
             "fairseq {peers_same_machine_kind.fairseq.greedy} / "
             "{peers_same_machine_kind.fairseq.beam5} "
             "({peers_ratio_to_reference_greedy_PEERS_md.fairseq.greedy}x / "
             "{peers_ratio_to_reference_greedy_PEERS_md.fairseq.beam5}x), CTranslate2 on an "
             "OpenNMT-py model (float32) {peers_same_machine_kind[CTranslate2 fp32].greedy} / "
             "{peers_same_machine_kind[CTranslate2 fp32].beam5}.",
             file="decode_speed_cpu_2026-11-26.json"))),
    Section(CPU, "decode_speed*.json", "Decoding through a CTranslate2 export", (
        Text("`nmtkit export --format ctranslate2` of the same checkpoint, decoded through "
             "`nmtkit.export.ctranslate2_engine.CTranslate2Translator` on the same sentences "
             "(tokenization included), and by CTranslate2 alone (pre-tokenized, the same caps); "
             "the share of outputs identical to nmtkit's."),
        Table("ctranslate2?", (
            ("file", "`{~}`"), ("threads", "{threads}"),
            ("fp32 greedy / beam 5", "{float32.greedy_sents_per_s} / {float32.beam5_sents_per_s}"),
            ("int8 greedy / beam 5", "{int8.greedy_sents_per_s} / **{int8.beam5_sents_per_s}**"),
            ("same output as nmtkit: fp32 greedy / beam 5", "{float32.greedy_same_output_as_nmtkit:.1%} / "
             "{float32.beam5_same_output_as_nmtkit:.1%}"),
            ("int8 greedy / beam 5", "{int8.greedy_same_output_as_nmtkit:.1%} / "
             "{int8.beam5_same_output_as_nmtkit:.1%}"),
            ("CTranslate2 alone, fp32 greedy / beam 5", "{float32.greedy_ct2_alone_sents_per_s?} / "
             "{float32.beam5_ct2_alone_sents_per_s?}"),
            ("int8", "{int8.greedy_ct2_alone_sents_per_s?} / {int8.beam5_ct2_alone_sents_per_s?}"))),
    ), per_file=False),
    Section(CPU, "train_speed*.json", "Training before and after a change, in the same rounds", (
        Text("`--baseline-src OLD_TREE` times an older commit's tree in the same alternating "
             "rounds as the tree under test; the ratio is new / old (1.0 = unchanged)."),
        Table("baseline?", (
            ("file", "`{~}`"), ("date", "{$.date|date}"), ("change", "{$.change?|clean}"),
            ("new / old", "**{speed_vs_baseline}x**"), ("rounds", "{rounds_speed_vs_baseline|join}"),
            ("CPU matmul GFLOP/s", "{$.cpu_matmul_peak_gflops?}"), ("command", "`{$.command|clean}`"))),
    ), per_file=False),
    Section(CPU, "decode_speed*.json", "Decoding before and after a change, in the same rounds", (
        Table("baseline?", (
            ("file", "`{~}`"), ("date", "{$.date|date}"), ("change", "{$.change?|clean}"),
            ("new / old: greedy", "**{greedy_speed_vs_baseline}x**"),
            ("beam 5", "**{beam5_speed_vs_baseline}x**"),
            ("beam 5, early stop", "**{beam5_early_stop_speed_vs_baseline}x**"),
            ("CPU matmul GFLOP/s", "{$.cpu_matmul_peak_gflops?}"), ("command", "`{$.command|clean}`"))),
    ), per_file=False),
    Section(CPU, "fast_ab*.json", "One training speed-up on and off, in one process", (
        Text("Pairs of chunks of updates on the same batches, one with the speed-up and one "
             "without, in alternating order: the host's drift between processes (10-30% within "
             "minutes) does not enter the ratio. Median of the pairs (their range). "
             "`output_loss`, `unpadded_encoder`: `nmtkit.fast.output_loss`, "
             "`nmtkit.fast.unpadded_encoder`; `onednn_linear`: `nmtkit.fast.linear`; "
             "`amp_bf16`: `train.amp: bf16` (a CPU with bf16 in hardware only)."),
        Table("speedups.*", (
            ("file", "`{~}`"), ("date", "{$.date|date}"), ("speed-up", "`{@}`"),
            ("with / without", "**{speed_with_vs_without}x**"), ("pairs", "{pairs|range}"),
            ("target tok/s with / without", "{tgt_tokens_per_s_with:,} / {tgt_tokens_per_s_without:,}"),
            ("CPU matmul GFLOP/s before, after", "{$.cpu_matmul_gflops_before_after|join}"),
            ("command", "`{$.command|clean}`")), unless="skipped"),
    ), per_file=False),
    Section(CPU, "decode_ab*.json", "One decoding speed-up on and off, in one process", (
        Text("Each batch of test sentences translated once with the speed-up and once without, "
             "in alternating order; one ratio per round over all batches, the median of the "
             "rounds (their range), and the share of translations that came out the same."),
        Table("speedups.*.*", (
            ("file", "`{~}`"), ("date", "{$.date|date}"), ("speed-up, search", "`nmtkit.fast.{^@}`, {@}"),
            ("with / without", "**{speed_with_vs_without}x**"), ("rounds", "{rounds|range}"),
            ("sents/s with / without", "{sents_per_s_with} / {sents_per_s_without}"),
            ("same output", "{same_output:.0%}"),
            ("CPU matmul GFLOP/s before, after", "{$.cpu_matmul_gflops_before_after|join}"),
            ("command", "`{$.command|clean}`"))),
        Text("`nmtkit.fast.allocator` is process-wide: one beam-5 pass before and after it is "
             "applied."),
        Table("allocator_beam5_pass", (
            ("file", "`{~}`"), ("page faults", "{before.page_faults:,} -> {after.page_faults:,}"),
            ("kernel CPU s", "{before.system_cpu_s} -> {after.system_cpu_s}"),
            ("user CPU s", "{before.user_cpu_s} -> {after.user_cpu_s}"),
            ("wall s", "{before.wall_s} -> {after.wall_s}"))),
    ), per_file=False),
    Section(CPU, "corpus_memory*.json", "A corpus larger than memory: `data.mmap`", (
        Text("A {corpus_pairs:,}-pair corpus ({corpus_text_mb} MB of text) prepared in memory, "
             "memory-mapped the first time, and memory-mapped again (store {store_mb} MB), "
             "then {runs.in_memory.batches} token-budget batches (`{~}`: `{command|clean}`):"),
        Table("runs.*", (
            ("run", "`{@}`"), ("seconds to the training ids", "{seconds_to_ids}"),
            ("seconds for the batches", "{seconds_for_batches}"), ("peak RSS GB", "{peak_rss_gb:.2f}"))),
        Text("Machine: {machine}."))),
    Section(CPU, "cold_start_cpu_*.json", "One sentence from a cold start: `nmtkit translate`", (
        Text("Each part in a fresh process, medians of {runs} rounds (the minimum beside the "
             "command's), translate's `--threads {threads}` (0: PyTorch's default), host load "
             "{load_average_before[0]:.1f} before and {load_average_after[0]:.1f} after (`{~}`: "
             "`{command|clean}`). `before` is the tree before the restructuring, with the "
             "checkpoint its own training wrote; where measured, `after` is PyTorch's path "
             "(`--engine torch`), `after_numpy` the command as a user runs it (a few lines: the "
             "checkpoint's Transformer in numpy, `nmtkit.lite`, no PyTorch imported) and "
             "`after_ctranslate2` an export run by CTranslate2:"),
        Table("trees.*", (
            ("tree", "`{@}`"), ("engine", "{engine?}"), ("best.pt MB", "{checkpoint_sizes_mb[best.pt]?}"),
            ("last.pt MB", "{checkpoint_sizes_mb[last.pt]?}"),
            ("import nmtkit.cli s", "{median.import_cli_s}"),
            ("import torch s", "{median.import_torch_s}"),
            ("translate's imports s", "{median.import_translate_s}"),
            ("load s", "{median.load_s}"), ("first sentence s", "{median.first_sentence_s}"),
            ("command wall s", "{median.command_wall_s}"),
            ("command wall s, minimum", "{min.command_wall_s}"))),
        Text("Machine: {machine}; matmul {matmul_gflops.before_rounds} and "
             "{matmul_gflops.after_rounds} GFLOP/s before and after the rounds."))),
    Section(CPU, "peers_cpu*.json", "Peers re-measured here, training", (
        Text("Each peer in a throwaway virtual environment, the reference in the same run "
             "({reference.train_tgt_tokens_per_s} target tok/s, peak RSS "
             "{reference.peak_rss_gb?:.2f} GB); {machine}, {threads} threads (`{~}`: "
             "`{command|clean}`)."),
        Table("peers.*", (
            ("peer", "{@}"), ("versions", "{version|items}"),
            ("target tok/s", "{tgt_tokens_per_s:,.0f}"),
            ("ratio to its reference", "**{ratio_to_reference}x**"),
            ("peak RSS GB", "{peak_rss_gb:.2f}"), ("timed steps", "{timed_steps}"))),
        Text("Not measured: {not_measured|items}.", optional=True))),
    Section(GPU, "gpu_h100_2026-11-22/summary.json", "Training and decoding throughput", (
        Text("{speed.device}, torch {speed.torch}, bf16 autocast (`{~}`, key `speed`: "
             "`{speed.command|clean}`): training `{speed.train.config|clean}` "
             "({speed.train.params|millions:.1f}M parameters), {speed.train.max_tokens}-token "
             "batches: **{speed.train.tgt_tokens_per_s:,}** target tokens/s, "
             "{speed.train.model_tflops_per_s} model TFLOP/s = {speed.train.mfu:.1%} of the "
             "measured {speed.train.bf16_matmul_peak_tflops} TFLOP/s bf16 matmul rate "
             "(Multi30k's short sentences and small batches leave the GPU waiting on kernel "
             "launches); peak memory {speed.train.peak_gpu_mem_gb} GB. Translating the "
             "{speed.decode.n:,} test sentences, batch {speed.decode.batch_size}: "
             "{speed.decode.greedy_sents_per_s:,} sentences/s greedy, "
             "{speed.decode.beam4_sents_per_s:,} with beam 4."),)),
    Section(GPU, "gpu_h100_2026-11-26/summary.json",
            "Fixed batch shapes and CUDA graphs (`train.cuda_graphs`)", (
                Text("{device}, torch {torch}, {date}. {how|clean}"),
                Table("runs.*", (
                    ("run", "`{@}`"), ("lengths", "{lengths?}"), ("tokens/batch", "{max_tokens?:,}"),
                    ("CUDA graphs", "{cuda_graphs?}"), ("target tok/s", "{tgt_tokens_per_s?:,}"),
                    ("MFU", "{mfu?:.1%}"), ("real/padded targets", "{tgt_real_of_padded?}"),
                    ("exit status", "{rc?}"), ("command", "`{command?|clean}`"))),
                Text("Goal of issue 18: {results_in_brief.issue_18_goal|clean}."),
                Text("Where the time goes: {where_the_time_goes|clean}"),
                Text("Decoding (the small model, test_2016_flickr, batch 128): "
                     "{results_in_brief.decoding_small_model_test_2016_batch128.greedy_sents_per_s:,} "
                     "sentences/s greedy, "
                     "{results_in_brief.decoding_small_model_test_2016_batch128.beam5_sents_per_s:,} "
                     "beam 5; {results_in_brief.decoding_small_model_test_2016_batch128.note|clean}."),
                Text("{correctness_on_the_gpu|clean}"))),
    Section(SERVING, "serve_load_*.json", "`nmtkit serve` under load ({date|date})", (
        Text("{machine.cpus} cores (torch {machine.torch}), {requests_per_level} one-sentence "
             "requests per level (`{~}`: `{command|clean}`). Concurrent requests are merged "
             "into one model call."),
        Table("runs[*]?", (
            ("concurrency", "{concurrency}"), ("requests/s", "{requests_per_s}"),
            ("p50 ms", "{latency_ms.p50}"), ("p95 ms", "{latency_ms.p95}"),
            ("sentences per model call", "{sentences_per_call}"), ("failed", "{failed}"))),
        Table("engines.*.runs[*]?", (
            ("engine (beam {engines.torch.beam?})", "{^@} ({^.model.device})"),
            ("concurrency", "{concurrency}"), ("requests/s", "{requests_per_s}"),
            ("p50 ms", "{latency_ms.p50}"), ("p95 ms", "{latency_ms.p95}"),
            ("sentences per model call", "{sentences_per_call}"), ("failed", "{failed}"))),
        Table("ctranslate2_vs_torch[*]?", (
            ("CTranslate2 / PyTorch at concurrency", "{concurrency}"),
            ("requests/s", "**{requests_per_s_ratio}x**"), ("p50 latency", "{p50_latency_ratio}x"),
            ("p95 latency", "{p95_latency_ratio}x"))))),
)

HEADLINES: tuple[Headline, ...] = (
    Headline("time_to_quality_cpu_2026-12-07_avx2.json",
             "the main job (`bash scripts/quickstart.sh`), 10 minutes on a 2-core {host_kind} host, "
             "a fresh clone's first run, de->en test sacreBLEU: "
             "**{runs[1].test_2016_flickr.bleu:.2f}** ({runs[1].updates:,} updates; the cores "
             "busy for its first 100 s: {runs[0].test_2016_flickr.bleu:.2f})",
             command="`{runs[1].command|brief}`"),
    Headline("quickstart_budget_cpu_2026-11-29_changing_speed.json",
             "the quickstart with its recipe before 2026-12-07 (width 256), 10 minutes, de->en "
             "test sacreBLEU: "
             "**{runs[0].test_2016_flickr.bleu:.2f}** ({runs[0].updates:,} updates)",
             command="`{runs[0].command|brief}`"),
    Headline("quickstart_budget_cpu_2026-11-25.json",
             "the same, an earlier commit on another host: **{runs[1].test_2016_flickr.bleu:.2f}** "
             "({runs[1].updates:,} updates)", command="`{runs[1].command|brief}`"),
    Headline("multi30k_1h_budget_cpu_2026-11-25.json",
             "one hour (`configs/multi30k_transformer_hour.yaml`), de->en test sacreBLEU: "
             "**{runs[0].checkpoints[best.pt].test.bleu:.2f}**; en->de "
             "{runs[1].checkpoints[best.pt].test.bleu:.2f}",
             command="`{runs[0].commands[0]|brief}`"),
    Headline("multi30k_hour_seeds_cpu_2026-11-26_bf16_amx.json",
             "three hour-recipe seeds as one ensemble, length penalty chosen on val, de->en: "
             "**{ensemble.tuned.test.bleu:.2f}** sacreBLEU "
             "({ensemble.tuned.test.bleu_official_tok:.2f} official tokenized)",
             command="`{command|brief}`"),
    Headline("ablation_cpu_ende_rerank_ens2_r2l_3h_preregistered_2026-11-29.json",
             "en->de in 3 CPU hours (two-model ensemble reranked by a de->en and a right-to-left "
             "model, every choice fixed before training): **{rows[-1].note|after(test )}** "
             "official tokenized (the ensemble alone {rows[1].note|after(test )})",
             command="`{commands[-1]|brief}`"),
    Headline("gpu_h100_2026-11-22/summary.json",
             "five minutes on one GPU, base model, de->en: "
             "**{runs.run3_base.test_2016_flickr_avg.bleu:.2f}** (the average of the last 5 "
             "checkpoints)",
             machine="{device}",
             command="`nmtkit train configs/multi30k_transformer_base.yaml --set "
                     "{runs.run3_base.overrides|join( --set )}`"),
    Headline("train_speed_cpu_2026-11-26.json",
             "CPU training: **{speedup_vs_reference}x** the seed's reference "
             "({nmtkit.tgt_tokens_per_s:,.0f} target tok/s)"),
    Headline("train_speed_cpu_2026-11-26_bf16_amx.json",
             "CPU training with `train.amp: bf16`: **{speedup_vs_reference}x** the reference"),
    Headline("fast_ab_cpu_2026-11-26_amx_host.json",
             "`train.amp: bf16` against float32 in one process: "
             "**{speedups.amp_bf16.speed_with_vs_without}x**"),
    Headline("decode_speed_cpu_2026-11-26.json",
             "CPU decoding: greedy **{greedy_speedup_vs_reference}x** the reference's, beam 5 "
             "**{beam5_speed_vs_reference_greedy}x**; CTranslate2 int8 export beam 5 "
             "{ctranslate2.int8.beam5_sents_per_s} sents/s"),
    Headline("serve_load_cpu_2026-11-26.json",
             "serving, CTranslate2 engine against PyTorch (requests/s at concurrency 1, 8, 32): "
             "**{ctranslate2_vs_torch[*].requests_per_s_ratio|join(x, )}x**",
             machine="{machine.cpus} CPU cores"),
    Headline("gpu_h100_2026-11-26/summary.json",
             "GPU training with `train.cuda_graphs`, 8,192-token batches: "
             "{results_in_brief.multi30k_8192_tokens.speedup_same_call|join(x, )}x eager "
             "({results_in_brief.multi30k_8192_tokens.cuda_graphs_tok_s|fmt(,)|join( and )} target tok/s)",
             machine="{device}", command="`bash experiments/gpu_suite.sh OUT`"),
    Headline("corpus_memory_cpu_2026-11-22.json",
             "a {corpus_pairs:,}-pair corpus: peak RSS {runs.in_memory.peak_rss_gb:.2f} GB in "
             "memory, {runs.mmap_reuse.peak_rss_gb:.2f} GB memory-mapped (`data.mmap`)"),
)

ABLATIONS: tuple[Line, ...] = (
    Line("ablation_*.json", "**{title|clean}** (val {val_score?BLEU|clean}): "
         "{rows[0].ingredient|clean|short} {rows[0].val_bleu_beam5:.2f}; ", "rows[1:][*]",
         "{ingredient|clean|short} {val_bleu_beam5:.2f} "
         "({val_bleu_beam5|minus($.rows[0].val_bleu_beam5):+.2f})"),
)

FINDINGS: tuple[Line, ...] = (
    Line("mbr_hour_ende_cpu_2026-11-28.json",
         "MBR over the beam's 20 best with equal weights, chosen on val for an en->de hour model: "
         "val {rows[0].val.bleu_official_tok:.2f} -> {rows[$.chosen].val.bleu_official_tok:.2f}, "
         "test {rows[0].test.bleu_official_tok:.2f} -> "
         "{rows[$.chosen].test.bleu_official_tok:.2f} official tokenized "
         "({rows[$.chosen].test.bleu_official_tok|minus(rows[0].test.bleu_official_tok):+.2f})"),
    Line("mbr_rerank_deen_hour_cpu_2026-11-28.json",
         "Reranking the beam's 20 best by a model of the other direction, de->en, one "
         "lowercased hour model per direction: val {rows[0].val.bleu_official_tok:.2f} -> "
         "{rows[$.chosen].val.bleu_official_tok:.2f}, test {rows[0].test.bleu_official_tok:.2f} "
         "-> {rows[$.chosen].test.bleu_official_tok:.2f} official tokenized "
         "({rows[$.chosen].test.bleu_official_tok|minus(rows[0].test.bleu_official_tok):+.2f}; "
         "chosen: {rows[$.chosen].setting})"),
    Line("mbr_rerank_ende_hour_cpu_2026-11-28.json",
         "Reranking the beam's 20 best by a model of the other direction, en->de, one "
         "lowercased hour model per direction: val {rows[0].val.bleu_official_tok:.2f} -> "
         "{rows[$.chosen].val.bleu_official_tok:.2f}, test {rows[0].test.bleu_official_tok:.2f} "
         "-> {rows[$.chosen].test.bleu_official_tok:.2f} official tokenized "
         "({rows[$.chosen].test.bleu_official_tok|minus(rows[0].test.bleu_official_tok):+.2f}; "
         "chosen: {rows[$.chosen].setting})"),
    Line("backtranslation_*.json",
         "Back-translation from half of Multi30k into the other half ({direction}, "
         "{steps_per_run} updates per run): test {scores.baseline.test_2016_flickr.bleu:.2f} "
         "without, {scores.backtranslation.test_2016_flickr.bleu:.2f} with "
         "({gain_of_backtranslation.test_2016_flickr.bleu:+.2f}; the reverse model that made "
         "the synthetic sources: {scores.reverse.test_2016_flickr.bleu:.2f})"),
    Line("decode_tuning_hour_cpu_2026-11-26.json",
         "The length penalty chosen on val did not carry over to test for en->de: the "
         "three-seed ensemble {systems[-1].test_recipe.bleu:.2f} -> "
         "{systems[-1].test_chosen.bleu:.2f} (de->en {systems[3].test_recipe.bleu:.2f} -> "
         "{systems[3].test_chosen.bleu:.2f}); the recipes keep 0.6"),
    Line("mbr_quick10_deen_cpu_2026-11-28.json",
         "MBR on the quickstart's 10-minute de->en model: val {rows[0].val.bleu:.2f} with beam "
         "search, {rows[2].val.bleu:.2f} with MBR over 20; val chose beam search"),
    Line("mbr_hour_ende_cpu_2026-11-28.json",
         "MBR weighted by the model's probability (mbr_scale 1) lost on val against equal "
         "weights: {rows[2].val.bleu_official_tok:.2f} against {rows[3].val.bleu_official_tok:.2f} "
         "official tokenized (beam search {rows[0].val.bleu_official_tok:.2f})"),
    Line("multi30k_hour_seeds_ende_cpu_2026-11-27_bf16_amx_4th_110min.json",
         "A fourth en->de seed trained 110 minutes instead of 60: test "
         "{runs[3].checkpoints[$.runs[3].chosen_on_val].test.bleu:.2f} ({runs[3].chosen_on_val}, "
         "chosen on val), the ensemble of four "
         "{ensemble.test.bleu:.2f}"),
)


def section(glob: str) -> Section:
    """The (first) entry of ``SECTIONS`` for the files ``glob``."""
    return next(s for s in SECTIONS if s.glob == glob)


def page(results: Path = RESULTS) -> str:
    """docs/results.md: the summary table, then every part with its sections."""
    out = ["# Results", "",
           "<!-- Generated by benchmarks/report.py from benchmarks/results/*.json: run "
           "`python benchmarks/report.py --out docs/results.md --ablations docs/ablations.md`; "
           "do not edit by hand. -->", "",
           "Every figure of nmtkit's benchmarks, each with the file in `benchmarks/results/` it "
           "is read from and the command that wrote that file. Paths of the machine a command ran "
           "on are shown repository-relative; `MIRROR` is the offline data mirror "
           "(`$NMTKIT_DATA`) and `OLD_TREE` a `git worktree` of the older commit being timed. "
           "Negative results and ablations, one line each: [ablations.md](ablations.md).", "",
           "## Summary", "", *summary_table(HEADLINES, results), ""]
    for part, intro in PARTS.items():
        body = [line for s in SECTIONS if s.part == part for line in render_section(s, results)]
        if body:
            out += [f"## {part}", "", *([intro, ""] if intro else []), *body]
    return "\n".join(out).rstrip() + "\n"


def ablations_page(results: Path = RESULTS) -> str:
    """docs/ablations.md: one line per ablation and per negative finding."""
    out = ["# Ablations and negative results", "",
           "<!-- Generated by benchmarks/report.py from benchmarks/results/*.json; do not edit "
           "by hand. -->", "",
           "One line per experiment: each ingredient's val score and, in brackets, its difference "
           "from the first row's. Protocols, every row in full, "
           "test scores and commands: [results.md](results.md#ablations).", "",
           *ablation_lines((*ABLATIONS, *FINDINGS), results)]
    return "\n".join(out).rstrip() + "\n"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", help="write docs/results.md here (without it: print it)")
    p.add_argument("--ablations", help="write docs/ablations.md here")
    a = p.parse_args()
    text = page()
    if a.out:
        Path(a.out).write_text(text, encoding="utf-8")
        print(f"wrote {a.out}")
    else:
        print(text, end="")
    if a.ablations:
        Path(a.ablations).write_text(ablations_page(), encoding="utf-8")
        print(f"wrote {a.ablations}")


if __name__ == "__main__":
    main()
