"""The source's own shape (issue 72, item 7): no function in ``src/`` over
:data:`MAX_FUNCTION_LINES` lines, none of its modules over :data:`MAX_MODULE_LINES`. A
function that grows past the limit is split where its algorithm has a seam (a step of the
search, a route of the server, the checks of a request), not into helpers that only pass
their arguments on."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "nmtkit"
MAX_FUNCTION_LINES = 80
MAX_MODULE_LINES = 800


def function_lengths(source: str) -> dict[str, int]:
    """``"Class.method"``/``"function"`` (nested ones as ``"outer.inner"``) -> its lines,
    from its first decorator to its last line, docstring and comments included."""
    found: dict[str, int] = {}

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = f"{prefix}{child.name}"
                if not isinstance(child, ast.ClassDef):
                    first = min([child.lineno, *(d.lineno for d in child.decorator_list)])
                    found[name] = (child.end_lineno or child.lineno) - first + 1
                visit(child, f"{name}.")
            else:
                visit(child, prefix)

    visit(ast.parse(source), "")
    return found


def test_function_lengths_count_decorators_nested_functions_and_methods():
    source = ("@decorator\n"
              "def f(x):\n"
              "    def g():\n"
              "        return 1\n"
              "    return g()\n"
              "\n"
              "class C:\n"
              "    async def m(self):\n"
              "        pass\n")
    assert function_lengths(source) == {"f": 5, "f.g": 2, "C.m": 2}


def test_no_function_in_src_is_over_the_limit():
    over = {f"{path.relative_to(SRC.parent)}:{name}": n
            for path in sorted(SRC.rglob("*.py"))
            for name, n in function_lengths(path.read_text(encoding="utf-8")).items()
            if n > MAX_FUNCTION_LINES}
    assert not over, (f"functions over {MAX_FUNCTION_LINES} lines: {over}; split each where "
                      "its algorithm has a seam")


def test_no_module_in_src_is_over_the_limit():
    over = {str(p.relative_to(SRC.parent)): n for p in sorted(SRC.rglob("*.py"))
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES}
    assert not over, f"modules over {MAX_MODULE_LINES} lines: {over}"
