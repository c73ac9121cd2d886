"""nmtkit.viz: the data behind every figure, the PNGs, the `plot` command and the HTML page."""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

pytest.importorskip("matplotlib")


from nmtkit import viz  # noqa: E402
from nmtkit.checkpoint import load_bundle  # noqa: E402
from nmtkit.cli import main  # noqa: E402
from nmtkit.config import ModelConfig, load  # noqa: E402
from nmtkit.data.vocab import BOS, EOS  # noqa: E402
from nmtkit.models import build_model  # noqa: E402
from nmtkit.train.loop import Trainer  # noqa: E402

from .helpers import ROOT, assert_png, severe_browser_errors, tiny_copy_overrides  # noqa: E402

# --- the data behind the concept figures -------------------------------------------------------


def test_mask_is_lower_triangular():
    m = viz.mask_data(12)
    assert m.dtype == bool and m.shape == (12, 12)
    assert np.array_equal(m, np.tril(np.ones((12, 12), dtype=bool)))


def test_positional_encoding_matches_the_formula():
    pe = viz.positional_data(max_len=50, d_model=16)
    pos = np.arange(50)[:, None]
    i = np.arange(8)[None, :]
    angle = pos / 10000.0 ** (2 * i / 16)
    np.testing.assert_allclose(pe[:, 0::2], np.sin(angle), atol=1e-6)
    np.testing.assert_allclose(pe[:, 1::2], np.cos(angle), atol=1e-6)


def test_lr_schedule_peaks_at_warmup():
    settings = ((512, 400), (512, 800), (256, 400))
    steps, curves = viz.lr_schedule_data(settings, steps=2000, factor=2.0)
    assert list(curves) == ["d_model=512, warmup=400", "d_model=512, warmup=800",
                            "d_model=256, warmup=400"]
    for (d_model, warmup), rates in zip(settings, curves.values(), strict=True):
        assert steps[int(np.argmax(rates))] == warmup
        assert rates.max() == pytest.approx(2.0 * d_model ** -0.5 * warmup ** -0.5)


def test_smoothed_distribution_puts_one_minus_eps_on_gold():
    targets, eps, v = (2, 1, 0, 3, 3), 0.4, 5
    q = viz.smoothing_distribution_data(v, eps, targets)
    assert q.shape == (5, 5)
    for row, t in zip(q, targets, strict=True):
        if t == 0:  # a padding target contributes nothing
            assert np.all(row == 0)
            continue
        assert row[t] == pytest.approx(1 - eps)
        assert row[0] == 0.0
        others = [row[j] for j in range(1, v) if j != t]
        np.testing.assert_allclose(others, eps / (v - 2))
        assert row.sum() == pytest.approx(1.0)


def test_label_smoothing_penalises_overconfidence():
    d = viz.smoothing_penalty_data(eps=0.1, vocab_size=5, points=400)
    c, loss = d["confidence"], d["smoothed"]
    assert np.all(loss > -1e-9)  # a KL divergence
    assert c[int(np.argmin(loss))] == pytest.approx(0.9, abs=0.01)
    assert loss[-1] > loss[int(np.argmin(loss))] + 0.1  # too confident costs again
    assert np.all(np.diff(d["nll"]) < 0)  # without smoothing: always better to be surer


# --- attention ---------------------------------------------------------------------------------


def tiny_transformer(layers: int = 2, heads: int = 2) -> torch.nn.Module:
    torch.manual_seed(0)
    cfg = ModelConfig(layers=layers, d_model=16, d_ff=32, heads=heads, dropout=0.0)
    return build_model(cfg, 24, 24)


def test_attention_rows_sum_to_one():
    src, tgt_in = [5, 6, 7, 8, EOS], [BOS, 9, 10, 11]
    maps = viz.compute_attention(tiny_transformer(), src, tgt_in)
    assert list(maps) == ["encoder", "decoder_self", "decoder_src"]
    assert maps["encoder"].shape == (2, 2, 5, 5)
    assert maps["decoder_self"].shape == (2, 2, 4, 4)
    assert maps["decoder_src"].shape == (2, 2, 4, 5)
    for arr in maps.values():
        np.testing.assert_allclose(arr.sum(-1), 1.0, atol=1e-5)
        assert arr.min() >= 0.0
    upper = np.triu(np.ones((4, 4), dtype=bool), k=1)
    assert np.all(maps["decoder_self"][..., upper] == 0.0)  # no peeking at later positions


