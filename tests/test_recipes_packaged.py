"""config/recipe.py's find_recipe and packaged_recipes, `nmtkit train --list` and a recipe
given by name: the YAML recipes are package data (nmtkit/recipes, which configs/ links to),
so the built wheel, installed into a fresh virtual environment, trains one by its name."""

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

from nmtkit.cli import main
from nmtkit.config import ConfigError, find_recipe, load, packaged_recipes
from nmtkit.config.recipe import recipe_purpose, recipes_dir

from .helpers import ROOT, tiny_copy_overrides

COPY_TASK_PURPOSE = ("The Annotated Transformer's first example: learn to copy random symbol "
                     "sequences")


def test_configs_is_the_packaged_recipes():
    """configs/ is the package's recipes folder (a link), so every recipe the repository's
    README, docs and scripts name by path is also one a pip user names by its name."""
    assert (ROOT / "configs").is_symlink()
    assert (ROOT / "configs").resolve() == recipes_dir().resolve() == ROOT / "src/nmtkit/recipes"
    names = packaged_recipes()
    assert list(names) == sorted(p.stem for p in (ROOT / "configs").glob("*.yaml"))
    assert {"copy_task", "multi30k_transformer_small", "multi30k_homework_rnn"} <= set(names)
    for name, path in names.items():
        assert recipe_purpose(path), f"{name}.yaml opens without a comment saying what it is for"


def test_find_recipe_a_path_wins_then_a_name(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    packaged = recipes_dir() / "copy_task.yaml"
    assert find_recipe("copy_task") == packaged
    assert find_recipe("copy_task.yaml") == packaged
    assert load("copy_task").name == "copy_task"
    mine = tmp_path / "copy_task.yaml"  # a file of that path is the user's own recipe
    mine.write_text("name: my_copy\ndata:\n  corpus: copy\n")
    assert find_recipe("copy_task.yaml") == Path("copy_task.yaml")
    assert load("copy_task.yaml").name == "my_copy"
    (tmp_path / "copy_task").write_text("name: bare\ndata:\n  corpus: copy\n")
    assert load("copy_task").name == "bare"


def test_an_unknown_recipe_names_the_packaged_ones(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError) as e:
        find_recipe("multi30k_transformer_smal")
    message = str(e.value)
    assert message.startswith("multi30k_transformer_smal: config file not found")
    assert all(name in message for name in packaged_recipes())
    assert "nmtkit train --list" in message
    # a configs/NAME.yaml path where there is no configs/: the name is what finds it
    with pytest.raises(ConfigError, match=r"configs/copy_task\.yaml: config file not found; the "
                       r"packaged recipe of that name is used by its name: copy_task$"):
        load("configs/copy_task.yaml")


def test_recipe_purpose_is_the_first_sentence_of_its_opening_comment(tmp_path):
    assert recipe_purpose(recipes_dir() / "copy_task.yaml") == COPY_TASK_PURPOSE
    recipe = tmp_path / "r.yaml"
    recipe.write_text("# Two ways (Johnson et al. 2017) in one model. More\n# text.\nname: r\n")
    assert recipe_purpose(recipe) == "Two ways (Johnson et al. 2017) in one model"
    recipe.write_text("# A sentence that runs on\n# to the next line:\n#   nmtkit train r.yaml\n")
    assert recipe_purpose(recipe) == "A sentence that runs on to the next line"
    long = "A recipe whose purpose runs long" + ", and longer" * 8
    recipe.write_text(f"# {long}: the shape.\n")
    assert recipe_purpose(recipe) == long  # the detail after the colon left out
    recipe.write_text("# Short: the shape.\n")
    assert recipe_purpose(recipe) == "Short: the shape"
    recipe.write_text("name: r\n# a comment further down\n")
    assert recipe_purpose(recipe) == ""


@pytest.mark.slow
def test_train_list_names_every_recipe_with_its_purpose(capsys):
    assert main(["train", "--list"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    named = [line.split()[0] for line in lines if not line.startswith(" ")]
    assert named == list(packaged_recipes())
    at = next(i for i, line in enumerate(lines) if line.startswith("copy_task "))
    text = " ".join(" ".join(lines[at:at + 2]).split())
    assert text.startswith(f"copy_task {COPY_TASK_PURPOSE}")
    assert main(["train"]) == 2  # neither a recipe nor --list
    assert "train needs a RECIPE" in capsys.readouterr().err


def _fresh_venv_with_the_wheel(tmp: Path) -> Path:
    """Build the wheel from a copy of the sources (no build files in the repository), make a
    virtual environment without pip that sees this one's dependencies (torch ...) through a
    .pth file but not the repository's src/, and pip-install the wheel into it, offline."""
    src = tmp / "src_copy"
    shutil.copytree(ROOT / "src", src / "src", symlinks=False,
                    ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                    "--no-index", "-q", "-w", str(tmp / "dist"), str(src)],
                   check=True, capture_output=True, text=True)
    (wheel,) = (tmp / "dist").glob("nmtkit-*.whl")
    packaged = {n for n in zipfile.ZipFile(wheel).namelist() if n.startswith("nmtkit/recipes/")}
    assert packaged == {f"nmtkit/recipes/{name}.yaml" for name in packaged_recipes()}
    venv = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    site = Path(subprocess.run(
        [venv / "bin" / "python", "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        check=True, capture_output=True, text=True).stdout.strip())
    (site / "dependencies.pth").write_text(sysconfig.get_path("purelib") + "\n")
    subprocess.run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"),
                    "install", "--no-deps", "--no-index", "-q", str(wheel)],
                   check=True, capture_output=True, text=True)
    return venv


@pytest.mark.slow
def test_the_installed_wheel_trains_a_recipe_by_name(tmp_path):
    venv = _fresh_venv_with_the_wheel(tmp_path)
    work = tmp_path / "work"  # no configs/ here, and the repository's src/ is not on the path
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    where = subprocess.run([venv / "bin" / "python", "-c", "import nmtkit; print(nmtkit.__file__)"],
                           cwd=work, env=env, check=True, capture_output=True, text=True)
    assert where.stdout.startswith(str(venv))
    sets = [s for o in tiny_copy_overrides(3) for s in ("--set", o)]
    trained = subprocess.run([venv / "bin" / "nmtkit", "train", "copy_task", *sets,
                              "--set", "train.valid_every=3", "--run-dir", "run"],
                             cwd=work, env=env, capture_output=True, text=True)
    assert trained.returncode == 0, trained.stderr[-3000:]
    result = json.loads(trained.stdout.splitlines()[-1])
    assert result["run_dir"] == "run" and result["step"] == 3
    assert (work / "run" / "best.pt").exists()
