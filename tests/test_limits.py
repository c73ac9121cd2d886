"""Issue 74, items 2 (the config's part), 4 (configs that never finish printing) and 9: every
size a config asks for has a limit checked before anything is built; a config's nesting and
size are bounded; a recipe is a regular file under a size cap; memory running out is one
line. Each error names the field (or file), a bounded view of the value, and the limit."""

from __future__ import annotations

import os
import signal
import time
from contextlib import contextmanager

import pytest
import torch

from nmtkit.cli import main as cli_main
from nmtkit.config import Config, ConfigError, ModelConfig, load
from nmtkit.config.limits import (
    MAX_CONFIG_DEPTH,
    MAX_CONFIG_ITEMS,
    MAX_LAYERS,
    MAX_PARAMETERS,
    MAX_RECIPE_BYTES,
    MAX_SHOWN,
    brief,
)
from nmtkit.config.model import check_model_size, parameter_count
from nmtkit.models import build_model

from .helpers import (
    billion_laughs_yaml,
    deeply_nested_config,
    deeply_nested_yaml,
    refused,
    shared_references_config,
)


@contextmanager
def within(seconds: int):
    """Fail (instead of hanging the test run) if the block takes longer than ``seconds``."""
    def timeout(signum, frame):
        raise AssertionError(f"still running after {seconds} s: a hang")
    old = signal.signal(signal.SIGALRM, timeout)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def one_line(message: str) -> None:
    assert "\n" not in message.strip() and len(message) < 600, message


# --- sizes past their limits ---------------------------------------------------------------------