class SingleAttentionModel(torch.nn.Module):
    """Stands in for the RNN: one additive attention, so only decoder_src, 1 layer, 1 head."""

    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(24, 24))

    def attention_maps(self, src, tgt_in):
        scores = self.w[tgt_in][:, :, src[0]]  # (1, T, S)
        return {"decoder_src": [scores.softmax(-1).unsqueeze(1)]}  # (1, 1, T, S)


def maps_of(model, src_tokens, tgt_tokens) -> viz.AttentionMaps:
    src_ids = list(range(5, 5 + len(src_tokens))) + [EOS]
    tgt_in = [BOS] + list(range(10, 10 + len(tgt_tokens)))
    return viz.AttentionMaps(
        source=" ".join(src_tokens), translation=" ".join(tgt_tokens),
        src_tokens=list(src_tokens) + ["</s>"], tgt_in_tokens=["<s>"] + list(tgt_tokens),
        tgt_out_tokens=list(tgt_tokens) + ["</s>"],
        maps=viz.compute_attention(model, src_ids, tgt_in))


def test_attention_of_a_single_attention_model(tmp_path):
    torch.manual_seed(0)
    att = maps_of(SingleAttentionModel(), ["▁ein", "▁Hund"], ["▁a", "▁dog"])
    assert list(att.maps) == ["decoder_src"]
    assert att.maps["decoder_src"].shape == (1, 1, 3, 3)
    np.testing.assert_allclose(att.maps["decoder_src"].sum(-1), 1.0, atol=1e-6)
    written = viz.write_attention(att, tmp_path / "rnn", html=True)
    assert [p.name for p in written] == ["rnn_decoder_src.png", "rnn.html"]
    assert_png(written[0])
    with pytest.raises(ValueError, match="no 'encoder' maps"):
        viz.attention_figure(att, "encoder")


@pytest.fixture(scope="module")
def copy_run(tmp_path_factory) -> Path:
    """A copy-task run of a few steps: checkpoints, metrics.csv and curves.png."""
    run = tmp_path_factory.mktemp("copy_run")
    cfg = load(ROOT / "configs" / "copy_task.yaml", tiny_copy_overrides(steps=20) + ["train.log_every=2"])
    Trainer(cfg, run, on_validation=viz.curves.redraw_curves).run()
    return run


@pytest.mark.slow
def test_training_draws_the_curves(copy_run):
    assert_png(copy_run / "curves.png")
    m = viz.read_metrics(copy_run)
    assert list(m["step"]) == [10.0, 20.0]
    assert np.all(np.isfinite(m["valid_loss"]))


def test_curves_have_the_per_batch_loss_panel(copy_run):
    """losses.csv holds the training loss of every log_every window (here every 2 updates):
    the first of the four panels of curves.png."""
    losses = viz.curves.read_losses(copy_run)
    assert losses is not None
    assert list(losses["step"]) == [float(s) for s in range(2, 21, 2)]
    assert np.all(np.isfinite(losses["train_loss"])) and np.all(losses["lr"] > 0)
    fig = viz.curves_figure(viz.read_metrics(copy_run), losses=losses)
    panels = fig.get_axes()
    assert len(panels) == 4 and panels[0].get_title() == "Training loss per logged step"
    x, y = panels[0].get_lines()[0].get_data()
    np.testing.assert_allclose(y, losses["train_loss"])
    # Its mean over a validation interval is about the interval's train_loss of metrics.csv.
    m = viz.read_metrics(copy_run)
    assert float(np.mean(y[:5])) == pytest.approx(m["train_loss"][0], rel=0.05)
    older = viz.curves_figure(viz.read_metrics(copy_run))  # a run without losses.csv
    assert "no per-step losses recorded" in [t.get_text() for t in older.get_axes()[0].texts]


def test_a_failed_plot_does_not_stop_training(tmp_path, caplog, monkeypatch):
    viz.curves.redraw_curves(tmp_path)  # no metrics.csv yet: a warning, not an exception
    assert "curves.png not written" in caplog.text
    caplog.clear()
    trainer = SimpleNamespace(place=SimpleNamespace(main=True), directory=SimpleNamespace(path=tmp_path),
                              on_validation=lambda d: 1 / 0)
    Trainer.after_validation(trainer)  # any failing callback: a warning
    assert "after-validation callback failed" in caplog.text
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # matplotlib not installed: no callback
    for name in [m for m in sys.modules if m == "nmtkit.viz" or m.startswith("nmtkit.viz.")]:
        monkeypatch.delitem(sys.modules, name)
    from nmtkit.cli.train import curves_callback

    assert curves_callback() is None


