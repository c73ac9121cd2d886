"""Reliability, third probe (issue 66): an output never lands on an input, whatever path leads
to it; every number a user gives is finite and bounded; a full disk names its file and leaves
nothing half-made; the cases where two surfaces disagreed now agree."""

from __future__ import annotations

import argparse
import builtins
import errno
import json
import math
import os
import shutil
from fnmatch import fnmatch
from pathlib import Path

import pytest
import yaml

from nmtkit.cli import main as cli_main

from .helpers import ROOT, refused, tiny_copy_overrides

# --- 1. an output through a missing directory (or a link) that is an input -------------------

# Each command with an output, the input it would write over, and the output path that
# leads there only once resolved: ``nosuch/..`` folds away (no ``nosuch/`` exists), as the
# writers (nmtkit.io.atomic_open: os.path.realpath) fold it.
OUTPUT_ON_INPUT = {
    "translate -o over -i": (["translate", "--model", "m.pt", "-i", "text.de",
                              "-o", "nosuch/../text.de"], "text.de"),
    "translate -o over --prefix-file": (["translate", "--model", "m.pt", "-i", "text.de",
                                         "--prefix-file", "prefix.en",
                                         "-o", "./nosuch/../prefix.en"], "prefix.en"),
    "translate -o over --reverse-model": (["translate", "--model", "m.pt", "-i", "text.de",
                                           "--rerank", "2", "--reverse-model", "rev.pt",
                                           "-o", "nosuch/../rev.pt"], "rev.pt"),
    "evaluate -o over --ref": (["evaluate", "--model", "m.pt", "--src", "text.de",
                                "--ref", "ref.en", "-o", "nosuch/../ref.en"], "ref.en"),
    "tune -o over --model": (["tune", "--model", "m.pt", "--src", "text.de", "--ref", "ref.en",
                              "--beam", "1", "--length-penalty", "1", "-o", "nosuch/../m.pt"],
                             "m.pt"),
    "average --out over a checkpoint": (["average", "--out", "nosuch/../a.pt", "a.pt", "b.pt"],
                                        "a.pt"),
    "backtranslate -o over -i": (["backtranslate", "--model", "m.pt", "-i", "mono.de",
                                  "-o", "nosuch/../mono"], "mono.de"),
    "distill -o over --model": (["distill", "--model", "teacher.en", "-o", "nosuch/../teacher"],
                                "teacher.en"),
    "export --out over --model": (["export", "--format", "ctranslate2", "--model", "ex/m.pt",
                                   "--out", "nosuch/../ex", "--force"], "ex/m.pt"),
    "plot -o over the run's metrics": (["plot", "curves", "--run", "run", "-o",
                                        "nosuch/../run/metrics.csv"], "run/metrics.csv"),
    "train --overwrite over --init-from": (["train", "copy.yaml", "--run-dir", "nosuch/../run",
                                            "--overwrite", "--init-from", "run/best.pt"],
                                           "run/best.pt"),
    "train over a step checkpoint it would prune": (["train", "copy.yaml", "--run-dir",
                                                     "nosuch/../run", "--overwrite",
                                                     "--init-from", "run/step_00000010.pt"],
                                                    "run/step_00000010.pt"),
    "train --overwrite over --vocab-from": (["train", "copy.yaml", "--run-dir", "run",
                                             "--overwrite", "--vocab-from", "./run/last.pt"],
                                            "run/last.pt"),
    "train over a corpus file": (["train", "copy.yaml", "--run-dir", "run", "--overwrite",
                                  "--set", "data.corpus=tsv", "--set", "data.train=run/samples.txt",
                                  "--set", "data.valid=valid.tsv"], "run/samples.txt"),
}


