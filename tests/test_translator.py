"""decode/translator.py: text in, text out; options resolved in one place."""

import json

import numpy as np
import pytest

from nmtkit.checkpoint import load_bundle
from nmtkit.config import DecodeConfig
from nmtkit.data.vocab import UNK
from nmtkit.decode.options import TranslateOptions
from nmtkit.decode.text_translator import decode_options, pharaoh
from nmtkit.decode.translator import Translator
from nmtkit.train.loop import Trainer

from .helpers import make_cfg


@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    run = tmp_path_factory.mktemp("translator")
    Trainer(make_cfg(30, ["decode.n_best=2", "decode.beam=3"]), run).run()
    return load_bundle(run / "last.pt")


def test_decode_options_keep_defaults_for_none():
    cfg = DecodeConfig()
    assert decode_options(cfg) is cfg
    assert decode_options(cfg, beam=None, batch_size=None) == cfg
    got = decode_options(cfg, beam=2, early_stop=True, length_penalty=None)
    assert (got.beam, got.early_stop, got.length_penalty) == (2, True, cfg.length_penalty)
    assert cfg.beam == DecodeConfig().beam  # the original is not changed


@pytest.mark.slow
def test_from_bundle_uses_stored_options_and_n_best(bundle):
    tr = Translator.from_bundle(bundle)
    assert tr.decode_cfg == bundle.cfg.decode
    out = tr.translate(["1 2 3", "4 5"])
    assert [len(hs) for hs in out] == [2, 2]  # decode.n_best from the checkpoint
    assert all(hs[0].score >= hs[1].score for hs in out)
    greedy = Translator.from_bundle(bundle, beam=1, n_best=1).translate(["1 2 3"])
    assert len(greedy[0]) == 1
    assert Translator.from_bundle(bundle).decode_cfg == tr.decode_cfg  # the shorthand is the same door


@pytest.mark.slow
def test_order_empty_lines_and_caps(bundle):
    tr = Translator.from_bundle(bundle, beam=1)
    lines = ["1 2 3 4 5 6", "", "7", "   ", "2 3"]
    out = tr.translate_lines(lines, batch_size=2)
    assert len(out) == len(lines) and out[1] == "" and out[3] == ""
    assert out == tr.translate_lines(lines, batch_size=64)  # batching does not change results
    capped = tr.translate(lines, TranslateOptions(max_length=2))
    assert all(len(hs[0].tokens) <= 2 for hs in capped)
    with pytest.raises(ValueError, match="beam"):
        tr.translate(["1"], TranslateOptions(beam=0))
    with pytest.raises(ValueError, match="max_length"):
        tr.translate(["1"], TranslateOptions(max_length=0))


@pytest.mark.slow
def test_attention_is_returned_per_output_token(bundle):
    hyp = Translator.from_bundle(bundle, beam=1).translate(["1 2 3"],
                                                          TranslateOptions(need_attention=True))[0][0]
    assert hyp.attention is not None
    assert tuple(hyp.attention.shape) == (len(hyp.tokens) + 1, len(hyp.src_tokens) + 1)


# --- prefixes, scores, alignments, sampling, ensembles through text and the CLI (issue 15) -------

LINES = ["1 2 3 4 5 6", "", "7 8", "3 3 4", "9 1 2 3"]
PREFIX_TEXTS = ["9 9", "5", "", "4 5 6 7 8 9 1 2 3 4 5 6 7 8 9 1 2", "1"]


@pytest.mark.slow
@pytest.mark.parametrize("beam", [1, 3])
def test_prefixes_appear_verbatim_and_decoding_continues(bundle, beam):
    tr = Translator.from_bundle(bundle, beam=beam, n_best=1)
    out = tr.translate(LINES, TranslateOptions(prefixes=PREFIX_TEXTS, batch_size=2))
    for line, prefix, (h,) in zip(LINES, PREFIX_TEXTS, out, strict=True):
        if not line:  # an empty source line stays empty
            assert h.text == ""
            continue
        assert h.text.startswith(prefix)
        assert h.tokens[:len(prefix.split())] == prefix.split()
    plain = tr.translate(LINES)
    assert out[2][0].text == plain[2][0].text  # no prefix: unchanged
    with pytest.raises(ValueError, match="2 prefixes for 5 lines"):
        tr.translate(LINES, TranslateOptions(prefixes=["1", "2"]))


