"""Export to CTranslate2: the exported model computes what nmtkit computes.

Tiny Transformers are trained for a few dozen steps on the copy task (about a second each,
so that their outputs are neither random nor trivial), saved as checkpoints, exported, and
translated by both engines: the same token log-probabilities (``score_batch`` against
teacher forcing), the same greedy output, and the same beam output wherever both searches
agree on what is best (where they do not, CTranslate2's choice must be at least as probable
under nmtkit's own model: it keeps finished hypotheses that nmtkit's fixed beam slots can
lose). Pre- and post-norm, with and without output bias, tied and untied, reversed source.
"""

import json
import os
import re
import stat
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

ct2 = pytest.importorskip("ctranslate2")
pytestmark = pytest.mark.numerics

from nmtkit.checkpoint import load_bundle  # noqa: E402
from nmtkit.cli import main as cli_main  # noqa: E402
from nmtkit.config import Config, DataConfig, DecodeConfig, ModelConfig  # noqa: E402
from nmtkit.data.tokenizers import SentencePieceTokenizer, WhitespaceTokenizer  # noqa: E402
from nmtkit.data.vocab import BOS, Vocab  # noqa: E402
from nmtkit.decode.options import TranslateOptions  # noqa: E402
from nmtkit.decode.text_translator import TargetTextError  # noqa: E402
from nmtkit.decode.translator import Translator  # noqa: E402
from nmtkit.export import ExportError  # noqa: E402
from nmtkit.export.ctranslate2 import export_ctranslate2  # noqa: E402
from nmtkit.export.ctranslate2_engine import CTranslate2Translator, export_attention  # noqa: E402
from nmtkit.models import build_model  # noqa: E402
from nmtkit.rules import output_cap  # noqa: E402

from .helpers import COPY_VARIANTS as VARIANTS  # noqa: E402
from .helpers import COPY_VOCAB as VOCAB  # noqa: E402
from .helpers import (  # noqa: E402
    ROOT,
    copy_config,
    exported_copy_model,
    nmtkit_log_prob,
    save_tiny_checkpoint,
    train_copy,
)
from .helpers import copy_sentences as sentences  # noqa: E402


