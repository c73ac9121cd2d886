import io
import logging
import pickle
import shutil
from pathlib import Path

import pytest
import torch

from nmtkit.checkpoint import (
    TRAINING_STATE,
    CheckpointError,
    is_release,
    load_bundle,
    load_checkpoint,
    save_checkpoint,
)
from nmtkit.cli import main as cli_main
from nmtkit.decode.translator import Translator
from nmtkit.train.average import average_checkpoints
from nmtkit.train.loop import Trainer
from nmtkit.train.start import Start

from .helpers import ROOT, make_cfg, tiny_copy_overrides

COPY = ROOT / "configs" / "copy_task.yaml"


@pytest.mark.slow
def test_checkpoint_round_trip_translates_identically(tmp_path):
    trainer = Trainer(make_cfg(10), tmp_path)
    trainer.run()
    ckpt = load_checkpoint(tmp_path / "last.pt")
    assert {"config", "tokenizers", "vocab", "model", "optimizer", "schedule", "progress",
            "rng"} <= set(ckpt)
    assert ckpt["progress"]["step"] == 10
    bundle = load_bundle(tmp_path / "last.pt")
    for k, v in trainer.model.state_dict().items():
        assert torch.equal(v, bundle.model.state_dict()[k]), k
    lines = ["1 2 3 4 5", "7 7 8"]
    a = Translator.from_bundle(trainer.bundle()).translate_lines(lines, beam=2)
    assert Translator.from_bundle(bundle).translate_lines(lines, beam=2) == a
    assert (tmp_path / "best.pt").exists() and (tmp_path / "metrics.csv").exists()
    assert len(list(tmp_path.glob("step_*.pt"))) == 1


@pytest.mark.slow
def test_resume_continues_exactly_like_an_uninterrupted_run(tmp_path):
    straight = Trainer(make_cfg(30), tmp_path / "a")
    straight.run()
    first = Trainer(make_cfg(20), tmp_path / "b")
    first.run()
    resumed = Trainer(make_cfg(30), tmp_path / "b", Start.resume())
    assert resumed.progress.step == 20
    resumed.run()
    for k, v in straight.model.state_dict().items():
        assert torch.equal(v, resumed.model.state_dict()[k]), k
    drop = {"elapsed_s"}
    rows_a = [{k: v for k, v in r.items() if k not in drop} for r in straight.progress.history]
    rows_b = [{k: v for k, v in r.items() if k not in drop} for r in resumed.progress.history]
    assert rows_a == rows_b
    assert len(list((tmp_path / "b").glob("step_*.pt"))) == 3  # keep_last


@pytest.mark.slow
def test_resume_refuses_a_different_model(tmp_path):
    Trainer(make_cfg(10), tmp_path).run()
    with pytest.raises(ValueError, match="model section"):
        Trainer(make_cfg(20, ["model.d_ff=128"]), tmp_path, Start.resume())


class Evil:
    def __reduce__(self):
        return (print, ("code ran",))


def test_checkpoint_with_pickled_code_is_refused(tmp_path):
    bad = tmp_path / "evil.pt"
    torch.save({"format": "nmtkit-checkpoint", "payload": Evil()}, bad)
    with pytest.raises(CheckpointError, match="refused"):
        load_checkpoint(bad)
    raw = tmp_path / "raw.pt"
    raw.write_bytes(pickle.dumps({"x": Evil()}))
    with pytest.raises(CheckpointError):
        load_checkpoint(raw)


@pytest.mark.slow
def test_truncated_and_foreign_checkpoints_give_clear_errors(tmp_path):
    Trainer(make_cfg(10), tmp_path / "run").run()
    data = (tmp_path / "run" / "last.pt").read_bytes()
    cut = tmp_path / "cut.pt"
    cut.write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match="cut.pt"):
        load_checkpoint(cut)
    other = tmp_path / "other.pt"
    buf = io.BytesIO()
    torch.save({"weights": torch.zeros(2)}, buf)
    other.write_bytes(buf.getvalue())
    with pytest.raises(CheckpointError, match="not an nmtkit checkpoint"):
        load_checkpoint(other)
    with pytest.raises(CheckpointError, match="not found"):
        load_checkpoint(tmp_path / "missing.pt")


