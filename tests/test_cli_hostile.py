"""Hostile input, second probe (2026-11-28): outputs that are inputs, devices that are not
there, options out of range, contradictory options. Each is refused with exit status 2 and
a message that names the problem, before anything is written."""

from pathlib import Path

import pytest

from nmtkit.cli import main as cli_main
from nmtkit.config import ConfigError, DataConfig, check_trainable, load
from nmtkit.decode.translator import Translator
from nmtkit.train.loop import Trainer

from .helpers import make_cfg, refused

pytestmark = pytest.mark.slow  # trains a model or starts processes: not in the fast tier


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    run = tmp_path_factory.mktemp("hostile")
    Trainer(make_cfg(20), run).run()  # step_10, step_20, last, best
    return run


def test_an_output_that_is_an_input_is_refused_and_the_input_kept(run, tmp_path, capsys):
    text = tmp_path / "in.txt"
    text.write_text("1 2 3\n4 5\n")
    model = str(run / "last.pt")
    before = {p: p.read_bytes() for p in (text, run / "last.pt", run / "step_00000010.pt")}
    refused(capsys, ["translate", "--model", model, "-i", str(text), "-o", str(text)],
            f"{text} is also an input ({text})")
    link = tmp_path / "hard.txt"  # another name for the same file
    link.hardlink_to(text)
    refused(capsys, ["translate", "--model", model, "-i", str(text), "-o", str(link)],
            "choose another -o")
    refused(capsys, ["evaluate", "--model", model, "--src", str(text), "--ref", str(text),
                     "-o", str(text)], "is also an input")
    refused(capsys, ["tune", "--model", model, "--src", str(text), "--ref", str(text),
                     "-o", model], f"{model} is also an input")
    refused(capsys, ["average", "--out", str(run / "step_00000010.pt"),
                     str(run / "step_00000010.pt"), str(run / "step_00000020.pt")],
            "choose another --out")
    # back-translation writes PREFIX.<src_lang> and PREFIX.<tgt_lang>: here the input's name
    mono = tmp_path / "mono.de"
    mono.write_text("1 2 3\n")
    refused(capsys, ["backtranslate", "--model", model, "-i", str(mono),
                     "-o", str(tmp_path / "mono")], f"{mono} is also an input")
    assert mono.read_text() == "1 2 3\n" and not (tmp_path / "mono.en").exists()
    assert {p: p.read_bytes() for p in before} == before
    # Not a concern: a new file, and a device that is written through.
    assert cli_main(["translate", "--model", model, "-i", str(text),
                     "-o", str(tmp_path / "out.txt")]) == 0
    assert cli_main(["translate", "--model", model, "-i", str(text), "-o", "/dev/null"]) == 0


def test_distill_refuses_to_write_over_the_split_it_translates(run, tmp_path):
    from nmtkit.checkpoint import load_bundle
    from nmtkit.train.distill import distill

    for lang, line in (("de", "1 2\n"), ("en", "2 1\n")):
        (tmp_path / f"corpus.{lang}").write_text(line)
    data = DataConfig(corpus="parallel", train=str(tmp_path / "corpus"),
                      valid=str(tmp_path / "corpus"), src_lang="de", tgt_lang="en")
    tr = Translator.from_bundle(load_bundle(run / "last.pt"))
    with pytest.raises(ValueError, match=r"corpus\.de is also an input .*output prefix"):
        distill(tr, data, tmp_path / "corpus")
    assert (tmp_path / "corpus.en").read_text() == "2 1\n"  # the references are kept


@pytest.mark.parametrize("device, said", [
    ("tpu", "'tpu' is not a torch device"),
    ("cuda:7", "cuda:7: this machine has"),
    ("meta", "meta: nmtkit runs on cpu, cuda or mps"),
])
def test_a_device_this_machine_lacks_is_refused_by_name(run, capsys, device, said):
    import torch

    if device == "cuda:7" and torch.cuda.device_count() > 7:
        pytest.skip("this machine has a CUDA device 7")
    refused(capsys, ["translate", "--model", str(run / "last.pt"), "--device", device],
            f"argument --device: {said}")
    refused(capsys, ["serve", "--model", str(run / "last.pt"), "--device", device],
            f"argument --device: {said}")


def test_options_out_of_range_are_refused_before_any_work(run, tmp_path, capsys):
    text = tmp_path / "in.txt"
    text.write_text("1 2 3\n")
    model = str(run / "last.pt")
    base = ["--model", model, "--src", str(text), "--ref", str(text)]
    # a beam of 100,000 ran for minutes in tune and ran out of memory in translate
    refused(capsys, ["tune", *base, "--beam", "100000", "--length-penalty", "0"],
            "decode.beam must be <= 1024, got 100000")
    refused(capsys, ["translate", "--model", model, "-i", str(text), "--beam", "5000"],
            "decode.beam must be <= 1024")
    # an output cap that overflowed int64 gave empty translations with exit status 0
    refused(capsys, ["translate", "--model", model, "-i", str(text), "--max-len-a", "1e20"],
            "decode.max_len_a must be <= 1000")
    refused(capsys, ["evaluate", *base, "--max-len-b", "99999999999999999999"],
            "decode.max_len_b must be <= 65536")
    refused(capsys, ["translate", "--model", model, "-i", str(text), "--max-len-a", "0",
                     "--max-len-b", "0"], "cannot both be 0")
    refused(capsys, ["translate", "--model", model, "-i", str(text), "--sampling",
                     "--temperature", "1e-300"], "decode.sampling_temperature must be in")
    refused(capsys, ["translate", "--model", model, "-i", str(text), "--sampling",
                     "--seed", "99999999999999999999999"], "decode.sampling_seed must be <=")
    refused(capsys, ["evaluate", *base, "--split", "valid"],
            "evaluate takes --split NAME or --src FILE --ref FILE, not both")
    refused(capsys, ["plot", "mask", "-o", str(tmp_path / "m.png"), "--dpi", "100000"],
            "dpi must be in 10..1200")
    assert list(tmp_path.iterdir()) == [text]


