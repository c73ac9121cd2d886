"""experiments/seeds.py: several seeds of one recipe, each chosen on val, their ensemble tuned
on val. End to end on the copy task (two tiny seeds), and its grid extension with a stand-in
for ``nmtkit tune``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from argparse import Namespace

import pytest

from .helpers import ROOT, load_benchmark, tiny_copy_overrides
from .helpers import write_xyz_corpus as write_corpus

SCRIPT = ROOT / "experiments" / "seeds.py"


def run_script(work, *extra, seeds=("1", "2")):
    sets = [x for o in tiny_copy_overrides(20) for x in ("--set", o)]
    proc = subprocess.run([sys.executable, str(SCRIPT), "--config", "configs/copy_task.yaml",
                           "--seeds", *seeds, "--work", str(work), "--beam", "2",
                           "--length-penalty", "0", "1", "--no-matmul", *sets, *extra],
                          cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout), proc.stderr


@pytest.fixture(scope="module")
def alone(tmp_path_factory):
    """Two seeds trained one after the other: (work folder, seeds.py's JSON, its log). Made
    once for the module: the tests below read the JSON as it first came out, and the first
    one goes on to run the script again in the same folder."""
    work = tmp_path_factory.mktemp("alone") / "seeds"
    return (work, *run_script(work))


@pytest.fixture(scope="module")
def side_by_side(tmp_path_factory):
    """The same two seeds trained at once (``--parallel 2``): (work folder, JSON, log)."""
    work = tmp_path_factory.mktemp("side") / "seeds"
    return (work, *run_script(work, "--parallel", "2"))


@pytest.mark.slow
def test_seeds_choose_on_val_and_ensemble_the_chosen(alone):
    work, result, log = alone
    assert [r["seed"] for r in result["runs"]] == [1, 2]
    for run in result["runs"]:
        assert run["updates"] == 20
        ckpts = run["checkpoints"]
        assert set(ckpts) == {"best.pt", "last.pt", "avg3.pt"}  # avg3: steps 10 and 20
        order = list(ckpts)
        best = max(ckpts, key=lambda n: (ckpts[n]["val"]["bleu"], -order.index(n)))
        assert run["chosen_on_val"] == best
        for name, c in ckpts.items():  # the numbers are those of the kept evaluations
            kept = json.loads((work / f"seed{run['seed']}" / f"eval_{name[:-3]}_val.json")
                              .read_text())
            assert c["val"]["bleu"] == kept["bleu"] and kept["beam"] == 2
    ens = result["ensemble"]
    assert ens["models"] == [str(work / f"seed{r['seed']}" / r["chosen_on_val"])
                             for r in result["runs"]]
    tuned = ens["tuned"]
    assert tuned["grid"] == [0.0, 1.0] and len(tuned["trials"]) == 2
    assert tuned["chosen"]["bleu"] == max(t["bleu"] for t in tuned["trials"])
    assert json.loads((work / "ensemble_test_2016_flickr_tuned.json").read_text())[
        "length_penalty"] == tuned["chosen"]["length_penalty"]
    assert "nmtkit tune" in log and "--split val" in log  # tuned on val, not on test
    assert "--split test_2016_flickr --beam 2 --length-penalty" in log  # test: scored only
    picked = [r["checkpoints"][r["chosen_on_val"]]["test"]["bleu"] for r in result["runs"]]
    assert result["single_model_chosen_on_val"]["test_mean"] == round(sum(picked) / 2, 2)

    # Run again: every step finds its file and nothing is trained or translated again.
    stamps = {p: p.stat().st_mtime_ns for p in work.rglob("*") if p.is_file()}
    again, log = run_script(work)
    assert "+ " not in log  # no command ran
    assert {p: p.stat().st_mtime_ns for p in stamps} == stamps
    assert again["ensemble"] == result["ensemble"] and again["runs"] == result["runs"]

    # Another penalty grid: the seeds' files are kept, the ensemble is tuned again, and only
    # a translation whose command changed (test with a newly chosen penalty) is made again.
    other, log = run_script(work, "--length-penalty", "0", "2", "--extend", "0")
    assert "nmtkit train" not in log and log.count("+ nmtkit tune") == 1
    moved = other["ensemble"]["tuned"]["chosen"]["length_penalty"] != tuned["chosen"][
        "length_penalty"]
    assert log.count("+ nmtkit evaluate") == (1 if moved else 0)
    assert other["ensemble"]["tuned"]["grid"] == [0.0, 2.0] and other["runs"] == result["runs"]
    for p, stamp in stamps.items():
        changed = p.stat().st_mtime_ns != stamp
        assert changed == (p.name.startswith("tune") or moved and "_tuned." in p.name), p

    # A third seed: it is trained and scored, the two kept, and the ensemble made anew.
    three, log = run_script(work, seeds=("1", "2", "3"))
    assert log.count("nmtkit train") == 1 and f"--run-dir {work / 'seed3'} " in log
    assert three["runs"][:2] == result["runs"] and len(three["ensemble"]["models"]) == 3
    assert three["ensemble"]["models"][2].startswith(str(work / "seed3"))
    kept = json.loads((work / "ensemble_val.json").read_text())
    assert three["ensemble"]["val"]["bleu"] == kept["bleu"]
    assert (work / "ensemble_val.cmd").read_text().count("--model") == 3

    # A finished seed is never trained over by another recipe: refused, named.
    proc = subprocess.run([sys.executable, str(SCRIPT), "--config", "configs/copy_task.yaml",
                           "--seeds", "1", "2", "--work", str(work), "--no-matmul",
                           "--set", "train.max_steps=30"], cwd=ROOT, capture_output=True,
                          text=True)
    assert proc.returncode != 0 and "seed1 was trained by" in proc.stderr
    assert "train.max_steps=30" in proc.stderr and "--work" in proc.stderr
    assert (work / "seed1" / "last.pt").stat().st_mtime_ns == stamps[work / "seed1" / "last.pt"]


@pytest.mark.slow
def test_refuses_fewer_than_two_seeds(tmp_path):
    proc = subprocess.run([sys.executable, str(SCRIPT), "--seeds", "1", "1",
                           "--work", str(tmp_path)], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 2 and "two different seeds" in proc.stderr


@pytest.mark.slow
def test_one_seed_changed_by_seed_set_is_named_in_the_record(tmp_path):
    work = tmp_path / "mixed"
    result, log = run_script(work, "--seed-set", "2:train.max_steps=30", "--extend", "0",
                             "--metric", "bleu_lc_tok")
    one, two = result["runs"]
    assert one["updates"] == 20 and "overrides" not in one
    assert two["updates"] == 30 and two["overrides"] == ["train.max_steps=30"]
    assert log.count("train.max_steps=30") == 1  # seed 2's training command only
    assert "changing only train.seed (seed 2 also train.max_steps=30)," in result["protocol"]
    assert "(seed 2 also train.max_steps=30)" in result["title"]
    # --set changed the recipe for every seed: the title and the protocol name it.
    every = ", ".join(tiny_copy_overrides(20))
    assert result["title"].startswith(f"copy_task ({every}) with 2 seeds (seed 2 also ")
    assert result["protocol"].startswith(f"configs/copy_task.yaml with {every} for every "
                                         "seed, trained once per seed (1, 2),")
    # Its kept command holds the override: the same call again trains nothing.
    assert "train.max_steps=30" in (work / "seed2.cmd").read_text()
    # --metric bleu_lc_tok chose each seed's checkpoint and the penalty, and is named.
    assert result["metric"] == "bleu_lc_tok"
    assert "the best val BLEU on lowercased tokenized text (bleu_lc_tok)." in result["protocol"]
    for run in result["runs"]:
        ckpts = run["checkpoints"]
        order = list(ckpts)
        assert run["chosen_on_val"] == max(
            ckpts, key=lambda n: (ckpts[n]["val"]["bleu_lc_tok"], -order.index(n)))
    tuned = result["ensemble"]["tuned"]
    assert tuned["chosen"]["bleu_lc_tok"] == max(t["bleu_lc_tok"] for t in tuned["trials"])
    assert "--metric bleu_lc_tok" in (work / "tune.cmd").read_text()
    again, log = run_script(work, "--seed-set", "2:train.max_steps=30", "--extend", "0",
                            "--metric", "bleu_lc_tok")
    assert "nmtkit train" not in log and again["runs"] == result["runs"]

    # docs/results.md's section of these files names the seed's overrides beside it.
    report = load_benchmark("report")
    for c in (*[r["checkpoints"][r["chosen_on_val"]] for r in result["runs"]],
              result["ensemble"], result["ensemble"]["tuned"]):  # a Multi30k score
        c["test"].setdefault("bleu_official_tok", 0.0)
    result["single_model_chosen_on_val"].setdefault("test_official_tok_mean", 0.0)
    (tmp_path / "multi30k_hour_seeds_x.json").write_text(json.dumps(result))
    section = report.render_section(report.section("multi30k_hour_seeds*.json"), tmp_path)
    rows = [x for x in section if x.startswith("| 2 ")]
    assert len(rows) == 1 and rows[0].startswith("| 2 (train.max_steps=30) | 30 (")
    chosen = two["checkpoints"][two["chosen_on_val"]]  # cells in the metric that chose
    assert f"**{chosen['val']['bleu_lc_tok']:.2f}** / **{chosen['test']['bleu_lc_tok']:.2f}**" \
        in rows[0]
    assert "Each cell: val / test_2016_flickr `bleu_lc_tok` (beam 5); bold: the checkpoint " \
           "chosen on val." in section
    ens = [x for x in section if x.startswith("| ensemble of the 2 chosen")][0]
    assert ens.endswith(f"| **{result['ensemble']['test']['bleu_official_tok']:.2f}** |")


@pytest.mark.slow
def test_seed_set_refuses_what_it_cannot_apply(tmp_path):
    for bad, said in (("2-train.max_steps=30", "expected SEED:SECTION.KEY=VALUE"),
                      ("7:train.max_steps=30", "seed 7 is not in --seeds"),
                      ("2:train.no_such_key=1", "no_such_key")):
        proc = subprocess.run([sys.executable, str(SCRIPT), "--config", "configs/copy_task.yaml",
                               "--seeds", "1", "2", "--work", str(tmp_path), "--no-matmul",
                               "--seed-set", bad], cwd=ROOT, capture_output=True, text=True)
        assert proc.returncode != 0 and said in proc.stderr, (bad, proc.stderr[-500:])
        assert not any(tmp_path.iterdir())  # refused before anything was trained


def tune_writing(trials, calls):
    """A stand-in for ``nmtkit tune`` that notes its arguments in ``calls`` and writes
    ``trials`` to its ``-o`` file."""
    def fake_tune(*args):
        calls.append(args)
        with open(args[args.index("-o") + 1], "w", encoding="utf-8") as f:
            json.dump({"trials": trials}, f)
        return ""
    return fake_tune


def test_the_grid_grows_upwards_while_its_largest_penalty_wins(tmp_path, monkeypatch, capsys):
    seeds = load_benchmark("seeds")
    calls = []

    def fake_tune(*args):  # BLEU rises with the penalty up to 2.1, then falls
        calls.append(args)
        end = args.index("--metric") if "--metric" in args else args.index("-o")
        grid = [float(x) for x in args[args.index("--length-penalty") + 1:end]]
        trials = [{"beam": 5, "length_penalty": p, "bleu": 30 - abs(2.1 - p), "chrf": 50.0,
                   "length_ratio": 1.0, "seconds": 1.0, "bleu_lc_tok": 31 - abs(0.6 - p)}
                  for p in grid]
        out = args[args.index("-o") + 1]
        with open(out, "w", encoding="utf-8") as f:
            json.dump({"trials": trials}, f)
        return ""

    monkeypatch.setattr(seeds, "nmtkit_in_process", fake_tune)
    a = Namespace(length_penalty=[0.0, 0.6, 1.0], extend=5, beam=5, work=tmp_path, metric="bleu")
    got = seeds.tune_ensemble(a, [tmp_path / "a.pt", tmp_path / "b.pt"], "val")
    # 1.0 wins at the edge: 1.4 and 1.8 are tried, 1.8 wins at the edge: 2.2 and 2.6 ...
    assert got["grid"] == [0.0, 0.6, 1.0, 1.4, 1.8, 2.2, 2.6]
    assert got["chosen"]["length_penalty"] == 2.2
    assert len(calls) == 3 and got["edge"] is None
    assert all(c[c.index("--split") + 1] == "val" for c in calls)
    # One verdict over all rounds (nmtkit tune's hint speaks of its own round's grid only).
    said = capsys.readouterr().err
    assert "in 3 round(s): 0 0.6 1 1.4 1.8 2.2 2.6; chosen 2.2" in said
    assert "inside the grid" in said

    # At most --extend extensions, and the chosen penalty may then stay at the edge.
    a = Namespace(length_penalty=[0.0, 0.3], extend=1, beam=5, work=tmp_path / "x", metric="bleu")
    a.work.mkdir()
    got = seeds.tune_ensemble(a, [tmp_path / "a.pt"], "val")
    assert got["grid"] == [0.0, 0.3, 0.6, 0.9] and got["chosen"]["length_penalty"] == 0.9
    assert got["edge"] == "largest"
    assert "chosen 0.9 (bleu 28.8), the largest tried: --extend 1 reached" in capsys.readouterr().err

    # --mbr: nmtkit tune tries it with every penalty; the verdict names the choice
    calls.clear()
    a = Namespace(length_penalty=[0.0, 0.3, 0.6, 0.9], extend=0, beam=5, work=tmp_path / "mbr",
                  metric="bleu", mbr=[0, 20])
    a.work.mkdir()

    def fake_mbr_tune(*args):
        calls.append(args)
        grid = [float(x) for x in args[args.index("--length-penalty") + 1:args.index("-o")]]
        sizes = [int(x) for x in args[args.index("--mbr") + 1:args.index("--length-penalty")]]
        trials = [{"beam": 5, "length_penalty": p, "bleu": 30 - abs(0.3 - p) + m / 100,
                   "chrf": 50.0, "length_ratio": 1.0, "seconds": 1.0, "bleu_lc_tok": 31.0,
                   "mbr": m} for p in grid for m in sizes]
        with open(args[args.index("-o") + 1], "w", encoding="utf-8") as f:
            json.dump({"trials": trials}, f)
        return ""

    monkeypatch.setattr(seeds, "nmtkit_in_process", fake_mbr_tune)
    got = seeds.tune_ensemble(a, [tmp_path / "a.pt"], "val")
    assert len(calls) == 1 and got["chosen"]["mbr"] == 20 and got["chosen"]["length_penalty"] == 0.3
    assert "chosen 0.3 with --mbr 20 (bleu 30.2)" in capsys.readouterr().err
    monkeypatch.setattr(seeds, "nmtkit_in_process", fake_tune)

    # --metric bleu_lc_tok (a lowercased recipe): nmtkit tune is told, and it chooses 0.6
    # where cased BLEU would go on to 0.9.
    calls.clear()
    a = Namespace(length_penalty=[0.0, 0.3, 0.6, 0.9], extend=1, beam=5, work=tmp_path / "lc",
                  metric="bleu_lc_tok")
    a.work.mkdir()
    got = seeds.tune_ensemble(a, [tmp_path / "a.pt"], "val")
    assert len(calls) == 1 and calls[0][calls[0].index("--metric") + 1] == "bleu_lc_tok"
    assert got["chosen"]["length_penalty"] == 0.6 and got["edge"] is None
    assert "chosen 0.6 (bleu_lc_tok 31)" in capsys.readouterr().err

    # --rerank with its reverse models and weights: passed to nmtkit tune, the choice named
    calls.clear()
    a = Namespace(length_penalty=[0.3, 0.6], extend=0, beam=5, work=tmp_path / "rr",
                  metric="bleu", rerank=[0, 10], reverse_weight=[0.0, 2.0],
                  reverse_model=["r1.pt", "r2.pt"])
    a.work.mkdir()

    trials = [{"beam": 5, "length_penalty": p, "bleu": 30 + w - p, "chrf": 50.0,
               "length_ratio": 1.0, "seconds": 1.0, "bleu_lc_tok": 31.0,
               "mbr": 0, "rerank": r, "reverse_weight": w if r else None}
              for p in (0.3, 0.6) for r in (0, 10) for w in ((0.0, 2.0) if r else (0.0,))]
    monkeypatch.setattr(seeds, "nmtkit_in_process", tune_writing(trials, calls))
    got = seeds.tune_ensemble(a, [tmp_path / "a.pt"], "val")
    flags = " ".join(calls[0])
    assert "--rerank 0 10 --reverse-weight 0 2 --reverse-model r1.pt --reverse-model r2.pt" in flags
    assert (got["chosen"]["rerank"], got["chosen"]["reverse_weight"]) == (10, 2.0)
    assert "chosen 0.3 with --rerank 10 --reverse-weight 2 (bleu 31.7)" in capsys.readouterr().err
    seen = []
    monkeypatch.setattr(seeds, "json_file", lambda path, command, make: seen.append(command))
    seeds.evaluate([tmp_path / "a.pt"], "test", 5, tmp_path / "e.json", length_penalty=0.3,
                   rerank=10, reverse_weight=2.0, reverse_models=["r1.pt"])
    assert seen[0][-6:] == ["--rerank", "10", "--reverse-weight", "2", "--reverse-model", "r1.pt"]



def test_right_to_left_models_join_the_reranking_on_val_and_on_test(tmp_path, monkeypatch,
                                                                   capsys):
    """--r2l-model: nmtkit tune tries its weights with every reverse weight; the choice,
    r2l weight included, is what the test split is translated with."""
    seeds = load_benchmark("seeds")
    calls = []
    a = Namespace(length_penalty=[0.6], extend=0, beam=5, work=tmp_path, metric="bleu",
                  rerank=[0, 10], reverse_weight=[1.0, 2.0], reverse_model=["r.pt"],
                  r2l_weight=[0.0, 1.0], r2l_model=["l1.pt", "l2.pt"])

    trials = [{"beam": 5, "length_penalty": 0.6, "bleu": 30 + w + 2 * v, "chrf": 50.0,
               "length_ratio": 1.0, "seconds": 1.0, "mbr": 0, "rerank": r,
               "reverse_weight": w if r else None, "r2l_weight": v if r else None}
              for r in (0, 10) for w in ((1.0, 2.0) if r else (0.0,))
              for v in ((0.0, 1.0) if r else (0.0,))]
    monkeypatch.setattr(seeds, "nmtkit_in_process", tune_writing(trials, calls))
    got = seeds.tune_ensemble(a, [tmp_path / "a.pt"], "val")
    flags = " ".join(calls[0])
    assert ("--reverse-weight 1 2 --reverse-model r.pt --r2l-weight 0 1 --r2l-model l1.pt "
            "--r2l-model l2.pt") in flags
    assert (got["chosen"]["reverse_weight"], got["chosen"]["r2l_weight"]) == (2.0, 1.0)
    assert "with --rerank 10 --reverse-weight 2 --r2l-weight 1 (bleu 34)" in capsys.readouterr().err
    seen = []
    monkeypatch.setattr(seeds, "json_file", lambda path, command, make: seen.append(command))
    seeds.evaluate([tmp_path / "a.pt"], "test", 5, tmp_path / "e.json", rerank=10,
                   reverse_weight=2.0, reverse_models=["r.pt"], r2l_weight=1.0,
                   r2l_models=["l1.pt"])
    assert seen[0][-10:] == ["--rerank", "10", "--reverse-weight", "2", "--reverse-model",
                             "r.pt", "--r2l-weight", "1", "--r2l-model", "l1.pt"]


@pytest.mark.slow
def test_a_right_to_left_model_needs_the_reranking(tmp_path):
    proc = subprocess.run([sys.executable, str(SCRIPT), "--config", "configs/copy_task.yaml",
                           "--seeds", "1", "2", "--work", str(tmp_path), "--no-matmul",
                           "--r2l-model", "l.pt"], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 2
    assert "--r2l-model scores the candidates of --rerank: give --rerank too" in proc.stderr

@pytest.mark.slow
def test_seeds_trained_side_by_side_are_the_same_runs(side_by_side, alone):
    """--parallel 2: both seeds train at once (each its own log), then are evaluated side by
    side (each command a process of its own), and what follows is the procedure of
    one-after-the-other: the same updates and scores, the choice on val, the ensemble; the
    protocol says the runs shared the machine."""
    work, result, log = side_by_side
    assert log.count("nmtkit train") == 2 and [r["seed"] for r in result["runs"]] == [1, 2]
    # 3 candidates x 2 splits per seed, each in its own process; averages too.
    assert log.count("-m nmtkit evaluate") == 12 and log.count("-m nmtkit average") == 2
    assert "+ nmtkit tune" in log  # the ensemble's steps stay in this process
    assert all(r["updates"] == 20 for r in result["runs"])
    assert "2 runs at a time side by side" in result["protocol"]
    assert "alone on the machine" not in result["protocol"]
    for seed in (1, 2):
        assert (work / f"seed{seed}.cmd").read_text().startswith("train configs/copy_task.yaml")
        assert f"train.seed={seed}" in (work / f"seed{seed}.cmd").read_text()
    # The copy task is deterministic on a CPU: seed 1 side by side = seed 1 alone.
    _, one_by_one, log = alone
    assert "-m nmtkit evaluate" not in log and log.count("+ nmtkit evaluate") == 15
    assert [r["checkpoints"] for r in one_by_one["runs"]] == \
        [r["checkpoints"] for r in result["runs"]]
    assert "each run alone on the machine" in one_by_one["protocol"]
    # Trained already: a rerun with --parallel starts nothing.
    again, log = run_script(work, "--parallel", "2")
    assert "+ " not in log and again["runs"] == result["runs"]


@pytest.mark.slow
def test_parallel_must_be_positive(tmp_path):
    proc = subprocess.run([sys.executable, str(SCRIPT), "--config", "configs/copy_task.yaml",
                           "--seeds", "1", "2", "--work", str(tmp_path), "--parallel", "0"],
                          cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 2 and "--parallel 0" in proc.stderr


def test_seeds_sharing_overrides_are_named_together():
    seeds = load_benchmark("seeds")
    assert seeds.seed_set_phrase({}) == ""
    assert seeds.seed_set_phrase({2: ["train.max_steps=30"]}) == \
        " (seed 2 also train.max_steps=30)"
    assert seeds.seed_set_phrase({4: ["train.rdrop=5"], 5: ["train.rdrop=5"],
                                  6: ["train.rdrop=5", "model.dropout=0.2"]}) == \
        " (seeds 4, 5 also train.rdrop=5) (seed 6 also train.rdrop=5, model.dropout=0.2)"


@pytest.mark.slow
def test_the_gpu_wrapper_brings_back_scores_and_logs_without_checkpoints(tmp_path,
                                                                        side_by_side):
    """experiments/gpu_seeds.sh (run here with this interpreter and no GPU): seeds.py's JSON,
    its stderr, env.txt, and an archive of the work folder's logs and scores, no .pt. It runs
    in the side-by-side test's folder with the seeds trained already and the ensemble's
    files removed, so that the ensemble is tuned and scored again through the wrapper."""
    import tarfile

    work, trained, _ = side_by_side
    out = tmp_path / "out"
    for kept in [*work.glob("ensemble_*"), *work.glob("tune.*")]:
        kept.unlink()
    sets = [x for o in tiny_copy_overrides(20) for x in ("--set", o)]
    proc = subprocess.run(["bash", "experiments/gpu_seeds.sh", str(out), str(work),
                           "--config", "configs/copy_task.yaml", "--seeds", "1", "2",
                           "--parallel", "2", "--beam", "2", "--length-penalty", "0", "1",
                           "--no-matmul", *sets], cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, "PY": sys.executable, "LIMIT": "300"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "seeds.py: exit 0" in proc.stdout
    result = json.loads((out / "seeds.json").read_text())
    assert "2 runs at a time side by side" in result["protocol"]
    assert result["runs"] == trained["runs"]
    assert [result["ensemble"][s]["bleu"] for s in ("val", "test")] == \
        [trained["ensemble"][s]["bleu"] for s in ("val", "test")]
    said = (out / "log.txt").read_text()
    assert "+ nmtkit tune" in said and "nmtkit train" not in said
    assert sys.version.split()[0] in (out / "env.txt").read_text()
    with tarfile.open(out / "work.tgz") as tar:
        names = tar.getnames()
    assert "./seed1.log" in names and "./tune.json" in names
    assert "./seed2/eval_best_val.json" in names and "./seed1/metrics.csv" in names
    assert not [n for n in names if n.endswith(".pt")]


@pytest.mark.slow
def test_a_recipe_of_both_directions_is_scored_per_direction_and_reranked_by_its_members(
        tmp_path):
    """data.directions: --tgt-lang picks the direction every evaluation and the tuning
    score (their files named after it, so one work folder serves both directions), and
    --reverse-members reranks with the ensemble's own members read the other way."""
    root = write_corpus(tmp_path)
    for lang in "xyz":  # a test split of its own (tune refuses to choose on the test split)
        (root / f"test.{lang}").write_text((root / f"val.{lang}").read_text())
    toy = ["data.corpus=parallel", f"data.train={root / 'train'}", f"data.valid={root / 'val'}",
           f"data.test={root / 'test'}", "data.tokenizer=sentencepiece", "data.vocab_size=16",
           "data.directions=[x-z, z-x]"]
    work = tmp_path / "work"
    extra = [x for o in toy for x in ("--set", o)]
    result, log = run_script(work, *extra, "--tgt-lang", "z", "--rerank", "0", "3",
                             "--reverse-members", "--reverse-weight", "0", "2")
    assert result["direction"] == "x-z" and "(x->z, beam 2)" in result["title"]
    members = [str(work / f"seed{r['seed']}" / r["chosen_on_val"]) for r in result["runs"]]
    assert "reverse models: the ensemble's own members, asked for x" in result["protocol"]
    tune_cmd = (work / "tune_x-z.cmd").read_text()
    assert "--tgt-lang z --src-lang x" in tune_cmd
    assert all(f"--reverse-model {m}" in tune_cmd for m in members)
    assert (work / "seed1" / "eval_best_val_x-z.json").exists()
    kept = json.loads((work / "ensemble_val_x-z.json").read_text())
    assert (kept["src_lang"], kept["tgt_lang"]) == ("x", "z")
    # the other direction from the same folder: the training is reused, the scores are new
    other, _ = run_script(work, *extra, "--tgt-lang", "x")
    assert other["direction"] == "z-x" and (work / "ensemble_val_z-x.json").exists()
    assert [r["updates"] for r in other["runs"]] == [r["updates"] for r in result["runs"]]


@pytest.mark.slow
def test_reverse_members_needs_a_recipe_that_reads_back(tmp_path):
    sets = [x for o in tiny_copy_overrides(20) for x in ("--set", o)]
    proc = subprocess.run([sys.executable, str(SCRIPT), "--config", "configs/copy_task.yaml",
                           "--seeds", "1", "2", "--work", str(tmp_path), "--no-matmul", *sets,
                           "--rerank", "0", "3", "--reverse-members"],
                          cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 2
    assert "--reverse-members: the recipe's models do not translate" in proc.stderr
