"""benchmarks/cold_start.py: the parts of a one-sentence ``nmtkit translate`` in fresh
processes, and the command's own wall and CPU time, as JSON."""

import json
import subprocess
import sys

import pytest

from .helpers import ROOT, imported_modules, load_benchmark


def test_cpu_keys_name_the_part():
    cold_start = load_benchmark("cold_start")
    assert [cold_start.cpu_key(p) for p in cold_start.PARTS] == [
        "import_cli_cpu_s", "import_torch_cpu_s", "import_translate_cpu_s", "load_cpu_s",
        "first_sentence_cpu_s"]


@pytest.mark.slow
def test_one_round_on_a_given_checkpoint(copy_run, tmp_path):
    out = tmp_path / "cold.json"
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "cold_start.py"), "--model",
                           str(copy_run / "best.pt"), "--runs", "1", "--threads", "1", "--out",
                           str(out), "--ctranslate2", "--sentence", "3 4 5 6"],
                          capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(out.read_text())
    after = result["trees"]["after"]
    assert set(result["trees"]) == {"after", "after_numpy", "after_ctranslate2"}
    assert after["model"] == str(copy_run / "best.pt")
    for name in ("after_numpy", "after_ctranslate2"):  # neither imports PyTorch
        other = result["trees"][name]["median"]
        assert other["import_torch_s"] < 0.01 and other["torch_imported"] == 0, name
        assert other["load_s"] > 0 and other["command_wall_s"] > 0
    assert result["numpy_command_wall_speedup"] > 0 and result["ctranslate2_command_wall_speedup"] > 0
    median = after["median"]
    parts = ["import_cli", "import_torch", "import_translate", "load", "first_sentence"]
    for part in parts:
        assert median[f"{part}_s"] > 0 and median[f"{part}_cpu_s"] > 0, part
    assert median["in_process_total_s"] == pytest.approx(sum(median[f"{p}_s"] for p in parts),
                                                         abs=0.01)
    assert median["command_wall_s"] > median["load_s"] and median["command_cpu_s"] > 0
    assert result["threads"] == 1 and result["matmul_gflops"]["before_rounds"] > 0
    assert "machine" in result and len(after["rounds"]) == 1


# What a one-sentence translate with PyTorch pays for: the layers it uses, not the training
# step, the exporters or the figures (benchmarks/cold_start.py measures the seconds; without
# --engine a short one imports no PyTorch at all: tests/test_lite.py).
NOT_FOR_TRANSLATE = ("nmtkit.train", "nmtkit.train.step", "nmtkit.train.loop",
                     "nmtkit.export.ctranslate2", "nmtkit.export.ctranslate2_engine", "nmtkit.viz",
                     "nmtkit.serve.app")


@pytest.mark.slow
def test_piped_translate_imports_only_what_it_uses(copy_run):
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "nmtkit", "translate",
                           "--engine", "torch", "--model", str(copy_run / "best.pt")],
                          input="3 4 5\n",
                          capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    assert len(done.stdout.splitlines()) == 1
    modules = imported_modules(done.stderr)
    assert {"torch", "nmtkit.checkpoint", "nmtkit.decode.translator"} <= modules
    assert not modules & set(NOT_FOR_TRANSLATE), sorted(modules & set(NOT_FOR_TRANSLATE))


@pytest.mark.slow
def test_console_script_exits_with_mains_status_and_all_its_output(copy_run, tmp_path):
    """``console`` freezes the collector before the shutdown: the status of ``main`` still
    comes out, the output file is whole, and an error still says what it is."""
    out = tmp_path / "out.txt"
    src = tmp_path / "in.txt"
    src.write_text("".join(f"{i} {i + 1} {i + 2}\n" for i in range(3, 40)))
    ok = subprocess.run([sys.executable, "-m", "nmtkit", "translate", "--model",
                         str(copy_run / "best.pt"), "-i", str(src), "-o", str(out)],
                        capture_output=True, text=True, cwd=ROOT)
    assert ok.returncode == 0, ok.stderr[-3000:]
    assert len(out.read_text().splitlines()) == 37
    bad = subprocess.run([sys.executable, "-m", "nmtkit.cli", "translate", "--model",
                          str(tmp_path / "missing.pt")], input="3 4\n", capture_output=True,
                         text=True, cwd=ROOT)
    assert bad.returncode == 2 and "missing.pt" in bad.stderr and "Traceback" not in bad.stderr
