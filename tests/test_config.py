import dataclasses
import re
from pathlib import Path

import pytest

from nmtkit import config
from nmtkit.config import (
    ARCHS,
    CORPORA,
    DEVICES,
    EARLY_STOP_METRICS,
    LR_SCHEDULES,
    NORMS,
    RNN_ATTENTIONS,
    RNN_INITS,
    SPM_MODEL_TYPES,
    TOKENIZERS,
    Config,
    ConfigError,
    DataConfig,
    ModelConfig,
    TrainConfig,
    load,
    validate,
)

SHARED = Path("/work/shared/data")


def write(tmp_path, text):
    p = tmp_path / "c.yaml"
    p.write_text(text)
    return p


def test_defaults_and_overrides(tmp_path):
    p = write(tmp_path, "model:\n  d_model: 64\n  heads: 4\n")
    cfg = load(p, ["train.max_steps=7", "data.src_lang=en", "data.tgt_lang=de",
                   "train.adam_betas=[0.9, 0.99]"])
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
    # a key given twice: the later value silently won
    p = write(tmp_path, "name: x\ntrain:\n  lr: 2.0\n  warmup: 10\n  lr: 0.5\n")
    with pytest.raises(ConfigError, match=rf"^{re.escape(str(p))}:5: invalid YAML: duplicate "
                       r"key 'lr' \(first given on line 3\)$"):
        load(p)
    with pytest.raises(ConfigError, match=r"duplicate key 'heads'"):
        load(write(tmp_path, "name: x\n"), ["model={heads: 2, heads: 4}"])
    assert load(write(tmp_path, "train: {lr: 2.0}\ndecode: {beam: 2}\n")).train.lr == 2.0
    with pytest.raises(ConfigError, match="not found"):
        load(tmp_path / "nope.yaml")
    with pytest.raises(ConfigError, match="unknown key"):
        load(write(tmp_path, "{}"), ["train.bogus=1"])


# Every check of config.validate, one case each: the raw values that break it and the key its
# message starts with (after the source file). The first check a config fails is the one
# reported, so a message that starts with the key shows that this case reached that check.
RNN = {"arch": "rnn"}
TSV_SPLIT = {"corpus": "tsv", "tsv_file": "data.txt", "tsv_split": [0.8, 0.2], "train": "train",
             "valid": "valid"}