def tiny_copy_yaml(steps: int = 30) -> str:
    """The recipe of ``copy_run`` (conftest) as a YAML file (``steps``: its train.max_steps):
    a run that fine-tunes from it, or resumes it."""
    cfg = yaml.safe_load((ROOT / "configs" / "copy_task.yaml").read_text())
    for override in [*tiny_copy_overrides(steps), "model.layers=2", "train.valid_bleu=false"]:
        key, value = override.split("=", 1)
        section, name = key.split(".")
        cfg[section][name] = yaml.safe_load(value)
    return yaml.safe_dump(cfg)


@pytest.fixture
def workdir(copy_run, tmp_path, monkeypatch):
    """A directory of inputs (the current directory): text, references, checkpoints, a run."""
    w = tmp_path / "in"
    w.mkdir()
    for name in ("m.pt", "rev.pt", "a.pt", "teacher.en"):
        shutil.copy(copy_run / "last.pt", w / name)
    shutil.copy(copy_run / "step_00000010.pt", w / "b.pt")
    (w / "text.de").write_text("1 2 3\n4 5\n")
    (w / "prefix.en").write_text("1\n\n")
    (w / "ref.en").write_text("1 2 3\n4 5\n")
    (w / "mono.de").write_text("1 2 3\n")
    (w / "ex").mkdir()
    shutil.copy(copy_run / "last.pt", w / "ex" / "m.pt")
    shutil.copytree(copy_run, w / "run")
    (w / "copy.yaml").write_text(tiny_copy_yaml())
    (w / "run" / "samples.txt").write_text("1 2\t1 2\n")  # a corpus file where a run writes
    (w / "valid.tsv").write_text("1 2\t1 2\n")
    monkeypatch.chdir(w)
    return w


@pytest.mark.parametrize("case", OUTPUT_ON_INPUT)
def test_an_output_that_resolves_to_an_input_is_refused(case, workdir, capsys):
    argv, kept = OUTPUT_ON_INPUT[case]
    before = {p: p.read_bytes() for p in workdir.rglob("*") if p.is_file()}
    err = refused(capsys, argv, "an input (")
    assert kept in err and "choose another" in err, err
    after = {p: p.read_bytes() for p in workdir.rglob("*") if p.is_file()}
    assert after == before  # every input kept, byte for byte, and nothing written
    assert not (workdir / "nosuch").exists()


def test_an_output_through_a_link_to_an_input_is_refused(workdir, capsys):
    """A link to the input's directory, and a link to the input itself: the writer follows
    both (it replaces a link's target), so both are the input."""
    (workdir / "here").symlink_to(workdir)
    (workdir / "alias.de").symlink_to(workdir / "text.de")
    for out in ("here/text.de", "alias.de", "here/nosuch/../alias.de"):
        refused(capsys, ["translate", "--model", "m.pt", "-i", "text.de", "-o", out],
                "is also an input")
    assert (workdir / "text.de").read_text() == "1 2 3\n4 5\n"


# --- 4. non-finite numbers ---------------------------------------------------------------------

def float_fields(schema: dict, name: str) -> list[str]:
    """The request body ``name``'s fields that take a number (JSON Schema ``number``)."""
    def numbers(s: dict) -> bool:
        return s.get("type") == "number" or any(numbers(x) for x in s.get("anyOf", []))

    body = schema["components"]["schemas"][name]
    return [f for f, s in body["properties"].items() if numbers(s)]


@pytest.mark.slow
@pytest.mark.parametrize("path, body, model", [
    ("/v1/translate", {"texts": ["1 2"], "confidence": True}, "TranslateRequest"),
    ("/v1/attention", {"text": "1 2", "confidence": True}, "AttentionRequest"),
])
def test_every_float_of_a_request_refuses_infinities_and_nan(copy_bundle, path, body, model):
    """``"low_coverage": Infinity`` was answered 200 with a threshold of null where the
    schema promises a number (and every token flagged)."""
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from nmtkit.serve.app import create_app
    from nmtkit.serve.limits import ServeLimits

    with TestClient(create_app(copy_bundle, ServeLimits())) as c:
        fields = float_fields(c.get("/openapi.json").json(), model)
        assert {"low_probability", "low_coverage"} <= set(fields)
        for field in fields:
            for value in ("Infinity", "-Infinity", "NaN", "1e999"):
                text = json.dumps(body)[:-1] + f', "{field}": {value}}}'
                r = c.post(path, content=text, headers={"content-type": "application/json"})
                assert r.status_code == 422, (field, value, r.text)
                assert field in r.json()["detail"] and "finite" in r.json()["detail"], r.text
        r = c.post(path, json={**body, "low_coverage": 0.5})
        assert r.status_code == 200 and "null" not in r.text, r.text


