"""Release checkpoints as safetensors (issue 74, item 1): what a run, an average and a
conversion write, read back as they were written; older ``.pt`` release checkpoints load as
before and ``nmtkit convert`` rewrites them; ``last.pt`` stays a ``torch.save`` archive."""

import json
import shutil
from pathlib import Path

import pytest
import torch

from nmtkit.checkpoint import (
    CheckpointError,
    convert_checkpoint,
    is_release,
    load_bundle,
    load_checkpoint,
    release_payload,
    save_checkpoint,
)
from nmtkit.checkpoint_format import SAFETENSORS, TORCH_ZIP, checkpoint_kind
from nmtkit.cli import main as cli_main
from nmtkit.decode.translator import Translator
from nmtkit.lite.checkpoint import load_lite_bundle
from nmtkit.models import build_model
from nmtkit.train.average import average_checkpoints
from nmtkit.train.loop import Trainer

from .helpers import make_cfg, refused

OLD = Path(__file__).parent / "data" / "copy_task_v1_b02ce64.pt"
"""A release checkpoint written by torch.save (commit b02ce64, before safetensors)."""
LINES = ["1 2 3", "4 5 6 7", "8 9"]


def translations(path: Path) -> list:
    results = Translator.from_bundle(load_bundle(path), beam=3, n_best=2).translate(LINES)
    return [[(h.text, round(h.score, 5)) for h in hs] for hs in results]


def test_an_older_release_checkpoint_converts_and_translates_the_same(tmp_path):
    new = tmp_path / "best.pt"  # the name kept: the kind is in the file
    said = convert_checkpoint(OLD, new)
    assert said == {"out": str(new), "from": str(OLD), "was": TORCH_ZIP, "format": SAFETENSORS,
                    "weights": 38}
    assert checkpoint_kind(new) == SAFETENSORS and checkpoint_kind(OLD) == TORCH_ZIP
    old, converted = load_checkpoint(OLD), load_checkpoint(new)
    assert {k: v for k, v in converted.items() if k != "model"} == {
        k: v for k, v in release_payload(old).items() if k != "model"}  # config, vocab ...
    assert converted["step"] == old["progress"]["step"] == 60
    assert converted["weights_sha256"] == old["weights_sha256"]  # the same bytes
    assert all(torch.equal(v, converted["model"][k]) for k, v in old["model"].items())
    assert translations(new) == translations(OLD)
    assert new.stat().st_size < OLD.stat().st_size


def test_convert_in_place_and_from_the_command_line(tmp_path, capsys):
    copy = tmp_path / "best.pt"
    shutil.copy(OLD, copy)
    assert cli_main(["convert", str(copy), str(copy)]) == 0
    said = json.loads(capsys.readouterr().out)
    assert said["was"] == TORCH_ZIP and checkpoint_kind(copy) == SAFETENSORS
    assert [p.name for p in tmp_path.iterdir()] == ["best.pt"]  # no temporary file left
    again = tmp_path / "again.pt"
    assert cli_main(["convert", str(copy), str(again)]) == 0  # a release file: rewritten alike
    assert json.loads(capsys.readouterr().out)["was"] == SAFETENSORS
    assert again.read_bytes() == copy.read_bytes()
    (tmp_path / "text.pt").write_text("not a checkpoint\n")
    refused(capsys, ["convert", str(tmp_path / "text.pt"), str(tmp_path / "x.pt")],
            "text.pt: not an nmtkit checkpoint")
    assert not (tmp_path / "x.pt").exists()


def tied_payload() -> dict:
    cfg = make_cfg(1)
    torch.manual_seed(0)
    model = build_model(cfg.model, 15, 15)
    return {"config": cfg.to_dict(), "tokenizers": {"src": {"kind": "whitespace"},
                                                    "tgt": {"kind": "whitespace"}},
            "vocab": {"src": {"itos": ["<pad>", "<unk>", "<s>", "</s>", *map(str, range(11))]},
                      "tgt": {"itos": ["<pad>", "<unk>", "<s>", "</s>", *map(str, range(11))]}},
            "model": model.state_dict(), "step": 3}