@pytest.fixture(scope="module", autouse=True)
def one_torch_thread():
    """Tiny models: one thread is fastest, and does not fight other work for the cores."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture(scope="module", params=list(VARIANTS))
def copy_export(request, tmp_path_factory):
    """(checkpoint, float32 export directory) of a briefly trained copy model."""
    return exported_copy_model(tmp_path_factory.mktemp(f"export_{request.param}"), request.param)


def tokens_allowed(line: str, cfg: DecodeConfig) -> int:
    """The output tokens before </s> that nmtkit's length rule allows a line of whitespace
    tokens (its source: those and </s>)."""
    return output_cap(len(line.split()) + 1, cfg.max_len_a, cfg.max_len_b) - 1


@pytest.mark.slow
def test_exported_files(copy_export):
    ckpt, out = copy_export
    names = {p.name for p in out.iterdir()}
    assert {"model.bin", "config.json", "shared_vocabulary.json", "nmtkit.json",
            "README.txt"} <= names
    assert not list(out.parent.glob(".ct2.*")), "temporary directories left behind"
    vocab = json.loads((out / "shared_vocabulary.json").read_text())
    assert vocab == VOCAB.itos  # CTranslate2's ids are nmtkit's
    config = json.loads((out / "config.json").read_text())
    assert config["add_source_eos"] is True and config["add_source_bos"] is False
    assert (config["bos_token"], config["eos_token"], config["unk_token"]) == ("<s>", "</s>",
                                                                              "<unk>")
    assert config["layer_norm_epsilon"] == pytest.approx(1e-6)
    assert "CTranslate2Translator" in (out / "README.txt").read_text()


@pytest.mark.slow
def test_token_log_probs_equal_teacher_forcing(copy_export):
    ckpt, out = copy_export
    bundle, tr = load_bundle(ckpt), CTranslate2Translator(out, intra_threads=1)
    src = sentences(8, seed=3)
    tgt = [" ".join(s.split()[::-1]) for s in src]  # any target: here the reversed source
    for s, t, got in zip(src, tgt, tr.score(src, tgt), strict=True):
        want = nmtkit_log_prob(bundle, s, t.split())
        assert len(got) == len(want)
        np.testing.assert_allclose(got, want.numpy(), atol=2e-4, rtol=1e-4)


@pytest.mark.slow
def test_greedy_output_equals_nmtkit(copy_export):
    ckpt, out = copy_export
    lines = sentences() + ["w3 unknown-symbol w4", ""]
    ours = Translator.from_bundle(load_bundle(ckpt)).translate(lines, TranslateOptions(beam=1))
    theirs = CTranslate2Translator(out, intra_threads=1).translate(lines,
                                                                   TranslateOptions(beam=1, batch_size=5))
    assert [h[0].tokens for h in theirs] == [h[0].tokens for h in ours]
    assert [h[0].text for h in theirs] == [h[0].text for h in ours]
    bundle = load_bundle(ckpt)
    for line, o, t in zip(lines, ours, theirs, strict=True):
        o, t = o[0], t[0]
        if len(t.tokens) < tokens_allowed(line, bundle.cfg.decode):
            assert t.score == pytest.approx(o.score, abs=1e-3)
        else:  # at the cap nmtkit forces </s> and adds its log-probability; CTranslate2 stops
            per_token = nmtkit_log_prob(bundle, line, t.tokens)
            assert o.score == pytest.approx(float(per_token.sum()), abs=1e-3)
            assert t.score == pytest.approx(float(per_token[:-1].sum()), abs=1e-3)
    assert sum(h[0].text == line for h, line in zip(ours, lines, strict=True)) >= 2  # not random


@pytest.mark.slow
def test_beam_output_equals_nmtkit(copy_export):
    """Beam 4 without length penalty: both rank by log P(y, </s>). The outputs must agree,
    except where CTranslate2 returns a hypothesis that nmtkit's own model scores at least
    as high (a finished hypothesis that nmtkit's beam pushed out of its slots)."""
    ckpt, out = copy_export
    bundle = load_bundle(ckpt)
    lines = sentences(32, seed=1)
    ours = Translator.from_bundle(bundle).translate(lines, TranslateOptions(beam=4))
    theirs = CTranslate2Translator(out, intra_threads=1).translate(lines,
                                                                   TranslateOptions(beam=4, batch_size=7))
    same = 0
    for line, o, t in zip(lines, ours, theirs, strict=True):
        o, t = o[0], t[0]
        if o.tokens == t.tokens:
            same += 1
            assert t.score == pytest.approx(o.score, abs=1e-3)
            continue
        ct2_by_nmtkit = float(nmtkit_log_prob(bundle, line, t.tokens).sum())
        assert t.score == pytest.approx(ct2_by_nmtkit, abs=1e-3)
        assert ct2_by_nmtkit >= o.score - 1e-4, (line, o.tokens, t.tokens)
    assert same >= 0.8 * len(lines)


@pytest.mark.slow
def test_beam_with_length_penalty_is_consistent(copy_export):
    """With alpha > 0 CTranslate2 divides by len ** alpha where nmtkit uses the GNMT penalty
    ((5 + len) / 6) ** alpha (len counts </s> in both), so only the scoring is checked, and
    that most outputs still agree."""
    ckpt, out = copy_export
    bundle = load_bundle(ckpt)
    lines = sentences(16, seed=2)
    ours = Translator.from_bundle(bundle, length_penalty=0.6).translate(lines, TranslateOptions(beam=4))
    theirs = CTranslate2Translator(out, intra_threads=1).translate(lines, TranslateOptions(beam=4,
                                                                   length_penalty=0.6))
    for line, t in zip(lines, theirs, strict=True):
        t = t[0]
        per_token = nmtkit_log_prob(bundle, line, t.tokens)
        if len(t.tokens) == tokens_allowed(line, bundle.cfg.decode):
            per_token = per_token[:-1]  # stopped at the cap, without </s>
        assert t.score == pytest.approx(float(per_token.sum()) / len(per_token) ** 0.6, abs=1e-3)
    agree = sum(o[0].tokens == t[0].tokens for o, t in zip(ours, theirs, strict=True))
    assert agree >= 0.5 * len(lines)


@pytest.mark.slow
def test_pad_and_bos_are_never_produced(tmp_path):
    """A model that prefers <s> everywhere: nmtkit takes the best other token, and so does the
    export (searched again with <pad>/<s> suppressed)."""
    cfg = copy_config("pre", True, True, False)
    torch.manual_seed(0)
    model = build_model(cfg.model, len(VOCAB), len(VOCAB)).eval()
    with torch.no_grad():
        model.generator.bias[BOS] = 30.0
    tok = WhitespaceTokenizer()
    ckpt = save_tiny_checkpoint(tmp_path / "bos.pt", cfg, tok, tok, VOCAB, VOCAB, model)
    out = export_ctranslate2(ckpt, tmp_path / "ct2")
    lines = sentences(6, seed=6)
    tr = CTranslate2Translator(out, intra_threads=1)
    ours = Translator.from_bundle(load_bundle(ckpt)).translate(lines, TranslateOptions(beam=1))
    theirs = tr.translate(lines, TranslateOptions(beam=1))
    assert [h[0].tokens for h in theirs] == [h[0].tokens for h in ours]
    for h in tr.translate(lines, TranslateOptions(beam=3, n_best=3)):  # (these run to the cap: no equality)
        assert not any(t in ("<s>", "<pad>") for hyp in h for t in hyp.tokens)


@pytest.mark.slow
def test_max_length_and_cap_are_respected(copy_export):
    ckpt, out = copy_export
    tr = CTranslate2Translator(out, intra_threads=1)
    lines = sentences(6, seed=4)
    ours = Translator.from_bundle(load_bundle(ckpt)).translate(lines, TranslateOptions(beam=1, max_length=2))
    theirs = tr.translate(lines, TranslateOptions(beam=1, max_length=2))
    assert [h[0].tokens for h in theirs] == [h[0].tokens for h in ours]
    assert all(len(h[0].tokens) <= 2 for h in theirs)
    tr.exact_caps = False  # one call, the largest cap
    loose = tr.translate(lines, TranslateOptions(beam=1))
    tr.exact_caps = True
    assert all(len(h[0].tokens) <= max(tokens_allowed(x, tr.decode_cfg) for x in lines)
               for h in loose)
    nbest = tr.translate(lines[:2], TranslateOptions(beam=4, n_best=3))
    assert [len(h) for h in nbest] == [3, 3]
    assert all(h[0].score >= h[1].score >= h[2].score for h in nbest)
    with pytest.raises(ValueError, match="n_best"):
        tr.translate(lines, TranslateOptions(beam=2, n_best=3))


@pytest.mark.slow
def test_one_shared_call_gives_each_sentence_its_own_cap(copy_export):
    """All sentences go to CTranslate2 in one call at the largest cap; greedy outputs past
    their own cap are cut there and rescored, beams that reached it are searched again:
    the same outputs and scores as searching each sentence alone, at its own cap."""
    ckpt, out = copy_export
    tr = CTranslate2Translator(out, intra_threads=1)
    lines = sentences(20, seed=7) + ["w1", "w2 w2", "w5 w6 w7 w8 w9 w10 w11 w12 w13 w14"]
    for beam, max_length in ((1, None), (1, 4), (4, None), (4, 3)):
        together = tr.translate(lines, TranslateOptions(beam=beam, max_length=max_length))
        for line, t in zip(lines, together, strict=True):
            a = tr.translate([line], TranslateOptions(beam=beam, max_length=max_length))[0]
            assert t[0].tokens == a[0].tokens, (beam, line)
            assert t[0].score == pytest.approx(a[0].score, abs=1e-4)


def assert_same_extras(o, t, capped: bool):
    """A translation of both engines with the same tokens: the same token log-probabilities,
    source attention (rows: the tokens and </s>; columns: the source tokens and </s>, in
    reading order), alignments, and score (but at the cap, where nmtkit pays for </s>)."""
    if not capped:
        assert t.score == pytest.approx(o.score, abs=1e-3)
        assert t.log_prob == pytest.approx(o.log_prob, abs=1e-3)
    if not o.src_tokens:  # an empty line: nothing searched, nothing to show
        assert t.token_log_probs is None and t.attention is None and not t.alignment
        return
    assert t.token_log_probs == pytest.approx(o.token_log_probs, abs=2e-4)
    assert t.alignment == o.alignment
    assert t.attention.shape == (len(t.tokens) + 1, len(t.src_tokens) + 1)
    n, s = t.attention.shape
    np.testing.assert_allclose(t.attention, o.attention[:n, :s], atol=1e-4, rtol=0)


@pytest.mark.slow
def test_prefixes_n_best_scores_attention_and_alignments_equal_nmtkit(copy_export):
    """What the server asks of an engine besides the text, from both engines: the same
    wherever the outputs are the same (every greedy output; most of each beam's n best), in
    batches of several sentences (where CTranslate2's beam search mixes up the first step's
    attention: the export's comes from forced decoding)."""
    ckpt, out = copy_export
    bundle = load_bundle(ckpt)
    ours_tr, theirs_tr = Translator.from_bundle(bundle), CTranslate2Translator(out, intra_threads=1)
    lines = sentences(14, seed=5) + [""]
    prefixes = [" ".join(line.split()[:i % 3]) for i, line in enumerate(lines)]
    for beam, n_best, pre in ((1, 1, False), (1, 1, True), (4, 3, False), (4, 3, True)):
        options = TranslateOptions(beam=beam, n_best=n_best, batch_size=6, token_scores=True,
                                   need_attention=True, alignments=True,
                                   prefixes=prefixes if pre else None)
        ours, theirs = ours_tr.translate(lines, options), theirs_tr.translate(lines, options)
        same = 0
        for line, p, os_, ts in zip(lines, prefixes, ours, theirs, strict=True):
            assert len(ts) == n_best
            if pre:
                assert all(t.tokens[:len(p.split())] == p.split() for t in ts)
            for o, t in zip(os_, ts, strict=True):
                if o.tokens == t.tokens:
                    same += 1
                    cap = tokens_allowed(line, bundle.cfg.decode)
                    assert_same_extras(o, t, capped=len(t.tokens) >= max(cap, len(p.split())))
        assert same == len(lines) if beam == 1 else same >= 0.75 * n_best * len(lines), (beam, same)


@pytest.mark.slow
def test_the_export_returns_the_attention_decode_names(tmp_path):
    """``decode.alignment_layer``/``alignment_head`` go into the export (CTranslate2's
    alignment_layer/alignment_heads): layer 0, head 0 gives nmtkit's layer 0, head 0; another
    layer or head is refused with the reason, and constraints with theirs."""
    cfg = copy_config("post", True, False, False)
    cfg = replace(cfg, decode=replace(cfg.decode, alignment_layer=0, alignment_head=0))
    torch.manual_seed(0)
    model = build_model(cfg.model, len(VOCAB), len(VOCAB))
    train_copy(model, steps=60)
    tok = WhitespaceTokenizer()
    ckpt = save_tiny_checkpoint(tmp_path / "model.pt", cfg, tok, tok, VOCAB, VOCAB, model)
    out = export_ctranslate2(ckpt, tmp_path / "ct2")
    assert json.loads((out / "nmtkit.json").read_text())["attention"] == {"layer": 0, "head": 0}
    tr = CTranslate2Translator(out, intra_threads=1)
    lines = sentences(6, seed=8)
    options = TranslateOptions(beam=4, batch_size=3, need_attention=True, alignments=True)
    ours = Translator.from_bundle(load_bundle(ckpt)).translate(lines, options)
    for o, t in zip(ours, tr.translate(lines, options), strict=True):
        if o[0].tokens == t[0].tokens:
            assert t[0].alignment == o[0].alignment
            n, s = t[0].attention.shape
            np.testing.assert_allclose(t[0].attention, o[0].attention[:n, :s], atol=1e-4, rtol=0)
    assert tr.unsupported(replace(options, alignment_layer=0, alignment_head=0)) is None
    with pytest.raises(ValueError, match=r"alignment layer 1, head -1: this export returns the source "
                                         r"attention of decoder layer 0 \(head 0\) only"):
        tr.translate(lines, replace(options, alignment_layer=1, alignment_head=-1))
    with pytest.raises(ValueError, match="CTranslate2 has no lexically constrained search"):
        tr.translate(lines, TranslateOptions(constraints=[["w1"]] * len(lines)))
    assert export_attention({}) == (-1, 0)  # an export made before: CTranslate2's default


@pytest.mark.slow
def test_an_unknown_prefix_token_is_refused_as_nmtkit_refuses_it(copy_export):
    ckpt, out = copy_export
    lines, prefixes = ["w1 w2", "w3"], ["w1", "w1 <s> zz"]
    with pytest.raises(TargetTextError) as ours:
        Translator.from_bundle(load_bundle(ckpt)).translate(lines, TranslateOptions(prefixes=prefixes))
    with pytest.raises(TargetTextError) as theirs:
        CTranslate2Translator(out, intra_threads=1).translate(lines, TranslateOptions(prefixes=prefixes))
    assert (theirs.value.field, theirs.value.index, theirs.value.problem) == (
        ours.value.field, ours.value.index, ours.value.problem) == (
        "prefixes", 1, ours.value.problem)
    assert "'<s>', 'zz'" in theirs.value.problem


# --- int8, SentencePiece, refusals, the command line --------------------------------------------


@pytest.fixture(scope="module")
def spm_checkpoint(tmp_path_factory):
    """An untrained Transformer with a joint SentencePiece vocabulary (as the Multi30k recipes)."""
    tmp = tmp_path_factory.mktemp("export_spm")
    rng = np.random.default_rng(0)
    words = ["ein", "Mann", "fährt", "Fahrrad", "zwei", "Hunde", "spielen", "im", "Schnee",
             "eine", "Frau", "liest", "Buch", "Kinder", "laufen", "am", "Strand", "."]
    corpus = [" ".join(rng.choice(words, size=int(rng.integers(3, 9)))) for _ in range(300)]
    tok = SentencePieceTokenizer.train(corpus, vocab_size=60)
    vocab = Vocab.build(tok.encode(line) for line in corpus)
    cfg = Config(name="spm", data=DataConfig(corpus="parallel", tokenizer="sentencepiece"),
                 model=ModelConfig(d_model=32, d_ff=64, heads=4, layers=1, norm="pre",
                                   max_positions=64),
                 decode=DecodeConfig(beam=2, max_len_a=1.0, max_len_b=4))
    torch.manual_seed(0)
    model = build_model(cfg.model, len(vocab), len(vocab)).eval()
    return save_tiny_checkpoint(tmp / "spm.pt", cfg, tok, tok, vocab, vocab, model)


SPM_LINES = ["Ein Mann fährt Fahrrad.", "Zwei Hunde spielen im Schnee.", "", "Kinder laufen."]


def test_sentencepiece_export_translates_like_nmtkit(spm_checkpoint, tmp_path):
    out = export_ctranslate2(spm_checkpoint, tmp_path / "ct2")
    assert (out / "sentencepiece.model").read_bytes() == load_bundle(spm_checkpoint).src_tok.model_proto
    meta = json.loads((out / "nmtkit.json").read_text())
    assert meta["tokenizers"]["src"] == {"kind": "sentencepiece", "lowercase": False,
                                         "model_file": "sentencepiece.model"}
    ours = Translator.from_bundle(load_bundle(spm_checkpoint)).translate_lines(SPM_LINES, beam=1)
    theirs = CTranslate2Translator(out, intra_threads=1).translate_lines(SPM_LINES, beam=1)
    assert theirs == ours and theirs[2] == ""


@pytest.mark.slow
def test_int8_export_loads_and_translates(copy_export, tmp_path):
    """int8 weights approximate the model: its token log-probabilities stay near nmtkit's
    (a broken export, e.g. a transposed matrix, is off by nats), and it translates within
    the caps. Outputs are not compared one by one: on these tiny models int8 rounding flips
    near-ties, and which ones differs between CPUs (AVX2 vs AVX-512 kernels)."""
    ckpt, fp32 = copy_export
    out = export_ctranslate2(ckpt, tmp_path / "int8", quantization="int8")
    assert json.loads((out / "nmtkit.json").read_text())["quantization"] == "int8"
    assert (out / "model.bin").stat().st_size < 0.6 * (fp32 / "model.bin").stat().st_size
    tr = CTranslate2Translator(out, intra_threads=1)
    bundle = load_bundle(ckpt)
    src = sentences(24, seed=3)
    diffs = [np.abs(np.asarray(got) - nmtkit_log_prob(bundle, s, s.split()).numpy())
             for s, got in zip(src, tr.score(src, src), strict=True)]
    assert float(np.concatenate(diffs).mean()) < 0.8  # measured 0.26-0.52 nats (4 variants)
    lines = sentences(12, seed=5)
    results = tr.translate(lines, TranslateOptions(beam=4))
    for line, hyps in zip(lines, results, strict=True):
        assert len(hyps[0].tokens) <= tokens_allowed(line, tr.decode_cfg)
        assert all(t in VOCAB for t in hyps[0].tokens)
    assert sum(bool(h[0].tokens) for h in results) >= 0.75 * len(lines)


def test_rnn_checkpoint_is_refused(tmp_path):
    cfg = Config(name="rnn", data=DataConfig(corpus="copy", tokenizer="whitespace"),
                 model=ModelConfig(arch="rnn", emb_dim=8, rnn_hidden=8, tie_output=False,
                                   tie_all=False))
    model = build_model(cfg.model, len(VOCAB), len(VOCAB))
    tok = WhitespaceTokenizer()
    ckpt = save_tiny_checkpoint(tmp_path / "rnn.pt", cfg, tok, tok, VOCAB, VOCAB, model)
    with pytest.raises(ExportError, match=r"rnn\.pt: model\.arch is 'rnn'; only 'transformer'"):
        export_ctranslate2(ckpt, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_export_writes_the_positions_of_each_option(tmp_path):
    """The sinusoid and a learned table go into both position tables; RoPE into the rotary
    settings of every self-attention (and no table); the exported scores are compared by
    the ``copy_export`` variants above."""
    from nmtkit.export.ctranslate2 import transformer_spec_from_bundle

    tok = WhitespaceTokenizer()
    specs = {}
    for positional in ("sinusoidal", "learned", "rope"):
        cfg = copy_config("pre", True, True, False, positional)
        torch.manual_seed(0)
        model = build_model(cfg.model, len(VOCAB), len(VOCAB))
        ckpt = save_tiny_checkpoint(tmp_path / f"{positional}.pt", cfg, tok, tok, VOCAB, VOCAB, model)
        bundle = load_bundle(ckpt)
        specs[positional] = (bundle.model, transformer_spec_from_bundle(bundle))
    model, spec = specs["learned"]
    np.testing.assert_array_equal(spec.decoder.position_encodings.encodings,
                                  model.position.table.weight.detach().numpy())
    np.testing.assert_array_equal(spec.encoder.position_encodings.encodings,
                                  model.position.table.weight.detach().numpy())
    model, spec = specs["sinusoidal"]
    np.testing.assert_array_equal(spec.encoder.position_encodings.encodings, model.position.pe.numpy())
    assert not hasattr(spec.decoder.layer[0].self_attention, "rotary_dim")
    _, spec = specs["rope"]
    assert not hasattr(spec.decoder, "position_encodings")
    for layer in [*spec.encoder.layer, *spec.decoder.layer]:
        assert layer.self_attention.rotary_dim == 0 and layer.self_attention.rotary_interleave
        assert layer.self_attention.rotary_base == pytest.approx(10000.0)
    assert not hasattr(spec.decoder.layer[0].attention, "rotary_dim")  # source attention


def test_rope_is_refused_by_a_ctranslate2_without_rotary_encoders(tmp_path, monkeypatch):
    """An older ctranslate2 (the extra allows >= 4.0) whose encoder spec has no rotary
    settings cannot express RoPE: a clear error naming the option, and nothing written."""
    from ctranslate2.specs import transformer_spec

    class OldEncoderSpec(transformer_spec.TransformerEncoderSpec):
        def __init__(self, num_layers, num_heads, pre_norm=True, activation=None):
            raise AssertionError("not to be built")

    monkeypatch.setattr(transformer_spec, "TransformerEncoderSpec", OldEncoderSpec)
    cfg = copy_config("pre", True, True, False, "rope")
    model = build_model(cfg.model, len(VOCAB), len(VOCAB))
    tok = WhitespaceTokenizer()
    ckpt = save_tiny_checkpoint(tmp_path / "rope.pt", cfg, tok, tok, VOCAB, VOCAB, model)
    with pytest.raises(ExportError, match=r"rope\.pt: model\.positional is 'rope', and this "
                                          r"ctranslate2 \(.*\) has no rotary embeddings"):
        export_ctranslate2(ckpt, tmp_path / "out")
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_cli_export_end_to_end(spm_checkpoint, tmp_path, capsys):
    out = tmp_path / "exported"
    proc = subprocess.run([sys.executable, "-m", "nmtkit.cli", "export", "--format", "ctranslate2",
                           "--model", str(spm_checkpoint), "--out", str(out)],
                          capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    assert summary["out"] == str(out) and summary["quantization"] == "float32"
    assert "sentencepiece.model" in summary["files"]
    assert CTranslate2Translator(out).translate_lines(SPM_LINES, beam=1) == \
        Translator.from_bundle(load_bundle(spm_checkpoint)).translate_lines(SPM_LINES, beam=1)

    before = (out / "model.bin").read_bytes()
    assert cli_main(["export", "--format", "ctranslate2", "--model", str(spm_checkpoint),
                     "--out", str(out), "--quantization", "int8"]) == 2
    assert "already exists; pass --force" in capsys.readouterr().err
    assert (out / "model.bin").read_bytes() == before  # untouched
    assert cli_main(["export", "--format", "ctranslate2", "--model", str(spm_checkpoint),
                     "--out", str(out), "--quantization", "int8", "--force"]) == 0
    assert json.loads((out / "nmtkit.json").read_text())["quantization"] == "int8"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["exported"]  # no temporary leftovers
    assert cli_main(["export", "--format", "ctranslate2", "--model", str(tmp_path / "no.pt"),
                     "--out", str(tmp_path / "x")]) == 2
    assert "not found" in capsys.readouterr().err


# --- --force replaces only an earlier export --------------------------------------------------


@pytest.fixture(scope="module")
def tiny_checkpoint(tmp_path_factory):
    """An untrained copy-task Transformer (whitespace tokens): exported in a fraction of a second."""
    cfg = copy_config("pre", True, True, False)
    torch.manual_seed(0)
    model = build_model(cfg.model, len(VOCAB), len(VOCAB)).eval()
    tok = WhitespaceTokenizer()
    return save_tiny_checkpoint(tmp_path_factory.mktemp("export_force") / "tiny.pt", cfg, tok,
                                tok, VOCAB, VOCAB, model)


def _tree(path: Path) -> dict[str, bytes]:
    """Every file under ``path`` (links not followed) and its bytes: to check it untouched."""
    return {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*"))
            if p.is_file() and not p.is_symlink()}


def test_force_replaces_an_earlier_export_and_nothing_else(tiny_checkpoint, tmp_path):
    """An earlier export (nmtkit's files, and CTranslate2's under other names: .txt and
    per-side vocabularies, per-side SentencePiece models) is replaced; the same directory
    with one file of the user's in it is not."""
    out = export_ctranslate2(tiny_checkpoint, tmp_path / "ct2")
    for name in ("source_vocabulary.txt", "target_vocabulary.json", "src.spm.model"):
        (out / name).write_text("[]")  # what other exports of this kind hold
    assert export_ctranslate2(tiny_checkpoint, out, quantization="int8", force=True) == out
    assert json.loads((out / "nmtkit.json").read_text())["quantization"] == "int8"
    assert not (out / "source_vocabulary.txt").exists()  # replaced whole, not overwritten
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ct2"]  # no .tmp/.old leftovers

    (out / "notes.txt").write_text("mine")
    before = _tree(out)
    with pytest.raises(ExportError, match=r"ct2: is not an earlier export \(it holds "
                                          r"notes\.txt\); refusing to replace it with --force"):
        export_ctranslate2(tiny_checkpoint, out, force=True)
    assert _tree(out) == before


@pytest.mark.slow
def test_force_refuses_a_directory_of_other_files(tiny_checkpoint, tmp_path, capsys):
    """A user's directory is refused before any work, its files untouched, the message naming
    them (a few at most); the command line says so with exit status 2."""
    mine = tmp_path / "mine"
    (mine / "data").mkdir(parents=True)
    (mine / "data" / "corpus.txt").write_text("precious\n")
    (mine / "notes.txt").write_text("notes\n")
    (mine / "model.bin").write_text("an export's name, but the rest is not\n")
    for i in range(5):
        (mine / f"z{i}.log").write_text("")
    before = _tree(mine)
    with pytest.raises(ExportError) as e:
        export_ctranslate2(tmp_path / "no-such.pt", mine, force=True)  # refused before loading it
    msg = str(e.value)
    assert msg.startswith(f"{mine}: is not an earlier export (it holds data/, notes.txt, z0.log, "
                          "z1.log and 3 more); refusing to replace it with --force"), msg
    assert "model.bin" not in msg and "remove it yourself or choose another --out" in msg
    assert _tree(mine) == before

    capsys.readouterr()
    assert cli_main(["export", "--format", "ctranslate2", "--model", str(tiny_checkpoint),
                     "--out", str(mine), "--force"]) == 2
    err = capsys.readouterr().err
    assert f"nmtkit: error: {mine}: is not an earlier export (it holds data/, notes.txt" in err
    assert _tree(mine) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine"]  # no temporary directory


def test_force_refuses_a_file_a_link_and_a_fifo(tiny_checkpoint, tmp_path):
    """Not a directory (a file, a fifo standing in for a device), or a link, even one to an
    earlier export: refused with and without --force, and left as it was."""
    earlier = export_ctranslate2(tiny_checkpoint, tmp_path / "earlier")
    exported = _tree(earlier)
    a_file = tmp_path / "a_file"
    a_file.write_text("keep me\n")
    to_dir, to_file = tmp_path / "to_dir", tmp_path / "to_file"
    to_dir.symlink_to(earlier)
    to_file.symlink_to(a_file)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    cases = [(a_file, "is a file, not an export directory"),
             (to_dir, f"is a symbolic link \\(to a directory: {earlier}\\), not an export"),
             (to_file, "is a symbolic link \\(to a file: "),
             (fifo, "is a fifo, not an export directory")]
    for path, why in cases:
        with pytest.raises(ExportError, match=f"{path}: {why}.*refusing to replace it with --force"):
            export_ctranslate2(tiny_checkpoint, path, force=True)
        with pytest.raises(ExportError, match=f"{path}: already exists and {why}"):
            export_ctranslate2(tiny_checkpoint, path)
    assert a_file.read_text() == "keep me\n" and stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert os.readlink(to_dir) == str(earlier) and os.readlink(to_file) == str(a_file)
    assert _tree(earlier) == exported
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a_file", "earlier", "fifo", "to_dir",
                                                          "to_file"]


def test_force_over_an_empty_directory(tiny_checkpoint, tmp_path):
    """An empty directory takes the export (with or without --force); one that holds only
    an empty folder or a hidden file is not empty, and not an export."""
    empty = tmp_path / "empty"
    empty.mkdir()
    out = export_ctranslate2(tiny_checkpoint, empty, force=True)
    assert (out / "model.bin").is_file() and (out / "nmtkit.json").is_file()
    for extra in ("sub", ".keep"):
        d = tmp_path / f"with{extra}"
        d.mkdir()
        (d / extra).mkdir() if extra == "sub" else (d / extra).write_text("")
        shown = "sub/" if extra == "sub" else ".keep"
        with pytest.raises(ExportError, match=f"it holds {re.escape(shown)}\\)"):
            export_ctranslate2(tiny_checkpoint, d, force=True)
        assert [p.name for p in d.iterdir()] == [extra]