def float_options() -> list[tuple[str, argparse.Action]]:
    """(command, option) of every option of every command that takes a number with a point."""
    from nmtkit.cli import build_parser
    from nmtkit.cli.options import finite_float

    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return [(name, a) for name, p in sub.choices.items() for a in p._actions
            if a.type in (float, finite_float)]


# The server's limits: checked with their ranges by ServeLimits and check_keep_alive.
SERVE_LIMITS = {"--timeout", "--timeout-keep-alive", "--max-wait-ms"}


@pytest.mark.slow
def test_every_float_flag_refuses_infinities_and_nan_before_any_model_loads(capsys):
    options = float_options()
    assert {"--length-penalty", "--temperature", "--mbr-scale"} <= {a.option_strings[0]
                                                                    for _, a in options}
    for command, action in options:
        flag = action.option_strings[0]
        for value in ("inf", "-inf", "nan", "1e999"):
            argv = [command, "--model", "missing.pt", f"{flag}={value}"]
            if command in ("translate", "evaluate", "tune", "backtranslate", "distill"):
                argv += {"tune": ["--src", "s", "--ref", "r"],
                         "backtranslate": ["-i", "x", "-o", "y"],
                         "distill": ["-o", "y"]}.get(command, [])
            err = refused(capsys, argv, flag)
            assert "finite" in err and "missing.pt" not in err, (command, flag, err)
            if flag not in SERVE_LIMITS:
                assert "argument " + flag in err  # refused by the parser: finite_float


@pytest.mark.slow
@pytest.mark.parametrize("section", ["data", "model", "train", "decode"])
def test_every_float_of_a_config_refuses_infinities_and_nan(section):
    import dataclasses

    from nmtkit.config import Config, ConfigError

    cls = getattr(Config(), section).__class__
    floats = [f.name for f in dataclasses.fields(cls) if f.type in ("float", float)]
    assert floats
    for name in floats:
        for value in (math.inf, -math.inf, math.nan):
            with pytest.raises(ConfigError, match=rf"{section}\.{name} must be a finite number"):
                Config.from_dict({section: {name: value}})


# --- 5. the length penalty's bound -------------------------------------------------------------

@pytest.mark.parametrize("alpha", [1000, 1e308])
def test_a_length_penalty_past_its_bound_is_refused_everywhere(alpha, copy_run, capsys):
    """``--length-penalty 1000`` overflowed ((5 + |y|) / 6) ** alpha to inf: every hypothesis
    scored 0 and the output was whichever came first ("There is two carks"), exit 0."""
    from nmtkit.checkpoint import load_bundle
    from nmtkit.config import MAX_LENGTH_PENALTY, Config, ConfigError
    from nmtkit.decode.options import TranslateOptions
    from nmtkit.decode.translator import Translator

    bound = f"decode.length_penalty must be <= {MAX_LENGTH_PENALTY:g}"
    with pytest.raises(ConfigError, match=bound):
        Config.from_dict({"decode": {"length_penalty": alpha}})
    model = str(copy_run / "last.pt")
    refused(capsys, ["translate", "--model", model, "--beam", "2", "--length-penalty", str(alpha)],
            bound)
    err = refused(capsys, ["tune", "--model", model, "--src", model, "--ref", model,
                           "--beam", "2", "--length-penalty", "0.6", str(alpha)],
                  f"length penalties must be in [0, {MAX_LENGTH_PENALTY:g}]")
    assert "split" not in err  # before any trial
    tr = Translator.from_bundle(load_bundle(copy_run / "last.pt"))
    with pytest.raises(ValueError, match=bound):
        tr.translate(["1 2 3"], TranslateOptions(beam=2, length_penalty=alpha))