def test_a_3000000_layer_model_is_refused_by_the_command_line_before_anything_is_built(
        tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    err = refused(capsys, ["train", "copy_task", "--set", "model.layers=3000000"],
                  f"model.layers must be at most {MAX_LAYERS:,}")
    assert "got 3000000" in err
    one_line(err)
    assert not (tmp_path / "runs").exists()


def test_a_stored_config_past_a_limit_is_refused_as_it_is_read():
    """A checkpoint's stored config goes through the same reading (``Config.from_dict``, which
    ``nmtkit.checkpoint`` and the numpy engine call before building anything)."""
    raw = Config().to_dict()
    raw["model"]["layers"] = 3_000_000
    with pytest.raises(ConfigError, match=r"^m\.pt: model\.layers must be at most 1,024 .*got "
                       r"3000000$") as e:
        Config.from_dict(raw, "m.pt")
    one_line(str(e.value))


@pytest.mark.slow
@pytest.mark.parametrize("engine", ["torch", "numpy"])
def test_a_checkpoint_whose_config_asks_for_3000000_layers_is_one_line_at_once(
        copy_run, tmp_path, capsys, engine):
    """Both engines read the stored config through ``Config.from_dict`` before building: the
    limit is met before any layer is allocated (was: several GB, then a timeout or a
    ``MemoryError`` traceback)."""
    ck = torch.load(copy_run / "last.pt", weights_only=True)
    ck["config"]["model"]["layers"] = 3_000_000
    bad = tmp_path / "deep.pt"
    torch.save(ck, bad)
    text = tmp_path / "in.txt"
    text.write_text("1 2 3\n")
    with within(60):
        err = refused(capsys, ["translate", "--model", str(bad), "--engine", engine,
                               "-i", str(text)], "model.layers must be at most 1,024")
    one_line(err)
    assert "got 3000000" in err


def test_wide_and_deep_within_each_limit_is_refused_by_its_parameter_count():
    with pytest.raises(ConfigError, match=r"model: 1000\+1000 layers of d_model 8192, d_ff 32768 "
                       r"and vocabularies of .* weights, more than 20,000,000,000") as e:
        Config.from_dict({"data": {"corpus": "copy"}, "model": {
            "layers": 1000, "d_model": 8192, "d_ff": 32768, "heads": 8}}, "wide.yaml")
    one_line(str(e.value))
    # a checkpoint with a large vocabulary can be asked with the sizes it holds
    with pytest.raises(ConfigError, match="a target vocabulary of 10000000 entries"):
        check_model_size(ModelConfig(), 100, 10**7, "m.pt")
    with pytest.raises(ConfigError, match="weights, more than"):
        check_model_size(ModelConfig(d_model=16384, d_ff=65536, heads=16), 500_000, 500_000, "m.pt")
    check_model_size(ModelConfig(), 32000, 32000, "m.pt")  # the base Transformer: fine


@pytest.mark.parametrize("model", [
    {}, {"norm": "pre"}, {"positional": "learned"}, {"positional": "rope"},
    {"output_bias": False, "tie_output": False}, {"enc_layers": 3, "dec_layers": 2},
    {"arch": "rnn"}, {"arch": "rnn", "bidirectional": False, "attention": "general"},
    {"arch": "rnn", "attention": "dot", "tie_output": False, "layers": 3},
    {"arch": "rnn", "attention_dim": 20, "enc_layers": 2, "dec_layers": 3},
])
def test_the_parameter_count_is_what_building_allocates(model):
    """Every weight and table (a tied matrix as often as it is made), so that the bound is
    the allocation it is meant to prevent."""
    cfg = ModelConfig(**{"d_model": 64, "d_ff": 128, "heads": 4, "layers": 2, "emb_dim": 32,
                         "rnn_hidden": 48, "tie_all": False, **model})
    with torch.device("meta"):
        built = build_model(cfg, 100, 120)
    allocated = sum(p.numel() for _, p in built.named_parameters(remove_duplicate=False)) + sum(
        b.numel() for b in built.buffers())
    assert parameter_count(cfg, 100, 120) == allocated
    assert MAX_PARAMETERS > parameter_count(ModelConfig(), 256_000, 256_000)


def test_an_integer_of_thousands_of_digits_is_one_line(tmp_path, capsys, monkeypatch):
    """Python refuses to write out an integer of over 4,300 digits: every message bounds it."""
    monkeypatch.chdir(tmp_path)
    big = "1" + "0" * 5000
    for item, said in ((f"train.seed={big}", "a number YAML cannot read"),
                       ("decode.max_len_a=1" + "0" * 400,
                        "decode.max_len_a: <an integer of about 401 digits>")):
        one_line(refused(capsys, ["train", "copy_task", "--set", item], said))
    with pytest.raises(ConfigError, match=r"model\.layers: <an integer of about 5001 digits> is "
                       "out of range"):
        Config.from_dict({"model": {"layers": 10**5000}}, "m.pt")


def test_error_messages_show_a_bounded_view_of_any_value():
    huge = "x" * 1_000_000
    with pytest.raises(ConfigError) as e:
        Config.from_dict({"data": {"corpus": huge}}, "r.yaml")
    assert len(str(e.value)) < 200 and "..." in str(e.value)
    with pytest.raises(ConfigError) as e:
        Config.from_dict({"data": {"src_lang": huge, "tgt_lang": huge}}, "r.yaml")
    assert len(str(e.value)) < 600
    with pytest.raises(ConfigError) as e:  # many unknown keys: a few named
        Config.from_dict({f"key{i}": 1 for i in range(5000)}, "r.yaml")
    assert len(str(e.value)) < 300 and "and 4995 more" in str(e.value)
    assert len(brief(list(range(10**6)))) <= MAX_SHOWN
    assert brief(10**5000).startswith("<an integer of about")


# --- configs that never finish printing ----------------------------------------------------------


def test_a_billion_laughs_recipe_is_one_line_at_once(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    recipe = tmp_path / "laughs.yaml"
    recipe.write_text(billion_laughs_yaml())
    assert recipe.stat().st_size < 600
    with within(20):
        start = time.monotonic()
        err = refused(capsys, ["train", str(recipe)], f"more than {MAX_CONFIG_ITEMS:,} entries")
    one_line(err)
    assert time.monotonic() - start < 10


def test_a_stored_config_of_shared_references_is_refused_at_once():
    """What a pickle's memo can make of a checkpoint's config: 2**20 entries when walked."""
    with within(20), pytest.raises(ConfigError, match=f"more than {MAX_CONFIG_ITEMS:,} entries"):
        Config.from_dict(shared_references_config(), "m.pt")
    cyclic: list = []
    cyclic.append(cyclic)
    with within(20), pytest.raises(ConfigError, match="nested more than"):
        Config.from_dict({"data": {"directions": cyclic}}, "m.pt")


def test_a_list_nested_200000_deep_is_one_line_not_a_recursion_error(tmp_path, capsys,
                                                                        monkeypatch):
    monkeypatch.chdir(tmp_path)
    recipe = tmp_path / "deep.yaml"
    recipe.write_text(deeply_nested_yaml())
    one_line(refused(capsys, ["train", str(recipe)],
                     f"deep.yaml:2: the YAML is nested more than {MAX_CONFIG_DEPTH} levels deep"))
    refused(capsys, ["train", "copy_task", "--set", "data.directions=" + "[" * 5000 + "]" * 5000],
            "nested more than")
    with pytest.raises(ConfigError, match=f"nested more than {MAX_CONFIG_DEPTH} levels deep"):
        Config.from_dict(deeply_nested_config(), "m.pt")


# --- recipes from devices and pipes --------------------------------------------------------------


@pytest.mark.parametrize("kind", ["/dev/zero", "fifo", "too big", "directory"])
def test_a_recipe_must_be_a_regular_file_under_the_size_cap(tmp_path, capsys, kind):
    if kind == "fifo":
        path = tmp_path / "recipe.yaml"
        os.mkfifo(path)
        said = "is a FIFO (named pipe): a recipe must be a regular file"
    elif kind == "too big":
        path = tmp_path / "big.yaml"
        path.write_text("# " + "x" * MAX_RECIPE_BYTES + "\nname: big\n")
        said = f"over {MAX_RECIPE_BYTES:,} bytes, the most that a recipe may have"
    elif kind == "directory":
        path = tmp_path / "dir.yaml"
        path.mkdir()
        said = "is a directory: a recipe must be a regular file"
    else:
        path, said = "/dev/zero", "/dev/zero is a device: a recipe must be a regular file"
    with within(20):
        one_line(refused(capsys, ["train", str(path)], said))
        with pytest.raises(ConfigError, match="must be a regular file|the most that a recipe"):
            load(path)


# --- memory running out --------------------------------------------------------------------------


@pytest.mark.parametrize("error", [
    MemoryError(),
    RuntimeError("[enforce fail at alloc_cpu.cpp:117] data. DefaultCPUAllocator: not enough "
                 "memory: you tried to allocate 96000000000000 bytes."),
    RuntimeError("CUDA out of memory. Tried to allocate 20.00 GiB (GPU 0; 79.15 GiB total)"),
])
def test_memory_running_out_is_one_line_and_exit_2(monkeypatch, capsys, error):
    from nmtkit.cli import average

    def run(args):
        raise error
    monkeypatch.setattr(average, "run", run)
    err = refused(capsys, ["average", "--out", "x.pt", "a.pt", "b.pt"],
                  "nmtkit: error: out of memory while running nmtkit average")
    one_line(err)


def test_any_other_runtime_error_keeps_its_traceback(monkeypatch):
    from nmtkit.cli import average

    def run(args):
        raise RuntimeError("a bug")
    monkeypatch.setattr(average, "run", run)
    with pytest.raises(RuntimeError, match="a bug"):
        cli_main(["average", "--out", "x.pt", "a.pt", "b.pt"])
