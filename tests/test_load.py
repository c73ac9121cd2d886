"""decode/load.py: the library chooses the engine. ``load_translator`` gives the command's
translator (numpy for a few lines without PyTorch's import, PyTorch for the rest, an
ensemble, reranking, a CTranslate2 export), and refuses options that do not go together
before anything loads."""

import subprocess
import sys

import pytest
import torch

from nmtkit.data.tokenizers import WhitespaceTokenizer
from nmtkit.decode import load_translator
from nmtkit.decode.lite_translator import LiteTranslator
from nmtkit.decode.translator import Translator
from nmtkit.errors import UserError
from nmtkit.lite import MAX_LINES
from nmtkit.models import build_model

from .helpers import (
    COPY_VARIANTS,
    COPY_VOCAB,
    ROOT,
    copy_config,
    copy_sentences,
    save_tiny_checkpoint,
    train_copy,
)


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    cfg = copy_config(*COPY_VARIANTS["pre-bias-tied"])
    torch.manual_seed(0)
    model = build_model(cfg.model, len(COPY_VOCAB), len(COPY_VOCAB))
    train_copy(model, steps=40)
    tok = WhitespaceTokenizer()
    path = tmp_path_factory.mktemp("load") / "copy.pt"
    return save_tiny_checkpoint(path, cfg, tok, tok, COPY_VOCAB, COPY_VOCAB, model.eval())


@pytest.mark.slow
@pytest.mark.slow  # (trains a model)
def test_auto_is_numpy_for_a_few_lines_and_pytorch_for_the_rest(ckpt):
    lines = copy_sentences(MAX_LINES + 1, seed=3)
    tr = load_translator(ckpt)
    assert isinstance(tr, LiteTranslator) and tr.bundle.cfg.model.arch == "transformer"
    torch_tr = load_translator(ckpt, engine="torch")
    assert isinstance(torch_tr, Translator) and torch_tr.bundle.path is not None
    # a few lines in numpy, more by its fallback (PyTorch's search): the same translations
    assert tr.translate_lines(lines[:3]) == torch_tr.translate_lines(lines[:3])
    assert tr.translate_lines(lines) == torch_tr.translate_lines(lines)
    assert tr._fallback is not None  # built once more lines came than numpy takes
    # what numpy cannot start: PyTorch's translator
    assert isinstance(load_translator([ckpt, ckpt]), Translator)  # an ensemble
    assert isinstance(load_translator(ckpt, fast=False), Translator)
    assert isinstance(load_translator(ckpt, engine="numpy", beam=2), LiteTranslator)
    assert load_translator(ckpt, beam=2).decode_cfg.beam == 2  # options as the flags give them


@pytest.mark.parametrize("engine, options, message", [
    ("numpy", {"models": 2}, "--engine numpy runs one model"),
    ("numpy", {"fast": False}, "--engine numpy runs on the CPU"),
    ("ctranslate2", {"verify": False}, "apply to --engine torch"),
    ("numpy", {"rerank": 3}, "reranking runs with --engine torch"),
    ("torch", {"compute_type": "int8"}, "--compute-type applies to --engine ctranslate2 only"),
    ("tensorflow", {}, "engine 'tensorflow': one of auto, torch, numpy, ctranslate2"),
])
def test_options_that_do_not_go_together_are_refused_before_loading(tmp_path, engine, options,
                                                                     message):
    models = [str(tmp_path / "missing.pt")] * options.pop("models", 1)
    with pytest.raises(UserError, match=message):
        load_translator(models, engine, **options)


@pytest.mark.slow
@pytest.mark.slow  # (trains a model, starts a process)
def test_the_readme_example_starts_without_pytorch(ckpt):
    """The README's Python example, as written there, on a checkpoint: numpy's engine, no
    PyTorch imported (as fast as the command's start)."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    example = readme.split("```python\n", 1)[1].split("```", 1)[0]
    assert "load_translator(" in example
    code = example.replace("runs/copy/best.pt", str(ckpt)).replace("1 2 3 4 5 6 7 8 9 10", "3 4 5")
    code += "import sys\nprint('torch' in sys.modules, type(translator).__name__)\n"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    printed, imported = done.stdout.strip().splitlines()
    assert printed == repr(load_translator(ckpt, engine="torch").translate_lines(["3 4 5"]))
    assert imported == "False LiteTranslator"
