"""The test suite's own shape (issue 63): every test module stands alone. What several
modules build is in ``tests/helpers.py`` (plain functions), what pytest injects in
``tests/conftest.py`` (fixtures); no module imports a test module, nor conftest."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent


def _forbidden(name: str, relative: bool) -> bool:
    """A test module or conftest of tests/. An absolute ``test_x`` counts only where
    tests/test_x.py exists (another package may have such a name)."""
    if name != "conftest" and not name.startswith("test_"):
        return False
    return relative or (TESTS / f"{name}.py").exists()


def imported_test_modules(source: str) -> list[str]:
    """``"line N: module"`` for each import of a test module or of conftest in ``source``,
    however spelled (``from .test_x import y``, ``from . import test_x``,
    ``from tests.test_x import y``, ``import tests.test_x``...), in functions too."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom):
            parts = (node.module or "").split(".") if node.module else []
            relative = node.level > 0 or parts[:1] == ["tests"]
            if parts[:1] == ["tests"] and node.level == 0:
                parts = parts[1:]
            names = parts[:1] if parts else [a.name for a in node.names]
        elif isinstance(node, ast.Import):
            names, relative = [], False
            for alias in node.names:
                parts = alias.name.split(".")
                if parts[0] == "tests" and len(parts) > 1:
                    names.append(parts[1])
                    relative = True
                else:
                    names.append(parts[0])
        else:
            continue
        found += [f"line {node.lineno}: {n}" for n in names if _forbidden(n, relative)]
    return found


@pytest.mark.parametrize("source", [
    "from .test_search import tiny_model",
    "from . import test_rnn, test_transformer",
    "from .conftest import ROOT",
    "from tests.test_checkpoint import make_cfg",
    "from tests import test_rnn",
    "import tests.test_rnn as rnn",
    "import test_search",
    "def test_f():\n    from .test_export import sentences\n",
])
def test_the_check_sees_every_spelling_of_a_test_module_import(source):
    assert imported_test_modules(source)


def test_the_check_lets_helpers_and_other_packages_through():
    assert imported_test_modules("from .helpers import make_cfg\nfrom . import helpers\n"
                                 "import pytest\nfrom nmtkit.decode import search\n"
                                 "from test_no_such_module import x\n") == []


def test_no_test_module_imports_another_test_module_or_conftest():
    offenders = {p.name: imported_test_modules(p.read_text(encoding="utf-8"))
                 for p in sorted(TESTS.glob("*.py"))}
    offenders = {name: found for name, found in offenders.items() if found}
    assert not offenders, (
        f"test modules import other test modules or conftest: {offenders}. Put what they "
        "share in tests/helpers.py (plain functions) or tests/conftest.py (fixtures).")