@pytest.mark.slow
def test_training_does_not_import_the_figures():
    import subprocess

    code = ("import sys, nmtkit.train.loop; "
            "sys.exit(any(m.startswith('nmtkit.viz') or m == 'matplotlib' for m in sys.modules))")
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0


def test_curves_tolerate_missing_bleu(tmp_path):
    (tmp_path / "metrics.csv").write_text(
        "step,epoch,train_loss,train_ppl,valid_loss,valid_ppl,valid_bleu,lr,tgt_tokens,elapsed_s\n"
        "10,0,3.2,20.1,3.0,18.0,,0.001,100,1.0\n20,0,2.5,10.2,2.4,9.5,,0.002,200,2.0\n")
    m = viz.read_metrics(tmp_path / "metrics.csv")
    assert np.all(np.isnan(m["valid_bleu"]))
    assert_png(viz.write_curves(tmp_path))
    (tmp_path / "metrics.csv").write_text("step,valid_loss\n10,abc\n")
    with pytest.raises(ValueError, match=r"metrics.csv:2: column 'valid_loss'"):
        viz.read_metrics(tmp_path)


@pytest.mark.parametrize("reverse_source", [False, True])
def test_attention_of_a_checkpoint(copy_run, reverse_source):
    bundle = load_bundle(copy_run / "last.pt")
    bundle.cfg.data.reverse_source = reverse_source  # the model then reads the source backwards
    att = viz.attention_for_text(bundle, "1 2 3 4 5", beam=1)
    assert att.src_tokens == ["1", "2", "3", "4", "5", "</s>"]
    assert att.tgt_in_tokens[0] == "<s>" and att.tgt_out_tokens[-1] == "</s>"
    t, s = len(att.tgt_out_tokens), len(att.src_tokens)
    assert att.maps["encoder"].shape == (1, 2, s, s)
    assert att.maps["decoder_self"].shape == (1, 2, t, t)
    assert att.maps["decoder_src"].shape == (1, 2, t, s)
    for arr in att.maps.values():
        np.testing.assert_allclose(arr.sum(-1), 1.0, atol=1e-5)
    # Teacher forcing the translation reproduces the attention the search saw (last layer,
    # mean over heads), in reading order whichever way the model read the source.
    np.testing.assert_allclose(att.maps["decoder_src"][-1].mean(0), att.search_attention, atol=1e-5)
    data = json.loads(json.dumps(att.to_dict()))
    assert data["kinds"]["decoder_src"]["rows"] == att.tgt_out_tokens


@pytest.mark.slow
def test_attention_of_an_rnn_checkpoint(tmp_path):
    """The RNN has one attention (decoder over source: 1 layer, 1 head) and reads the source
    reversed in its recipe; the maps come back in reading order and match the search."""
    from nmtkit.config import ConfigError

    try:
        cfg = load(ROOT / "configs" / "copy_task.yaml", tiny_copy_overrides(steps=5) + [
            "model.arch=rnn", "model.emb_dim=16", "model.rnn_hidden=32", "data.reverse_source=true",
            "train.lr_schedule=constant", "train.lr=0.003", "train.valid_every=5"])
    except ConfigError as e:
        pytest.skip(f"no RNN in this build: {e}")
    Trainer(cfg, tmp_path).run()
    att = viz.attention_for_text(load_bundle(tmp_path / "last.pt"), "1 2 3 4 5", beam=1)
    assert list(att.maps) == ["decoder_src"]
    t = len(att.tgt_out_tokens)
    assert att.maps["decoder_src"].shape == (1, 1, t, 6)
    np.testing.assert_allclose(att.maps["decoder_src"].sum(-1), 1.0, atol=1e-5)
    np.testing.assert_allclose(att.maps["decoder_src"][0, 0], att.search_attention, atol=1e-5)
    assert [p.name for p in viz.write_attention(att, tmp_path / "a")] == ["a_decoder_src.png"]


# --- PNG files and the command line ------------------------------------------------------------


