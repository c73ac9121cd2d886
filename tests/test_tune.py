"""decode/tune.py and `nmtkit tune`: beam size and length penalty chosen on a validation set."""

import json

import pytest

from nmtkit.cli import main
from nmtkit.config import TUNE_METRICS, DecodeConfig
from nmtkit.decode.text_translator import TextTranslator
from nmtkit.decode.tune import Trial, at_the_edge, best_trial, grid, tune_search
from nmtkit.train.loop import Trainer

from .helpers import make_cfg

REFS = ["a man rides a red bike down the hill", "two dogs play in the deep snow",
        "a woman reads a book"]


class LengthFollowsPenalty(TextTranslator):
    """A stand-in search: the larger the length penalty, the more of each reference it
    outputs (all of it from alpha 1.0 on); beam 1 outputs half. Records every call."""

    def __init__(self, decode: DecodeConfig):
        super().__init__(None, None, decode)
        self.calls: list[tuple[int, float]] = []

    def translate_lines(self, lines, beam=None, batch_size=None, *, tgt_lang=None):
        cfg = self.decode_cfg
        self.calls.append((cfg.beam, cfg.length_penalty))
        share = 0.5 if cfg.beam == 1 else min(1.0, 0.4 + 0.6 * cfg.length_penalty)
        out = []
        for ref in REFS:
            words = ref.split()
            out.append(" ".join(words[:max(1, round(share * len(words)))]))
        return out


def test_grid_tries_greedy_once_and_each_pair_once():
    assert grid([1, 5, 5, 2], [0.6, 1.0, 0.6]) == [
        (1, None, 0, 0), (5, 0.6, 0, 0), (5, 1.0, 0, 0), (2, 0.6, 0, 0), (2, 1.0, 0, 0)]
    for beams, penalties in (([], [1.0]), ([5], []), ([0], [1.0]), ([5], [-0.1]),
                             ([5], [float("nan")])):
        with pytest.raises(ValueError):
            grid(beams, penalties)


def test_grid_tries_mbr_with_each_beam_search_setting_but_not_greedy():
    assert grid([1, 5], [0.6, 1.0], [0, 12, 12]) == [
        (1, None, 0, 0), (5, 0.6, 0, 0), (5, 0.6, 12, 0), (5, 1.0, 0, 0), (5, 1.0, 12, 0)]
    for mbr in ([], [-1]):
        with pytest.raises(ValueError):
            grid([5], [0.6], mbr)
    assert Trial(5, 0.6, 1.0, 1.0, 1.0, 1.0, None, 12).flags() == "--beam 5 --length-penalty 0.6 --mbr 12"
    # MBR among the reranking's best: each MBR size below a reranking size, after both alone
    assert grid([5], [0.6], [0, 4, 8], [0, 8]) == [
        (5, 0.6, 0, 0), (5, 0.6, 4, 0), (5, 0.6, 8, 0), (5, 0.6, 0, 8), (5, 0.6, 4, 8)]
    assert Trial(5, 0.6, 1.0, 1.0, 1.0, 1.0, None, 4, 8, 3.0).flags() == \
        "--beam 5 --length-penalty 0.6 --rerank 8 --reverse-weight 3 --mbr 4"
    # a tie: fewer candidates (faster) wins
    tied = [Trial(5, 0.6, 40.0, 60.0, 1.0, 9.0, None, 12), Trial(5, 0.6, 40.0, 60.0, 1.0, 1.0)]
    assert best_trial(tied) is tied[1]