EVERY_CHECK = [
    # data
    ({"data": {"corpus": "nope"}}, "data.corpus"),
    ({"data": {"tokenizer": "nope"}}, "data.tokenizer"),
    ({"data": {"spm_model_type": "nope"}}, "data.spm_model_type"),
    ({"data": {"vocab_size": 8}}, "data.vocab_size"),
    ({"data": {"min_freq": 0}}, "data.min_freq"),
    ({"data": {"max_len": 0}}, "data.max_len"),
    ({"data": {"copy_len": 0}}, "data.copy_len"),
    ({"data": {"copy_train_size": 0}}, "data.copy_train_size"),
    ({"data": {"copy_valid_size": 0}}, "data.copy_valid_size"),
    ({"data": {"copy_vocab": 1}}, "data.copy_vocab"),
    ({"data": {"tokenizer_sample": -1}}, "data.tokenizer_sample"),
    ({"data": {"subword_nbest": 1}}, "data.subword_nbest"),
    ({"data": {"subword_nbest": 4}}, "data.subword_nbest"),
    ({"data": {"subword_alpha": 1.0}}, "data.subword_alpha"),
    ({"data": {"subword_alpha": 1.5, "spm_model_type": "unigram"}}, "data.subword_alpha"),
    ({"data": {"subword_alpha": 0.1, "tokenizer": "word"}}, "data.subword_alpha"),
    ({"data": {"subword_alpha": 0.1, "mmap": True}}, "data.subword_alpha"),
    ({"data": {"tsv_split": [float("nan"), 0.5]}}, "data.tsv_split"),
    ({"data": {"tsv_columns": ["src", "src"]}}, "data.tsv_columns"),
    ({"data": {**TSV_SPLIT, "tsv_split": [0.8, 0.3]}}, "data.tsv_split"),
    ({"data": {**TSV_SPLIT, "corpus": "parallel"}}, "data.tsv_split"),
    ({"data": {**TSV_SPLIT, "tsv_file": ""}}, "data.tsv_split"),
    ({"data": {**TSV_SPLIT, "valid": "val"}}, "data.train"),
    ({"data": {"tsv_seed": -1}}, "data.tsv_seed"),
    ({"data": {"extra": [{"path": " "}]}}, "data.extra.path"),
    ({"data": {"extra": [{"path": "s", "weight": -1}]}}, "data.extra.weight"),
    ({"data": {"extra": [{"path": "s", "tag": "<pad>"}]}}, "data.extra.tag"),
    ({"data": {"extra": [{"path": "s"}], "mmap": True}}, "data.extra"),
    ({"data": {"direction_temperature": 0}}, "data.direction_temperature"),
    ({"data": {"src_lang": "en", "tgt_lang": "en"}}, "data.src_lang"),
    ({"data": {"directions": ["de"]}}, "data.directions"),
    ({"data": {"directions": ["de-en", "de-en"]}}, "data.directions"),
    ({"data": {"directions": ["de-en"], "corpus": "copy"}}, "data.directions"),
    ({"data": {"directions": ["de-en"], "tokenizer": "word"}}, "data.directions"),
    ({"data": {"directions": ["de-en"], "extra": [{"path": "s"}]}}, "data.directions"),
    ({"data": {"directions": ["de-en"], "mmap": True}}, "data.directions"),
    ({"data": {"directions": ["de-en"], "reverse_source": True}}, "data.directions"),
    ({"data": {"directions": ["de-en"], "subword_alpha": 0.1}}, "data.directions"),
    # data: sizes past their limits (nmtkit.config.limits)
    ({"data": {"vocab_size": 10**7}}, "data.vocab_size"),
    ({"data": {"copy_vocab": 10**7}}, "data.copy_vocab"),
    ({"data": {"max_len": 10**6}}, "data.max_len"),
    ({"data": {"copy_len": 10**6}}, "data.copy_len"),
    ({"data": {"copy_train_size": 10**9}}, "data.copy_train_size"),
    ({"data": {"copy_valid_size": 10**9}}, "data.copy_valid_size"),
    ({"data": {"subword_nbest": 10**6, "spm_model_type": "unigram"}}, "data.subword_nbest"),
    ({"data": {"extra": [{"path": "s", "weight": 1e9}]}}, "data.extra.weight"),
    # model
    ({"model": {"dropout": float("nan")}}, "model.dropout"),
    ({"model": {"arch": "nope"}}, "model.arch"),
    ({"model": {"norm": "mid"}}, "model.norm"),
    ({"model": {"d_model": 0}}, "model.d_model"),
    ({"model": {"heads": 0}}, "model.heads"),
    ({"model": {"d_ff": 0}}, "model.d_ff"),
    ({"model": {"layer_norm_eps": 0}}, "model.layer_norm_eps"),
    ({"model": {"d_model": 100, "heads": 8}}, "model.d_model"),
    ({"model": {"layers": 0}}, "model.layers"),
    ({"model": {"enc_layers": -1}}, "model.enc_layers"),
    ({"model": {"dec_layers": -1}}, "model.dec_layers"),
    ({"model": {"max_positions": 1}}, "model.max_positions"),
    ({"model": {"dropout": 1.0}}, "model.dropout"),
    ({"model": {"attention_dropout": -0.1}}, "model.attention_dropout"),
    ({"model": {"relu_dropout": 2}}, "model.relu_dropout"),
    ({"model": {"positional": "absolute"}}, "model.positional"),
    ({"model": {**RNN, "positional": "rope"}}, "model.positional"),
    ({"model": {"positional": "rope", "d_model": 30, "heads": 10}}, "model.positional"),
    ({"model": {"emb_dim": 0}}, "model.emb_dim"),
    ({"model": {"rnn_hidden": 0}}, "model.rnn_hidden"),
    ({"model": {"attention_temperature": 0}}, "model.attention_temperature"),
    ({"model": {"init_range": 0}}, "model.init_range"),
    ({"model": {**RNN, "rnn_hidden": 7}}, "model.rnn_hidden"),
    ({"model": {"attention": "nope"}}, "model.attention"),
    ({"model": {"init": "nope"}}, "model.init"),
    ({"model": {"attention_dim": -1}}, "model.attention_dim"),
    ({"model": {"teacher_forcing_anneal_steps": -1}}, "model.teacher_forcing_anneal_steps"),
    ({"model": {**RNN, "teacher_forcing": 1.5}}, "model.teacher_forcing"),
    ({"model": {**RNN, "teacher_forcing_min": -0.5}}, "model.teacher_forcing_min"),
    ({"model": {**RNN, "teacher_forcing": 0.5, "teacher_forcing_min": 0.8,
                "teacher_forcing_anneal_steps": 10}}, "model.teacher_forcing_min"),
    ({"model": {"teacher_forcing": 0.5}}, "model.teacher_forcing"),
    ({"model": {"teacher_forcing_anneal_steps": 10}}, "model.teacher_forcing_anneal_steps"),
    ({"model": {"init": "uniform"}}, "model.init"),
    ({"model": {"max_positions": 1 << 20}}, "model.max_positions"),
    ({"model": {"layers": 3000000}}, "model.layers"),
    ({"model": {"enc_layers": 3000000}}, "model.enc_layers"),
    ({"model": {"dec_layers": 3000000}}, "model.dec_layers"),
    ({"model": {"d_model": 1 << 20}}, "model.d_model"),
    ({"model": {"d_ff": 1 << 20}}, "model.d_ff"),
    ({"model": {"emb_dim": 1 << 20}}, "model.emb_dim"),
    ({"model": {"rnn_hidden": 1 << 20}}, "model.rnn_hidden"),
    ({"model": {"attention_dim": 1 << 20}}, "model.attention_dim"),
    ({"model": {"heads": 4096}}, "model.heads"),
    # train
    ({"train": {"adam_betas": [0.9, float("nan")]}}, "train.adam_betas"),
    ({"train": {"lr_schedule": "nope"}}, "train.lr_schedule"),
    ({"train": {"optimizer": "sgd"}}, "train.optimizer"),
    ({"train": {"min_lr": -1}}, "train.min_lr"),
    ({"train": {"cosine_steps": -1}}, "train.cosine_steps"),
    ({"train": {"lr_schedule": "cosine", "min_lr": 1.0}}, "train.min_lr"),
    ({"train": {"lr_schedule": "cosine", "warmup": 100, "cosine_steps": 100}}, "train.cosine_steps"),
    ({"train": {"early_stop_metric": "nope"}}, "train.early_stop_metric"),
    ({"train": {"device": "tpu"}}, "train.device"),
    ({"train": {"max_tokens": 0}}, "train.max_tokens"),
    ({"train": {"max_tokens": 10**9}}, "train.max_tokens"),
    ({"train": {"threads": 10**6}}, "train.threads"),
    ({"train": {"lr": 0}}, "train.lr"),
    ({"train": {"adam_eps": 0}}, "train.adam_eps"),
    ({"train": {"accum": 0}}, "train.accum"),
    ({"train": {"max_steps": 0}}, "train.max_steps"),
    ({"train": {"valid_every": 0}}, "train.valid_every"),
    ({"train": {"log_every": 0}}, "train.log_every"),
    ({"train": {"max_nonfinite": 0}}, "train.max_nonfinite"),
    ({"train": {"seed": -1}}, "train.seed"),
    ({"train": {"seed": 10**23}}, "train.seed"),
    ({"train": {"max_epochs": -1}}, "train.max_epochs"),
    ({"train": {"max_minutes": -1}}, "train.max_minutes"),
    ({"train": {"max_minutes": 1e308, "budget_schedule": True}}, "train.max_minutes"),
    ({"train": {"warmup": -1}}, "train.warmup"),
    ({"train": {"weight_decay": -0.1}}, "train.weight_decay"),
    ({"train": {"clip_norm": -1}}, "train.clip_norm"),
    ({"train": {"patience": -1}}, "train.patience"),
    ({"train": {"plateau_patience": -1}}, "train.plateau_patience"),
    ({"train": {"keep_last": -1}}, "train.keep_last"),
    ({"train": {"valid_max_sents": -1}}, "train.valid_max_sents"),
    ({"train": {"sample_every": -1}}, "train.sample_every"),
    ({"train": {"samples": 0}}, "train.samples"),
    ({"train": {"threads": -2}}, "train.threads"),
    ({"train": {"warmup": 0}}, "train.warmup"),
    ({"train": {"label_smoothing": 1}}, "train.label_smoothing"),
    ({"train": {"word_dropout": 1}}, "train.word_dropout"),
    ({"train": {"rdrop": -1}}, "train.rdrop"),
    ({"train": {"adam_betas": [0.9, 1.0]}}, "train.adam_betas"),
    ({"train": {"plateau_factor": 1}}, "train.plateau_factor"),
    ({"train": {"amp": "fp32"}}, "train.amp"),
    ({"train": {"ema": 1.0}}, "train.ema"),
    ({"train": {"budget_probe_steps": 1}}, "train.budget_probe_steps"),
    ({"train": {"budget_reserve": 1.0}}, "train.budget_reserve"),
    ({"train": {"budget_revise_every": 0.0}}, "train.budget_revise_every"),
    ({"train": {"budget_warmup": 0.0}}, "train.budget_warmup"),
    ({"train": {"budget_valid_share": 1.0}}, "train.budget_valid_share"),
    ({"train": {"budget_schedule": True}}, "train.budget_schedule"),
    ({"train": {"budget_schedule": True, "max_minutes": 5, "lr_schedule": "plateau"}},
     "train.budget_schedule"),
    ({"train": {"freeze": ["encoder", "attention"]}}, "train.freeze"),
    ({"train": {"freeze": ["encoder", "decoder", "embeddings"]}}, "train.freeze"),
    ({"train": {"forgetting_splits": ["val", " "]}}, "train.forgetting_splits"),
    ({"train": {"forgetting_splits": ["de-de:val"]}}, "train.forgetting_splits"),
    ({"train": {"cuda_graphs": True, "rdrop": 1.0}}, "train.cuda_graphs"),
    # decode
    ({"decode": {"max_len_a": float("-inf")}}, "decode.max_len_a"),
    ({"decode": {"beam": 0}}, "decode.beam"),
    ({"decode": {"batch_size": 0}}, "decode.batch_size"),
    ({"decode": {"batch_size": 10**9}}, "decode.batch_size"),
    ({"decode": {"sampling_top_k": 10**9}}, "decode.sampling_top_k"),
    ({"decode": {"length_penalty": -1}}, "decode.length_penalty"),
    ({"decode": {"length_penalty": 1000}}, "decode.length_penalty must be <= 5"),
    ({"decode": {"max_len_a": -1}}, "decode.max_len_a"),
    ({"decode": {"max_len_b": -1}}, "decode.max_len_b"),
    ({"decode": {"n_best": 6}}, "decode.n_best"),
    ({"decode": {"sampling_top_k": -1}}, "decode.sampling_top_k"),
    ({"decode": {"sampling_seed": -1}}, "decode.sampling_seed"),
    ({"decode": {"sampling_temperature": 0}}, "decode.sampling_temperature"),
    ({"decode": {"sampling_top_p": 0}}, "decode.sampling_top_p"),
    ({"decode": {"sampling_epsilon": 1.0}}, "decode.sampling_epsilon"),
    ({"decode": {"alignment_layer": -2}}, "decode.alignment_layer"),
    ({"decode": {"alignment_head": -2}}, "decode.alignment_head"),
    ({"decode": {"beam": 100000}}, "decode.beam"),
    ({"decode": {"n_best": 100000, "sampling": True}}, "decode.n_best"),
    ({"decode": {"max_len_a": 1e20}}, "decode.max_len_a"),
    ({"decode": {"max_len_b": 2**63}}, "decode.max_len_b"),
    ({"decode": {"max_len_a": 0, "max_len_b": 0}}, "decode.max_len_a"),
    ({"decode": {"sampling_seed": 10**23}}, "decode.sampling_seed"),
    ({"decode": {"mbr": -1}}, "decode.mbr"),
    ({"decode": {"mbr_scale": -0.5}}, "decode.mbr_scale"),
    ({"decode": {"mbr": 2000}}, "decode.mbr"),
    ({"decode": {"mbr_utility": "meteor"}}, "decode.mbr_utility"),
    ({"decode": {"mbr": 2, "beam": 5, "n_best": 3}}, "decode.mbr"),
    ({"decode": {"rerank": -1}}, "decode.rerank"),
    ({"decode": {"rerank": 2000}}, "decode.rerank"),
    ({"decode": {"reverse_weight": -0.5}}, "decode.reverse_weight"),
    ({"decode": {"r2l_weight": -1}}, "decode.r2l_weight"),
    ({"decode": {"rerank": 2, "beam": 5, "n_best": 3}}, "decode.rerank"),
    ({"decode": {"rerank": 10, "mbr": 10}}, "decode.mbr"),
    # across sections
    ({"data": {"joint_vocab": False}}, "model.tie_all"),
    ({"model": RNN, "decode": {"alignment_head": 0}}, "decode.alignment_layer"),
    ({"decode": {"alignment_layer": 6}}, "decode.alignment_layer"),
    ({"decode": {"alignment_head": 8}}, "decode.alignment_head"),
    ({"model": RNN, "train": {"cuda_graphs": True}}, "train.cuda_graphs"),
    ({"data": {"directions": ["de-en"]}, "train": {"forgetting_splits": ["val"]}},
     "train.forgetting_splits"),
    ({"data": {"directions": ["de-en"]}, "train": {"forgetting_splits": ["en-fr:val"]}},
     "train.forgetting_splits"),
]
TIE_ALL = "model.tie_all needs data.joint_vocab: true (one vocabulary for all three embeddings)"


