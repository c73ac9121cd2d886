"""The documentation cannot drift from the code.

- docs/guide.md and docs/handbook.md are exactly what docs/build.py makes from their
  ``.src.md`` sources, so a changed line of an excerpted or linked object (say, in
  models/attention.py) fails here until ``python docs/build.py`` is rerun;
- every excerpt marker and every ``[[path::name]]`` link names an existing object;
- the guide keeps the seeds' size (no section over 250 lines, at most 2,500 in all) and its
  contents list links every section; every ``#anchor`` of a built page exists;
- the guide's table of the homework's choices is the recipe's and the defaults';
- every ``nmtkit.x.y`` name and every repository path in README.md and docs/*.md exists;
- README.md and docs/ name no path outside the repository;
- docs/results.md is what benchmarks/report.py makes from benchmarks/results/.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import re
import sys
from pathlib import Path

import pytest
import yaml

from nmtkit import config

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
BUILT = sorted(build.PAGES.items())


def _rel(page: Path) -> str:
    return str(page.relative_to(ROOT))


@pytest.mark.parametrize("src,page", BUILT, ids=[_rel(p) for _, p in BUILT])
def test_page_is_built_from_its_source(src, page, tmp_path):
    out = tmp_path / page.name
    assert build.main(["--src", str(src), "--out", str(out)]) == 0
    built = out.read_text(encoding="utf-8")
    committed = page.read_text(encoding="utf-8")
    if built != committed:
        source = src.read_text(encoding="utf-8")
        stale = [f"{p}::{n}" for p, n in build.markers(source)
                 if build.render(build.excerpt(p, n), build.DOCS) not in committed]
        stale += [f"{p}::{n}" for p, n in build.links(source)
                  if build.render_link(build.excerpt(p, n), build.DOCS) not in committed]
        pytest.fail(f"{_rel(page)} is out of date with the code or {_rel(src)}; run "
                    f"`python docs/build.py`. Changed excerpts: {stale or 'none (prose changed)'}")


@pytest.mark.slow
def test_check_mode_finds_a_stale_page(tmp_path):
    out = tmp_path / "guide.md"
    out.write_text("stale\n", encoding="utf-8")
    assert build.main(["--src", str(build.SOURCE), "--out", str(out), "--check"]) == 1
    assert build.main(["--src", str(build.SOURCE), "--out", str(out)]) == 0
    assert build.main(["--src", str(build.SOURCE), "--out", str(out), "--check"]) == 0


def test_every_marker_resolves():
    source = build.SOURCE.read_text(encoding="utf-8")
    found = build.markers(source)
    assert len(found) >= 30, "the guide should show the code beside each idea"
    assert len(build.links(source)) >= 10, "the guide should link the production code"
    for src in build.PAGES:
        text = src.read_text(encoding="utf-8")
        for path, name in build.markers(text) + build.links(text):
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


def test_a_link_marker_becomes_a_link_to_the_lines():
    text = "See [[src/nmtkit/models/attention.py::scaled_dot_product_attention]].\n"
    ex = build.excerpt("src/nmtkit/models/attention.py", "scaled_dot_product_attention")
    built = build.build(text)
    assert (f"See [`src/nmtkit/models/attention.py::scaled_dot_product_attention`]"
            f"(../src/nmtkit/models/attention.py#L{ex.start}-L{ex.end}).") in built
    fenced = "```\n" + text + "```\n"  # code is left as written
    assert build.build(fenced).endswith(fenced)
    with pytest.raises(build.MarkerError, match="no_such_function"):
        build.build("[[src/nmtkit/models/attention.py::no_such_function]]\n")


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


# --- the guide's shape ---------------------------------------------------------------------------

MAX_SECTION, MAX_GUIDE = 250, 2500


def _sections(text: str) -> list[tuple[str, int]]:
    """(heading, lines up to the next ``#`` or ``##`` heading) of a built page."""
    lines, found, fenced = text.splitlines(), [], False
    starts = []
    for i, line in enumerate(lines):
        if build.FENCE.match(line):
            fenced = not fenced
        elif not fenced and build.HEADING.match(line):
            starts.append(i)
    for a, b in zip(starts, [*starts[1:], len(lines)], strict=True):
        found.append((lines[a], b - a))
    return found


def test_the_guide_is_in_the_seeds_size():
    text = build.TARGET.read_text(encoding="utf-8")
    sections = _sections(text)
    assert len(sections) >= 30
    too_long = [(h, n) for h, n in sections if n > MAX_SECTION]
    assert not too_long, f"sections over {MAX_SECTION} lines: {too_long}"
    assert len(text.splitlines()) <= MAX_GUIDE


def test_section_sizes_are_counted_from_headings():
    text = "# A\nx\n## B\n```\n# not a heading\n```\ny\n"
    assert _sections(text) == [("# A", 2), ("## B", 5)]


@pytest.mark.parametrize("src,page", BUILT, ids=[_rel(p) for _, p in BUILT])
def test_contents_list_every_section(src, page):
    text = page.read_text(encoding="utf-8")
    titles = build.headings(src.read_text(encoding="utf-8"))[1:]
    listed = re.findall(r"^ *- \[(.+)\]\(#([\w-]+)\)$", text, flags=re.M)
    assert [t for t, _ in listed] == [t.replace("`", "") for _, t in titles]


def _anchors(page: Path) -> set[str]:
    seen: dict[str, int] = {}
    text = page.read_text(encoding="utf-8")
    fenced, titles = False, []
    for line in text.splitlines():
        if build.FENCE.match(line):
            fenced = not fenced
        elif not fenced and (m := re.match(r"^#{1,6} (.+?)\s*$", line)):
            titles.append(m[1])
    return {build.slug(t, seen) for t in titles}


@pytest.mark.parametrize("page", PAGES, ids=_rel)
def test_anchors_exist(page):
    text = re.sub(r"^```.*?^```", "", page.read_text(encoding="utf-8"), flags=re.S | re.M)
    missing = []
    for target, anchor in re.findall(r"\]\(([\w./-]*)#([\w-]+)\)", text):
        if target.endswith(".py") or "://" in target:
            continue  # a line of code (#L10-L20), checked by the build
        linked = (page.parent / target) if target else page
        if anchor not in _anchors(linked):
            missing.append(f"{target}#{anchor}")
    assert not missing, f"{_rel(page)} links to missing anchors: {missing}"


def test_slugs_follow_github():
    seen: dict[str, int] = {}
    assert build.slug("4. Scaled dot-product attention (Eq. 1)", seen) == \
        "4-scaled-dot-product-attention-eq-1"
    assert build.slug("20. From the post's names to nmtkit's", seen) == \
        "20-from-the-posts-names-to-nmtkits"
    assert build.slug("Ensembles", seen) == "ensembles"
    assert build.slug("Ensembles", seen) == "ensembles-1"


# --- the homework's recipe -----------------------------------------------------------------------

HOMEWORK = ROOT / "configs" / "multi30k_homework_rnn.yaml"
SECTIONS = {"data": config.DataConfig, "model": config.ModelConfig, "train": config.TrainConfig,
            "decode": config.DecodeConfig}


def _switches() -> list[tuple[str, str, object]]:
    """(section, key, value) of every switch in the guide's table of the homework's choices."""
    text = build.SOURCE.read_text(encoding="utf-8")
    table = text.split("| the homework | nmtkit's default | the switch that restores it |", 1)[1]
    rows = [r for r in table.split("\n\n", 1)[0].splitlines() if r.startswith("| ")]
    assert len(rows) >= 12, rows
    found = []
    for row in rows:
        for item in re.findall(r"`(\w+)\.(\w+): ([^`]+)`", row.split("|")[3]):
            found.append((item[0], item[1], yaml.safe_load(item[2])))
    return found


def _same(a: object, b: object) -> bool:
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return list(a) == list(b)
    return a == b


@pytest.mark.slow
def test_the_homework_table_is_the_recipe_against_the_defaults():
    cfg = config.load(HOMEWORK)
    switches = _switches()
    for section, key, value in switches:
        default = {f.name: f.default for f in dataclasses.fields(SECTIONS[section])}[key]
        assert _same(getattr(getattr(cfg, section), key), value), (section, key)
        assert not _same(default, value), f"{section}.{key}: {value!r} is nmtkit's default"
    assert cfg.model.arch == "rnn" and cfg.data.corpus == "multi30k"
    # and every key of the recipe that differs from the defaults is in the table (or named here)
    raw = yaml.safe_load(HOMEWORK.read_text(encoding="utf-8"))
    listed = {(s, k) for s, k, _ in switches}
    obvious = {("model", "arch"), ("data", "src_lang"), ("data", "tgt_lang"), ("data", "test"),
               ("data", "valid"), ("data", "train"), ("data", "corpus"), ("train", "max_steps"),
               ("train", "max_minutes"), ("train", "seed"), ("model", "emb_dim"),
               ("model", "rnn_hidden"), ("decode", "batch_size"), ("train", "log_every"),
               ("model", "teacher_forcing_min")}  # (the floor of an annealing the recipe does not do)
    unlisted = [(s, k) for s, keys in raw.items() if s in SECTIONS for k, v in keys.items()
                if not _same(v, {f.name: f.default for f in dataclasses.fields(SECTIONS[s])}[k])
                and (s, k) not in listed | obvious]
    assert not unlisted, f"the recipe changes defaults the guide's table does not list: {unlisted}"


def test_every_key_of_the_homework_recipe_is_commented():
    lines = HOMEWORK.read_text(encoding="utf-8").splitlines()
    keys = [ln for ln in lines if re.match(r"^\s+\w+:", ln)]
    assert len(keys) > 40
    bare = [ln for ln in keys if "#" not in ln]
    assert not bare, bare