@pytest.mark.parametrize("content, said", [
    (b"", "empty file"),
    (b"hello\n", "not the zip archive"),  # torch.load: KeyError 101
    (b"\x80\x02]q\x00.", "not the zip archive"),  # a pickled list: IndexError inside torch
    (bytes(range(256)) * 4, "not the zip archive"),
])
def test_files_that_are_not_checkpoints_name_the_problem(tmp_path, content, said):
    bad = tmp_path / "bad.pt"
    bad.write_bytes(content)
    with pytest.raises(CheckpointError, match=f"bad.pt: .*{said}"):
        load_checkpoint(bad)


def test_a_zip_archive_that_torch_cannot_read_is_a_checkpoint_error(tmp_path):
    import zipfile

    bad = tmp_path / "other.zip"
    with zipfile.ZipFile(bad, "w") as z:
        z.writestr("readme.txt", "not a torch archive")
    with pytest.raises(CheckpointError, match="other.zip: truncated or corrupted checkpoint"):
        load_checkpoint(bad)


@pytest.mark.slow
def test_average_is_the_elementwise_mean(tmp_path):
    Trainer(make_cfg(30), tmp_path).run()
    steps = sorted(tmp_path.glob("step_*.pt"))
    assert len(steps) == 3
    avg = average_checkpoints(steps, tmp_path / "avg.pt")
    states = [load_checkpoint(p)["model"] for p in steps]
    for k, v in avg["model"].items():
        if v.is_floating_point():
            expect = sum(s[k].double() for s in states) / 3
            assert torch.allclose(v.double(), expect, atol=1e-6), k
    bundle = load_bundle(tmp_path / "avg.pt")
    assert Translator.from_bundle(bundle).translate_lines(["1 2 3"], beam=1)[0] is not None
    same = average_checkpoints([steps[0], steps[0]], tmp_path / "same.pt")
    for k, v in same["model"].items():
        assert torch.equal(v, states[0][k])


def test_a_checkpoint_written_before_nmtkit_fast_loads_and_translates_the_same():
    """tests/data/copy_task_v1_b02ce64.pt was trained and averaged by commit b02ce64 (before the
    speed code left models/); the expected file is that commit's own `translate --beam 3
    --n-best 2` output for the same three lines."""
    data = Path(__file__).parent / "data"
    bundle = load_bundle(data / "copy_task_v1_b02ce64.pt")
    results = Translator.from_bundle(bundle, beam=3, n_best=2).translate(["1 2 3", "4 5 6 7", "8 9"])
    expected = [line.split("\t") for line in
                (data / "copy_task_v1_b02ce64.expected.tsv").read_text().splitlines()]
    got = [(str(i), h.score, h.text) for i, hs in enumerate(results) for h in hs]
    assert [(i, t) for i, _, t in expected] == [(i, t) for i, _, t in got]
    for (_, s, _), (_, score, _) in zip(expected, got, strict=True):
        assert abs(float(s) - score) < 1e-3
    assert isinstance(bundle.model, torch.nn.Module)


@pytest.mark.slow
def test_checkpoints_that_stored_amp_as_a_boolean_still_load_and_resume(tmp_path):
    """Before ``train.amp`` took off|bf16|fp16 it was a boolean, and checkpoints store it."""
    data = Path(__file__).parent / "data"
    assert load_checkpoint(data / "copy_task_v1_b02ce64.pt")["config"]["train"]["amp"] is False
    assert load_bundle(data / "copy_task_v1_b02ce64.pt").cfg.train.amp == "off"
    Trainer(make_cfg(10), tmp_path).run()
    ckpt = load_checkpoint(tmp_path / "last.pt")
    ckpt["config"]["train"]["amp"] = True
    del ckpt["scaler"]  # as written before fp16 existed
    save_checkpoint(tmp_path / "last.pt", ckpt)
    assert load_bundle(tmp_path / "last.pt").cfg.train.amp == "bf16"
    resumed = Trainer(make_cfg(20), tmp_path, Start.resume())
    assert resumed.progress.step == 10 and not resumed.updater.scaler.is_enabled()
    resumed.run()


