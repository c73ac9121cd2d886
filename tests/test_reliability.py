"""Faults a user meets: kills, interrupts, numerical blow-ups, hostile input, broken checkpoints.

Each test tries one fault and checks what the user sees and that nothing written is lost.
"""

from __future__ import annotations

import logging
import os
import random
import signal
import subprocess
import sys
import time

import pytest
import torch

from nmtkit.checkpoint import Bundle, CheckpointError, load_bundle, load_checkpoint
from nmtkit.config import ModelConfig, load
from nmtkit.data.tokenizers import SentencePieceTokenizer
from nmtkit.data.vocab import Vocab
from nmtkit.decode.translator import Translator
from nmtkit.models import build_model
from nmtkit.train.loop import Trainer
from nmtkit.train.step import TrainingError

from .helpers import ROOT, tiny_copy_overrides

COPY = ROOT / "configs" / "copy_task.yaml"


def cli_train(run_dir, steps, extra=(), resume=False):
    sets = [a for o in tiny_copy_overrides(steps) + ["train.valid_every=5", *extra]
            for a in ("--set", o)]
    cmd = [sys.executable, "-m", "nmtkit.cli", "train", str(COPY), "--run-dir", str(run_dir), *sets]
    return cmd + (["--resume"] if resume else [])


def wait_for(path, proc, timeout=120):
    t0 = time.time()
    while not path.exists():
        if proc.poll() is not None:
            raise AssertionError(f"training ended before {path} appeared: "
                                 f"{proc.stderr.read()[-2000:] if proc.stderr else ''}")
        if time.time() - t0 > timeout:
            raise AssertionError(f"{path} did not appear")
        time.sleep(0.05)


@pytest.mark.slow
def test_sigkill_at_a_random_moment_loses_nothing_and_resume_matches(tmp_path):
    steps = 40
    straight = subprocess.run(cli_train(tmp_path / "straight", steps), capture_output=True,
                              text=True, cwd=ROOT)
    assert straight.returncode == 0, straight.stderr[-2000:]

    run = tmp_path / "killed"
    proc = subprocess.Popen(cli_train(run, steps), stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, cwd=ROOT)
    wait_for(run / "last.pt", proc)
    time.sleep(random.Random(os.getpid()).uniform(0.0, 1.0))
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    ckpt = load_checkpoint(run / "last.pt")  # whatever moment it died, last.pt loads
    assert ckpt["progress"]["step"] % 5 == 0

    resumed = subprocess.run(cli_train(run, steps, resume=True), capture_output=True, text=True,
                             cwd=ROOT)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    a = load_checkpoint(tmp_path / "straight" / "last.pt")
    b = load_checkpoint(run / "last.pt")
    assert b["progress"]["step"] == steps
    for k, v in a["model"].items():
        assert torch.equal(v, b["model"][k]), k
    strip = [{k: v for k, v in r.items() if k != "elapsed_s"} for r in a["progress"]["history"]]
    assert strip == [{k: v for k, v in r.items() if k != "elapsed_s"}
                     for r in b["progress"]["history"]]
    assert not list(run.glob(".*.tmp"))