@pytest.mark.parametrize("raw,key", EVERY_CHECK, ids=[f"{i}-{key}" for i, (_, key) in enumerate(EVERY_CHECK)])
def test_every_check_names_its_key_and_the_source(raw, key):
    with pytest.raises(ConfigError) as e:
        Config.from_dict(raw, "recipe.yaml")
    assert re.match(rf"recipe\.yaml: {re.escape(key)}\b", str(e.value)), str(e.value)


def _check_name(message: str) -> str:
    """A check's message without the values: ``model.d_model (N) must be divisible by ...``."""
    return re.sub(r"\(\d+\)", "(N)", re.sub(r", got .*", "", message))


def test_every_check_has_exactly_one_case(monkeypatch):
    """Each message of a check is built whether or not the check fails, so validating the
    defaults (a Transformer: the RNN-only branch runs too) lists every check of a section."""
    made = []
    real = config.Checks.require

    def require(self, cond, msg):
        made.append(_check_name(f"{self.source}: {msg}"))
        real(self, cond, msg)

    monkeypatch.setattr(config.Checks, "require", require)
    validate(Config(), "recipe.yaml")
    monkeypatch.undo()
    finite = {m for m in made if "must be a finite number" in m}
    checks = set(made) - finite | {_check_name(f"recipe.yaml: {TIE_ALL}")}
    cases = []
    for raw, _ in EVERY_CHECK:
        with pytest.raises(ConfigError) as e:
            Config.from_dict(raw, "recipe.yaml")
        cases.append(_check_name(str(e.value)))
    assert sorted(c for c in cases if c not in finite) == sorted(checks)
    # The finiteness check is one per section (over all its float fields): one case each.
    assert sorted(c.split(": ")[1].split(".")[0] for c in cases if c in finite) == [
        "data", "decode", "model", "train"]


