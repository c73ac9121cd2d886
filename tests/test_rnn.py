"""The recurrent encoder-decoder with attention (seed 003): scores, masking, temperature,
teacher forcing, incremental decoding, search, training, checkpoints and the CLI."""

import json

import pytest
import torch
from torch import nn

from nmtkit.checkpoint import load_bundle
from nmtkit.config import ConfigError, DecodeConfig, ModelConfig, load
from nmtkit.data.vocab import PAD
from nmtkit.decode.search import beam_search, greedy_search
from nmtkit.decode.translator import Translator
from nmtkit.models import build_model
from nmtkit.models.attention import (
    attention_context,
    concat_scores,
    dot_scores,
    general_scores,
    masked_softmax,
)
from nmtkit.train.loop import Trainer
from nmtkit.train.start import Start

from .helpers import ROOT, V_TGT, nmtkit, padded_batch
from .helpers import make_rnn as make_model

KINDS = ["concat", "general", "dot"]


def run_steps(model, src, src_mask, tokens, need_attention=False):
    state = model.start(model.encode(src, src_mask), src_mask, need_attention=need_attention)
    out, attns = [], []
    for t in range(tokens.size(1)):
        lp, state, a = model.step(state, tokens[:, t])
        out.append(lp)
        attns.append(a)
    return torch.stack(out, dim=1), attns, state


# --- the pure score functions ---------------------------------------------------------------


def test_scores_match_their_formulas():
    torch.manual_seed(0)
    h, s = torch.randn(2, 5, 6), torch.randn(2, 4)
    w_cat, v = nn.Linear(6 + 4, 3), torch.randn(3)
    # concat: v^T tanh(W [h; s]) with W split into its h and s columns
    expect = torch.stack([torch.stack([v @ torch.tanh(w_cat(torch.cat([h[b, j], s[b]])))
                                       for j in range(5)]) for b in range(2)])
    keys = h @ w_cat.weight[:, :6].T + w_cat.bias
    got = concat_scores(keys, s @ w_cat.weight[:, 6:].T, v)
    assert torch.allclose(got, expect, atol=1e-6)
    w = torch.randn(6, 4)
    assert torch.allclose(general_scores(h, s, w), torch.einsum("bjd,de,be->bj", h, w, s),
                          atol=1e-5)
    q = torch.randn(2, 6)
    assert torch.allclose(dot_scores(h, q), torch.einsum("bjd,bd->bj", h, q), atol=1e-6)
    probs = masked_softmax(torch.randn(2, 5))
    assert torch.allclose(attention_context(probs, h), torch.einsum("bj,bjd->bd", probs, h))


def test_masked_softmax_temperature_limits():
    scores = torch.tensor([[0.3, 2.0, -1.0, 5.0], [1.0, 0.5, 0.9, 0.0]])
    mask = torch.tensor([[True, True, True, False], [True, True, True, True]])
    sharp = masked_softmax(scores, mask, temperature=1e-3)
    assert torch.allclose(sharp, torch.tensor([[0.0, 1, 0, 0], [1, 0, 0, 0]]), atol=1e-6)
    flat = masked_softmax(scores, mask, temperature=1e4)
    assert torch.allclose(flat, torch.tensor([[1 / 3] * 3 + [0.0], [0.25] * 4]), atol=1e-3)
    assert flat[0, 3] == 0
    plain = masked_softmax(scores, mask, temperature=1.0)
    assert torch.allclose(plain[1], scores[1].softmax(-1))
    assert torch.allclose(masked_softmax(scores, mask, 2.0)[1], (scores[1] / 2).softmax(-1))
    with pytest.raises(ValueError, match="temperature"):
        masked_softmax(scores, mask, 0.0)


# --- the model ------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_attention_sums_to_one_and_is_zero_on_padding(kind):
    model = make_model(attention=kind)
    src, src_mask, tgt = padded_batch()
    with torch.no_grad():
        _, attns, _ = run_steps(model, src, src_mask, tgt, need_attention=True)
    for a in attns:
        assert a.shape == (3, 6)
        assert torch.allclose(a.sum(-1), torch.ones(3), atol=1e-5)
        assert torch.all(a[2, 2:] == 0) and torch.all(a[1, 4:] == 0)
        assert torch.all(a[0] > 0)


