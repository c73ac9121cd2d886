import pytest

from nmtkit.config import Config, ConfigError, load


def write(tmp_path, text):
    p = tmp_path / "c.yaml"
    p.write_text(text)
    return p


def test_defaults_and_overrides(tmp_path):
    p = write(tmp_path, "model:\n  d_model: 64\n  heads: 4\n")
    cfg = load(p, ["train.max_steps=7", "data.src_lang=en", "train.adam_betas=[0.9, 0.99]"])
    assert cfg.name == "c"
    assert cfg.model.d_model == 64 and cfg.train.max_steps == 7 and cfg.data.src_lang == "en"
    assert cfg.train.adam_betas == (0.9, 0.99)
    assert cfg.model.d_ff == 2048  # default from the dataclass
    assert Config.from_dict(cfg.to_dict()) == cfg


@pytest.mark.parametrize("text,msg", [
    ("model:\n  d_modl: 64\n", "unknown key"),
    ("train:\n  max_steps: many\n", "expected int"),
    ("model:\n  d_model: 100\n  heads: 8\n", "divisible"),
    ("train:\n  warmup: 0\n", "warmup"),
    ("decode:\n  beam: 0\n", "beam"),
    ("model: [1, 2]\n", "expected a mapping"),
    ("data:\n  corpus: nope\n", "data.corpus"),
])
def test_bad_configs_are_rejected_with_a_clear_message(tmp_path, text, msg):
    with pytest.raises(ConfigError, match=msg):
        load(write(tmp_path, text))


def test_bad_yaml_and_missing_file(tmp_path):
    with pytest.raises(ConfigError, match="invalid YAML"):
        load(write(tmp_path, "model: {d_model: [\n"))
    with pytest.raises(ConfigError, match="not found"):
        load(tmp_path / "nope.yaml")
    with pytest.raises(ConfigError, match="unknown key"):
        load(write(tmp_path, "{}"), ["train.bogus=1"])