def test_equal_languages_are_refused_only_where_files_are_named_by_language():
    """A corpus read from ``<split>.<lang>`` files would pair a file with itself; the copy
    task and a tsv file (whose languages only choose the tokenizer's rules: paraphrase,
    error correction) may have one language on both sides."""
    same = {"src_lang": "en", "tgt_lang": "en"}
    for corpus in ("multi30k", "iwslt14", "wmt14", "parallel"):
        with pytest.raises(ConfigError, match=r"data\.src_lang and data\.tgt_lang must differ"):
            Config.from_dict({"data": {"corpus": corpus, **same}})
    for corpus in ("copy", "tsv"):
        assert Config.from_dict({"data": {"corpus": corpus, **same}}).data.src_lang == "en"
    both = Config.from_dict({"data": {"directions": ["de-en", "en-de"], **same}})
    assert both.data.directions == ("de-en", "en-de")  # src_lang/tgt_lang unused there


def test_validate_runs_every_section_and_the_checks_between_them():
    cfg = Config()
    validate(cfg, "x.yaml")
    for name, change in [("data", {"max_len": 0}), ("model", {"layers": 0}), ("train", {"accum": 0}),
                         ("decode", {"beam": 0})]:
        section = dataclasses.replace(getattr(cfg, name), **change)
        with pytest.raises(ConfigError, match=rf"^x\.yaml: {name}\."):
            section.validate("x.yaml")
        with pytest.raises(ConfigError, match=rf"^x\.yaml: {name}\."):
            validate(dataclasses.replace(cfg, **{name: section}), "x.yaml")
    split = dataclasses.replace(cfg, data=dataclasses.replace(cfg.data, joint_vocab=False))
    split.data.validate("x.yaml")  # fine on its own: the conflict is between sections
    for check in (split.validate, lambda source: validate(split, source)):
        with pytest.raises(ConfigError, match=r"^x\.yaml: model\.tie_all"):
            check("x.yaml")


