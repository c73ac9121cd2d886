"""Which modules of ``src/nmtkit`` a test run executes: a pytest plugin for checking that the
fast tier (``-m "not slow"``) touches every module (issue 72, item 8). Run by hand, with
``coverage`` installed (it is not a dependency of the suite, and CI does not run this)::

    pip install coverage
    python -m pytest -m "not slow" -p tests.tier_coverage

At the end it prints how many modules were touched and names those that were not: not
imported, or (a module with functions) none of its functions' bodies run. The run then
fails (exit status 1). Under pytest-xdist each worker measures itself and the controller
combines their data.
"""

from __future__ import annotations

import ast
import os
import tempfile
from pathlib import Path
from types import ModuleType

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "nmtkit"
DATA = Path(tempfile.gettempdir()) / f"nmtkit-tier-coverage-{os.getuid()}"


def function_lines(source: str) -> set[int]:
    """The lines of the statements inside the module's functions (what importing it does
    not run)."""
    lines: set[int] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for stmt in node.body:
                lines.update(range(stmt.lineno, (stmt.end_lineno or stmt.lineno) + 1))
    return lines


def untouched(executed: dict[str, set[int]]) -> list[str]:
    """The modules of src/nmtkit that ``executed`` (file -> lines run) does not touch."""
    missing = []
    for path in sorted(SRC.rglob("*.py")):
        ran = executed.get(str(path), set())
        body = function_lines(path.read_text(encoding="utf-8"))
        if not ran or (body and not ran & body):
            missing.append(str(path.relative_to(SRC.parent)))
    return missing


def _coverage() -> ModuleType:
    try:
        import coverage
    except ImportError:
        raise pytest.UsageError("tests/tier_coverage.py needs coverage: pip install coverage") from None
    return coverage


def _worker() -> str | None:
    return os.environ.get("PYTEST_XDIST_WORKER")


def pytest_configure(config: pytest.Config) -> None:
    if _worker() is None:  # the controller (or a run without xdist): start afresh
        DATA.mkdir(parents=True, exist_ok=True)
        for old in DATA.glob(".coverage*"):
            old.unlink()
    cov = _coverage().Coverage(data_file=str(DATA / ".coverage"), data_suffix=_worker() or "main",
                               source_pkgs=["nmtkit"])
    cov.start()
    config.stash[COVERAGE] = cov


COVERAGE = pytest.StashKey[object]()


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session: pytest.Session) -> None:
    """Each process saves its data; the controller (which finishes after its workers) then
    combines them and reports."""
    cov = session.config.stash[COVERAGE]
    cov.stop()  # type: ignore[attr-defined]
    cov.save()  # type: ignore[attr-defined]
    if _worker() is not None:
        return
    combined = _coverage().Coverage(data_file=str(DATA / ".coverage"))
    combined.combine([str(DATA)], keep=True)
    data = combined.get_data()
    missing = untouched({f: set(data.lines(f) or ()) for f in data.measured_files()})
    modules = len(list(SRC.rglob("*.py")))
    print(f"\ntier coverage: {modules - len(missing)} of {modules} modules of src/nmtkit touched")
    for m in missing:
        print(f"  not touched: {m}")
    if missing:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
