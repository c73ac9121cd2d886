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


# Every check of config.validate: the override that breaks it and the key its message names.
EVERY_CHECK = [
    ("data.corpus=nope", "data.corpus"), ("data.tokenizer=nope", "data.tokenizer"),
    ("data.spm_model_type=nope", "data.spm_model_type"), ("data.vocab_size=8", "data.vocab_size"),
    ("data.min_freq=0", "data.min_freq"), ("data.max_len=0", "data.max_len"),
    ("data.tokenizer_sample=-1", "data.tokenizer_sample"), ("data.copy_len=0", "data.copy_len"),
    ("data.copy_vocab=1", "data.copy_vocab"), ("data.copy_train_size=0", "data.copy_train_size"),
    ("model.arch=nope", "model.arch"), ("model.norm=mid", "model.norm"),
    ("model.d_model=0", "model.d_model"), ("model.heads=3", "model.heads"),
    ("model.layers=0", "layers"), ("model.dropout=1.0", "model.dropout"),
    ("model.attention_dropout=-0.1", "model.attention_dropout"),
    ("model.relu_dropout=2", "model.relu_dropout"), ("model.layer_norm_eps=0", "model.layer_norm_eps"),
    ("model.max_positions=0", "model.max_positions"), ("model.emb_dim=0", "model.emb_dim"),
    ("model.rnn_hidden=7", "model.rnn_hidden"), ("model.attention=nope", "model.attention"),
    ("model.attention_dim=-1", "model.attention_dim"),
    ("model.attention_temperature=0", "model.attention_temperature"),
    ("model.teacher_forcing=0.5", "model.teacher_forcing"), ("model.init=uniform", "model.init"),
    ("model.init_range=0", "model.init_range"),
    ("train.max_tokens=0", "train.max_tokens"), ("train.accum=0", "train.accum"),
    ("train.max_steps=0", "train.max_steps"), ("train.max_epochs=-1", "train.max_epochs"),
    ("train.max_minutes=-1", "train.max_minutes"), ("train.lr_schedule=nope", "train.lr_schedule"),
    ("train.lr=0", "train.lr"), ("train.lr=.inf", "train.lr"), ("train.warmup=0", "train.warmup"),
    ("train.label_smoothing=1", "train.label_smoothing"),
    ("train.plateau_factor=1", "train.plateau_factor"),
    ("train.plateau_patience=-1", "train.plateau_patience"),
    ("train.valid_every=0", "train.valid_every"),
    ("train.early_stop_metric=nope", "train.early_stop_metric"),
    ("train.keep_last=-1", "train.keep_last"), ("train.device=tpu", "train.device"),
    ("train.log_every=0", "train.log_every"), ("train.seed=-1", "train.seed"),
    ("train.max_nonfinite=0", "train.max_nonfinite"),
    ("train.valid_max_sents=-1", "train.valid_max_sents"), ("train.threads=-2", "train.threads"),
    ("train.adam_betas=[0.9, 1.0]", "train.adam_betas"), ("train.adam_eps=0", "train.adam_eps"),
    ("train.weight_decay=-0.1", "train.weight_decay"), ("train.clip_norm=-1", "train.clip_norm"),
    ("train.patience=-1", "train.patience"),
    ("decode.beam=0", "decode.beam"), ("decode.n_best=6", "decode.n_best"),
    ("decode.batch_size=0", "decode.batch_size"), ("decode.max_len_a=-1", "decode.max_len_a"),
    ("decode.length_penalty=.nan", "decode.length_penalty"),
    ("decode.length_penalty=-1", "decode.length_penalty"),
    ("decode.max_len_a=.inf", "decode.max_len_a"),
]


@pytest.mark.parametrize("override,key", EVERY_CHECK)
def test_every_check_names_its_key(tmp_path, override, key):
    extra = ["model.arch=rnn"] if override.startswith("model.rnn_hidden") else []
    with pytest.raises(ConfigError) as e:
        load(write(tmp_path, "train:\n  warmup: 10\n"), [*extra, override])
    assert key in str(e.value)


def test_tie_all_needs_a_joint_vocabulary(tmp_path):
    with pytest.raises(ConfigError, match="model.tie_all"):
        load(write(tmp_path, ""), ["data.joint_vocab=false"])


@pytest.mark.parametrize("content,msg", [
    (b"- a\n- b\n", "top level must be a mapping"),
    (b"just a string\n", "top level must be a mapping"),
    (b"\x89PNG\r\n\x1a\n\x00\x00\xff\xfe", "not a UTF-8 text file"),
])
def test_files_that_are_no_recipe(tmp_path, content, msg):
    p = tmp_path / "c.yaml"
    p.write_bytes(content)
    with pytest.raises(ConfigError, match=msg) as e:
        load(p)
    assert str(p) in str(e.value)


def test_a_directory_is_no_config(tmp_path):
    with pytest.raises(ConfigError, match="cannot read"):
        load(tmp_path)


@pytest.mark.parametrize("item,msg", [
    ("train.lr=[1, 2", "not valid YAML"),
    ("train.lr=!!python/object/apply:os.system ['true']", "not valid YAML"),
    ("train..lr=1", "expected section.key=value"),
    ("=3", "expected section.key=value"),
    ("train.lr", "expected section.key=value"),
    ("name.x=1", "name"),
    ("train.lr.x=1", "train.lr"),
])
def test_bad_set_items(tmp_path, item, msg):
    with pytest.raises(ConfigError, match=msg):
        load(write(tmp_path, "train:\n"), [item])