@pytest.mark.slow
@pytest.mark.parametrize("word", ["<pad>", "<s>", "</s>"])
def test_control_tokens_in_prefixes_and_constraints_are_unknown_words(bundle, word):
    """A user's prefix or constraint is text: a literal control token in it is a word the model
    does not know (<unk>), never a PAD/BOS/EOS id forced into the hypothesis (the serve fuzzer
    found "<pad>" as a prefix breaking the confidence view's token count); and a word the
    model does not know is refused, not written as <unk> (probe III, failure 8)."""
    tr = Translator.from_bundle(bundle, beam=2, n_best=1)
    assert tr.text_ids([word, "1"]) == [UNK, tr.tgt_vocab.stoi["1"]]
    with pytest.raises(ValueError, match=f"no '{word}'"):
        tr.translate(["1 2 3"], TranslateOptions(prefixes=[f"{word} 1"], token_scores=True))
    with pytest.raises(ValueError, match=f"no '{word}'"):
        tr.translate(["1 2 3"], TranslateOptions(constraints=[[word]]))


@pytest.mark.slow
def test_alignments_point_at_the_argmax_of_the_attention(bundle):
    tr = Translator.from_bundle(bundle, beam=2, n_best=1)
    out = tr.translate(LINES, TranslateOptions(need_attention=True, alignments=True, token_scores=True))
    for (h,) in out:
        if not h.tokens:
            continue
        assert h.alignment is not None and len(h.alignment) == len(h.tokens)
        for i, j in h.alignment:
            row = h.attention[j, :len(h.src_tokens)]  # the real source tokens, not </s>
            assert row[i] == row.max()
        alpha = tr.decode_cfg.length_penalty
        assert sum(h.token_log_probs) == pytest.approx(h.score * ((5 + len(h.tokens) + 1) / 6) ** alpha,
                                                       abs=1e-4)
    bare = tr.translate(LINES[:1], TranslateOptions(alignments=True))[0][0]
    assert bare.attention is None and bare.alignment is not None  # attention only if asked


@pytest.mark.slow
def test_every_feature_gives_the_same_output_without_fast(bundle):
    from nmtkit.checkpoint import load_bundle
    from nmtkit.decode.ensemble import ensemble_translator

    def run(fast):
        b = load_bundle(bundle.path)  # a model of its own: fast packs it in place
        out = []
        for extra in ({"beam": 3}, {"beam": 1}, {"sampling": True, "n_best": 3, "sampling_seed": 5}):
            tr = Translator.from_bundle(b, fast=fast, **extra)
            out.append(tr.translate(LINES, TranslateOptions(prefixes=PREFIX_TEXTS, token_scores=True,
                                                            alignments=True)))
        out.append(ensemble_translator([b, b], fast=fast, beam=2).translate(
            LINES, TranslateOptions(token_scores=True)))
        return out

    for a, b in zip(run(True), run(False), strict=True):
        for hs, gs in zip(a, b, strict=True):
            assert [h.text for h in hs] == [g.text for g in gs]
            assert [h.alignment for h in hs] == [g.alignment for g in gs]
            for h, g in zip(hs, gs, strict=True):
                assert h.score == pytest.approx(g.score, abs=1e-4)
                assert (h.token_log_probs or []) == pytest.approx(g.token_log_probs or [], abs=1e-4)


@pytest.mark.slow
def test_decode_fast_keeps_freed_memory_in_the_process(bundle, monkeypatch):
    """A translator with decode.fast applies nmtkit.fast.allocator's setting; without it, or
    for a training run's validation (fast.inference), nothing changes the process."""
    from nmtkit import fast

    calls = []
    monkeypatch.setattr(fast, "retain_freed_memory", lambda: calls.append("retain") or True)
    b = load_bundle(bundle.path)
    Translator.from_bundle(b, fast=False)
    with fast.inference(b.model):
        pass
    assert calls == []
    Translator.from_bundle(b, fast=True)
    assert calls == ["retain"]