def _sigint_as_at_a_terminal() -> None:
    """In the child before it starts: SIGINT's default action, as a command typed at a
    terminal has it. A shell without job control starts background commands with SIGINT
    ignored (``pytest ... &`` in a script), and a Python started so keeps ignoring it."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.slow
def test_sigint_saves_a_checkpoint_and_exits_cleanly(tmp_path):
    run = tmp_path / "run"
    proc = subprocess.Popen(cli_train(run, 100000), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=ROOT,
                            preexec_fn=_sigint_as_at_a_terminal)
    try:
        wait_for(run / "last.pt", proc)  # training is under way (first validation written)
        time.sleep(0.3)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:  # never leave a run of 100000 updates behind
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130, err[-2000:]
    assert "interrupted at step" in err and "Traceback" not in err
    ckpt = load_checkpoint(run / "last.pt")
    assert ckpt["progress"]["step"] > 0


@pytest.mark.slow
def test_non_finite_loss_is_skipped_then_stops_with_a_clear_message(tmp_path, caplog):
    cfg = load(COPY, tiny_copy_overrides(12) + ["train.max_nonfinite=3"])
    trainer = Trainer(cfg, tmp_path / "one")
    real = trainer.model.features  # the teacher-forced pass of both loss paths
    calls = {"n": 0}

    def once_nan(*a, **k):
        calls["n"] += 1
        out = real(*a, **k)
        return out * float("nan") if calls["n"] == 4 else out

    trainer.model.features = once_nan
    with caplog.at_level(logging.WARNING):
        result = trainer.run()
    assert result["step"] == 12
    assert "non-finite loss" in caplog.text
    assert all(torch.isfinite(p).all() for p in trainer.model.parameters())

    trainer2 = Trainer(cfg, tmp_path / "two")
    trainer2.model.features = lambda *a, **k: real(*a, **k) * float("inf")
    with pytest.raises(TrainingError, match="3 consecutive non-finite losses"):
        trainer2.run()


@pytest.fixture(scope="module")
def bundle():
    """A random tiny model with a SentencePiece tokenizer: edge cases need no training."""
    lines = ["ein mann fährt fahrrad .", "zwei hunde spielen im schnee .",
             "a man rides a bike .", "two dogs play in the snow ."] * 30
    tok = SentencePieceTokenizer.train(lines, vocab_size=60)
    vocab = Vocab.build([tok.encode(x) for x in lines])
    cfg = load(COPY, ["data.corpus=multi30k", "data.tokenizer=sentencepiece",
                      "model.d_model=16", "model.d_ff=32", "model.heads=2", "model.layers=1",
                      "model.max_positions=64"])
    torch.manual_seed(0)
    model = build_model(cfg.model, len(vocab), len(vocab)).eval()
    return Bundle(cfg, model, tok, tok, vocab, vocab)


HOSTILE = ["", "   ", "\t", "😀🎉 ein hund 🐕", "שלום עולם", "مرحبا بالعالم", "e\u0301e\u0301 ñ",
           "a\x00b\x07c\x1bd", "line\x1cwith\x85odd\u2028separators", "x " * 3000, "ein mann ."]


@pytest.mark.parametrize("beam", [1, 3])
def test_hostile_lines_give_one_output_each_in_order(bundle, beam, caplog):
    # protect_spans off: the 3000 "x" (a character the copy vocabulary lacks) must reach the
    # model and be cut to its position table, not be set aside as spans it cannot say.
    tr = Translator.from_bundle(bundle, max_len_a=0.0, max_len_b=5, protect_spans=False)
    with caplog.at_level(logging.WARNING):
        out = tr.translate_lines(HOSTILE, beam=beam, batch_size=4)
    assert len(out) == len(HOSTILE)
    assert out[0] == out[1] == out[2] == ""
    assert "truncated" in caplog.text  # the 3000-token line
    assert all(isinstance(o, str) for o in out)
    single = [tr.translate_lines([x], beam=beam)[0] for x in HOSTILE[3:]]
    assert single == out[3:]  # batching and sorting never mix lines up


@pytest.mark.slow
def test_cli_translate_keeps_line_count_with_odd_separators(tmp_path, bundle):
    from nmtkit.checkpoint import save_checkpoint

    b = bundle
    save_checkpoint(tmp_path / "m.pt", {
        "config": b.cfg.to_dict(), "tokenizers": {"src": b.src_tok.state(), "tgt": b.tgt_tok.state()},
        "vocab": {"src": b.src_vocab.to_dict(), "tgt": b.tgt_vocab.to_dict()},
        "model": b.model.state_dict()})
    text = "\n".join(HOSTILE) + "\n"
    proc = subprocess.run([sys.executable, "-m", "nmtkit.cli", "translate", "--model",
                           str(tmp_path / "m.pt"), "--beam", "2"], input=text.encode("utf-8"),
                          capture_output=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.decode("utf-8").count("\n") == len(HOSTILE)
    bad = subprocess.run([sys.executable, "-m", "nmtkit.cli", "translate", "--model",
                          str(tmp_path / "m.pt")], input=b"ok\n\xff\xfe bad\n", capture_output=True,
                         cwd=ROOT)
    assert bad.returncode != 0 and b"<stdin>:2: invalid UTF-8" in bad.stderr


def test_wrong_architecture_or_vocabulary_in_a_checkpoint_is_a_clear_error(tmp_path, bundle):
    from nmtkit.checkpoint import save_checkpoint

    b = bundle
    base = {"config": b.cfg.to_dict(),
            "tokenizers": {"src": b.src_tok.state(), "tgt": b.tgt_tok.state()},
            "vocab": {"src": b.src_vocab.to_dict(), "tgt": b.tgt_vocab.to_dict()},
            "model": b.model.state_dict()}
    wrong_arch = dict(base, config={**base["config"], "model": {**base["config"]["model"],
                                                                  "d_model": 32}})
    save_checkpoint(tmp_path / "arch.pt", wrong_arch)
    with pytest.raises(CheckpointError, match="do not fit"):
        load_bundle(tmp_path / "arch.pt")
    itos = b.src_vocab.to_dict()["itos"] + ["extra"]
    wrong_vocab = dict(base, vocab={"src": {"itos": itos}, "tgt": {"itos": itos}})
    save_checkpoint(tmp_path / "vocab.pt", wrong_vocab)
    with pytest.raises(CheckpointError, match="do not fit"):
        load_bundle(tmp_path / "vocab.pt")
    corrupt = tmp_path / "corrupt.pt"
    data = bytearray((tmp_path / "arch.pt").read_bytes())
    data[len(data) // 3: len(data) // 3 + 64] = b"\x00" * 64
    corrupt.write_bytes(bytes(data))
    with pytest.raises(CheckpointError):
        load_bundle(corrupt)


def test_model_config_defaults_are_valid():
    assert build_model(ModelConfig(d_model=16, d_ff=32, heads=2, layers=1), 10, 10) is not None