def test_the_set_overrides_reach_the_checks(tmp_path):
    with pytest.raises(ConfigError) as e:
        load(write(tmp_path, "train:\n  warmup: 10\n"), ["model.arch=rnn", "model.rnn_hidden=7"])
    assert str(e.value).startswith(f"{tmp_path / 'c.yaml'}: model.rnn_hidden")
    with pytest.raises(ConfigError, match="train.lr must be a finite number"):
        load(write(tmp_path, ""), ["train.lr=.inf"])


# Every allowed-value constant is exactly what the module that uses the value accepts.
TINY = dict(layers=1, d_model=16, d_ff=32, heads=2, emb_dim=8, rnn_hidden=16, max_positions=32,
            dropout=0.0)


def test_build_model_accepts_every_arch_norm_attention_and_init():
    from nmtkit.models import build_model

    for arch in ARCHS:
        assert build_model(ModelConfig(arch=arch, **TINY), 20, 20) is not None
    for norm in NORMS:
        assert build_model(ModelConfig(norm=norm, **TINY), 20, 20) is not None
    for kind in RNN_ATTENTIONS:
        assert build_model(ModelConfig(arch="rnn", attention=kind, **TINY), 20, 20).attention.kind == kind
    for init in RNN_INITS:
        assert build_model(ModelConfig(arch="rnn", init=init, **TINY), 20, 20) is not None
    with pytest.raises(ValueError):
        build_model(ModelConfig(arch="nope", **TINY), 20, 20)


