"""benchmarks/cold_start.py: the parts of a one-sentence ``nmtkit translate`` in fresh
processes, and the command's own wall and CPU time, as JSON."""

import json
import subprocess
import sys

import pytest

from .helpers import ROOT, load_benchmark


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
                           str(out)], capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(out.read_text())
    after = result["trees"]["after"]
    assert set(result["trees"]) == {"after"} and after["model"] == str(copy_run / "best.pt")
    median = after["median"]
    parts = ["import_cli", "import_torch", "import_translate", "load", "first_sentence"]
    for part in parts:
        assert median[f"{part}_s"] > 0 and median[f"{part}_cpu_s"] > 0, part
    assert median["in_process_total_s"] == pytest.approx(sum(median[f"{p}_s"] for p in parts),
                                                         abs=0.01)
    assert median["command_wall_s"] > median["load_s"] and median["command_cpu_s"] > 0
    assert result["threads"] == 1 and result["matmul_gflops"]["before_rounds"] > 0
    assert "machine" in result and len(after["rounds"]) == 1