def test_concept_figures_are_pngs(tmp_path):
    figures = {"mask": viz.mask_figure(8), "positional": viz.positional_figure(40, 16),
               "lr": viz.lr_schedule_figure(steps=500, settings=((64, 100), (64, 200))),
               "smoothing": viz.label_smoothing_figure()}
    for name, fig in figures.items():
        assert_png(viz.save_figure(fig, tmp_path / f"{name}.png"))


def test_plot_single_figures(tmp_path, capsys):
    assert main(["plot", "mask", "-o", str(tmp_path / "m.png")]) == 0
    assert_png(tmp_path / "m.png")
    assert json.loads(capsys.readouterr().out)["written"] == [str(tmp_path / "m.png")]
    for figure in ("positional", "lr-schedule", "label-smoothing"):
        assert main(["plot", figure, "--out", str(tmp_path / "d")]) == 0
    names = sorted(p.name for p in (tmp_path / "d").iterdir())
    assert names == ["label_smoothing.png", "lr_schedule.png", "positional.png"]


@pytest.mark.slow
def test_plot_all_with_run_and_model(copy_run, tmp_path, capsys):
    out = tmp_path / "figs"
    rc = main(["plot", "all", "--out", str(out), "--run", str(copy_run),
               "--model", str(copy_run / "last.pt"), "--text", "3 1 4 1 5", "--html"])
    assert rc == 0
    written = [Path(p) for p in json.loads(capsys.readouterr().out)["written"]]
    assert sorted(p.name for p in written) == sorted([
        "mask.png", "positional.png", "lr_schedule.png", "label_smoothing.png", "curves.png",
        "architecture.png", "architecture_rnn.png", "temperature.png", "teacher_forcing.png",
        "attention_encoder.png", "attention_decoder_self.png", "attention_decoder_src.png",
        "attention.html"])
    for p in written:
        if p.suffix == ".png":
            assert_png(p)
    assert main(["plot", "attention", "--model", str(copy_run / "last.pt"), "--text", "2 7",
                 "-o", str(tmp_path / "one" / "att.png")]) == 0
    assert sorted(p.name for p in (tmp_path / "one").iterdir()) == [
        "att_decoder_self.png", "att_decoder_src.png", "att_encoder.png"]


def test_plotsevere_browser_errors(tmp_path, capsys):
    assert main(["plot", "curves", "--out", str(tmp_path)]) == 2
    assert "needs --run" in capsys.readouterr().err
    assert main(["plot", "attention", "--model", str(tmp_path / "x.pt")]) == 2
    assert "--text" in capsys.readouterr().err
    assert main(["plot", "curves", "--run", str(tmp_path)]) == 2
    assert "no metrics.csv" in capsys.readouterr().err
    assert main(["plot", "attention", "--model", str(tmp_path / "x.pt"), "--text", "a"]) == 2
    assert "checkpoint not found" in capsys.readouterr().err
    with pytest.raises(SystemExit):  # argparse: -o and --out together
        main(["plot", "mask", "--out", str(tmp_path), "-o", str(tmp_path / "m.png")])


# --- the architecture diagrams and the homework's figures ----------------------------------------

TRANSFORMER_MODULES = ["Embeddings", "PositionalEncoding", "MultiHeadAttention", "SublayerConnection",
                       "PositionwiseFeedForward", "EncoderLayer", "DecoderLayer", "generator"]
RNN_MODULES = ["RNNEncoder", "RNNAttention", "GRU", "generator"]


def figure_text(fig) -> str:
    from matplotlib.text import Text

    return "\n".join(t.get_text() for t in fig.findobj(Text))


def test_architecture_figure_names_every_module_with_the_config_numbers(tmp_path):
    from nmtkit.models import transformer
    from nmtkit.viz.architecture import architecture_figure, transformer_blocks

    cfg = ModelConfig(layers=3, d_model=256, heads=4, d_ff=1024, norm="pre")
    text = figure_text(architecture_figure(cfg))
    for name in TRANSFORMER_MODULES:
        assert name in text, name
    for numbers in ("EncoderLayer\nx N = 3", "DecoderLayer\nx N = 3", "d_model = 256", "h = 4, d_k = 64",
                    "256 -> 1024 -> 256", "x + Dropout(Sublayer(LayerNorm(x)))", "decoder_norm"):
        assert numbers in text, numbers
    post = figure_text(architecture_figure(ModelConfig(layers=6, enc_layers=2)))
    assert "EncoderLayer\nx N = 2" in post and "DecoderLayer\nx N = 6" in post
    assert "LayerNorm(x + Dropout(Sublayer(x)))" in post and "decoder_norm" not in post
    # The boxes name classes of nmtkit.models.transformer, or attributes of the built model.
    model = tiny_transformer()
    for block in {b.name for col in transformer_blocks(cfg).values() for b in col}:
        assert hasattr(transformer, block) or hasattr(model, block) or block in (
            "LayerNorm", "log_softmax"), block
    path = tmp_path / "architecture.png"
    assert_png(viz.save_figure(architecture_figure(cfg), path))