@pytest.mark.slow
def test_the_tokenizers_accept_every_kind_and_spm_model_type():
    from nmtkit.data.tokenizers import SentencePieceTokenizer, tokenizer_from_state, train_tokenizers

    src = ["ein mann läuft", "eine frau singt", "zwei hunde spielen"] * 5
    tgt = ["a man runs", "a woman sings", "two dogs play"] * 5
    for kind in TOKENIZERS:
        if kind == "word":
            pytest.importorskip("spacy")
        s, _ = train_tokenizers(DataConfig(tokenizer=kind, vocab_size=40), src, tgt)
        assert tokenizer_from_state(s.state()).encode("a man runs") == s.encode("a man runs")
    for model_type in SPM_MODEL_TYPES:
        SentencePieceTokenizer.train(src + tgt, vocab_size=40, model_type=model_type)
    with pytest.raises(ValueError, match="sentencepiece, word, whitespace"):
        train_tokenizers(DataConfig(tokenizer="nope"), src, tgt)


def test_the_corpora_module_reads_every_corpus(tmp_path, monkeypatch):
    from nmtkit.config import PREPARED_CORPORA
    from nmtkit.data.corpora import CorpusError, load_parallel, split_files
    from nmtkit.data.recipes import RECIPES

    (tmp_path / "p.de").write_text("a\nb\n")
    (tmp_path / "p.en").write_text("c\nd\n")
    (tmp_path / "t.tsv").write_text("a\tc\nb\td\n")
    assert set(RECIPES) <= set(CORPORA)
    assert sorted(RECIPES) == sorted(PREPARED_CORPORA)  # what `nmtkit prepare` offers
    for corpus in CORPORA:
        cfg = DataConfig(corpus=corpus, train=str(tmp_path / "p"), copy_train_size=3)
        if corpus in RECIPES:
            continue  # prepared from archives by nmtkit.data.recipes (its own tests)
        if corpus == "multi30k":
            if not (SHARED / "multi30k" / "val.de.gz").is_file():
                continue
            monkeypatch.setenv("NMTKIT_DATA", str(SHARED))
            assert split_files(cfg, "val") is not None
            continue
        split = {"parallel": str(tmp_path / "p"), "tsv": str(tmp_path / "t.tsv"), "copy": "train"}[corpus]
        assert len(load_parallel(cfg, split).src) in (2, 3)
    with pytest.raises(CorpusError, match=", ".join(CORPORA)):
        load_parallel(DataConfig(corpus="nope"), "train")


