"""What several test modules build or check: tiny configurations, corpora, models and batches,
trained checkpoints, synthetic recipe archives, and the runners that drive the CLI, the
benchmarks and an interrupted training. Plain functions and constants; the pytest fixtures
built on them are in ``conftest.py``. Test modules import from here, never from each other
(``tests/test_repo_shape.py`` checks it).

The sizes and seeds are the ones the tests were written against: several compare exact
numbers, so change nothing here without running every module that imports it.
"""

from __future__ import annotations

import hashlib
import io
import random
import subprocess
import sys
import tarfile
import types
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from nmtkit.checkpoint import save_checkpoint
from nmtkit.cli import main as cli_main
from nmtkit.compat.annotated import from_reference
from nmtkit.config import Config, DataConfig, DecodeConfig, ModelConfig, load
from nmtkit.data.batching import pad_mask
from nmtkit.data.corpora import Parallel
from nmtkit.data.tokenizers import SentencePieceTokenizer, WhitespaceTokenizer
from nmtkit.data.vocab import BOS, EOS, PAD, Vocab
from nmtkit.models import build_model
from nmtkit.models.rnn import RNNSeq2Seq
from nmtkit.models.transformer import Transformer
from nmtkit.rules import NEVER
from nmtkit.train import loop
from nmtkit.train.loop import Trainer

ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = ROOT.parent / "shared" / "data"
ANNOTATED_REFERENCE = ROOT.parent / "shared" / "reference" / "annotated_reference.py"
PARITY_SRC_V, PARITY_TGT_V, PARITY_N, PARITY_D, PARITY_D_FF, PARITY_H = 13, 11, 2, 32, 64, 4
"""The parity model's sizes: vocabularies, layers, d_model, d_ff, heads."""
REF_PAD = 2  # the reference's <blank>


# --- tiny configurations and corpora -------------------------------------------------------------


def tiny_copy_overrides(steps: int = 20) -> list[str]:
    """A copy-task run small enough for unit tests (seconds)."""
    return [f"train.max_steps={steps}", "train.valid_every=10", "train.keep_last=3",
            "data.copy_train_size=400", "data.copy_valid_size=20", "model.d_model=32",
            "model.d_ff=64", "model.heads=2", "model.layers=1", "model.dropout=0.1",
            "train.max_tokens=256", "train.threads=1"]


def make_cfg(steps=20, extra=()):
    """The copy-task recipe at the size of :func:`tiny_copy_overrides`, ``extra`` overrides last."""
    return load(ROOT / "configs" / "copy_task.yaml", tiny_copy_overrides(steps) + list(extra))


XYZ_SYMBOLS = "abcdef"


def write_xyz_corpus(root, n_train=500, n_valid=20, blank_z=0):
    """Three line-aligned languages: x (random symbols), y = x (a copy), z = x reversed, so
    the two directions x-y and x-z read the same sources and differ only in what they write.
    ``blank_z``: that many training lines of z left empty (the direction x-z drops them)."""
    rng = random.Random(0)
    for split, n in (("train", n_train), ("val", n_valid)):
        xs = [" ".join(rng.choice(XYZ_SYMBOLS) for _ in range(rng.randint(3, 5))) for _ in range(n)]
        zs = [" ".join(x.split()[::-1]) for x in xs]
        if split == "train":
            zs = ["" if i < blank_z else z for i, z in enumerate(zs)]
        for lang, lines in (("x", xs), ("y", xs), ("z", zs)):
            (root / f"{split}.{lang}").write_text("".join(t + "\n" for t in lines))
    return root


def xyz_cfg(root, steps=400, extra=()):
    """A two-direction model (x-y, x-z of :func:`write_xyz_corpus`) small enough to learn both
    tasks in seconds."""
    return load(ROOT / "configs" / "copy_task.yaml", [
        f"train.max_steps={steps}", "train.valid_every=200", "train.keep_last=1",
        "model.d_model=32", "model.d_ff=64", "model.heads=2", "model.layers=2",
        "train.max_tokens=400", "train.threads=1", "train.lr_schedule=constant", "train.lr=0.005",
        "data.corpus=parallel", f"data.train={root / 'train'}", f"data.valid={root / 'val'}",
        "data.tokenizer=sentencepiece", "data.vocab_size=16", "data.directions=[x-y, x-z]",
        "train.samples=2", *extra])


