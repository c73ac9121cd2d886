"""nmtkit.lite and the LiteTranslator: a checkpoint read and translated in numpy, without
PyTorch, agrees with PyTorch's reading, model, search and translator; what it does not do
goes to PyTorch; ``nmtkit translate`` uses it for a few lines and imports no PyTorch then."""

import subprocess
import sys

import numpy as np
import pytest
import torch

from nmtkit.checkpoint import (
    CheckpointError,
    load_bundle,
    load_checkpoint,
    release_bytes,
    save_checkpoint,
    weights_digest,
)
from nmtkit.cli import main as cli_main
from nmtkit.config import DecodeConfig
from nmtkit.data.tokenizers import WhitespaceTokenizer
from nmtkit.decode.lite_translator import LiteTranslator
from nmtkit.decode.options import TranslateOptions
from nmtkit.decode.search import search
from nmtkit.decode.translator import Translator
from nmtkit.lite import MAX_LINES
from nmtkit.lite import checkpoint as lite_checkpoint
from nmtkit.lite.checkpoint import LiteUnsupported, load_lite_bundle
from nmtkit.lite.search import beam_search, greedy_search
from nmtkit.lite.transformer import NumpyTransformer, UnsupportedModel
from nmtkit.models import build_model

from .helpers import (
    COPY_VARIANTS,
    COPY_VOCAB,
    ROOT,
    copy_config,
    copy_sentences,
    imported_modules,
    save_tiny_checkpoint,
    sentencepiece_copy_checkpoint,
    train_copy,
)

pytestmark = pytest.mark.numerics


def copy_checkpoint(path, variant="pre-bias-tied", steps=60):
    cfg = copy_config(*COPY_VARIANTS[variant])
    torch.manual_seed(0)
    model = build_model(cfg.model, len(COPY_VOCAB), len(COPY_VOCAB))
    train_copy(model, steps=steps)
    tok = WhitespaceTokenizer()
    return save_tiny_checkpoint(path, cfg, tok, tok, COPY_VOCAB, COPY_VOCAB, model.eval())


@pytest.fixture(scope="module")
def copy_ckpt(tmp_path_factory):
    return copy_checkpoint(tmp_path_factory.mktemp("lite") / "copy.pt")


@pytest.fixture(scope="module")
def sp_ckpt(tmp_path_factory):
    return sentencepiece_copy_checkpoint(tmp_path_factory.mktemp("lite_sp") / "sp.pt")


# --- reading release files (safetensors) -------------------------------------------------------


def test_the_reader_reads_what_save_checkpoint_writes(copy_ckpt):
    """A release file: its entries as they were, every weight as PyTorch's reader reads it,
    tied weights (one tensor in PyTorch: stored once) one array again."""
    assert copy_ckpt.read_bytes()[8:9] == b"{"  # safetensors, whatever the name says
    torch_ck = load_checkpoint(copy_ckpt)
    assert torch_ck["model"]["generator.weight"] is torch_ck["model"]["tgt_embed.lut.weight"]
    bundle = load_lite_bundle(copy_ckpt)
    cfg, entries, state = lite_checkpoint._read(copy_ckpt)
    assert entries == {k: v for k, v in torch_ck.items() if k != "model"}
    assert set(state) == set(torch_ck["model"])
    for name, t in torch_ck["model"].items():
        assert state[name].dtype == np.float32 and np.array_equal(state[name], t.numpy()), name
    assert state["generator.weight"] is state["tgt_embed.lut.weight"]
    assert bundle.cfg == cfg and bundle.src_vocab.itos == COPY_VOCAB.itos