@pytest.mark.parametrize("kind", KINDS)
def test_model_temperature_sharpens_and_flattens(kind):
    src, src_mask, tgt = padded_batch()
    with torch.no_grad():
        sharp = run_steps(make_model(attention=kind, attention_temperature=1e-4), src, src_mask,
                          tgt, need_attention=True)[1]
        flat = run_steps(make_model(attention=kind, attention_temperature=1e4), src, src_mask,
                         tgt, need_attention=True)[1]
    for a in sharp:
        assert torch.allclose(a.max(-1).values, torch.ones(3), atol=1e-3)
    lengths = src_mask.sum(-1).float()  # (3, 1)
    for a in flat:
        assert torch.allclose(a, src_mask[:, 0] / lengths, atol=1e-3)


@pytest.mark.parametrize("kind,bidirectional,layers", [
    ("concat", True, (2, 2)), ("general", True, (3, 2)), ("dot", False, (1, 2))])
def test_incremental_step_equals_forward(kind, bidirectional, layers):
    model = make_model(attention=kind, bidirectional=bidirectional, enc_layers=layers[0],
                       dec_layers=layers[1])
    src, src_mask, tgt = padded_batch()
    with torch.no_grad():
        full = model(src, src_mask, tgt)
        inc, attns, _ = run_steps(model, src, src_mask, tgt)
    assert all(a is None for a in attns)
    assert full.shape == (3, 5, V_TGT)
    assert torch.allclose(inc, full, atol=1e-5)
    assert torch.allclose(full.exp().sum(-1), torch.ones(3, 5), atol=1e-5)


def test_padding_does_not_change_the_encoding():
    """Packed sequences: a sentence encodes the same alone as padded in a batch."""
    model = make_model()
    src, src_mask, tgt = padded_batch()
    with torch.no_grad():
        batch = model(src, src_mask, tgt)
        alone = model(src[2:, :2], src_mask[2:, :, :2], tgt[2:])
    assert torch.allclose(batch[2:], alone, atol=1e-5)


def test_teacher_forcing_ratio_one_equals_the_gold_forward():
    model = make_model(teacher_forcing=1.0)
    src, src_mask, tgt = padded_batch()
    with torch.no_grad():
        gold = model.logits(src, src_mask, tgt)
        model.train()  # dropout is 0: training mode differs only by teacher forcing
        rng = torch.get_rng_state()
        trained = model.logits(src, src_mask, tgt)
        assert torch.equal(torch.get_rng_state(), rng)  # ratio 1 draws no random numbers
    assert torch.allclose(trained, gold, atol=1e-6)


def test_teacher_forcing_below_one_feeds_own_predictions_in_training_only():
    model = make_model(teacher_forcing=0.0)
    src, src_mask, tgt = padded_batch()
    with torch.no_grad():
        gold = model.logits(src, src_mask, tgt)  # eval: always gold inputs
        model.train()
        free = model.logits(src, src_mask, tgt)
        # ratio 0 == feed the argmax of the previous position, step by step
        state = model.start(model.encode(src, src_mask), src_mask)
        prev, rows = tgt[:, 0], []
        for _ in range(tgt.size(1)):
            lp, state, _ = model.step(state, prev)
            rows.append(lp)
            prev = lp.argmax(-1)
    assert torch.allclose(free[:, 0], gold[:, 0], atol=1e-6)  # the first input is always BOS
    assert not torch.allclose(free, gold, atol=1e-3)
    assert torch.allclose(free.log_softmax(-1), torch.stack(rows, 1), atol=1e-5)


def test_teacher_forcing_sampling_uses_torch_rng():
    model = make_model(teacher_forcing=0.5).train()
    src, src_mask, tgt = padded_batch()
    with torch.no_grad():
        torch.manual_seed(3)
        a = model.logits(src, src_mask, tgt)
        torch.manual_seed(3)
        b = model.logits(src, src_mask, tgt)
    assert torch.equal(a, b)


def test_set_train_step_anneals_the_ratio():
    model = make_model(teacher_forcing=1.0, teacher_forcing_min=0.2,
                       teacher_forcing_anneal_steps=100)
    for step, ratio in ((0, 1.0), (50, 0.6), (100, 0.2), (1000, 0.2)):
        model.set_train_step(step)
        assert model.teacher_forcing_ratio == pytest.approx(ratio)
    constant = make_model(teacher_forcing=0.5)
    constant.set_train_step(10_000)
    assert constant.teacher_forcing_ratio == 0.5
    transformer = build_model(ModelConfig(layers=1, d_model=8, d_ff=8, heads=2), 5, 5)
    transformer.set_train_step(3)  # the same interface, nothing to do