def test_tune_scores_every_setting_and_restores_the_options():
    base = DecodeConfig(beam=4, length_penalty=0.2)
    tr = LengthFollowsPenalty(base)
    seen = []
    trials = tune_search(tr, ["x"] * 3, REFS, beams=[1, 5], penalties=[0.0, 0.6, 1.0, 1.4],
                         on_trial=seen.append)
    assert seen == trials
    assert [(t.beam, t.length_penalty) for t in trials] == [
        (1, None), (5, 0.0), (5, 0.6), (5, 1.0), (5, 1.4)]
    assert tr.calls == [(1, 0.2), (5, 0.0), (5, 0.6), (5, 1.0), (5, 1.4)]
    assert tr.decode_cfg is base  # the translator's own options again
    by_penalty = {t.length_penalty: t for t in trials}
    assert by_penalty[0.0].length_ratio < by_penalty[0.6].length_ratio < 1.0
    assert by_penalty[1.0].bleu == 100.0 and by_penalty[1.0].length_ratio == 1.0
    assert by_penalty[1.0].bleu_lc_tok == 100.0 > by_penalty[0.0].bleu_lc_tok
    assert by_penalty[0.0].bleu < by_penalty[0.6].bleu < by_penalty[1.0].bleu
    assert by_penalty[0.0].ter > by_penalty[0.6].ter > by_penalty[1.0].ter == 0.0
    best = best_trial(trials)
    assert (best.beam, best.length_penalty) == (5, 1.0)  # 1.4 ties it: the first one wins
    assert best.flags() == "--beam 5 --length-penalty 1"
    assert trials[0].flags() == "--beam 1"


def test_tune_refuses_mismatched_or_empty_sets():
    tr = LengthFollowsPenalty(DecodeConfig())
    with pytest.raises(ValueError, match="3 sources vs 2 references"):
        tune_search(tr, ["x"] * 3, REFS[:2])
    with pytest.raises(ValueError, match="empty"):
        tune_search(tr, [], [])


def test_best_trial_prefers_the_smaller_beam_on_a_tie():
    trials = [Trial(10, 0.6, 40.0, 60.0, 1.0, 3.0), Trial(5, 1.0, 40.0, 60.0, 1.0, 1.0),
              Trial(5, 0.6, 39.9, 60.0, 1.0, 1.0)]
    assert best_trial(trials) is trials[1]
    with pytest.raises(ValueError):
        best_trial([])


def test_best_trial_by_another_metric():
    # Cased BLEU prefers 0.6, BLEU on lowercased tokenized text 1.0 (a lowercased model).
    trials = [Trial(5, 0.6, 30.0, 60.0, 1.0, 1.0, 38.0), Trial(5, 1.0, 29.0, 61.0, 1.0, 1.0, 39.0)]
    assert best_trial(trials) is trials[0] and best_trial(trials, "bleu") is trials[0]
    assert best_trial(trials, "bleu_lc_tok") is trials[1]
    assert best_trial(trials, "chrf") is trials[1]
    with pytest.raises(ValueError, match="unknown metric 'meteor'"):
        best_trial(trials, "meteor")
    old = [Trial(5, 0.6, 30.0, 60.0, 1.0, 1.0)]  # recorded before bleu_lc_tok was kept
    assert best_trial(old) is old[0]
    with pytest.raises(ValueError, match="no bleu_lc_tok score"):
        best_trial(old, "bleu_lc_tok")


def test_best_trial_by_ter_takes_the_lowest():
    """TER is an edit rate: the fewest edits win, the highest BLEU notwithstanding; on a tie
    the smaller beam, as for the other metrics."""
    trials = [Trial(5, 0.6, 30.0, 60.0, 1.0, 1.0, 38.0, ter=52.0),
              Trial(5, 1.0, 29.0, 61.0, 1.0, 1.0, 39.0, ter=48.5),
              Trial(4, 1.4, 28.0, 59.0, 1.0, 1.0, 37.0, ter=48.5),
              Trial(5, 1.4, 31.0, 62.0, 1.0, 1.0, 40.0, ter=60.0)]
    assert best_trial(trials, "ter") is trials[2]
    assert best_trial(trials) is trials[3]  # BLEU: the highest
    assert best_trial(trials[:2], "ter") is trials[1]
    assert TUNE_METRICS["ter"] == "lower" and TUNE_METRICS["bleu"] == "higher"
    with pytest.raises(ValueError, match="no ter score"):
        best_trial([Trial(5, 0.6, 30.0, 60.0, 1.0, 1.0, 38.0)], "ter")  # recorded before TER


