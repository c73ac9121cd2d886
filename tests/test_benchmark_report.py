"""benchmarks/report.py: docs/results.md and docs/ablations.md from the declarative table
(results file glob -> section, columns as JSON key paths), not code per file."""

from __future__ import annotations

import json
import re
import shutil
import sys

import pytest

from .helpers import ROOT, load_benchmark

report = load_benchmark("report")
tables = sys.modules["_tables"]  # the module report.py reads its table with


def ablation(title: str, **extra) -> dict:
    rows = [{"ingredient": "base", "updates": 10, "val_bleu_beam5": 40.0},
            {"ingredient": "+ data.lowercase (both sides)", "updates": 10, "val_bleu_beam5": 40.5}]
    return {"title": title, "protocol": "p", "commands": ["nmtkit train x"], "machine": "m",
            "torch": "t", "matmul_gflops": 100.0, "rows": rows, **extra}


def write(path, result: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result), encoding="utf-8")


def test_the_summary_table_opens_the_page_and_links_each_figure_to_its_json():
    text = report.page()
    lines = text.splitlines()
    assert [x for x in lines if x.startswith("## ")][0] == "## Summary"
    first_table = next(i for i, x in enumerate(lines) if x.startswith("|"))
    assert lines[first_table] == "| figure | machine | command | JSON |"
    assert lines[first_table - 2] == "## Summary"
    rows = lines[first_table + 2:first_table + 2 + len(report.HEADLINES)]
    assert len(rows) == len(report.HEADLINES) and all(r.startswith("| ") for r in rows)
    for row, h in zip(rows, report.HEADLINES, strict=True):
        assert f"(../benchmarks/results/{h.file})" in row
        assert (ROOT / "benchmarks" / "results" / h.file).exists()
    assert "**35.00**" in rows[0] and "33.74" in rows[0]  # the main job's figures, from its JSON
    assert "**35.58**" in rows[1]  # the quick recipe before it


def test_a_new_file_matching_a_glob_appears_in_its_section(tmp_path):
    results = tmp_path / "results"
    shutil.copytree(ROOT / "benchmarks" / "results", results)
    before = report.page(results)
    assert "Ablation: a new ingredient" not in before
    write(results / "ablation_new_cpu.json", ablation("a new ingredient"))
    after = report.page(results)
    lines = after.splitlines()
    at = lines.index("### Ablation: a new ingredient")
    part = max(i for i, x in enumerate(lines[:at]) if x.startswith("## "))
    assert lines[part] == "## Ablations"  # under its part, with its table
    assert "| + data.lowercase (both sides) | 10 | 40.50 | +0.50 |" in lines[at:]
    assert "- **a new ingredient** (val BLEU): base 40.00; + data.lowercase 40.50 (+0.50) " \
           "([ablation_new_cpu.json](../benchmarks/results/ablation_new_cpu.json))" \
           in report.ablations_page(results).splitlines()


def test_a_missing_key_names_the_file_the_section_and_the_path(tmp_path):
    broken = ablation("no protocol")
    del broken["protocol"]
    write(tmp_path / "ablation_x.json", broken)
    with pytest.raises(tables.ReportError) as e:
        report.render_section(report.section("ablation_*.json"), tmp_path)
    message = str(e.value)
    assert "benchmarks/results/ablation_x.json" in message and "'protocol'" in message
    assert "Ablation: {title|clean}" in message  # the section
    broken = ablation("a row without its score")
    del broken["rows"][1]["val_bleu_beam5"]
    write(tmp_path / "ablation_x.json", broken)
    with pytest.raises(tables.ReportError, match=r"ablation_x.json: no 'val_bleu_beam5'.*row 1"):
        report.render_section(report.section("ablation_*.json"), tmp_path)


def test_an_optional_key_may_be_missing_and_a_column_no_file_has_is_left_out(tmp_path):
    write(tmp_path / "ablation_a.json", ablation("a"))
    write(tmp_path / "ablation_b.json", ablation("b", val_score="BLEU vs official lc.norm.tok"))
    lines = report.render_section(report.section("ablation_*.json"), tmp_path)
    heads = [x for x in lines if x.startswith("| ingredient")]
    assert heads == ["| ingredient | updates | val BLEU (beam 5) | vs. the first row |",
                     "| ingredient | updates | val BLEU vs official lc.norm.tok (beam 5) | "
                     "vs. the first row |"]  # no row has a note: no note column
    assert "Machine: m, torch t, matmul 100 GFLOP/s (`ablation_a.json`)." in lines