GERMAN_WORDS = "ein Hund läuft über die grüne Wiese und der Mann schaut zu heute".split()


def write_word_corpus(prefix, n=300, seed=0, src_lang="de", tgt_lang="en"):
    """``prefix.{src_lang,tgt_lang}``: ``n`` lines each of 1 to 11 random words."""
    rng = np.random.default_rng(seed)
    for lang in (src_lang, tgt_lang):
        lines = [" ".join(rng.choice(GERMAN_WORDS, size=int(rng.integers(1, 12)))) for _ in range(n)]
        (prefix.parent / f"{prefix.name}.{lang}").write_text("\n".join(lines) + "\n",
                                                             encoding="utf-8")


def parallel_data_cfg(prefix, **kw):
    """The data section of a whitespace-tokenized parallel corpus at ``prefix`` (train = valid)."""
    return DataConfig(**{"corpus": "parallel", "train": str(prefix), "valid": str(prefix),
                         "tokenizer": "whitespace", "min_freq": 1, **kw})


PAR = Parallel(src=["a b c", "a b", "a d", "e"], tgt=["x y", "x y z", "x", "w w"], name="tiny")


def whitespace_cfg(**kw) -> DataConfig:
    return DataConfig(corpus="parallel", tokenizer="whitespace", **kw)


# --- running the CLI, the benchmarks, an interrupted or clocked training -------------------------


def nmtkit(*args, input=None, env=None, check=True):
    """``python -m nmtkit.cli ARGS`` in the repository; an AssertionError with its stderr if it fails."""
    proc = subprocess.run([sys.executable, "-m", "nmtkit.cli", *map(str, args)], input=input,
                          capture_output=True, text=True, env=env, cwd=ROOT)
    if check and proc.returncode != 0:
        raise AssertionError(f"nmtkit {' '.join(map(str, args))} failed:\n{proc.stderr[-3000:]}")
    return proc


def load_benchmark(name: str):
    """A script of benchmarks/ or experiments/ imported as a module (its own ``from _common
    import ...`` resolved), so that tests can call its functions."""
    import importlib.util

    script = ROOT / "benchmarks" / f"{name}.py"
    if not script.exists():
        script = ROOT / "experiments" / f"{name}.py"
    sys.path.insert(0, str(script.parent))
    try:
        spec = importlib.util.spec_from_file_location(f"benchmark_{name}", script)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(script.parent))


def run_until_ctrl_c(monkeypatch, trainer, at_update: int) -> None:
    """Run ``trainer`` with a Ctrl-C (KeyboardInterrupt) at its ``at_update``-th call of
    ``Trainer._update`` (its ``last.pt`` then holds the updates before it, saved by the
    interrupt handler), then put ``Trainer._update`` back as it was."""
    real_update, calls = Trainer._update, {"n": 0}

    def update_then_ctrl_c(self, group):
        calls["n"] += 1
        if calls["n"] == at_update:
            raise KeyboardInterrupt
        return real_update(self, group)

    monkeypatch.setattr(Trainer, "_update", update_then_ctrl_c)
    with pytest.raises(KeyboardInterrupt):
        trainer.run()
    monkeypatch.setattr(Trainer, "_update", real_update)


def clocked_updates(monkeypatch, seconds, validation_s: float = 0.0):
    """loop.time.perf_counter reads a clock that only the updates (and validations, if
    ``validation_s``) move: update n (from 1) takes ``seconds(n)``, each validation
    ``validation_s``, the same in every run."""
    clock = {"t": 0.0, "n": 0}
    monkeypatch.setattr(loop, "time", types.SimpleNamespace(perf_counter=lambda: clock["t"]))
    real_update, real_validate = Trainer._update, Trainer.validate

    def update(self, group):
        clock["n"] += 1
        clock["t"] += seconds(clock["n"])
        return real_update(self, group)

    def validate(self):
        clock["t"] += validation_s
        return real_validate(self)

    monkeypatch.setattr(Trainer, "_update", update)
    monkeypatch.setattr(Trainer, "validate", validate)
    return update