@pytest.mark.slow
def test_translate_command_prefixes_scores_alignments_sampling_ensembles(bundle, tmp_path, capsys):
    from nmtkit import cli

    src = tmp_path / "in.txt"
    src.write_text("1 2 3 4\n7 8\n")
    pre = tmp_path / "prefix.txt"
    pre.write_text("9 9\n\n")
    ckpt = str(bundle.path)

    def translate(*args):
        assert cli.main(["translate", "--model", ckpt, "-i", str(src), *args]) == 0
        return capsys.readouterr().out.splitlines()

    lines = translate("--prefix-file", str(pre), "--scores", "--alignments", "--beam", "2", "--n-best", "1")
    assert len(lines) == 2
    score, lps, text, align = lines[0].split("\t")
    assert text.startswith("9 9")
    alpha = bundle.cfg.decode.length_penalty
    assert sum(map(float, lps.split())) == pytest.approx(float(score) * ((5 + len(lps.split())) / 6) ** alpha,
                                                         abs=1e-3)
    assert len(align.split()) == len(text.split())
    assert all(int(p.split("-")[1]) == j for j, p in enumerate(align.split()))
    greedy = translate("--beam", "1", "--scores")
    assert float(greedy[1].split("\t")[0]) == pytest.approx(sum(map(float, greedy[1].split("\t")[1].split())),
                                                           abs=1e-3)
    sampling = ("--sampling", "--n-samples", "3", "--seed", "1", "--top-k", "5", "--temperature", "1.5")
    sampled = translate(*sampling)
    assert sampled == translate(*sampling)
    assert [ln.split("\t")[0] for ln in sampled] == ["0"] * 3 + ["1"] * 3
    assert translate("--model", ckpt, "--beam", "2") == translate("--beam", "2")  # an ensemble of itself
    assert cli.main(["evaluate", "--model", ckpt, "--model", ckpt, "--src", str(src), "--ref", str(src),
                     "--beam", "2"]) == 0
    assert json.loads(capsys.readouterr().out)["model"] == [ckpt, ckpt]
    cons = tmp_path / "terms.txt"
    cons.write_text("8\t9 9\n\n")
    constrained = translate("--constraints-file", str(cons), "--beam", "3", "--n-best", "1")
    assert "8" in constrained[0].split() and "9 9" in constrained[0]
    assert cli.main(["translate", "--model", ckpt, "-i", str(src), "--n-samples", "2"]) == 2
    assert "--n-samples needs --sampling" in capsys.readouterr().err
    assert cli.main(["translate", "--model", ckpt, "-i", str(src), "--sampling", "--top-p", "0"]) == 2
    assert "decode.sampling_top_p must be in (0, 1]" in capsys.readouterr().err
    pre.write_text("1\n")
    assert cli.main(["translate", "--model", ckpt, "-i", str(src), "--prefix-file", str(pre)]) == 2
    assert "prefix.txt has 1 lines but the input has 2" in capsys.readouterr().err