def test_the_reader_leaves_to_pytorch_what_it_does_not_run(tmp_path, copy_ckpt):
    """A torch.save archive (last.pt, an older release file) and float16 weights are
    PyTorch's to read (and it reads them): not refused, not read here."""
    ck = load_checkpoint(copy_ckpt)
    old = tmp_path / "old.pt"
    torch.save(ck, old)
    with pytest.raises(LiteUnsupported, match="torch.save archive"):
        load_lite_bundle(old)
    assert load_checkpoint(old)["weights_sha256"] == ck["weights_sha256"]
    half = tmp_path / "half.pt"
    save_checkpoint(half, {k: v for k, v in ck.items() if k not in ("format", "version", "weights_sha256")}
                    | {"model": {k: v.half() for k, v in ck["model"].items()}})
    with pytest.raises(LiteUnsupported, match="not float32"):
        load_lite_bundle(half)
    assert load_checkpoint(half)["model"]["generator.bias"].dtype == torch.float16


@pytest.mark.parametrize("content, said", [
    (b"", "empty file"),
    (b"not a checkpoint\n", "not an nmtkit checkpoint"),
    ((40).to_bytes(8, "little") + b"{" + b" " * 10, "truncated or corrupted checkpoint"),
])
def test_the_reader_refuses_damaged_files_as_pytorchs_does(tmp_path, content, said):
    bad = tmp_path / "bad.pt"
    bad.write_bytes(content)
    with pytest.raises(CheckpointError, match=said) as numpy_said:
        load_lite_bundle(bad)
    with pytest.raises(CheckpointError) as torch_said:
        load_checkpoint(bad)
    assert str(numpy_said.value) == str(torch_said.value)


def test_the_weights_digest_is_the_checkpoints():
    model = build_model(copy_config(*COPY_VARIANTS["post-bias-untied"]).model, 24, 24)
    state = model.state_dict()
    assert lite_checkpoint.weights_digest({k: v.numpy() for k, v in state.items()}) == weights_digest(state)


# --- the model ---------------------------------------------------------------------------------


@pytest.mark.parametrize("variant", [v for v in COPY_VARIANTS if "rope" not in v])
def test_the_numpy_model_computes_what_the_torch_model_does(variant):
    cfg = copy_config(*COPY_VARIANTS[variant])
    torch.manual_seed(1)
    model = build_model(cfg.model, len(COPY_VOCAB), len(COPY_VOCAB)).eval()
    ours = NumpyTransformer(cfg.model, {k: v.numpy() for k, v in model.state_dict().items()},
                            len(COPY_VOCAB), len(COPY_VOCAB))
    src = torch.tensor([[5, 9, 4, 17, 8, 3]])
    with torch.no_grad():
        memory = model.encode(src, src != 0)
        np.testing.assert_allclose(ours.encode(src[0].numpy()), memory.numpy(), atol=2e-5)
        state = model.start(memory.expand(3, -1, -1), (src != 0).unsqueeze(1).expand(3, -1, -1),
                            need_attention=True)
        lite = ours.start(ours.encode(src[0].numpy()))
        prev = torch.tensor([2, 2, 2])
        for rows in ([0, 1, 2], [2, 2, 0], [1, 0, 0]):
            want, state, attn = model.step(state, prev)
            got, got_attn = ours.step(lite, prev.numpy(), need_attention=True)
            np.testing.assert_allclose(got, want.numpy(), atol=5e-5)
            np.testing.assert_allclose(got_attn, attn.numpy(), atol=2e-5)
            order = torch.tensor(rows)
            state = model.reorder(state, order, same_source=True)
            lite = ours.reorder(lite, np.array(rows))
            prev = want.argmax(-1)[order]


def test_what_the_numpy_model_does_not_run():
    rope = copy_config(*COPY_VARIANTS["post-untied-rope"]).model
    state = {k: v.numpy() for k, v in build_model(rope, 24, 24).state_dict().items()}
    with pytest.raises(UnsupportedModel, match="positional 'rope'"):
        NumpyTransformer(rope, state, 24, 24)
    plain = copy_config(*COPY_VARIANTS["pre-bias-tied"]).model
    state = {k: v.numpy() for k, v in build_model(plain, 24, 24).state_dict().items()}
    with pytest.raises(UnsupportedModel, match="weights other than the config's"):
        NumpyTransformer(plain, state, 24, 25)
    state["generator.bias"] = state["generator.bias"].astype(np.float64)
    with pytest.raises(UnsupportedModel, match="not float32"):
        NumpyTransformer(plain, state, 24, 24)