def test_reorder_selects_rows():
    model = make_model()
    src, src_mask, tgt = padded_batch()
    index = torch.tensor([2, 0, 0, 1])
    with torch.no_grad():
        _, _, state = run_steps(model, src, src_mask, tgt[:, :2])
        state = model.reorder(state, index)
        lp, _, _ = model.step(state, tgt[index, 2])
        ref = model(src[index], src_mask[index], tgt[index, :3])[:, 2]
    assert torch.allclose(lp, ref, atol=1e-5)


@pytest.mark.parametrize("kind", KINDS)
def test_beam_one_equals_greedy(kind):
    model = make_model(seed=1, attention=kind)
    src, src_mask, _ = padded_batch()
    cfg = DecodeConfig(beam=1, length_penalty=0.0, max_len_a=1.0, max_len_b=4)
    greedy = greedy_search(model, src, src_mask, cfg, need_attention=True)
    beam = beam_search(model, src, src_mask, cfg, need_attention=True)
    for g, (b,) in zip(greedy, beam, strict=True):
        assert g.tokens == b.tokens
        assert g.log_prob == pytest.approx(b.log_prob, abs=1e-5)
        assert torch.allclose(g.attention, b.attention, atol=1e-6)


def test_attention_maps_one_layer_one_head():
    model = make_model()
    src, src_mask, tgt = padded_batch()
    with torch.no_grad():
        maps = model.attention_maps(src, tgt)
        _, attns, _ = run_steps(model, src, src_mask, tgt, need_attention=True)
    assert set(maps) == {"decoder_src"} and len(maps["decoder_src"]) == 1
    w = maps["decoder_src"][0]
    assert w.shape == (3, 1, 5, 6)
    assert torch.allclose(w[:, 0], torch.stack(attns, dim=1), atol=1e-6)


def test_tying_and_initialisation():
    tied = make_model(vocab=(V_TGT, V_TGT), tie_output=True, tie_all=True)
    w = tied.tgt_embed.weight
    assert tied.generator.weight is w and tied.encoder.embed.weight is w
    assert tied.pre_output.out_features == 8  # [y; w; s] -> emb_dim before the shared matrix
    assert torch.all(w[PAD] == 0)
    with pytest.raises(ValueError, match="joint"):
        make_model(tie_all=True)
    uniform = make_model(init="uniform", init_range=0.08)
    for name, p in uniform.named_parameters():
        assert p.abs().max() <= 0.08, name
    assert uniform.encoder.rnn.weight_hh_l0.abs().max() > 0.07
    lstm = make_model().encoder.rnn  # glorot: forget-gate bias 1
    h = lstm.hidden_size
    assert torch.all(lstm.bias_ih_l0[h:2 * h] == 1) and torch.all(lstm.bias_ih_l0[:h] == 0)


