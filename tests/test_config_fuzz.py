"""Fuzzing the config path (issue "Reliability II"): random ``--set`` items never produce
anything but a Config or a ConfigError, and the command line never a traceback or a run
directory for a refused config."""

import dataclasses
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nmtkit.cli import main as cli_main
from nmtkit.config import Config, ConfigError, load

from .helpers import ROOT

pytestmark = pytest.mark.slow  # trains a model or starts processes: not in the fast tier

COPY = ROOT / "configs" / "copy_task.yaml"
SECTIONS = {f.name: f.type for f in dataclasses.fields(Config)}
REAL_KEYS = [f"{s}.{f.name}" for s in ("data", "model", "train", "decode")
             for f in dataclasses.fields(getattr(Config(), s))]
keys = st.one_of(st.sampled_from(REAL_KEYS), st.sampled_from(["name", "data", "x.y", "train.lr.z"]),
                 st.text(alphabet="abcdefghijklmnopqrstuvwxyz._", min_size=0, max_size=12))
values = st.one_of(
    st.integers(-10**12, 10**12).map(str), st.floats(allow_nan=True).map(repr),
    st.sampled_from([".nan", ".inf", "-.inf", "[1, 2]", "{a: 1}", "!!python/object:os.system",
                     "!!binary aGk=", ":", "'", "[", "true", "null", "", "~", "1e-3", "0x10"]),
    st.text(max_size=20))
items = st.builds(lambda k, v: f"{k}={v}", keys, values)


@settings(max_examples=300, deadline=None)
@given(st.lists(items, min_size=1, max_size=3))
def test_random_overrides_give_a_config_or_a_config_error(sets):
    try:
        assert isinstance(load(COPY, sets), Config)
    except ConfigError:
        pass


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(items)
def test_refused_overrides_exit_2_without_a_run_directory(item):
    try:
        load(COPY, [item])
        return  # a valid config would start training: not this test's business
    except ConfigError:
        pass
    run = Path(tempfile.mkdtemp()) / "run"
    assert cli_main(["train", str(COPY), "--run-dir", str(run), "--set", item]) == 2
    assert not run.exists()