# --- the search ---------------------------------------------------------------------------------


SEARCHES = [DecodeConfig(beam=1, max_len_a=1.0, max_len_b=5),
            DecodeConfig(beam=4, n_best=3, length_penalty=0.6, max_len_a=1.2, max_len_b=4),
            DecodeConfig(beam=3, n_best=2, length_penalty=0.0, max_len_a=0.5, max_len_b=1),
            DecodeConfig(beam=5, n_best=2, length_penalty=1.0, early_stop=True, max_len_a=1.0,
                         max_len_b=6)]


@pytest.mark.parametrize("cfg", SEARCHES, ids=["greedy", "beam-lp", "beam-short-caps", "early-stop"])
def test_the_numpy_search_finds_what_the_torch_search_does(copy_ckpt, cfg):
    bundle = load_bundle(copy_ckpt)
    lite = load_lite_bundle(copy_ckpt).model
    for i, line in enumerate(copy_sentences(16, seed=4)):
        ids = np.asarray(bundle.src_vocab.encode(line.split(), add_eos=True))
        src = torch.as_tensor(ids)[None]
        max_length = 3 if i % 5 == 4 else None
        want = search(bundle.model, src, (src != 0).unsqueeze(1), cfg, max_length=max_length,
                      token_scores=True)[0]
        run = greedy_search if cfg.beam == 1 else beam_search
        got = run(lite, ids, cfg, max_length=max_length, token_scores=True)
        got = [got] if cfg.beam == 1 else got
        assert [h.tokens for h in got] == [h.tokens for h in want], line
        for g, w in zip(got, want, strict=True):
            assert g.score == pytest.approx(w.score, abs=1e-4)
            assert g.log_prob == pytest.approx(w.log_prob, abs=1e-4)
            np.testing.assert_allclose(g.token_log_probs, w.token_log_probs, atol=1e-4)


# --- the translator -----------------------------------------------------------------------------


def lite_translator(path, **decode):
    bundle = load_lite_bundle(path)
    cfg = bundle.cfg.decode if not decode else DecodeConfig(**{**bundle.cfg.decode.__dict__, **decode})
    calls = []

    def full():
        calls.append(1)
        return Translator.from_bundle(load_bundle(path), cfg)

    return LiteTranslator(bundle, cfg, full), Translator.from_bundle(load_bundle(path), cfg), calls


LINES = ["Ein Mann fährt mit dem Fahrrad die Straße entlang. Zwei Kinder spielen im Sand.",
         "", "Ein Hund läuft über die Wiese", "Der Mann liest ein Buch! Die Frau sitzt."]


@pytest.mark.slow
def test_the_lite_translator_translates_as_the_torch_translator(sp_ckpt):
    lite, torch_tr, calls = lite_translator(sp_ckpt)
    for options in (None, TranslateOptions(beam=1), TranslateOptions(n_best=2, token_scores=True),
                    TranslateOptions(max_length=4), TranslateOptions(split_sentences=False)):
        got, want = lite.translate(LINES, options), torch_tr.translate(LINES, options)
        assert [[t.text for t in ts] for ts in got] == [[t.text for t in ts] for ts in want]
        for g, w in zip([t for ts in got for t in ts], [t for ts in want for t in ts], strict=True):
            assert (g.tokens, g.src_tokens) == (w.tokens, w.src_tokens)
            assert g.score == pytest.approx(w.score, abs=1e-4)
            assert (g.token_log_probs is None) == (w.token_log_probs is None)
    assert "Zwei Kinder spielen im Sand" in lite.translate_lines(LINES[:1])[0]  # both sentences
    assert not calls  # all of it in numpy