def test_paths_filters_and_formats():
    root = {"metric": "bleu", "runs": [{"seed": 1, "val": {"bleu": 41.234}, "ok": "best.pt"},
                                       {"seed": 2, "val": {"bleu": 40.0}, "ok": "last.pt"}],
            "arms": [{"kind": "beam", "x": 1.0}, {"kind": "reverse", "x": 3.5}],
            "ck": {"best.pt": {"bleu": 9.0}}, "command": "python benchmarks/seeds.py --work /tmp/w"}
    c = tables.Ctx("f.json", root, root)
    render = tables.render
    assert render("{runs[0].val[$.metric]:.2f}", c) == "41.23"
    assert render("{runs[*].seed|join( / )}", c) == "1 / 2"
    assert render("{runs[*].val.bleu|range(.1f)}", c) == "40.0-41.2"
    assert render("{arms[kind=reverse].x|minus(arms[0].x):+.2f}", c) == "+2.50"
    assert render("{ck[best.pt].bleu:g} {missing?} {missing?none}", c) == "9  none"
    assert render("{command|clean}", c) == "python experiments/seeds.py --work w"
    assert render("{runs[-1].seed|bold_if(runs[-1].ok=='last.pt')}", c) == "**2**"
    rows = tables.rows_of(c, "runs[*].val.*")
    assert [(r.key, r.row, r.parent.row["seed"]) for r in rows] == [("bleu", 41.234, 1),
                                                                     ("bleu", 40.0, 2)]
    with pytest.raises(tables.ReportError, match=r"f.json: no 'nope'"):
        render("{runs[0].nope}", c)


def test_a_pivot_puts_each_trial_in_its_row_and_column(tmp_path):
    trials = [{"length_penalty": 0.6, "rerank": 0, "reverse_weight": None, "bleu": 30.0},
              {"length_penalty": 0.6, "rerank": 20, "reverse_weight": 1.0, "bleu": 31.0},
              {"length_penalty": 0.6, "rerank": 20, "reverse_weight": 3.0, "bleu": 31.5},
              {"length_penalty": 1.0, "rerank": 0, "reverse_weight": None, "bleu": 30.5},
              {"length_penalty": 0.6, "mbr": 5, "rerank": 20, "reverse_weight": 3.0, "bleu": 32.0}]
    write(tmp_path / "val_grid_x.json", {"split": "val", "model": ["a.pt"], "metric": "bleu",
                                         "flags": "--rerank 20", "trials": trials})
    lines = report.render_section(report.section("val_grid_*.json"), tmp_path)
    at = lines.index("| length penalty | beam alone | rerank 20 w 1 | rerank 20 w 3 "
                     "| rerank 20 w 3 MBR 5 |")
    assert lines[at + 2:at + 4] == ["| 0.6 | 30.00 | 31.00 | 31.50 | 32.00 |",
                                    "| 1 | 30.50 | - | - | - |"]


def test_rerank_seeds_arms_show_their_gain_over_the_reverse_model(tmp_path):
    def arm(name, kind, val, test):
        return {"name": name, "kind": kind,
                "chosen": {"length_penalty": 1.0, "reverse_weight": 2.0, "r2l_weight": 1.0},
                "val": {"bleu_official_tok": val, "bleu": val - 2},
                "test": {"bleu_official_tok": test, "bleu": test - 2}}

    write(tmp_path / "rerank_seeds_x.json", {
        "title": "T", "protocol": "P", "metric": "bleu_official_tok", "command": "python x",
        "machine": "M", "threads": 2, "torch": "2.13.0+cpu",
        "matmul_gflops": {"torch": 120.0, "onednn": 110.0},
        "arms": [arm("beam 20 alone", "beam", 38.0, 37.5), arm("reverse model", "reverse", 39.0, 38.0),
                 arm("reverse + right-to-left a", "seed", 39.5, 38.75)],
        "gains": [{"val": 0.5, "test": 0.75}], "gain_mean": {"val": 0.5, "test": 0.75},
        "gain_sd": {"val": None, "test": None}})
    lines = report.render_section(report.section("rerank_seeds_*.json"), tmp_path)
    assert lines[0] == "### T"
    assert "| reverse + right-to-left a | 1, 2, 1 | 39.50 | 38.75 | 36.75 | +0.50 | +0.75 |" in lines
    assert "| beam 20 alone | 1, 2, 1 | 38.00 | 37.50 | 35.50 | -1.00 | -0.50 |" in lines
    assert ("Over 1 right-to-left seeds, the gain over the reverse model alone: val +0.50, "
            "test +0.75 bleu_official_tok.") in lines
    assert any(x.startswith("Machine: M, 2 threads, torch 2.13.0+cpu, matmul torch 120, "
                            "onednn 110 GFLOP/s (`rerank_seeds_x.json`).") for x in lines)


def test_every_results_file_is_in_a_section():
    results = ROOT / "benchmarks" / "results"
    files = sorted({p.relative_to(results) for p in results.glob("*.json")}
                   | {p.relative_to(results) for p in results.glob("*/summary.json")})
    unshown = [str(f) for f in files if not any(f.match(s.glob) for s in report.SECTIONS)]
    assert not unshown, f"results files no section of benchmarks/report.py shows: {unshown}"


def test_the_readme_headline_figures_are_those_of_the_summary_table():
    """Each figure of README.md's headline table is in the summary row of a JSON it links."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8").split("## Headline figures")[1]
    rows = [x for x in readme.splitlines() if x.startswith("| ") and "benchmarks/results/" in x]
    assert len(rows) >= 6
    summary = report.summary_table(report.HEADLINES)
    for row in rows:
        _, value, links = (c.strip() for c in row.strip("|").split("|"))
        files = re.findall(r"\(benchmarks/results/([^)]+)\)", links)
        shown = " ".join(x for x in summary if any(f"/{f})" in x for f in files))
        for number in re.findall(r"\d+\.\d+", value):
            assert number in shown, f"README's {number} ({files}) is not in the summary table"