def test_a_best_penalty_at_the_edge_of_the_grid_is_flagged():
    def best(p, beam=5):
        return Trial(beam, p, 40.0, 60.0, 1.0, 1.0)

    grid_ = [0.0, 0.6, 1.0]
    assert at_the_edge(best(1.0), grid_) == "largest"
    assert at_the_edge(best(0.6), grid_) is None
    assert at_the_edge(best(0.0), grid_) is None  # 0 is the smallest there is
    assert at_the_edge(best(0.3), [0.3, 0.6]) == "smallest"
    assert at_the_edge(best(None, beam=1), grid_) is None
    assert at_the_edge(best(0.6), [0.6]) is None  # one value: no grid to extend


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    run = tmp_path_factory.mktemp("tune")
    Trainer(make_cfg(30), run).run()
    return run / "last.pt"


@pytest.mark.slow
def test_cli_tune_prints_each_trial_and_writes_the_best(checkpoint, tmp_path, capsys):
    src, ref = tmp_path / "dev.src", tmp_path / "dev.ref"
    lines = ["1 2 3 4 5", "7 7 3 9", "10 2 2 5 6 1"]
    src.write_text("\n".join(lines) + "\n")
    ref.write_text("\n".join(lines) + "\n")
    out = tmp_path / "tune.json"
    rc = main(["tune", "--model", str(checkpoint), "--src", str(src), "--ref", str(ref),
               "--beam", "1", "3", "--length-penalty", "0", "1", "-o", str(out)])
    assert rc == 0
    printed = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(p["beam"], p["length_penalty"]) for p in printed[:3]] == [(1, None), (3, 0.0), (3, 1.0)]
    summary = json.loads(out.read_text())
    assert summary["best"] == printed[-1]["best"] and summary["flags"] == printed[-1]["flags"]
    assert summary["best"]["bleu"] == max(t["bleu"] for t in summary["trials"])
    assert len(summary["trials"]) == 3 and summary["split"] == str(src)
    if summary["best"]["length_penalty"] == 1.0:  # the largest tried: said on stderr
        assert summary["edge"] == "largest" and "try values above" in capsys.readouterr().err
    else:
        assert summary["edge"] is None


@pytest.mark.slow
def test_cli_tune_tries_mbr_and_its_flags_decode_as_scored(checkpoint, tmp_path, capsys):
    src, ref = tmp_path / "dev.src", tmp_path / "dev.ref"
    src.write_text("1 2 3 4 5\n7 7 3 9\n10 2 2 5 6 1\n")
    ref.write_text("1 2 3 4 5\n7 7 3\n10 2 5 6 1\n")
    assert main(["tune", "--model", str(checkpoint), "--src", str(src), "--ref", str(ref),
                 "--beam", "3", "--length-penalty", "0.6", "--mbr", "0", "4"]) == 0
    printed = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(p["beam"], p["mbr"]) for p in printed[:2]] == [(3, 0), (3, 4)]
    out = tmp_path / "hyp.txt"
    assert main(["translate", "--model", str(checkpoint), "-i", str(src), "-o", str(out),
                 "--beam", "3", "--length-penalty", "0.6", "--mbr", "4"]) == 0
    from nmtkit.evaluate import score
    hyps = out.read_text().splitlines()
    assert score(hyps, ref.read_text().splitlines())["bleu"] == printed[1]["bleu"]