@pytest.mark.slow
def test_spans_go_back_through_numpys_own_attention(sp_ckpt):
    lite, torch_tr, calls = lite_translator(sp_ckpt)
    spans = ["Der Preis ist 5 € für 3 cm.", "Ein Hund 🐕 läuft.", "🐕", "5 €"]  # not in its vocabulary
    options = TranslateOptions(token_scores=True)
    got, want = lite.translate(spans, options), torch_tr.translate(spans, options)
    assert [t[0].text for t in got] == [t[0].text for t in want]
    assert [t[0].tokens for t in got] == [t[0].tokens for t in want]
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g[0].token_log_probs, w[0].token_log_probs, atol=1e-4)
        assert g[0].attention is None  # (not asked for)
    assert "€" in got[0][0].text and "🐕" in got[1][0].text and got[2][0].text == "🐕"
    assert not calls  # all in numpy


@pytest.mark.slow
def test_the_numpy_search_records_the_attention_torchs_does(sp_ckpt):
    bundle, lite = load_bundle(sp_ckpt), load_lite_bundle(sp_ckpt).model
    ids = np.asarray(bundle.src_vocab.encode(bundle.src_tok.encode("Ein Mann liest ein Buch"),
                                             add_eos=True))
    src = torch.as_tensor(ids)[None]
    for cfg in (DecodeConfig(beam=1), DecodeConfig(beam=3, n_best=2)):
        want = search(bundle.model, src, (src != 0).unsqueeze(1), cfg, need_attention=True)[0]
        got = (greedy_search if cfg.beam == 1 else beam_search)(lite, ids, cfg, need_attention=True)
        for g, w in zip([got] if cfg.beam == 1 else got, want, strict=True):
            np.testing.assert_allclose(g.attention, w.attention.numpy(), atol=2e-5)


@pytest.mark.slow
def test_what_numpy_does_not_do_goes_to_torch(sp_ckpt):
    lite, torch_tr, calls = lite_translator(sp_ckpt)
    lite.translate_lines(["Ein Mann."])
    assert not calls
    for options in (TranslateOptions(alignments=True), TranslateOptions(prefixes=["Ein", "", "", ""]),
                    TranslateOptions(mbr=3)):
        got, want = lite.translate(LINES, options), torch_tr.translate(LINES, options)
        assert [[t.text for t in ts] for ts in got] == [[t.text for t in ts] for ts in want]
    many = ["Ein Mann."] * (MAX_LINES + 1)  # PyTorch's batched search
    assert lite.translate_lines(many) == torch_tr.translate_lines(many)
    assert len(calls) == 1  # built once


def test_checkpoints_numpy_does_not_load(tmp_path, copy_ckpt):
    """Altered weights are refused here as PyTorch refuses them (and load with
    ``verify=False``); a model numpy does not run is PyTorch's."""
    ck = load_checkpoint(copy_ckpt)
    ck["model"]["generator.bias"][0] += 1.0  # no longer what the checksum says
    bad = tmp_path / "bad.pt"
    bad.write_bytes(release_bytes(ck))  # (the stored checksum kept, not renewed)
    with pytest.raises(CheckpointError, match="checksum") as numpy_said:
        load_lite_bundle(bad)
    with pytest.raises(CheckpointError) as torch_said:
        load_checkpoint(bad)
    assert str(numpy_said.value) == str(torch_said.value)
    load_lite_bundle(bad, verify=False)
    rope = copy_checkpoint(tmp_path / "rope.pt", "post-untied-rope", steps=1)
    with pytest.raises(LiteUnsupported, match="rope"):
        load_lite_bundle(rope)


# --- the command line ---------------------------------------------------------------------------