def test_a_position_table_shorter_than_the_training_sentences_is_refused(tmp_path, capsys):
    """It failed at the first long batch, naming no key, after --overwrite had emptied the run
    directory."""
    recipe = tmp_path / "short.yaml"
    recipe.write_text("model:\n  max_positions: 64\n")
    err = refused(capsys, ["train", str(recipe), "--run-dir", str(tmp_path / "run")],
                  f"{recipe}: model.max_positions (64) must be at least 102: the longest "
                  "training sentence (data.max_len = 100 tokens)")
    assert "data.max_len" in err and not (tmp_path / "run").exists()
    cfg = load(recipe, ["data.corpus=copy", "model.max_positions=11"])  # a usable config ...
    with pytest.raises(ConfigError, match=r"data\.copy_len = 10 tokens"):  # ... not trainable
        Trainer(cfg, tmp_path / "run")
    check_trainable(load(recipe, ["data.max_len=62"]), str(recipe))
    assert not (tmp_path / "run").exists()


def test_paths_that_exist_but_are_not_files_are_named_as_such(run, tmp_path, capsys):
    refused(capsys, ["translate", "--model", str(run), "-i", "/dev/null"],
            f"{run}: is a directory, not a checkpoint file (a run directory? give its best.pt")
    refused(capsys, ["translate", "--model", "/dev/null", "-i", "/dev/null"],
            "/dev/null: not a regular file")
    from nmtkit.data.corpora import CorpusError, load_parallel

    (tmp_path / "c.de").mkdir()
    (tmp_path / "c.en").write_text("x\n")
    data = DataConfig(corpus="parallel", src_lang="de", tgt_lang="en")
    with pytest.raises(CorpusError, match=r"c\.de: is a directory, not a corpus file"):
        load_parallel(data, str(tmp_path / "c"))


def test_a_full_device_is_named_in_the_error(run, capsys):
    refused(capsys, ["average", "--out", "/dev/full", str(run / "step_00000010.pt"),
                     str(run / "step_00000020.pt")], "/dev/full: No space left on device")


def test_backtranslation_needs_lines_and_a_prefix_of_file_names(run, tmp_path, capsys):
    model = str(run / "last.pt")
    blank = tmp_path / "blank.de"
    blank.write_text("\n  \n\n")
    refused(capsys, ["backtranslate", "--model", model, "-i", str(blank),
                     "-o", str(tmp_path / "bt")], "nothing to back-translate: the input's 3 line(s)")
    mono = tmp_path / "mono.de"
    mono.write_text("1 2 3\n")
    (tmp_path / "out").mkdir()
    for prefix in (f"{tmp_path / 'out'}/", str(tmp_path / "out")):  # out/.de, out/.en
        refused(capsys, ["backtranslate", "--model", model, "-i", str(mono), "-o", prefix],
                "a prefix of file names (PREFIX.<lang> is written), not a directory")
    assert not list((tmp_path / "out").iterdir()) and not (tmp_path / "bt.en").exists()
    # as root these wrote /dev/full.de ...; /dev/stdout is a link (here to pytest's capture file)
    for device in ("/dev/full", "/dev/null", "/dev/stdout"):
        for command in ("backtranslate", "distill"):
            refused(capsys, [command, "--model", model, *(["-i", str(mono)] if command ==
                             "backtranslate" else ["--split", "train"]), "-o", device],
                    "not a device, pipe, socket or link")
    assert not [p for p in Path("/dev").glob("*.de")] + [p for p in Path("/dev").glob("*.en")]


def test_attention_is_drawn_for_sentences_of_readable_length(run):
    from nmtkit.checkpoint import load_bundle
    from nmtkit.viz.attention import MAX_PLOT_TOKENS, attention_for_text

    bundle = load_bundle(run / "last.pt")
    with pytest.raises(ValueError, match=rf"text: \d+ source tokens, attention is limited to "
                       f"{MAX_PLOT_TOKENS}"):  # (counted after the cut to the position table)
        attention_for_text(bundle, "1 " * 3000)  # took minutes of drawing before
    assert attention_for_text(bundle, "1 2 3").src_tokens


def test_a_validation_split_of_blank_lines_is_refused(tmp_path):
    from nmtkit.config import Config
    from nmtkit.data.fetch import CorpusError

    for split, lines in (("train", "a b\nc d\n"), ("valid", " \n\t\n")):
        for lang in ("de", "en"):
            (tmp_path / f"{split}.{lang}").write_text(lines)
    cfg = Config.from_dict({"data": {"corpus": "parallel", "train": str(tmp_path / "train"),
                                     "valid": str(tmp_path / "valid"), "tokenizer": "whitespace",
                                     "min_freq": 1},
                            "model": {"d_model": 16, "d_ff": 32, "heads": 2, "layers": 1},
                            "train": {"max_steps": 1}}, "t")
    with pytest.raises(CorpusError, match=r"valid: the validation split \(data\.valid\) has no "
                       r"pair with both sides non-blank \(2 lines\)"):
        Trainer(cfg, tmp_path / "run")