def test_the_length_penalty_bound_keeps_every_output_length_apart():
    """At the bound the penalty of the longest output the position table allows is finite in
    float32, and lengths one token apart still get different penalties."""
    import torch

    from nmtkit.config import MAX_LENGTH_PENALTY, MAX_POSITIONS
    from nmtkit.rules import length_penalty

    lengths = torch.tensor([1, 2, MAX_POSITIONS - 1, MAX_POSITIONS])
    lp = length_penalty(lengths, MAX_LENGTH_PENALTY)
    assert torch.isfinite(lp).all() and (lp.diff() > 0).all(), lp
    assert torch.isfinite(-1e4 / lp).all() and (-1e4 / lp[-1]) < 0


# --- 6. a full disk ----------------------------------------------------------------------------

class FullDiskFile:
    """A file on a full disk: opening works (an inode is free), writing fails with ENOSPC and,
    as ``write(2)`` reports it, without a file name."""

    def __init__(self, f):
        self._f = f

    def __getattr__(self, name):
        return getattr(self._f, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._f.close()

    def write(self, data):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    def writelines(self, lines):
        self.write(b"")


def fill_the_disk(monkeypatch, where: Path, names: str = "*") -> None:
    """Every file under ``where`` whose name matches ``names`` opened for writing (``open``
    or ``os.fdopen``, as the atomic writers and the run lock open them) cannot be written."""
    real_open, real_fdopen = builtins.open, os.fdopen

    def full(f, path, mode):
        writing = any(m in str(mode) for m in "wax+")
        inside = path is not None and Path(os.path.realpath(path)).is_relative_to(where)
        return FullDiskFile(f) if writing and inside and fnmatch(Path(path).name, names) else f

    def open_(file, mode="r", *args, **kw):
        f = real_open(file, mode, *args, **kw)
        return full(f, file if isinstance(file, (str, os.PathLike)) else None, mode)

    def fdopen(fd, mode="r", *args, **kw):
        path = os.readlink(f"/proc/self/fd/{fd}") if os.path.exists("/proc/self/fd") else None
        return full(real_fdopen(fd, mode, *args, **kw), path, mode)

    monkeypatch.setattr(builtins, "open", open_)
    monkeypatch.setattr(os, "fdopen", fdopen)


def files_of(d: Path) -> dict[str, bytes]:
    return {str(p.relative_to(d)): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}


@pytest.mark.slow
@pytest.mark.parametrize("verbose", [[], ["-v"]])
def test_a_full_disk_at_the_lock_names_it_and_leaves_nothing(copy_run, tmp_path, monkeypatch,
                                                            capsys, verbose):
    """``train --resume`` on a full file system printed only "No space left on device" and
    left an empty RUN/.lock."""
    run = tmp_path / "run"
    shutil.copytree(copy_run, run)
    (tmp_path / "copy.yaml").write_text(tiny_copy_yaml(steps=60))
    before = files_of(run)
    fill_the_disk(monkeypatch, tmp_path)
    refused(capsys, [*verbose, "train", str(tmp_path / "copy.yaml"), "--resume",
                     "--run-dir", str(run)], f"{run / '.lock'}: No space left on device")
    assert files_of(run) == before and not (run / ".lock").exists()
    # A fresh run: the run directory it made goes again.
    refused(capsys, ["train", str(tmp_path / "copy.yaml"), "--run-dir", str(tmp_path / "new")],
            f"{tmp_path / 'new' / '.lock'}: No space left on device")
    assert not (tmp_path / "new").exists()


@pytest.mark.slow
def test_a_full_disk_at_a_checkpoint_names_it_and_leaves_nothing_half_made(
        copy_run, tmp_path, monkeypatch, capsys):
    run = tmp_path / "run"
    shutil.copytree(copy_run, run)
    (tmp_path / "copy.yaml").write_text(tiny_copy_yaml(steps=40))
    before = files_of(run)
    fill_the_disk(monkeypatch, tmp_path, names=".last.pt.*")  # the temporary file of last.pt
    refused(capsys, ["train", str(tmp_path / "copy.yaml"), "--resume", "--run-dir", str(run)],
            f"{run / 'last.pt'}: No space left on device")
    assert files_of(run).keys() == before.keys()  # no temporary file, no lock
    assert (run / "last.pt").read_bytes() == before["last.pt"]


# --- decided: a forced prefix longer than the output cap ---------------------------------------

def test_a_prefix_past_the_output_cap_is_refused_by_the_cli_the_library_and_the_server(
        copy_run, copy_bundle, tmp_path, capsys):
    """The output cap (the position table, a ``max_length`` asked for, the server's
    ``--max-length``) holds the whole output, prefix included: a longer prefix is refused
    everywhere (the command line cut it to the cap with a log line and went on, exit 0,
    where the server answered 422). A prefix longer than the length rule (``--max-len-a/-b``)
    but within the cap stretches the rule on both, as it always did
    (``test_serve_probe.py::test_a_prefix_within_the_cap_is_kept_and_the_output_stays_under_it``)."""
    from fastapi.testclient import TestClient

    from nmtkit.decode.options import TranslateOptions
    from nmtkit.decode.text_translator import TargetTextError
    from nmtkit.decode.translator import Translator
    from nmtkit.serve.app import create_app
    from nmtkit.serve.limits import ServeLimits

    cap = copy_bundle.cfg.model.max_positions - 1
    (tmp_path / "in").write_text("1 2\n3 4\n")
    (tmp_path / "pre").write_text("\n" + " ".join(["9"] * (cap + 5)) + "\n")
    refused(capsys, ["translate", "--model", str(copy_run / "last.pt"), "-i", str(tmp_path / "in"),
                     "--prefix-file", str(tmp_path / "pre"), "-o", str(tmp_path / "out")],
            f"{tmp_path / 'pre'}:2: prefix of {cap + 5} target tokens, more than the output "
            f"cap ({cap})")
    assert not (tmp_path / "out").exists()
    tr = Translator.from_bundle(copy_bundle)
    with pytest.raises(TargetTextError, match=r"prefixes\[0\]: prefix of 3 target tokens, more "
                                              r"than the output cap \(2\)"):
        tr.translate(["1 2"], TranslateOptions(prefixes=["9 9 9"], max_length=2))
    with TestClient(create_app(copy_bundle, ServeLimits(max_length=2))) as c:
        r = c.post("/v1/translate", json={"texts": ["1 2"], "prefixes": ["9 9 9"]})
        assert r.status_code == 422 and "prefixes.0: 3 target tokens" in r.text, r.text
    pytest.importorskip("ctranslate2")
    from nmtkit.export.ctranslate2 import export_ctranslate2
    from nmtkit.export.ctranslate2_engine import CTranslate2Translator

    ct2 = CTranslate2Translator(export_ctranslate2(copy_run / "last.pt", tmp_path / "ct2"),
                                intra_threads=1)
    with pytest.raises(TargetTextError, match=r"prefixes\[0\]: prefix of 3 target tokens"):
        ct2.translate(["1 2"], TranslateOptions(prefixes=["9 9 9"], max_length=2))


# --- decided: an empty input -------------------------------------------------------------------

@pytest.mark.parametrize("given", ["empty -i file", "/dev/null", "empty stdin"])
def test_an_empty_input_gives_an_empty_output_and_a_warning(given, copy_run, tmp_path,
                                                            monkeypatch, capsys):
    """An empty ``-i`` file was an error (``empty file``, exit 2) where empty stdin gave an
    empty output (exit 0): both now give an empty output, exit 0, and one warning: no lines
    in, no lines out, as for any other number of lines."""
    import io

    empty = tmp_path / "empty.de"
    empty.write_text("")
    source = {"empty -i file": ["-i", str(empty)], "/dev/null": ["-i", "/dev/null"],
              "empty stdin": []}[given]
    if given == "empty stdin":
        monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(b"")))
    model = str(copy_run / "last.pt")
    assert cli_main(["translate", "--model", model, *source, "--no-stream"]) == 0
    out, err = capsys.readouterr()
    assert out == "" and err.count("nothing to translate") == 1, err
    assert cli_main(["translate", "--model", model, *source, "--no-stream",
                     "-o", str(tmp_path / "out.en")]) == 0
    assert (tmp_path / "out.en").read_text() == ""


