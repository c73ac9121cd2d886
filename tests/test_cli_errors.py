"""One-line errors (exit 2) instead of tracebacks on the command line, and finished work kept
when its output cannot be written (issue "Reliability II", items 3 and 7)."""

import subprocess
import sys

import pytest

from nmtkit.cli import main as cli_main
from nmtkit.train.loop import Trainer

from .helpers import ROOT, make_cfg

pytestmark = pytest.mark.slow  # trains a model or starts processes: not in the fast tier


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    run = tmp_path_factory.mktemp("cli_errors")
    Trainer(make_cfg(4), run).run()
    return run / "last.pt"


def test_invalid_utf8_on_stdin_exits_2(model):
    proc = subprocess.run([sys.executable, "-m", "nmtkit.cli", "translate", "--model", str(model)],
                          input=b"1 2\n3 \xff 4\n", capture_output=True, cwd=ROOT)
    assert proc.returncode == 2
    assert b"<stdin>:2: invalid UTF-8" in proc.stderr and b"Traceback" not in proc.stderr


@pytest.mark.parametrize("target", ["parent_is_file", "is_directory", "disk_full"])
def test_unwritable_output_keeps_the_translation(model, tmp_path, capsys, target):
    (tmp_path / "in.txt").write_text("1 2 3\n4 5\n")
    (tmp_path / "file").write_text("x")
    (tmp_path / "dir").mkdir()
    out = {"parent_is_file": tmp_path / "file" / "out.txt", "is_directory": tmp_path / "dir",
           "disk_full": "/dev/full"}[target]
    code = cli_main(["translate", "--model", str(model), "-i", str(tmp_path / "in.txt"),
                     "-o", str(out)])
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.startswith("nmtkit: error: ") and err.count("\n") == 1
    kept = err.rsplit("kept in ", 1)[1].strip()
    assert len(open(kept, encoding="utf-8").read().splitlines()) == 2


def test_unwritable_evaluate_output_and_run_dir(model, tmp_path, capsys):
    (tmp_path / "file").write_text("x")
    (tmp_path / "s.txt").write_text("1 2\n")
    assert cli_main(["evaluate", "--model", str(model), "--src", str(tmp_path / "s.txt"),
                     "--ref", str(tmp_path / "s.txt"), "-o", str(tmp_path / "file" / "h")]) == 2
    assert "kept in" in capsys.readouterr().err
    assert cli_main(["train", str(ROOT / "configs" / "copy_task.yaml"), "--run-dir",
                     str(tmp_path / "file" / "run"), "--set", "train.max_steps=1"]) == 2
    assert "Traceback" not in capsys.readouterr().err


def test_server_checks_host_and_sends_security_headers(model):
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from nmtkit.checkpoint import load_bundle
    from nmtkit.serve.app import create_app
    from nmtkit.serve.security import default_allowed_hosts, host_name

    assert host_name("[::1]:8000") == "::1" and host_name("LocalHost:80") == "localhost"
    app = create_app(load_bundle(model), allowed_hosts=default_allowed_hosts("127.0.0.1"))
    with TestClient(app, base_url="http://127.0.0.1:8000") as c:
        page = c.get("/")
        assert page.status_code == 200
        assert page.headers["x-content-type-options"] == "nosniff"
        assert page.headers["x-frame-options"] == "DENY"
        assert "script-src 'self'" in page.headers["content-security-policy"]
        assert c.get("/docs").status_code == 404  # no CDN scripts
        assert c.get("/openapi.json").status_code == 200
        rebound = c.get("/health", headers={"host": "attacker.example:8000"})
        assert rebound.status_code == 400 and "Host" in rebound.json()["detail"]
        ok = c.post("/v1/translate", json={"texts": ["1 2"]}, headers={"host": "localhost:8000"})
        assert ok.status_code == 200
