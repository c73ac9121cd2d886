"""nmtkit.rules: the decoding rules (output-length cap, GNMT length penalty, ranking) are one
torch-free module, and every engine follows them at their boundaries: PyTorch's greedy and
beam search, numpy's, CTranslate2's, the server's work check and the export's plain
CTranslate2 snippet give the same number of output tokens as the rule says."""

import contextlib
import io
import re
import subprocess
import sys
from dataclasses import replace

import numpy as np
import pytest
import torch

from nmtkit.checkpoint import load_bundle
from nmtkit.data.tokenizers import WhitespaceTokenizer
from nmtkit.data.vocab import EOS
from nmtkit.decode.lite_translator import LiteTranslator
from nmtkit.decode.options import TranslateOptions
from nmtkit.decode.translator import Translator
from nmtkit.lite.checkpoint import load_lite_bundle
from nmtkit.models import build_model
from nmtkit.rules import best_first, length_penalty, output_cap, output_cap_source

from .helpers import COPY_SYMBOLS, COPY_VARIANTS, COPY_VOCAB, copy_config, save_tiny_checkpoint

# (max_len_a, max_len_b, source tokens, max_length, output tokens before </s>): the values
# worked out by hand, not by the rule; the source the model reads is the tokens and </s>.
CASES = {
    "floor-exact": (1.16, 0, 24, None, 28),  # S = 25: 1.16 * 25 = 29 (float64: 28.999999999999996)
    "floor": (1.5, 0, 4, None, 6),  # S = 5: 7.5 -> 7 with </s>
    "source+1": (2.0, 1, 9, None, 20),  # S = 10 (not 9): 21 with </s>
    "at-least-1": (0.1, 0, 2, None, 0),  # S = 3: 0.3 -> 0 -> 1: </s> alone
    "max_length": (1.0, 10, 5, 3, 3),  # S = 6: 16, cut to max_length + 1
    "positions": (3.0, 10, 20, None, 47),  # S = 21: 73, cut to the position table (48)
}


@pytest.mark.slow
def test_the_rules_import_neither_torch_nor_numpy():
    code = "import sys, nmtkit.rules; print(sorted({'torch', 'numpy'} & set(sys.modules)))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


@pytest.mark.parametrize("case", CASES)
def test_output_cap_at_its_boundaries(case):
    a, b, n, max_length, want = CASES[case]
    max_length = 47 if case == "positions" else max_length  # (the text pipeline's limit)
    assert output_cap(n + 1, a, b, max_length) - 1 == want


def test_the_cap_is_exact_where_binary_floating_point_is_not():
    assert output_cap(100, 2.3, 0) == 230  # float64: floor(229.99999999999997) = 229
    assert output_cap(90, 1.3, 5) == 122  # float32: floor(121.99999) = 121
    assert output_cap(5, 1.2, 10) == 16 and output_cap(1, 0.0, 3) == 3
    assert output_cap(3, 0.0, 0.5) == 1  # at least </s>
    assert [output_cap(s, 1.2, 10, max_length=7) for s in (1, 100)] == [8, 8]


@pytest.mark.parametrize("a, b", [(1.2, 10), (1.16, 0), (0.1, 0), (2.0, 1), (1.0, 0.5),
                                  (0.3333, 7), (1000.0, 0), (0.0, 200)])
def test_the_snippets_expression_is_the_rule(a, b):
    expr = output_cap_source(a, b, "len(tokens) + 1")
    assert "." not in expr  # integers only: no floating point in the copy either
    for n in range(0, 300):
        assert eval(expr, {"tokens": [0] * n}) == output_cap(n + 1, a, b), (expr, n)


def test_length_penalty_is_gnmts_in_every_precision():
    lengths = [1, 4, 10, 30]
    for alpha in (0.0, 0.6, 1.0, 1.4):
        want = [((5 + n) / 6) ** alpha for n in lengths]
        assert [length_penalty(n, alpha) for n in lengths] == want
        t = length_penalty(torch.tensor(lengths).float(), alpha)
        a = length_penalty(np.array(lengths, dtype=np.float32), alpha)
        assert t.dtype == torch.float32 and a.dtype == np.float32
        # (each in its library's float32 pow, which may differ in the last bit)
        assert t.tolist() == pytest.approx(want, rel=1e-6) and a.tolist() == pytest.approx(want, rel=1e-6)
    assert length_penalty(1, 0.6) == 1.0


def test_best_first_ranks_by_score_and_keeps_the_slot_order_of_ties():
    assert best_first([-3.0, -1.0, float("-inf"), -1.0, -2.0], 4) == [1, 3, 4, 0]
    assert best_first([float("-inf")] * 3, 2) == [0, 1]