def test_tied_weights_are_stored_once_and_come_back_tied(tmp_path):
    payload = tied_payload()
    state = payload["model"]
    tied = [k for k in state if k != "src_embed.lut.weight"
            and state[k].data_ptr() == state["src_embed.lut.weight"].data_ptr()]
    assert tied  # the copy recipe ties the embeddings and the generator
    save_checkpoint(tmp_path / "best.pt", payload)
    back = load_checkpoint(tmp_path / "best.pt")
    assert is_release(back) and back["step"] == 3 and list(back["model"]) == list(state)
    assert all(back["model"][k] is back["model"]["src_embed.lut.weight"] for k in tied)
    assert all(torch.equal(v, back["model"][k]) for k, v in state.items())
    untied = {**payload, "model": {k: v.clone() for k, v in state.items()}}
    save_checkpoint(tmp_path / "untied.pt", untied)
    saved = (tmp_path / "untied.pt").stat().st_size - (tmp_path / "best.pt").stat().st_size
    weights = len(tied) * state["src_embed.lut.weight"].numel() * 4
    assert weights <= saved < weights + 200  # (and a longer header)
    lite = load_lite_bundle(tmp_path / "best.pt")
    assert lite.model.tgt_embed is lite.model.src_embed


def test_the_training_state_stays_a_torch_file_and_a_release_entry_must_be_plain(tmp_path):
    payload = {**tied_payload(), "optimizer": {"state": {0: {"exp_avg": torch.ones(2)}}},
               "schedule": {}, "progress": {"step": 3}, "rng": {"torch": torch.ones(3)}}
    save_checkpoint(tmp_path / "last.pt", payload)
    assert checkpoint_kind(tmp_path / "last.pt") == TORCH_ZIP
    assert not is_release(load_checkpoint(tmp_path / "last.pt"))
    with pytest.raises(TypeError, match="entry note: Tensor cannot be stored"):
        save_checkpoint(tmp_path / "x.pt", {**tied_payload(), "note": torch.ones(1)})
    assert not (tmp_path / "x.pt").exists()


def test_an_average_of_old_and_new_files_is_a_release_file(tmp_path):
    new = tmp_path / "new.pt"
    convert_checkpoint(OLD, new)
    avg = tmp_path / "avg.pt"
    average_checkpoints([OLD, new], avg)
    assert checkpoint_kind(avg) == SAFETENSORS
    back, old = load_checkpoint(avg), load_checkpoint(OLD)
    assert back["averaged_from"] == [str(OLD), str(new)] and "step" not in back
    assert all(torch.equal(v, back["model"][k]) for k, v in old["model"].items())


def test_an_average_keeps_tied_weights_tied(tmp_path):
    save_checkpoint(tmp_path / "a.pt", tied_payload())
    average_checkpoints([tmp_path / "a.pt", tmp_path / "a.pt"], tmp_path / "avg.pt")
    back = load_checkpoint(tmp_path / "avg.pt")
    assert back["model"]["generator.weight"] is back["model"]["src_embed.lut.weight"]


@pytest.mark.slow
def test_a_run_writes_release_files_as_safetensors_and_last_pt_with_torch(tmp_path):
    Trainer(make_cfg(10), tmp_path).run()
    assert checkpoint_kind(tmp_path / "last.pt") == TORCH_ZIP
    for name in ("best.pt", "step_00000010.pt"):
        assert checkpoint_kind(tmp_path / name) == SAFETENSORS, name
        assert load_lite_bundle(tmp_path / name).cfg == load_bundle(tmp_path / name).cfg
    last, best = load_checkpoint(tmp_path / "last.pt"), load_checkpoint(tmp_path / "best.pt")
    assert best["config"] == last["config"] and best["weights_sha256"] == last["weights_sha256"]
    out = tmp_path / "from_last.pt"
    convert_checkpoint(tmp_path / "last.pt", out)  # the weights of a resume state
    assert load_checkpoint(out)["weights_sha256"] == last["weights_sha256"]
    assert load_checkpoint(out)["step"] == 10


def test_a_checkpoint_error_is_one_class_for_both_readers():
    from nmtkit import checkpoint_format
    from nmtkit.lite import checkpoint as lite_checkpoint

    assert CheckpointError is checkpoint_format.CheckpointError is lite_checkpoint.CheckpointError