# --- decided: --n-samples with --n-best --------------------------------------------------------

def test_n_samples_and_n_best_together_are_refused(copy_run, capsys):
    """``--n-samples`` is ``--n-best`` for sampling (both set decode.n_best): given both, one
    was silently dropped (``--n-samples 2 --n-best 4`` printed 2 translations a line)."""
    model = str(copy_run / "last.pt")
    for n_best in ("4", "2"):
        err = refused(capsys, ["translate", "--model", model, "--sampling", "--n-samples", "2",
                               "--n-best", n_best], "--n-best")
        assert "not allowed with argument --n-samples" in err, err


# --- decided: fine-tuning data the parent's vocabulary does not cover --------------------------

@pytest.mark.slow
@pytest.mark.parametrize("copy_vocab, warned", [(16, True), (11, False)])
def test_fine_tuning_on_data_the_parents_vocabulary_misses_is_a_warning(copy_run, tmp_path,
                                                                        caplog, copy_vocab, warned):
    """A third of the tokens <unk> under the parent's vocabulary (symbols 11..15 it never saw)
    was an INFO line; above 1 in 20 it is a warning that says which vocabulary to use."""
    import logging

    from nmtkit.config import load
    from nmtkit.train.loop import Trainer
    from nmtkit.train.start import Start

    cfg = load(ROOT / "configs" / "copy_task.yaml",
               [*tiny_copy_overrides(2), "model.layers=2", "train.valid_bleu=false",
                f"data.copy_vocab={copy_vocab}"])
    with caplog.at_level(logging.INFO, logger="nmtkit.train"):
        Trainer(cfg, tmp_path / "child", Start.fine_tune(copy_run / "last.pt"))
    said = [r for r in caplog.records if "are <unk>" in r.getMessage()]
    assert len(said) == 1
    if warned:
        assert said[0].levelno == logging.WARNING
        text = said[0].getMessage()
        assert "more than 1 in 20" in text and "data.tokenizer: whitespace" in text
        assert "sentencepiece" in text and "without --init-from" in text
    else:
        assert said[0].levelno == logging.INFO and "0.00% of source" in said[0].getMessage()