# --- every engine at the boundaries -----------------------------------------------------------


def never_ending_checkpoint(path, a, b):
    """A copy-task Transformer (random weights) that never chooses </s> of its own: every
    search runs to its cap, where </s> is forced (CTranslate2 stops there)."""
    cfg = copy_config(*COPY_VARIANTS["pre-bias-tied"])
    cfg = replace(cfg, decode=replace(cfg.decode, max_len_a=a, max_len_b=b))
    torch.manual_seed(0)
    model = build_model(cfg.model, len(COPY_VOCAB), len(COPY_VOCAB)).eval()
    with torch.no_grad():
        model.state_dict()["generator.bias"][EOS] -= 50.0
    tok = WhitespaceTokenizer()
    return save_tiny_checkpoint(path, cfg, tok, tok, COPY_VOCAB, COPY_VOCAB, model)


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    root = tmp_path_factory.mktemp("rules")
    return {case: never_ending_checkpoint(root / f"{case}.pt", a, b)
            for case, (a, b, *_) in CASES.items()}


def source_line(n: int) -> str:
    return " ".join(COPY_SYMBOLS[i % len(COPY_SYMBOLS)] for i in range(n))


def no_pytorch_fallback():
    raise AssertionError("the numpy engine handed this to PyTorch")


@pytest.mark.parametrize("beam", [1, 3])
@pytest.mark.parametrize("case", CASES)
def test_pytorch_and_numpy_follow_the_rule(checkpoints, case, beam):
    _, _, n, max_length, want = CASES[case]
    path, line = checkpoints[case], source_line(n)
    options = TranslateOptions(beam=beam, n_best=1, max_length=max_length)
    bundle = load_bundle(path)
    engines = {"pytorch": Translator.from_bundle(bundle),
               "numpy": LiteTranslator(load_lite_bundle(path), bundle.cfg.decode, no_pytorch_fallback)}
    for name, tr in engines.items():
        out = tr.translate([line], options)[0][0]
        assert len(out.tokens) == want, (name, out.tokens)


@pytest.fixture(scope="module")
def exports(checkpoints, tmp_path_factory):
    pytest.importorskip("ctranslate2")
    from nmtkit.export.ctranslate2 import export_ctranslate2

    root = tmp_path_factory.mktemp("rules_ct2")
    return {case: export_ctranslate2(path, root / case) for case, path in checkpoints.items()}


@pytest.mark.parametrize("beam", [1, 3])
@pytest.mark.parametrize("case", CASES)
def test_ctranslate2_follows_the_rule(exports, case, beam):
    from nmtkit.export.ctranslate2_engine import CTranslate2Translator

    _, _, n, max_length, want = CASES[case]
    tr = CTranslate2Translator(exports[case], intra_threads=1)
    out = tr.translate([source_line(n)], TranslateOptions(beam=beam, n_best=1, max_length=max_length))
    assert len(out[0][0].tokens) == want, out[0][0].tokens


@pytest.mark.parametrize("case", [c for c, v in CASES.items() if v[3] is None and c != "positions"])
def test_the_exports_plain_snippet_follows_the_rule(exports, case):
    """The README's "ctranslate2 alone" lines, run as written (they neither cut the source
    nor cap the output at the position table: the cases within it)."""
    _, _, n, _, want = CASES[case]
    readme = (exports[case] / "README.txt").read_text()
    block = readme.split("for one input `line`:\n\n", 1)[1].split("\n\n", 1)[0]
    code = "\n".join(line[4:] for line in block.splitlines()).replace("THIS_DIR", str(exports[case]))
    assert re.search(r"^steps = max\(1, .*\) - 1$", code, re.M), code
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(code, {"line": source_line(n)})
    assert len(printed.getvalue().split()) == want, printed.getvalue()


@pytest.mark.parametrize("case", CASES)
def test_the_servers_work_check_counts_the_rules_steps(checkpoints, case):
    pytest.importorskip("fastapi")
    from fastapi import HTTPException

    from nmtkit.serve.checks import checked_work
    from nmtkit.serve.limits import ServeLimits

    _, _, n, max_length, want = CASES[case]
    tr = Translator.from_bundle(load_bundle(checkpoints[case]))
    limits = ServeLimits(work_per_second=1, timeout_s=0.001)  # any work is too much: 413
    with pytest.raises(HTTPException) as refused:
        checked_work(tr, [source_line(n)], 2, None, max_length, limits)
    steps = int(re.search(r"up to (\d+) output tokens", refused.value.detail).group(1))
    assert steps == want + 1  # the search's steps: the tokens and </s>