# --- tiny random models and batches --------------------------------------------------------------

D, V_SRC, V_TGT = 32, 13, 11


def make_transformer(seed: int = 0, vocab=(V_SRC, V_TGT), **kw) -> Transformer:
    """A 2-layer Transformer of width :data:`D`, no dropout, in eval mode, with non-trivial
    biases and norms."""
    torch.manual_seed(seed)
    base = dict(layers=2, d_model=D, d_ff=64, heads=4, dropout=0.0, tie_output=False,
                tie_all=False, max_positions=64)
    base.update(kw)
    model = Transformer(ModelConfig(**base), *vocab).eval()
    with torch.no_grad():  # make biases and norms non-trivial
        for name, p in model.named_parameters():
            if "norm" in name or name.endswith("bias"):
                p.add_(0.1 * torch.randn_like(p))
    return model


def make_rnn(seed: int = 0, vocab=(V_SRC, V_TGT), **kw) -> RNNSeq2Seq:
    """A 2-layer recurrent encoder-decoder (seed 003), no dropout, in eval mode."""
    torch.manual_seed(seed)
    base = dict(arch="rnn", layers=2, emb_dim=8, rnn_hidden=12, dropout=0.0, tie_output=False,
                tie_all=False)
    base.update(kw)
    return RNNSeq2Seq(ModelConfig(**base), *vocab).eval()


def padded_batch():
    """(src, src_mask, tgt) of 3 sentences for the models above: sources of 6, 4 and 2 real
    tokens, targets of 5 starting with BOS."""
    torch.manual_seed(7)
    src = torch.randint(4, V_SRC, (3, 6))
    src[1, 4:] = PAD
    src[2, 2:] = PAD
    tgt = torch.randint(4, V_TGT, (3, 5))
    tgt[:, 0] = BOS
    return src, pad_mask(src), tgt


def tiny_model(arch: str, seed: int = 0):
    """A small random Transformer or RNN (12 source/target types) that favours EOS a little."""
    model = (make_transformer if arch == "transformer" else make_rnn)(seed, vocab=(12, 12))
    with torch.no_grad():
        model.generator.bias[EOS] += 1.0
    return model


def mixed_batch():
    """(src, src_mask) of 4 sources of 6, 3, 5 and 2 tokens for :func:`tiny_model`."""
    torch.manual_seed(11)
    lengths = [6, 3, 5, 2]
    src = torch.randint(4, 12, (len(lengths), 6))
    for i, n in enumerate(lengths):
        src[i, n:] = PAD
    return src, pad_mask(src)


PREFIXES = [[5, 6, 7], [], [9], [4] * 12]  # the last one is longer than its length cap


def src_batch(lengths, s=8):
    src = torch.full((len(lengths), s), PAD)
    for i, n in enumerate(lengths):
        src[i, :n] = 4
    return src, pad_mask(src)


BIGRAM_VOCAB = 10


class BigramModel:
    """A fake model implementing encode/start/step/reorder: the next-token distribution
    depends only on the previous token, through a fixed table (prev -> probabilities)."""

    def __init__(self, table: dict[int, dict[int, float]], floor: float = 1e-4):
        self.src_vocab_size = self.tgt_vocab_size = BIGRAM_VOCAB
        probs = torch.full((BIGRAM_VOCAB, BIGRAM_VOCAB), floor)
        for prev, row in table.items():
            for tok, p in row.items():
                probs[prev, tok] = p
        self.log_probs = (probs / probs.sum(-1, keepdim=True)).log()  # (prev, next)
        self.reorders = 0

    def encode(self, src, src_mask):
        return src

    def start(self, memory, src_mask, need_attention=False):
        return {"rows": torch.arange(memory.size(0)), "t": 0}

    def step(self, state, prev_tokens):
        state["t"] += 1
        return self.log_probs[prev_tokens].clone(), state, None

    def reorder(self, state, index, same_source=False):
        self.reorders += 1
        state["rows"] = state["rows"].index_select(0, index)
        return state