def test_rnn_architecture_figure(tmp_path):
    from nmtkit.viz.architecture import architecture_figure, rnn_blocks

    cfg = ModelConfig(arch="rnn", layers=2, emb_dim=64, rnn_hidden=128, attention="general",
                      attention_temperature=0.5)
    text = figure_text(architecture_figure(cfg))
    for name in RNN_MODULES:
        assert name in text, name
    for numbers in ("biLSTM x 2: 64 fwd + 64 bwd = 128", "general", "T = 0.5", "2 x 128", "emb 64"):
        assert numbers in text, numbers
    model = build_model(dataclasses.replace(cfg, tie_all=False), 20, 20)
    for block in rnn_blocks(cfg)["encoder"]:  # RNNEncoder.<attribute> of the real encoder
        assert hasattr(model.encoder, block.name.split(".")[1]), block.name
    assert hasattr(model, "decoder_rnn") and isinstance(model.decoder_rnn, torch.nn.GRU)
    assert_png(viz.save_figure(architecture_figure(arch="rnn"), tmp_path / "rnn.png"))
    with pytest.raises(ValueError, match="no architecture figure for 'cnn'"):
        architecture_figure(arch="cnn")


@pytest.mark.slow
def test_plot_architecture_from_a_recipe(tmp_path, capsys):
    copy = str(ROOT / "configs" / "copy_task.yaml")
    assert main(["plot", "architecture", "--config", copy, "--set", "model.layers=4",
                 "-o", str(tmp_path / "a.png")]) == 0
    assert_png(tmp_path / "a.png")
    assert main(["plot", "architecture", "--arch", "rnn", "--out", str(tmp_path / "d")]) == 0
    assert_png(tmp_path / "d" / "architecture_rnn.png")
    rnn = str(ROOT / "configs" / "homework_rnn_ru_en.yaml")
    assert main(["plot", "teacher-forcing", "--config", rnn, "--set", "model.teacher_forcing=1.0",
                 "--set", "model.teacher_forcing_anneal_steps=100", "--out", str(tmp_path / "d")]) == 0
    assert main(["plot", "temperature", "--out", str(tmp_path / "d")]) == 0
    for name in ("teacher_forcing.png", "temperature.png"):
        assert_png(tmp_path / "d" / name)
    capsys.readouterr()
    assert main(["plot", "mask", "--set", "model.layers=2", "--out", str(tmp_path)]) == 2
    assert "--set needs --config" in capsys.readouterr().err


def test_temperature_rescales_the_same_scores():
    from nmtkit.viz import homework

    probs = homework.temperature_data()
    assert list(probs) == [0.5, 1.0, 2.0]
    scores = np.array(homework.EXAMPLE_SCORES)
    real = np.array([t != "<pad>" for t in homework.EXAMPLE_SOURCE])
    for t, p in probs.items():
        e = np.exp(scores[real] / t)
        np.testing.assert_allclose(p[real], e / e.sum(), atol=1e-12)
        assert np.all(p[~real] == 0.0)  # masked: exactly zero
    peaks = [p.max() for p in probs.values()]
    assert peaks[0] > peaks[1] > peaks[2]  # T < 1 sharpens, T > 1 flattens
    assert len({int(np.argmax(p)) for p in probs.values()}) == 1  # the same winner
    fig = homework.temperature_figure()
    assert "masked_softmax" in fig.get_axes()[0].get_title()