@pytest.mark.slow
def test_stream_answers_each_line_before_the_input_ends(bundle):
    import select
    import subprocess
    import sys

    from .helpers import ROOT

    proc = subprocess.Popen([sys.executable, "-m", "nmtkit.cli", "translate", "--model", str(bundle.path),
                             "--stream", "--beam", "1", "--n-best", "1", "--scores"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, cwd=ROOT)
    try:
        expected = Translator.from_bundle(bundle, beam=1, n_best=1).translate(["1 2 3", "4 5"])
        for line, (h,) in zip(["1 2 3", "4 5"], expected, strict=True):
            proc.stdin.write(line + "\n")
            proc.stdin.flush()  # stdin stays open: the answer must come anyway
            ready, _, _ = select.select([proc.stdout], [], [], 120)
            assert ready, "no answer while the input is still open"
            score, _, text = proc.stdout.readline().rstrip("\n").split("\t")
            assert text == h.text and float(score) == pytest.approx(h.score, abs=1e-3)
        proc.stdin.close()
        assert proc.wait(timeout=60) == 0, proc.stderr.read()
        assert proc.stdout.read() == ""
    finally:
        proc.kill()


# --- alignments from a named layer/head (issue 15) -----------------------------------------------

@pytest.fixture(scope="module")
def deep_bundle(tmp_path_factory):
    """Two decoder layers of two heads: a layer and a head to choose."""
    run = tmp_path_factory.mktemp("translator_layers")
    Trainer(make_cfg(20, ["model.layers=2", "decode.beam=2"]), run).run()
    return load_bundle(run / "last.pt")


@pytest.mark.slow
@pytest.mark.parametrize("reverse", [False, True])
def test_alignments_from_a_named_layer_and_head(deep_bundle, reverse):
    from dataclasses import replace

    from nmtkit.data.vocab import BOS
    from nmtkit.decode.attention import teacher_forced_maps

    cfg = deep_bundle.cfg
    bundle = replace(deep_bundle, cfg=replace(cfg, data=replace(cfg.data, reverse_source=reverse)))
    tr = Translator.from_bundle(bundle)
    lines = ["1 2 3 4 5 6", "7 8", "9 1 2 3"]
    default = tr.translate(lines, TranslateOptions(alignments=True, need_attention=True))
    seen = set()
    for layer, head in [(0, 0), (0, 1), (1, 0), (0, -1), (-1, 1)]:
        out = tr.translate(lines, TranslateOptions(alignments=True, need_attention=True,
                                                   alignment_layer=layer, alignment_head=head))
        for line, (h,), (d,) in zip(lines, out, default, strict=True):
            assert h.text == d.text  # the choice changes the alignment, not the translation
            src_toks, src_ids = tr.encode_source(line)
            tgt = [BOS, *tr.tgt_vocab.encode(h.tokens, add_eos=False)]
            maps = teacher_forced_maps(tr.model, src_ids.tolist(), tgt, reverse)["decoder_src"]
            w = maps[layer].mean(0) if head == -1 else maps[layer, head]  # (T + 1, S + 1)
            assert np.allclose(h.attention, w.numpy())
            want = w[:len(h.tokens), :len(src_toks)].argmax(dim=1).tolist()
            assert h.alignment == [(i, j) for j, i in enumerate(want)]
            seen.add(tuple(h.alignment))
    assert len(seen) > len(lines)  # the layers and heads do not all align alike
    # -1, -1: the attention the search saw, which is the last layer's mean (padding after </s>)
    for line, (d,) in zip(lines, default, strict=True):
        src_toks, src_ids = tr.encode_source(line)
        tgt = [BOS, *tr.tgt_vocab.encode(d.tokens, add_eos=False)]
        last = teacher_forced_maps(tr.model, src_ids.tolist(), tgt, reverse)["decoder_src"][-1].mean(0)
        n = len(src_toks) + 1
        assert np.allclose(d.attention[:, :n], last.numpy(), atol=1e-5)
        assert float(np.abs(d.attention[:, n:]).sum()) == 0.0


@pytest.mark.slow
def test_a_bad_layer_or_head_is_a_clear_error(deep_bundle, tmp_path, capsys):
    from nmtkit import cli
    from nmtkit.decode.ensemble import ensemble_translator

    tr = Translator.from_bundle(deep_bundle)
    with pytest.raises(ValueError, match=r"below the decoder's layers \(2\), got 2"):
        tr.translate(["1 2"], TranslateOptions(alignments=True, alignment_layer=2))
    with pytest.raises(ValueError, match=r"below model.heads \(2\), got 5"):
        tr.translate(["1 2"], TranslateOptions(alignments=True, alignment_head=5))
    with pytest.raises(ValueError, match="decode.alignment_head must be >= -1"):
        tr.translate(["1 2"], TranslateOptions(alignments=True, alignment_head=-3))
    # no alignments asked: unused
    assert tr.translate(["1 2"], TranslateOptions(alignment_layer=7))[0][0].text
    with pytest.raises(ValueError, match="no per-layer attention maps"):
        ensemble_translator([deep_bundle, deep_bundle]).translate(["1 2"], TranslateOptions(alignments=True,
                                                                  alignment_layer=0))
    src = tmp_path / "in.txt"
    src.write_text("1 2 3 4\n7 8\n")
    ckpt = str(deep_bundle.path)
    assert cli.main(["translate", "--model", ckpt, "-i", str(src), "--alignments",
                     "--alignment-layer", "0", "--alignment-head", "1"]) == 0
    got = [line.split("\t")[1] for line in capsys.readouterr().out.splitlines()]
    want = tr.translate(["1 2 3 4", "7 8"],
                        TranslateOptions(alignments=True, alignment_layer=0, alignment_head=1))
    assert got == [pharaoh(hs[0].alignment) for hs in want]
    assert cli.main(["translate", "--model", ckpt, "-i", str(src), "--alignments",
                     "--alignment-layer", "2"]) == 2
    assert "decode.alignment_layer must be -1 (the last layer) or below" in capsys.readouterr().err
    assert cli.main(["translate", "--model", ckpt, "-i", str(src), "--alignment-head", "0"]) == 2
    assert "add --alignments" in capsys.readouterr().err