def prefers_567():
    # BOS -> 5 -> 6 -> 7 -> EOS, each the most likely next token; some mass on alternatives.
    return BigramModel({BOS: {5: 0.7, 6: 0.2}, 5: {6: 0.7, 7: 0.2}, 6: {7: 0.7, EOS: 0.2},
                        7: {EOS: 0.7, 5: 0.2}})


def contains(tokens, phrase):
    """Whether ``phrase`` appears in ``tokens`` as a contiguous run."""
    return any(tokens[i:i + len(phrase)] == list(phrase) for i in range(len(tokens) - len(phrase) + 1))


def step_by_step(bundle, candidate: str, source: str, tag: str | None = None) -> float:
    """(1 / (|x| + 1)) log P(x </s> | y) by the model's incremental decoder, one position at
    a time: another path than the scorer's batched, padded, teacher-forced pass. ``tag``: a
    target-language token put before the candidate (a model of several directions)."""
    toks = ([tag] if tag else []) + bundle.src_tok.encode(candidate)
    src = torch.tensor([bundle.src_vocab.encode(toks, add_eos=True)])
    tgt = bundle.tgt_vocab.encode(bundle.tgt_tok.encode(source), add_eos=True)
    model = bundle.model.eval()
    with torch.no_grad():
        state = model.start(model.encode(src, pad_mask(src)), pad_mask(src))
        prev, total = torch.tensor([BOS]), 0.0
        for t in tgt:
            log_probs, state, _ = model.step(state, prev)
            total += float(log_probs[0, t])
            prev = torch.tensor([t])
    return total / len(tgt)


# --- briefly trained copy models, saved and exported to CTranslate2 ------------------------------

COPY_SYMBOLS = [f"w{i}" for i in range(20)]
COPY_VOCAB = Vocab(["<pad>", "<unk>", "<s>", "</s>", *COPY_SYMBOLS])


def save_tiny_checkpoint(path: Path, cfg: Config, src_tok, tgt_tok, src_vocab: Vocab,
                         tgt_vocab: Vocab, model: torch.nn.Module) -> Path:
    save_checkpoint(path, {"config": cfg.to_dict(),
                           "tokenizers": {"src": src_tok.state(), "tgt": tgt_tok.state()},
                           "vocab": {"src": src_vocab.to_dict(), "tgt": tgt_vocab.to_dict()},
                           "model": model.state_dict()})
    return path


def train_copy(model: torch.nn.Module, steps: int, seed: int = 1, max_len: int = 10) -> None:
    """A few Adam steps on the copy task (symbols -> the same symbols, 1 to ``max_len`` of
    them), no dropout."""
    torch.manual_seed(seed)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    g = torch.Generator().manual_seed(seed)
    v = model.tgt_vocab_size
    for _ in range(steps):
        lens = torch.randint(1, max_len + 1, (64,), generator=g).tolist()
        src = torch.full((64, max(lens) + 1), PAD)
        tgt_in, tgt_out = src.clone(), src.clone()
        for i, n in enumerate(lens):
            sym = torch.randint(4, v, (n,), generator=g)
            src[i, :n], src[i, n] = sym, EOS
            tgt_in[i, 0], tgt_in[i, 1:n + 1] = BOS, sym
            tgt_out[i, :n], tgt_out[i, n] = sym, EOS
        log_probs = model(src, (src != PAD).unsqueeze(-2), tgt_in)
        loss = F.nll_loss(log_probs.reshape(-1, v), tgt_out.reshape(-1), ignore_index=PAD)
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()


COPY_VARIANTS = {  # norm, output_bias, tied (output and source embeddings), reverse_source[, positional]
    "pre-bias-tied": ("pre", True, True, False),
    "pre-nobias-untied-reversed": ("pre", False, False, True),
    "post-bias-untied": ("post", True, False, False),
    "post-nobias-tied": ("post", False, True, False),
    "pre-tied-learned": ("pre", True, True, False, "learned"),
    "post-untied-rope": ("post", True, False, False, "rope"),
}


