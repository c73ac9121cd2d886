"""The documentation cannot drift from the code.

- docs/guide.md is exactly what docs/build.py makes from docs/guide.src.md, so a changed
  line of an excerpted object (say, in models/attention.py) fails here until
  ``python docs/build.py`` is rerun;
- every excerpt marker names an existing object;
- every ``nmtkit.x.y`` name and every repository path in README.md and docs/*.md exists;
- README.md and docs/ name no path outside the repository;
- docs/results.md and docs/ablations.md are what benchmarks/report.py makes from
  benchmarks/results/.
"""

from __future__ import annotations

import importlib
import importlib.util
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = sorted((ROOT / "docs").glob("*.md"))
PAGES = [ROOT / "README.md", *DOCS]


def _load_module(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


build = _load_module("nmtkit_docs_build", ROOT / "docs" / "build.py")


def _rel(page: Path) -> str:
    return str(page.relative_to(ROOT))


def test_guide_is_built_from_its_source(tmp_path):
    out = tmp_path / "guide.md"
    assert build.main(["--src", str(build.SOURCE), "--out", str(out)]) == 0
    built = out.read_text(encoding="utf-8")
    committed = build.TARGET.read_text(encoding="utf-8")
    if built != committed:
        stale = [f"{p}::{n}" for p, n in build.markers(build.SOURCE.read_text(encoding="utf-8"))
                 if build.render(build.excerpt(p, n), build.TARGET.parent) not in committed]
        pytest.fail("docs/guide.md is out of date with the code or docs/guide.src.md; run "
                    f"`python docs/build.py`. Changed excerpts: {stale or 'none (prose changed)'}")


def test_every_marker_resolves():
    found = build.markers(build.SOURCE.read_text(encoding="utf-8"))
    assert len(found) >= 30, "the guide should show the code beside each idea"
    for path, name in found:
        ex = build.excerpt(path, name)
        assert ex.start <= ex.end and ex.code.strip(), f"{path}::{name}"


def test_a_changed_line_is_caught(tmp_path):
    """Editing an excerpted line of a copy of models/attention.py changes the built guide."""
    path = "src/nmtkit/models/attention.py"
    src = (ROOT / path).read_text(encoding="utf-8")
    ex = build.excerpt(path, "scaled_dot_product_attention")
    line = src.splitlines()[ex.end - 1]
    copy = tmp_path / path
    copy.parent.mkdir(parents=True)
    copy.write_text(src.replace(line, line + "  # edited", 1), encoding="utf-8")
    marker = f"<!-- code: {path}::scaled_dot_product_attention -->\n"
    assert build.build(marker, tmp_path / "docs", tmp_path) != build.build(marker, ROOT / "docs", ROOT)


def test_unknown_marker_is_an_error():
    with pytest.raises(build.MarkerError, match="no_such_function"):
        build.build("<!-- code: src/nmtkit/models/attention.py::no_such_function -->\n")
    with pytest.raises(build.MarkerError, match="no such file"):
        build.build("<!-- code: src/nmtkit/models/nothing.py::f -->\n")


FILE_SUFFIXES = {"json", "yaml", "yml", "py", "pt", "txt", "md", "csv", "png", "html", "gz", "bin"}
DOTTED = re.compile(r"(?<![\w./-])nmtkit(?:\.[A-Za-z_]\w*)+")


def _resolve(dotted: str) -> bool:
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ModuleNotFoundError:
            continue
        for attr in parts[i:]:
            if not hasattr(obj, attr):
                try:  # a submodule not imported by its package
                    obj = importlib.import_module(f"{obj.__name__}.{attr}")
                    continue
                except (ModuleNotFoundError, AttributeError):
                    return False
            obj = getattr(obj, attr)
        return True
    return False


@pytest.mark.parametrize("page", PAGES, ids=_rel)
def test_dotted_names_exist(page):
    text = page.read_text(encoding="utf-8")
    names = {m.rstrip(".") for m in DOTTED.findall(text)}
    names = {n for n in names if n.rsplit(".", 1)[-1] not in FILE_SUFFIXES}
    missing = sorted(n for n in names if not _resolve(n))
    assert not missing, f"{_rel(page)} names objects that do not exist: {missing}"


REPO_PATH = re.compile(
    r"(?<![\w./$<-])((?:src|tests|configs|scripts|benchmarks|experiments|docs)/[\w./-]*[\w/])")


@pytest.mark.parametrize("page", PAGES, ids=_rel)
def test_repository_paths_exist(page):
    text = page.read_text(encoding="utf-8")
    missing = []
    for m in REPO_PATH.finditer(text):
        path = m.group(1)
        after = text[m.end():m.end() + 1]
        if after in "{*<" and after:  # a pattern (step_*.pt, {a,b}.json), not one file
            continue
        if path.startswith("docs/figures/") and not path.endswith(".png"):
            continue
        if not (ROOT / path).exists():
            missing.append(path)
    assert not missing, f"{_rel(page)} names files that do not exist: {sorted(set(missing))}"


URL = re.compile(r"[a-z][a-z0-9+.-]*://\S+")
# A path from the root of a machine's file system (HTTP routes such as /v1/translate are fine).
ABSOLUTE = re.compile(r"(?<![\w.:/~$-])/(?:tmp|home|work|usr|etc|var|opt|root|mnt|srv|data|scratch|"
                      r"Users|private|Volumes)\b(?:/[\w.-]*)*")
LINK = re.compile(r"\]\(([^)#\s]+)")


@pytest.mark.parametrize("page", PAGES, ids=_rel)
def test_no_paths_outside_the_repository(page):
    text = URL.sub("URL", page.read_text(encoding="utf-8"))
    absolute = [m.group(0) for m in ABSOLUTE.finditer(text)]
    assert not absolute, f"{_rel(page)} names absolute paths: {absolute}"
    outside = []
    for m in re.finditer(r"(?:\.\./)+[\w./-]*", text):
        target = (page.parent / m.group(0)).resolve()
        if not target.is_relative_to(ROOT):
            outside.append(m.group(0))
    assert not outside, f"{_rel(page)} names paths outside the repository: {outside}"
    prose = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)  # code may contain "](...)"
    broken = [t for t in LINK.findall(prose)
              if not t.startswith(("URL", "mailto:")) and not (page.parent / t).exists()]
    assert not broken, f"{_rel(page)} has links to missing files: {broken}"


def test_results_pages_are_generated_from_the_results_files():
    sys.path.insert(0, str(ROOT / "benchmarks"))  # report.py imports its _tables
    try:
        report = _load_module("nmtkit_benchmarks_report", ROOT / "benchmarks" / "report.py")
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    stale = "is stale: run `python benchmarks/report.py --out docs/results.md --ablations docs/ablations.md`"
    assert (ROOT / "docs" / "results.md").read_text(encoding="utf-8") == report.page(), \
        f"docs/results.md {stale}"
    assert (ROOT / "docs" / "ablations.md").read_text(encoding="utf-8") == report.ablations_page(), \
        f"docs/ablations.md {stale}"
