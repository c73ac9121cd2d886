"""``nmtkit translate --engine ctranslate2``: the command line on a CTranslate2 export, with
the checkpoint's text pipeline, the same outputs as nmtkit's own search where both are exact,
what it refuses, and a start that imports no PyTorch."""

import subprocess
import sys

import pytest

pytest.importorskip("ctranslate2")

from nmtkit.cli import main as cli_main  # noqa: E402

from .helpers import ROOT, copy_sentences, exported_copy_model, imported_modules  # noqa: E402

pytestmark = pytest.mark.slow  # trains a model or starts processes: not in the fast tier

LINES = [*copy_sentences(12, seed=5), "", "3 4 5"]


@pytest.fixture(scope="module")
def copy_export(tmp_path_factory):
    """(checkpoint, float32 export) of a briefly trained copy model."""
    return exported_copy_model(tmp_path_factory.mktemp("translate_ct2"), "pre-bias-tied")


def translate(capsys, *argv: str) -> list[str]:
    assert cli_main(["translate", *argv]) == 0
    return capsys.readouterr().out.splitlines()


@pytest.mark.parametrize("beam", ["1", "3"])
def test_the_export_translates_as_the_checkpoint(copy_export, tmp_path, capsys, beam):
    ckpt, ct2 = copy_export
    src = tmp_path / "in.txt"
    src.write_text("\n".join(LINES) + "\n")
    ours = translate(capsys, "--model", str(ckpt), "--beam", beam, "-i", str(src), "--threads", "1")
    theirs = translate(capsys, "--engine", "ctranslate2", "--compute-type", "float32", "--model",
                       str(ct2), "--beam", beam, "-i", str(src), "--threads", "1")
    assert len(theirs) == len(LINES) and theirs[-2] == ""
    if beam == "1":  # greedy: the same search (beam search ranks by another length penalty)
        assert theirs == ours
    else:
        assert sum(a == b for a, b in zip(ours, theirs, strict=True)) >= len(LINES) - 2


def test_n_best_scores_and_alignments_have_the_checkpoints_columns(copy_export, tmp_path,
                                                                   capsys):
    ckpt, ct2 = copy_export
    src = tmp_path / "in.txt"
    src.write_text("3 4 5 6\n")
    argv = ["--beam", "3", "--n-best", "2", "--scores", "--alignments", "--threads", "1",
            "-i", str(src)]
    for model in (["--model", str(ckpt)],
                  ["--engine", "ctranslate2", "--compute-type", "float32", "--model", str(ct2)]):
        out = translate(capsys, *model, *argv)
        assert len(out) == 2 and [o.split("\t")[0] for o in out] == ["0", "0"]
        cols = out[0].split("\t")
        assert len(cols) == 5  # i, score, token log-probs, text, alignment
        n_tokens = len(cols[3].split())
        assert len(cols[2].split()) == n_tokens + 1  # and </s>
        assert len(cols[4].split()) == n_tokens


@pytest.mark.parametrize("argv, message", [
    (["--engine", "ctranslate2", "--model", "{ct2}", "--model", "{ct2}"], "an ensemble"),
    (["--engine", "ctranslate2", "--model", "{ct2}", "--no-verify"], "apply to --engine torch"),
    (["--engine", "ctranslate2", "--model", "{ct2}", "--rerank", "4"], "reranking runs with "
                                                                        "--engine torch"),
    (["--engine", "ctranslate2", "--model", "{ckpt}"], "not a directory"),
    (["--model", "{ct2}"], "a CTranslate2 export directory; run it with --engine ctranslate2"),
    (["--model", "{ckpt}", "--compute-type", "int8"], "--compute-type applies to --engine "
                                                      "ctranslate2 only"),
    (["--engine", "ctranslate2", "--model", "{ct2}", "--constraints-file", "{constraints}"],
     "lexically constrained"),
])
def test_what_the_engine_cannot_do_is_an_error(copy_export, tmp_path, capsys, argv, message):
    ckpt, ct2 = copy_export
    constraints, src = tmp_path / "c.txt", tmp_path / "in.txt"
    constraints.write_text("3 4\n")
    src.write_text("3 4 5\n")
    argv = [a.format(ckpt=ckpt, ct2=ct2, constraints=constraints) for a in argv]
    assert cli_main(["translate", *argv, "-i", str(src)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("nmtkit: error: ") and message in err, err


def test_a_piped_translate_of_an_export_imports_no_torch(copy_export):
    """The cold start of ``--engine ctranslate2``: neither PyTorch nor the checkpoint, the
    model or nmtkit's search is imported (benchmarks/cold_start.py --engine ctranslate2
    measures the seconds)."""
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "nmtkit", "translate",
                           "--engine", "ctranslate2", "--model", str(copy_export[1])],
                          input="3 4 5\n7 8\n", capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    assert len(done.stdout.splitlines()) == 2
    modules = imported_modules(done.stderr)
    # (the library imports the engine by its name, nmtkit.decode.load.EXPORT_ENGINE, which
    # -X importtime does not list: CTranslate2 itself is what it brings in)
    assert {"ctranslate2", "nmtkit.decode.text_translator"} <= modules
    heavy = {"torch", "nmtkit.checkpoint", "nmtkit.models", "nmtkit.decode.translator",
             "nmtkit.decode.search", "nmtkit.export.ctranslate2"}
    assert not modules & heavy, sorted(modules & heavy)