# --- decided: backtranslate and distill replace both files or neither --------------------------

@pytest.mark.slow
@pytest.mark.parametrize("fails", ["writing the second file", "renaming the second file"])
def test_backtranslate_replaces_both_files_or_neither(copy_run, tmp_path, monkeypatch, capsys,
                                                      fails):
    """The two files were written one after the other: a failure on the second left the pair
    half-replaced (new back-translations beside the old monolingual lines, misaligned)."""
    (tmp_path / "mono.de").write_text("1 2 3\n4 5\n")
    (tmp_path / "synth.en").write_text("old translations\n")
    (tmp_path / "synth.de").write_text("old lines\n")
    before = files_of(tmp_path)
    if fails == "writing the second file":
        fill_the_disk(monkeypatch, tmp_path, names=".synth.de.*")
    else:
        real_replace = os.replace

        def replace(src, dst):
            if str(dst).endswith("synth.de") and ".tmp" in str(src):
                raise OSError(errno.EIO, os.strerror(errno.EIO), str(dst))
            return real_replace(src, dst)

        monkeypatch.setattr(os, "replace", replace)
    err = refused(capsys, ["backtranslate", "--model", str(copy_run / "last.pt"),
                           "-i", str(tmp_path / "mono.de"), "-o", str(tmp_path / "synth")],
                  f"{tmp_path / 'synth.de'}: cannot write the monolingual lines")
    assert files_of(tmp_path) == before  # both old files, and no temporary or backup file
    kept = [Path(k.split(",")[0].strip()) for k in err.split("kept in ")[1:]]
    assert [k.read_text().count("\n") for k in kept] == [2, 2]  # both new texts, kept
    monkeypatch.undo()
    assert cli_main(["backtranslate", "--model", str(copy_run / "last.pt"),
                     "-i", str(tmp_path / "mono.de"), "-o", str(tmp_path / "synth")]) == 0
    assert (tmp_path / "synth.de").read_text() == "1 2 3\n4 5\n"
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_distill_replaces_both_files_or_neither(copy_run, tmp_path, monkeypatch, capsys):
    from nmtkit.checkpoint import load_bundle
    from nmtkit.config import DataConfig
    from nmtkit.decode.translator import Translator
    from nmtkit.io import OutputError
    from nmtkit.train.distill import distill

    for lang in ("de", "en"):
        (tmp_path / f"corpus.{lang}").write_text("1 2\n3 4\n")
        (tmp_path / f"out.{lang}").write_text("old\n")
    data = DataConfig(corpus="parallel", train=str(tmp_path / "corpus"),
                      valid=str(tmp_path / "corpus"), src_lang="de", tgt_lang="en")
    tr = Translator.from_bundle(load_bundle(copy_run / "last.pt"))
    before = files_of(tmp_path)
    fill_the_disk(monkeypatch, tmp_path, names=".out.en.*")
    with pytest.raises(OutputError, match=r"out\.en: cannot write the teacher's translations"):
        distill(tr, data, tmp_path / "out")
    assert files_of(tmp_path) == before