def test_rnn_config_validation(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text("model:\n  arch: rnn\n  attention: dot\n")
    assert load(p, ["train.lr=1e-3"]).train.lr == 1e-3  # YAML 1.1 reads 1e-3 as a string
    for override, msg in [("model.attention=bahdanau", "model.attention"),
                          ("model.attention_temperature=0", "temperature"),
                          ("model.rnn_hidden=13", "even"),
                          ("model.teacher_forcing=1.5", "teacher_forcing"),
                          ("model.init=normal", "model.init"),
                          ("model.arch=lstm", "transformer|rnn")]:
        with pytest.raises(ConfigError, match=msg):
            load(p, [override])
    with pytest.raises(ConfigError, match="arch: rnn"):
        load(p, ["model.arch=transformer", "model.teacher_forcing=0.5"])
    cfg = load(ROOT / "configs" / "multi30k_rnn_attention.yaml")
    assert cfg.model.arch == "rnn" and cfg.train.lr_schedule == "plateau"


# --- training, checkpoints, command line ----------------------------------------------------


def copy_overrides(steps: int, extra=()) -> list[str]:
    """A tiny bidirectional-LSTM/GRU run of the copy task (seconds)."""
    return ["model.arch=rnn", "model.emb_dim=32", "model.rnn_hidden=64", "model.layers=1",
            "model.dropout=0.0", "train.lr_schedule=constant", "train.lr=5e-3",
            "train.adam_betas=[0.9, 0.999]", "train.adam_eps=1e-8", "train.clip_norm=5",
            "train.threads=1", "train.max_tokens=512", "data.copy_train_size=2000",
            "data.copy_valid_size=50", "train.valid_every=50", "train.keep_last=0",
            f"train.max_steps={steps}", *extra]


@pytest.mark.slow
def test_copy_task_is_learned(tmp_path):
    cfg = load(ROOT / "configs" / "copy_task.yaml", copy_overrides(100, ["train.valid_every=100"]))
    trainer = Trainer(cfg, tmp_path)
    result = trainer.run()
    assert result["valid_bleu"] >= 90.0
    lines = ["1 2 3 4 5 6 7 8 9 10", "3 3 7 1 9 2 2 8 5 4"]
    assert Translator.from_bundle(trainer.bundle()).translate_lines(lines, beam=3) == lines


@pytest.mark.slow
def test_checkpoint_round_trip_and_exact_resume(tmp_path):
    extra = ["model.teacher_forcing=0.5", "model.teacher_forcing_min=0.1",
             "model.teacher_forcing_anneal_steps=20", "model.dropout=0.2", "train.valid_every=6",
             "train.valid_bleu=false", "data.copy_train_size=300"]
    straight = Trainer(load(ROOT / "configs" / "copy_task.yaml", copy_overrides(12, extra)),
                       tmp_path / "a")
    straight.run()
    Trainer(load(ROOT / "configs" / "copy_task.yaml", copy_overrides(6, extra)),
            tmp_path / "b").run()
    resumed = Trainer(load(ROOT / "configs" / "copy_task.yaml", copy_overrides(12, extra)),
                      tmp_path / "b", Start.resume())
    resumed.run()
    for k, v in straight.model.state_dict().items():
        assert torch.equal(v, resumed.model.state_dict()[k]), k
    bundle = load_bundle(tmp_path / "a" / "last.pt")
    assert bundle.cfg.model.arch == "rnn"
    lines = ["1 2 3 4 5", "7 7 8"]
    for beam in (1, 2):
        expect = Translator.from_bundle(straight.bundle()).translate_lines(lines, beam=beam)
        assert Translator.from_bundle(bundle).translate_lines(lines, beam=beam) == expect


@pytest.mark.slow
def test_cli_train_translate_evaluate_rnn_on_multi30k(tmp_path, multi30k_mirror):
    """The plumbing on real data; trained on the small validation split to stay fast."""
    run = tmp_path / "run"
    sets = ["data.train=val", "data.valid=test_2016_flickr", "data.vocab_size=300",
            "data.max_len=40", "model.emb_dim=16", "model.rnn_hidden=16", "model.layers=1",
            "train.max_steps=4", "train.valid_every=4", "train.valid_max_sents=10",
            "train.max_tokens=1200", "train.keep_last=1", "train.threads=1"]
    out = nmtkit("train", ROOT / "configs" / "multi30k_rnn_attention.yaml", "--run-dir", run,
                 *[a for s in sets for a in ("--set", s)])
    summary = json.loads(out.stdout.strip().splitlines()[-1])
    assert summary["step"] == 4
    for name in ("last.pt", "best.pt", "metrics.csv"):
        assert (run / name).exists(), name
    src = ["Ein Mann fährt Fahrrad.", "", "Zwei Hunde spielen im Schnee."]
    tr = nmtkit("translate", "--model", run / "best.pt", "--beam", 2, input="\n".join(src) + "\n")
    lines = tr.stdout.split("\n")[:-1]
    assert len(lines) == 3 and lines[1] == ""
    infile, ref = tmp_path / "in.de", tmp_path / "ref.en"
    infile.write_text("\n".join(src) + "\n", encoding="utf-8")
    ref.write_text("A man rides a bike.\n\nTwo dogs play in the snow.\n", encoding="utf-8")
    ev = nmtkit("evaluate", "--model", run / "last.pt", "--src", infile, "--ref", ref,
                "--beam", 1)
    result = json.loads(ev.stdout)
    assert result["n"] == 3 and 0.0 <= result["bleu"] <= 100.0