def copy_config(norm: str, bias: bool, tied: bool, reverse: bool,
                positional: str = "sinusoidal") -> Config:
    return Config(
        name="export_test",
        data=DataConfig(corpus="copy", tokenizer="whitespace", reverse_source=reverse),
        model=ModelConfig(d_model=32, d_ff=64, heads=2, layers=2, dropout=0.0, norm=norm,
                          output_bias=bias, tie_output=tied, tie_all=tied, max_positions=48,
                          positional=positional),
        decode=DecodeConfig(beam=4, length_penalty=0.0, max_len_a=1.0, max_len_b=10))


def exported_copy_model(tmp: Path, variant: str) -> tuple[Path, Path]:
    """(checkpoint, float32 export directory) of a copy model of ``variant`` (one of
    :data:`COPY_VARIANTS`) trained briefly, written under ``tmp``. Needs ctranslate2."""
    from nmtkit.export.ctranslate2 import export_ctranslate2

    cfg = copy_config(*COPY_VARIANTS[variant])
    torch.manual_seed(0)
    model = build_model(cfg.model, len(COPY_VOCAB), len(COPY_VOCAB))
    train_copy(model, steps=60)
    tok = WhitespaceTokenizer()
    ckpt = save_tiny_checkpoint(tmp / "model.pt", cfg, tok, tok, COPY_VOCAB, COPY_VOCAB, model)
    return ckpt, export_ctranslate2(ckpt, tmp / "ct2")


SENTENCE_WORDS = ("Ein Mann fährt mit dem Fahrrad die Straße entlang Zwei Kinder spielen im Sand "
                  "Hund läuft über Wiese Der Preis ist für cm Frau sitzt auf einer Bank und "
                  "liest ein Buch").split()
"""The words of :func:`sentencepiece_copy_checkpoint`'s text: no digit, no emoji, no € or Ø."""


def sentencepiece_copy_checkpoint(path: Path, steps: int = 300, seed: int = 0) -> Path:
    """A German "copy" model at ``path``: a joint SentencePiece model trained on sentences of
    :data:`SENTENCE_WORDS` (each word one piece; digits, emoji, € and Ø are not in its
    vocabulary, and no byte fallback) and a 1-layer Transformer trained to copy random
    sequences of 1 to 12 of its pieces. Each sentence comes out as it went in; a line of two
    sentences is longer than anything it was trained on. ``data.src_lang`` de, ``tgt_lang``
    en (what the sentence rules read). About 20 s on one core."""
    rng = random.Random(seed)
    lines = [" ".join(rng.choice(SENTENCE_WORDS) for _ in range(rng.randint(3, 9)))
             + rng.choice([".", "!", ""]) for _ in range(2000)]
    tok = SentencePieceTokenizer.train(lines, vocab_size=300)
    vocab = Vocab(["<pad>", "<unk>", "<s>", "</s>", *[p for p in tok.pieces() if p != "<unk>"]])
    cfg = Config(name="sp_copy",
                 data=DataConfig(corpus="parallel", src_lang="de", tgt_lang="en",
                                 byte_fallback=False),
                 model=ModelConfig(d_model=64, d_ff=128, heads=2, layers=1, dropout=0.0,
                                   max_positions=64),
                 decode=DecodeConfig(beam=2, max_len_a=1.5, max_len_b=5))
    torch.manual_seed(seed)
    model = build_model(cfg.model, len(vocab), len(vocab))
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # batches this small run fastest on one thread
    train_copy(model, steps, seed, max_len=12)
    torch.set_num_threads(threads)
    return save_tiny_checkpoint(path, cfg, tok, tok, vocab, vocab, model.eval())


def copy_sentences(n: int = 24, seed: int = 0) -> list[str]:
    """``n`` lines of 1 to 10 of :data:`COPY_SYMBOLS`."""
    rng = np.random.default_rng(seed)
    return [" ".join(rng.choice(COPY_SYMBOLS, size=int(rng.integers(1, 11)))) for _ in range(n)]