# --- decided: a long line at a beam without early stopping -------------------------------------

def test_a_long_line_at_a_beam_without_early_stopping_is_warned_of(copy_bundle, monkeypatch,
                                                                   caplog):
    """One 10,000-character line at beam 2 took over 100 s where --early-stop took 9 s (the
    copy model: 900 tokens, 34 s against 0.2 s): without early stopping the other hypotheses
    run on to the output cap. Such a search is warned of, naming what bounds it."""
    import dataclasses
    import logging

    from nmtkit.decode import text_translator
    from nmtkit.decode.translator import Translator

    monkeypatch.setattr(text_translator, "LONG_SEARCH", 20)
    line = " ".join(["1", "2", "3"] * 10)  # 30 tokens: an output cap of 1.0 * 31 + 2 = 33

    # the line read whole, its digits as the model's own symbols (where these switches exist)
    whole = {k: False for k in ("split_sentences", "protect_spans")
             if hasattr(copy_bundle.cfg.decode, k)}

    def said(**decode):
        cfg = dataclasses.replace(copy_bundle.cfg.decode, **whole, **decode)
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="nmtkit.decode"):
            Translator.from_bundle(copy_bundle, cfg).translate([line, "1 2"])
        return [r.getMessage() for r in caplog.records if "early" in r.getMessage()]

    (warning,) = said(beam=2)
    assert "31 source tokens" in warning and "33 output tokens" in warning
    assert "--early-stop" in warning and "--max-len-a" in warning
    assert said(beam=2, early_stop=True) == [] and said(beam=1) == []
    assert said(beam=2, max_len_a=0.0, max_len_b=10) == []  # a cap that bounds it