def test_the_trainer_accepts_every_schedule_metric_and_device():
    import torch

    from nmtkit.train.run_dir import Progress
    from nmtkit.train.schedule import Schedule, noam_rate
    from nmtkit.train.setup import pick_device
    from nmtkit.train.validate import improved

    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    rates = {}
    for schedule in LR_SCHEDULES:
        cfg = TrainConfig(lr_schedule=schedule, lr=0.5, warmup=4, plateau_patience=0)
        s = Schedule(opt, cfg, d_model=16)
        s.validation(1.0)
        s.validation(2.0)  # a stalled loss: only ``plateau`` lowers the rate
        rates[schedule] = s.rate(2)
    assert rates == {"noam": noam_rate(2, 16, 0.5, 4), "constant": 0.5, "plateau": 0.25,
                     "inverse_sqrt": 0.25, "cosine": 0.25}  # (both: half-way up the warmup)
    for metric, metrics, better in [("bleu", {"valid_bleu": 2.0, "valid_loss": 9.0}, True),
                                    ("loss", {"valid_bleu": 2.0, "valid_loss": 9.0}, False)]:
        progress = Progress(best=1.0)
        assert improved(TrainConfig(early_stop_metric=metric), progress, metrics) is better
    assert set(EARLY_STOP_METRICS) == {"bleu", "loss"}
    for device in DEVICES:
        assert pick_device(device).type in ("cpu", "cuda")


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
    with pytest.raises(ConfigError, match="is a directory: a recipe must be a regular file"):
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


@pytest.mark.parametrize("written,read", [(True, "bf16"), (False, "off"), ("off", "off"),
                                          ("bf16", "bf16"), ("fp16", "fp16")])
def test_amp_takes_a_word_and_still_reads_the_old_booleans(tmp_path, written, read):
    assert Config.from_dict({"train": {"amp": written}}).train.amp == read
    # YAML 1.1 reads an unquoted ``off`` as false: it means "off" too.
    text = f"train:\n  amp: {str(written).lower() if isinstance(written, bool) else written}\n"
    assert load(write(tmp_path, text)).train.amp == read
    assert load(write(tmp_path, "train:\n  amp: off\n")).train.amp == "off"


def test_list_keys_take_a_yaml_list(tmp_path):
    cfg = load(write(tmp_path, "train:\n  freeze: [encoder, embeddings]\n"),
               ["train.forgetting_splits=[val, test_2016_flickr]"])
    assert cfg.train.freeze == ("encoder", "embeddings")
    assert cfg.train.forgetting_splits == ("val", "test_2016_flickr")
    assert Config.from_dict(cfg.to_dict()) == cfg
    with pytest.raises(ConfigError, match="train.freeze: expected a list of str, got 'encoder'"):
        load(write(tmp_path, "train:\n  freeze: encoder\n"))


def test_tensorboard_without_the_package_is_refused_clearly(tmp_path, monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "tensorboard" else real(name, *a))
    p = write(tmp_path, "train:\n  tensorboard: true\n")
    with pytest.raises(ConfigError, match=rf"{re.escape(str(p))}: train\.tensorboard needs the "
                       r"tensorboard package: pip install 'nmtkit\[tensorboard\]'"):
        load(p)
    assert not load(p, ["train.tensorboard=false"]).train.tensorboard
    # A stored config (a checkpoint's) still loads where the package is missing.
    assert Config.from_dict({"train": {"tensorboard": True}}, "ckpt.pt").train.tensorboard