def nmtkit_log_prob(bundle, line: str, tokens: list[str], allowed_only: bool = False) -> torch.Tensor:
    """log P(tokens, </s> | line) per target position, by nmtkit's teacher-forced forward.

    ``allowed_only``: renormalised over the tokens a search may produce (all but <pad> and
    <s>), which is what CTranslate2's search scores with those two suppressed.
    """
    toks = bundle.src_tok.encode(line)
    src = torch.tensor([bundle.src_vocab.encode(toks[::-1] if bundle.cfg.data.reverse_source
                                                else toks, add_eos=True)])
    tgt = bundle.tgt_vocab.encode(tokens, add_bos=True, add_eos=True)
    with torch.no_grad():
        lp = bundle.model(src, (src != PAD).unsqueeze(-2), torch.tensor([tgt[:-1]]))[0]
    if allowed_only:
        lp = lp - lp[:, [i for i in range(lp.size(1)) if i not in NEVER]].logsumexp(-1, keepdim=True)
    return lp.gather(-1, torch.tensor(tgt[1:]).unsqueeze(-1)).squeeze(-1)


# --- synthetic recipe archives in the real formats (IWSLT14) -------------------------------------


def make_tgz(path: Path, members: dict[str, str | bytes]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(path, "w:gz") as tar:
        dirs = sorted({name.split("/")[0] + "/" for name in members if "/" in name})
        for d in dirs:  # real archives list their folder first
            info = tarfile.TarInfo(d.rstrip("/"))
            info.type = tarfile.DIRTYPE
            tar.addfile(info)
        for name, text in members.items():
            data = text.encode("utf-8") if isinstance(text, str) else text
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


TRAIN_DE = [f"Satz {i} auf Deutsch." for i in range(1, 51)]
TRAIN_EN = [f"Sentence {i} in English." for i in range(1, 51)]
TRAIN_DE[29], TRAIN_EN[29] = "   ", "an English line whose German side is empty"


def train_tags(lines: list[str], lang: str) -> str:
    head = [
        "<url>http://www.ted.com/talks/lang/de/speaker.html</url>",
        f"<keywords>talks, {lang}</keywords>",
        "<speaker>Jane Doe</speaker>",
        "<talkid>1</talkid>",
        f"<title>Titel {lang}</title>",
        f"<description>TED Talk Subtitles and Transcript: about {lang}</description>",
    ]
    return "\n".join(head + lines[:25] + ["<reviewer href=''>R</reviewer>"] + lines[25:]) + "\n"


IWSLT_SETS = {
    "IWSLT14.TED.dev2010": 2,
    "IWSLT14.TEDX.dev2012": 1,
    "IWSLT14.TED.tst2010": 2,
    "IWSLT14.TED.tst2011": 1,
    "IWSLT14.TED.tst2012": 3,
}


def seg_text(stem: str, lang: str, i: int) -> str:
    return f"{stem} {lang} {i} Tom &amp; Jerry &lt;3 &#228;"


def iwslt_xml(stem: str, lang: str, n: int) -> str:
    segs = "\n".join(f'<seg id="{i}"> {seg_text(stem, lang, i)} </seg>' for i in range(1, n + 1))
    return (f'<?xml version="1.0" encoding="UTF-8"?>\n<mteval>\n<refset setid="{stem}" '
            f'srclang="de" trglang="{lang}">\n<doc docid="1" genre="lectures">\n'
            f"<url>http://www.ted.com/talks/x.html</url>\n<talkid>1</talkid>\n"
            f"<title>Ein Titel</title>\n{segs}\n</doc>\n</refset>\n</mteval>\n")


def iwslt_members(**override: str | None) -> dict[str, str]:
    members: dict[str, str | None] = {
        "de-en/README": "IWSLT 2014 de-en\n",
        "de-en/train.tags.de-en.de": train_tags(TRAIN_DE, "de"),
        "de-en/train.tags.de-en.en": train_tags(TRAIN_EN, "en"),
    }
    for stem, n in IWSLT_SETS.items():
        for lang in ("de", "en"):
            members[f"de-en/{stem}.de-en.{lang}.xml"] = iwslt_xml(stem, lang, n)
    members.update(override)
    return {k: v for k, v in members.items() if v is not None}


# --- checks on figures and pages -----------------------------------------------------------------


def assert_png(path: Path) -> None:
    """The file is a PNG that decodes, with more than one colour in it."""
    from matplotlib.image import imread

    assert path.is_file(), path
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    img = imread(path)
    assert img.ndim == 3 and img.shape[0] > 50 and img.shape[1] > 50
    assert float(img[..., :3].var()) > 0.0, f"{path} is blank"


def severe_browser_errors(driver) -> list[dict]:
    """The browser log's SEVERE entries (JavaScript errors, failed loads)."""
    return [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]


def parity_models(ref: types.ModuleType) -> tuple[torch.nn.Module, Transformer]:
    """The annotated post's ``make_model`` at the parity sizes (seed 0) with every parameter
    (norms and biases too) moved off its init, and nmtkit's copy of its weights
    (:func:`nmtkit.compat.annotated.from_reference`). ``ref``: the reference module."""
    torch.manual_seed(0)
    reference = ref.make_model(PARITY_SRC_V, PARITY_TGT_V, N=PARITY_N, d_model=PARITY_D,
                               d_ff=PARITY_D_FF, h=PARITY_H).eval()
    with torch.no_grad():
        for p in reference.parameters():
            p.add_(0.1 * torch.randn_like(p))
    ours = from_reference(reference.state_dict(), PARITY_SRC_V, PARITY_TGT_V, N=PARITY_N,
                          d_model=PARITY_D, d_ff=PARITY_D_FF, h=PARITY_H)
    return reference, ours


def parity_batch(ref: types.ModuleType) -> tuple[torch.Tensor, torch.Tensor, object]:
    """(src (3, 7), tgt_in (3, 6), the reference's ``Batch`` of them): random ids (seed 1),
    padded with the reference's <blank> at different lengths, targets starting with <s>."""
    torch.manual_seed(1)
    src = torch.randint(3, PARITY_SRC_V, (3, 7))
    src[1, 5:] = REF_PAD
    src[2, 3:] = REF_PAD
    tgt = torch.randint(3, PARITY_TGT_V, (3, 6))
    tgt[:, 0] = 0  # <s>
    tgt[0, 4:] = REF_PAD
    batch = ref.Batch(src, torch.cat([tgt, torch.full((3, 1), REF_PAD)], 1), pad=REF_PAD)
    return src, tgt, batch


def refused(capsys: pytest.CaptureFixture[str], argv: list[str], said: str) -> str:
    """``nmtkit ARGV`` exits 2 (argparse's SystemExit or main's return) naming ``said``;
    returns its stderr."""
    try:
        code = cli_main(argv)
    except SystemExit as e:
        code = e.code
    err = capsys.readouterr().err
    assert code == 2 and said in err and "Traceback" not in err, err
    return err


def imported_modules(importtime_stderr: str) -> set[str]:
    """The modules named by ``python -X importtime`` (``import time: self | cum | name``)."""
    return {line.rsplit("|", 1)[1].strip() for line in importtime_stderr.splitlines()
            if line.startswith("import time:") and line.count("|") == 2}


# --- hostile configs (issue 74: limits on every size) --------------------------------------------


def billion_laughs_yaml(levels: int = 9, width: int = 9) -> str:
    """A recipe of about 500 bytes whose ``data.src_lang`` holds ``width ** levels`` strings
    when walked (YAML's "billion laughs": 9 levels of 9, 387,420,489): a list of ``levels``
    lists, each made of ``width`` aliases of the one before."""
    parts = [f"&l0 [{', '.join(['lol'] * width)}]"]
    parts += [f"&l{i} [{', '.join([f'*l{i - 1}'] * width)}]" for i in range(1, levels)]
    return "data:\n  src_lang: [" + ", ".join(parts) + "]\n"


def shared_references_config(levels: int = 20) -> dict:
    """A stored config (as a checkpoint's pickle memo would give it) of ``2 ** levels`` list
    entries when walked, made of ``levels`` lists that each hold the one below twice."""
    value: list = ["lol"]
    for _ in range(levels):
        value = [value, value]
    return {"data": {"directions": value}}


def deeply_nested_yaml(depth: int = 200_000) -> str:
    """A recipe with a list nested ``depth`` deep (200,000: 400 KB)."""
    return "data:\n  directions: " + "[" * depth + "]" * depth + "\n"


def deeply_nested_config(depth: int = 200_000) -> dict:
    """A stored config with a list nested ``depth`` deep, built without recursion."""
    value: list = []
    for _ in range(depth):
        value = [value]
    return {"data": {"directions": value}}