def test_teacher_forcing_schedule_is_the_models():
    from nmtkit.viz import homework

    cfg = ModelConfig(arch="rnn", teacher_forcing=0.9, teacher_forcing_min=0.3,
                      teacher_forcing_anneal_steps=1000)
    steps, ratio = homework.teacher_forcing_data(cfg, steps=2000, points=21)
    assert list(steps) == list(range(0, 2001, 100))
    np.testing.assert_allclose(ratio[:11], np.linspace(0.9, 0.3, 11))  # linear over 1000 updates
    np.testing.assert_allclose(ratio[10:], 0.3)  # then the floor
    const, r = homework.teacher_forcing_data(ModelConfig(arch="rnn", teacher_forcing=0.5))
    assert const[-1] == 10000 and np.all(r == 0.5)
    fig = homework.teacher_forcing_figure()
    labels = fig.get_axes()[0].get_legend_handles_labels()[1]
    assert labels == ["the homework's: constant 0.5", "annealed: 1 -> 0.25 over 20000 updates"]


# --- the interactive page in a real browser ----------------------------------------------------




@pytest.mark.slow
def test_attention_page_in_chromium(browser, tmp_path):
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select, WebDriverWait

    att = maps_of(tiny_transformer(), ["▁Ein", "▁Hund", "<läuft>"], ["▁A", "▁dog", "▁runs"])
    page = tmp_path / "attention.html"
    page.write_text(viz.attention_html(att), encoding="utf-8")
    text = page.read_text(encoding="utf-8")
    assert "http://" not in text and "https://" not in text  # nothing to fetch
    browser.get(page.as_uri())
    WebDriverWait(browser, 10).until(lambda d: d.find_elements(By.CSS_SELECTOR, "#map td.c"))
    assert severe_browser_errors(browser) == []

    def state():
        return browser.execute_script(
            "var m = document.getElementById('map');"
            "return [m.dataset.kind, m.dataset.layer, m.dataset.head,"
            " Array.from(m.querySelectorAll('td.c')).map(function (td) {"
            "   return td.style.backgroundColor; })];")

    kind, layer, head, colors = state()
    assert (kind, layer, head) == ("encoder", "0", "0") and len(colors) == 4 * 4
    assert browser.find_element(By.ID, "source").text == att.source
    seen = [colors]
    for select, value in (("layer", "1"), ("head", "1"), ("head", "mean")):
        Select(browser.find_element(By.ID, select)).select_by_value(value)
        now = state()
        assert now[1 if select == "layer" else 2] == value
        assert now[3] not in seen, f"the map did not change with {select}={value}"
        seen.append(now[3])
    Select(browser.find_element(By.ID, "kind")).select_by_value("decoder_src")
    kind, layer, head, colors = state()
    assert kind == "decoder_src" and len(colors) == 4 * 4 and colors not in seen
    assert (layer, head) == ("1", "mean")  # the choices carry over where they exist
    Select(browser.find_element(By.ID, "head")).select_by_value("0")
    Select(browser.find_element(By.ID, "kind")).select_by_value("decoder_self")
    assert state()[0] == "decoder_self"
    assert len(browser.find_elements(By.CSS_SELECTOR, "#map td.masked")) == 4 * 3 // 2

    cell = browser.find_element(By.CSS_SELECTOR, '#map td.c[data-r="1"][data-c="1"]')
    ActionChains(browser).move_to_element(cell).perform()
    tip = browser.find_element(By.ID, "tip")
    WebDriverWait(browser, 5).until(lambda d: tip.is_displayed())
    w = att.maps["decoder_self"][1, 0, 1, 1]
    assert tip.text == f"row 2 \u201c▁dog\u201d \u2192 column 2 \u201c▁A\u201d: weight {w:.3f}"
    assert severe_browser_errors(browser) == []


@pytest.mark.slow
def test_single_attention_page_in_chromium(browser, tmp_path):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    torch.manual_seed(0)
    att = maps_of(SingleAttentionModel(), ["▁ein", "▁Hund"], ["▁a", "▁dog"])
    page = tmp_path / "rnn.html"
    page.write_text(viz.attention_html(att), encoding="utf-8")
    browser.get(page.as_uri())
    WebDriverWait(browser, 10).until(lambda d: d.find_elements(By.CSS_SELECTOR, "#map td.c"))
    count = browser.execute_script(
        "return ['kind', 'layer', 'head'].map(function (id) {"
        "  return document.getElementById(id).options.length; });")
    assert count == [1, 1, 1]
    assert len(browser.find_elements(By.CSS_SELECTOR, "#map td.c")) == 3 * 3
    assert severe_browser_errors(browser) == []
