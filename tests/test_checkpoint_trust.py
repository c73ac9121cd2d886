"""Untrusted checkpoints (issue "Reliability II", item 6, and the checkpoint parts of item 3):
flipped bytes are caught by the weights' checksum, a stored config cannot make the loader
allocate more than the file holds, bad weights and bad entries are one-line errors."""

import pytest
import torch

from nmtkit.checkpoint import (
    CheckpointError,
    load_bundle,
    load_checkpoint,
    save_checkpoint,
    weights_digest,
)
from nmtkit.cli import main as cli_main
from nmtkit.train.average import average_checkpoints
from nmtkit.train.loop import Trainer
from nmtkit.train.start import Start

from .helpers import make_cfg


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    run = tmp_path_factory.mktemp("trust")
    Trainer(make_cfg(4), run).run()
    return run / "last.pt"


def rewrite(src, dst, change):
    ck = torch.load(src, weights_only=True)
    change(ck)
    torch.save(ck, dst)  # plain torch.save: the stored checksum is not renewed
    return dst


@pytest.mark.slow
def test_checksum_is_stored_and_flipped_weights_are_refused(trained, tmp_path, capsys):
    (tmp_path / "in.txt").write_text("1 2 3\n")
    ck = load_checkpoint(trained)
    assert ck["weights_sha256"] == weights_digest(ck["model"])

    def flip(c):
        w = next(v for v in c["model"].values() if v.numel() > 64)
        w.view(-1)[:64] += 0.5
    bad = rewrite(trained, tmp_path / "flipped.pt", flip)
    with pytest.raises(CheckpointError, match="do not match their stored checksum"):
        load_bundle(bad)
    assert load_bundle(bad, verify=False) is not None
    assert cli_main(["translate", "--model", str(bad), "-i", str(tmp_path / "in.txt")]) == 2
    assert "checksum" in capsys.readouterr().err
    assert cli_main(["translate", "--model", str(bad), "-i", str(tmp_path / "in.txt"), "--no-verify"]) == 0


@pytest.mark.slow
@pytest.mark.parametrize("what,change,message", [
    ("nan", lambda c: next(iter(c["model"].values())).view(-1).__setitem__(0, float("nan")),
     "NaN or infinite"),
    ("int", lambda c: c["model"].update({k: v.long() for k, v in list(c["model"].items())[:1]}),
     "not floating point"),
    ("not a dict", lambda c: c.update(model=[1, 2, 3]), "not a state dict"),
    ("huge d_model", lambda c: c["config"]["model"].update(d_model=8192, heads=1),
     "weights do not fit"),
    ("huge positions", lambda c: c["config"]["model"].update(max_positions=10**9),
     "model.max_positions must be <= 65536"),
    ("huge beam", lambda c: c["config"]["decode"].update(beam=10**6), "decode.beam must be <= 1024"),
])
def test_bad_weights_and_greedy_configs_are_refused(trained, tmp_path, what, change, message):
    bad = rewrite(trained, tmp_path / "bad.pt", lambda c: (change(c), c.pop("weights_sha256")))
    with pytest.raises(CheckpointError, match=message) as e:
        load_bundle(bad)
    assert "\n" not in str(e.value) and "weights_only" not in str(e.value)


@pytest.mark.slow
def test_average_of_different_shapes_is_refused(trained, tmp_path):
    def grow(c):
        k = next(k for k, v in c["model"].items() if v.dim() == 2)
        c["model"][k] = torch.zeros(c["model"][k].shape[0] + 1, c["model"][k].shape[1])
    other = rewrite(trained, tmp_path / "other.pt", lambda c: (grow(c), c.pop("weights_sha256")))
    with pytest.raises(CheckpointError, match="has shape"):
        average_checkpoints([trained, other], tmp_path / "avg.pt")
    assert not (tmp_path / "avg.pt").exists()


@pytest.mark.slow
def test_resuming_from_an_averaged_checkpoint_is_a_clear_error(trained, tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    average_checkpoints([trained, trained], run / "last.pt")
    with pytest.raises(ValueError, match="cannot resume: it is a release checkpoint without "
                       "optimizer state"):
        Trainer(make_cfg(4), run, Start.resume())


@pytest.mark.slow
def test_serve_port_out_of_range_is_a_usage_error(trained, capsys):
    with pytest.raises(SystemExit) as e:
        cli_main(["serve", "--model", str(trained), "--port", "99999"])
    assert e.value.code == 2
    assert "port must be in 0..65535" in capsys.readouterr().err


@pytest.mark.slow
def test_saved_checkpoints_verify(trained, tmp_path):
    ck = load_checkpoint(trained)
    save_checkpoint(tmp_path / "copy.pt", {k: v for k, v in ck.items() if k != "weights_sha256"})
    assert load_checkpoint(tmp_path / "copy.pt")["weights_sha256"] == ck["weights_sha256"]


@pytest.mark.parametrize("sets", [[], ["model.positional=rope"], ["model.positional=learned"],
                                  "rnn"])
def test_the_bounds_checks_shapes_only_build_has_the_real_models_shapes(sets):
    """The loader builds the stored config on ``meta`` (no weight allocated) with
    nn.init's fills skipped and the fixed position tables left empty: the shapes, and only
    they, must be the real model's."""
    from nmtkit.checkpoint import _NoInitialisation
    from nmtkit.config import load
    from nmtkit.models import build_model
    from nmtkit.models.transformer import sinusoid_table

    model_cfg = (load("configs/multi30k_rnn_attention.yaml").model if sets == "rnn"
                 else make_cfg(1, sets).model)
    with torch.device("meta"), _NoInitialisation():
        meta = build_model(model_cfg, 50, 50)
    real = build_model(model_cfg, 50, 50)
    assert {k: v.shape for k, v in meta.state_dict().items()} == {
        k: v.shape for k, v in real.state_dict().items()}
    assert all(v.is_meta for v in meta.state_dict().values())
    assert all(not v.is_meta for v in real.state_dict().values())
    table = sinusoid_table(8, 4)  # outside the meta build: the values of Sec. 3.5
    assert table[1, 0].item() == pytest.approx(0.8414710) and table[1, 1].item() == pytest.approx(0.5403023)


@pytest.mark.slow
def test_loading_and_translating_import_no_compiler(trained):
    """The bounds check's meta build used to run Python reference kernels that import
    torch._dynamo: about a second of every command's start, for nothing."""
    import subprocess
    import sys

    code = ("import sys; from nmtkit.checkpoint import load_bundle; "
            "from nmtkit.decode.translator import Translator; "
            "print(Translator.from_bundle(load_bundle(sys.argv[1])).translate_lines(['1 2 3'])); "
            "print('torch._dynamo' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code, str(trained)], capture_output=True,
                         text=True, check=True)
    assert out.stdout.splitlines()[-1] == "False", out.stdout + out.stderr