# --- release checkpoints (issue 64, item 5) ------------------------------------------------------

@pytest.fixture(scope="module")
def run20(tmp_path_factory):
    """A copy-task run of 20 updates (validations and step files at 10 and 20), its log."""
    run = tmp_path_factory.mktemp("release")
    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append  # type: ignore[method-assign]
    logger = logging.getLogger("nmtkit.train.run_dir")
    logger.addHandler(handler)
    level = logger.level
    logger.setLevel(logging.INFO)
    try:
        Trainer(make_cfg(20), run).run()
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    return run, [r.getMessage() for r in records]


@pytest.mark.slow
def test_best_and_step_files_hold_weights_only_and_last_pt_the_training_state(run20):
    run, log_lines = run20
    last = load_checkpoint(run / "last.pt")
    assert {"optimizer", "schedule", "scaler", "progress", "rng"} <= set(last)
    steps = sorted(run.glob("step_*.pt"))
    assert [p.name for p in steps] == ["step_00000010.pt", "step_00000020.pt"]
    for path in (run / "best.pt", *steps):
        release = load_checkpoint(path)
        assert is_release(release) and not set(TRAINING_STATE) & set(release), path
        assert {"config", "tokenizers", "vocab", "model", "weights_sha256", "step"} <= set(release)
        assert release["config"] == last["config"] and release["vocab"] == last["vocab"]
        # Adam's two moments are twice the weights: last.pt is about three times the size.
        assert path.stat().st_size < 0.5 * (run / "last.pt").stat().st_size, path
    newest = load_checkpoint(steps[-1])
    assert newest["step"] == 20
    assert all(torch.equal(v, last["model"][k]) for k, v in newest["model"].items())
    # One INFO line per save names each file written and its size.
    saves = [m for m in log_lines if m.startswith("saved ")]
    assert len(saves) == 2
    sizes = {p.name: f"{p.stat().st_size / 1e6:.2f} MB" for p in (run / "last.pt", steps[-1])}
    assert all(f"{name} {size}" in saves[-1] for name, size in sizes.items()), saves


@pytest.mark.slow
def test_a_release_checkpoint_translates_as_last_pt(run20):
    run, _ = run20
    lines = ["1 2 3 4 5", "7 7 8"]
    got = {name: Translator.from_bundle(load_bundle(run / name)).translate_lines(lines, beam=2)
           for name in ("last.pt", "step_00000020.pt")}
    assert got["last.pt"] == got["step_00000020.pt"]


@pytest.mark.slow
def test_resume_from_a_release_checkpoint_is_refused_clearly(run20, tmp_path, capsys):
    run, _ = run20
    copied = tmp_path / "copied"
    copied.mkdir()
    shutil.copy(run / "best.pt", copied / "last.pt")
    with pytest.raises(ValueError, match="release checkpoint without optimizer state.*resume "
                       "from the last.pt"):
        Trainer(make_cfg(30), copied, Start.resume())
    args = ["train", str(COPY), "--run-dir", str(copied), "--resume"]
    for s in tiny_copy_overrides(30):
        args += ["--set", s]
    assert cli_main(args) == 2
    err = capsys.readouterr().err
    assert "release checkpoint without optimizer state" in err and f"--init-from {copied}" in err


@pytest.mark.slow
def test_fine_tuning_starts_from_best_pt(run20, tmp_path):
    run, _ = run20
    best = load_checkpoint(run / "best.pt")
    child = Trainer(make_cfg(3, ["train.seed=9"]), tmp_path, Start.fine_tune(run / "best.pt"))
    assert all(torch.equal(v, best["model"][k]) for k, v in child.model.state_dict().items())
    assert not child.updater.optimizer.state and child.progress.step == 0
    child.run()
    assert load_checkpoint(tmp_path / "last.pt")["progress"]["step"] == 3