def test_translate_picks_numpy_for_a_few_lines_and_says_the_same(copy_ckpt, tmp_path, capsys):
    src = tmp_path / "in.txt"
    src.write_text("\n".join(copy_sentences(6, seed=9)) + "\n")
    outs = {}
    for engine in ("numpy", "torch"):
        assert cli_main(["translate", "--model", str(copy_ckpt), "--engine", engine, "--scores",
                         "-i", str(src)]) == 0
        outs[engine] = [line.split("\t") for line in capsys.readouterr().out.splitlines()]
    assert [o[2] for o in outs["numpy"]] == [o[2] for o in outs["torch"]]
    assert [float(o[0]) for o in outs["numpy"]] == pytest.approx([float(o[0]) for o in outs["torch"]],
                                                                 abs=2e-4)


@pytest.mark.parametrize("argv, message", [
    (["--engine", "numpy", "--no-fast"], "--engine numpy runs on the CPU"),
    (["--engine", "numpy", "--model", "{ckpt}"], "--engine numpy runs one model"),
    (["--engine", "numpy", "--rerank", "3"], "reranking runs with --engine torch"),
])
def test_translate_refuses_what_numpy_cannot_do(copy_ckpt, tmp_path, capsys, argv, message):
    src = tmp_path / "in.txt"
    src.write_text("w1 w2\n")
    argv = [a.format(ckpt=copy_ckpt) for a in argv]
    assert cli_main(["translate", "--model", str(copy_ckpt), *argv, "-i", str(src)]) == 2
    assert message in capsys.readouterr().err


@pytest.mark.slow
def test_a_short_piped_translate_imports_no_torch_and_a_damaged_file_is_named(copy_ckpt, tmp_path):
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "nmtkit", "translate",
                           "--model", str(copy_ckpt)], input="w3 w4 w5\nw7 🐕 w1\n",
                          capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    assert len(done.stdout.splitlines()) == 2 and "🐕" in done.stdout.splitlines()[1]
    modules = imported_modules(done.stderr)  # (a span put back: numpy's own attention)
    assert {"nmtkit.lite.transformer", "nmtkit.decode.lite_translator"} <= modules
    heavy = {"torch", "nmtkit.checkpoint", "nmtkit.models.seq2seq", "nmtkit.models.transformer",
             "nmtkit.decode.translator"}  # (nmtkit.models itself: the sinusoid table only)
    assert not modules & heavy, sorted(modules & heavy)
    bad = tmp_path / "bad.pt"
    bad.write_bytes(copy_ckpt.read_bytes()[:5000])  # refused as PyTorch refuses it
    done = subprocess.run([sys.executable, "-m", "nmtkit", "translate", "--model", str(bad)],
                          input="w3\n", capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 2 and "bad.pt: truncated or corrupted checkpoint" in done.stderr
    assert len(done.stderr.splitlines()) == 1  # numpy's reader refuses it: PyTorch not needed


@pytest.mark.slow
def test_the_engine_counts_sentences_not_lines(sp_ckpt):
    # issue 74 item 10: one line of many sentences went to numpy, which searches them one
    # after another (3-4x PyTorch's batched search for 500 sentences)
    lite, _, _ = lite_translator(sp_ckpt)
    assert lite.refuses(TranslateOptions(), lite.decode_cfg, MAX_LINES) is None
    assert "more than 16 sentences" in lite.refuses(TranslateOptions(), lite.decode_cfg, MAX_LINES + 1)
    handed = []
    hand_over = lite.handed_over
    lite.handed_over = lambda: handed.append(1) or hand_over()
    few = " ".join(["Ein Mann fährt."] * MAX_LINES)
    assert lite.translate_lines([few]) == [few] and not handed  # numpy's: as many as it takes
    many = " ".join(["Ein Mann fährt."] * (MAX_LINES + 1))
    assert lite.translate_lines([many]) == [many] and handed == [1]  # PyTorch's
    # read whole (no splitting), the line is one sentence: numpy's again
    lite.translate([many], TranslateOptions(split_sentences=False))
    assert handed == [1]