@pytest.mark.slow
def test_cli_tune_chooses_by_the_metric_asked_for(checkpoint, tmp_path, capsys):
    src = tmp_path / "dev.src"
    src.write_text("1 2 3 4 5\n7 7 3 9\n")
    out = tmp_path / "tune.json"
    rc = main(["tune", "--model", str(checkpoint), "--src", str(src), "--ref", str(src),
               "--beam", "2", "--length-penalty", "0", "1", "--metric", "bleu_lc_tok",
               "-o", str(out)])
    assert rc == 0
    summary = json.loads(out.read_text())
    assert summary["metric"] == "bleu_lc_tok"
    assert summary["best"]["bleu_lc_tok"] == max(t["bleu_lc_tok"] for t in summary["trials"])
    assert json.loads(capsys.readouterr().out.splitlines()[-1])["metric"] == "bleu_lc_tok"
    assert main(["tune", "--model", str(checkpoint), "--src", str(src), "--ref", str(src),
                 "--beam", "2", "--length-penalty", "0", "1", "--metric", "ter",
                 "-o", str(out)]) == 0
    summary = json.loads(out.read_text())
    assert summary["metric"] == "ter"
    assert summary["best"]["ter"] == min(t["ter"] for t in summary["trials"])
    printed = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert all("ter" in p for p in printed[:-1]) and printed[-1]["metric"] == "ter"
    with pytest.raises(SystemExit):
        main(["tune", "--model", str(checkpoint), "--src", str(src), "--ref", str(src),
              "--metric", "meteor"])
    assert "invalid choice: 'meteor'" in capsys.readouterr().err


@pytest.mark.slow
def test_cli_tune_of_a_lowercased_model_names_the_metric_that_fits(tmp_path, capsys):
    Trainer(make_cfg(10, ["data.lowercase=true"]), tmp_path / "lc").run()
    src = tmp_path / "dev.src"
    src.write_text("1 2 3\n")
    args = ["tune", "--model", str(tmp_path / "lc" / "last.pt"), "--src", str(src),
            "--ref", str(src), "--beam", "1"]
    assert main(args) == 0
    assert "--metric bleu_lc_tok" in capsys.readouterr().err  # cased BLEU: said once
    assert main([*args, "--metric", "bleu_lc_tok"]) == 0
    assert "data.lowercase" not in capsys.readouterr().err


@pytest.mark.slow
def test_cli_tune_refuses_a_test_split(checkpoint, capsys):
    for split in ("test", "test_2016_flickr"):
        assert main(["tune", "--model", str(checkpoint), "--split", split]) == 2
        assert "is a test set" in capsys.readouterr().err


@pytest.mark.slow
def test_cli_decoding_flags_reach_the_search(checkpoint, tmp_path, capsys):
    src = tmp_path / "dev.src"
    src.write_text("1 2 3 4 5\n")
    rc = main(["evaluate", "--model", str(checkpoint), "--src", str(src), "--ref", str(src),
               "--beam", "2", "--length-penalty", "1.3", "--max-len-a", "0", "--max-len-b", "2"])
    assert rc == 0
    result = json.loads(capsys.readouterr().out)
    assert (result["beam"], result["length_penalty"]) == (2, 1.3)
    assert result["length_ratio"] <= 2 / 5  # at most 2 tokens of the 5 by the cap
    assert main(["translate", "--model", str(checkpoint), "--length-penalty", "-1"]) == 2
    assert "length_penalty" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.parametrize("command", ["evaluate", "tune"])
def test_cli_threads_sets_torchs_threads(checkpoint, tmp_path, capsys, command):
    import torch

    src = tmp_path / "dev.src"
    src.write_text("1 2 3 4 5\n")
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        rc = main([command, "--model", str(checkpoint), "--src", str(src), "--ref", str(src),
                   "--beam", "1", "--threads", "1"])
        assert rc == 0 and torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)
    capsys.readouterr()
    with pytest.raises(SystemExit) as e:  # argparse: a count of threads is 0 or more
        main(["translate", "--model", str(checkpoint), "--threads", "-2"])
    assert e.value.code == 2 and "threads must be 0" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.parametrize("command", ["evaluate", "tune"])
def test_cli_unmatched_or_missing_references_exit_2(checkpoint, tmp_path, capsys, command):
    src, ref = tmp_path / "dev.src", tmp_path / "dev.ref"
    src.write_text("1 2 3\n4 5\n")
    ref.write_text("1 2 3\n")
    assert main([command, "--model", str(checkpoint), "--src", str(src), "--ref", str(ref)]) == 2
    assert f"{src} has 2 lines but {ref} has 1" in capsys.readouterr().err
    assert main([command, "--model", str(checkpoint), "--src", str(src)]) == 2
    assert "needs --split NAME or --src FILE --ref FILE" in capsys.readouterr().err
