"""`nmtkit <command> --help` (issue 14, item 7; issue 64, item 7): the summary names every
command, every argument has help, defaults are shown, every subcommand ends with examples,
and no text carries markup."""

import argparse
import re

import pytest

from nmtkit.cli import COMMANDS, build_parser, main
from nmtkit.cli.options import HelpFormatter

NAMES = ["prepare", "train", "translate", "evaluate", "tune", "backtranslate", "distill", "average",
         "convert", "serve", "plot", "export"]


def subcommands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def test_every_argument_has_help_and_every_command_an_example():
    subs = subcommands()
    assert list(subs) == NAMES
    assert [c.__name__.rsplit(".", 1)[1] for c in COMMANDS] == NAMES  # one module per command
    for action in build_parser()._actions:
        assert action.help, action.option_strings
    for name, sub in subs.items():
        assert sub.formatter_class is HelpFormatter, name
        assert sub.get_default("func") is next(c for c in COMMANDS if c.__name__.endswith(name)).run
        assert f"nmtkit {name}" in (sub.epilog or ""), name
        for action in sub._actions:
            assert action.help, f"nmtkit {name} {'/'.join(action.option_strings) or action.dest}: no help"


def test_the_summary_names_every_command(capsys):
    with pytest.raises(SystemExit) as e:
        main(["--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    summary = re.search(r"Commands: (.*?)\.\n", out, re.S)
    assert summary, out
    assert re.split(r",\s+", summary.group(1)) == NAMES  # tune included (it was missing)
    listed = re.findall(r"^    (\w+)", out, re.M)  # the subcommand lines below COMMAND
    assert listed == NAMES


@pytest.mark.parametrize("command", NAMES)
def test_every_default_is_shown(command, capsys):
    """Each option whose default is not None (nor a flag's False, nor an empty list) shows
    it: "(default: X)" appended, or its text already says "(default ...)"."""
    sub = subcommands()[command]
    with pytest.raises(SystemExit):
        main([command, "--help"])
    out = re.sub(r"\s+", " ", capsys.readouterr().out)
    checked = 0
    for action in sub._actions:
        default = action.default
        if (not action.option_strings or default is None or default is False or default == []
                or default is argparse.SUPPRESS):
            continue
        checked += 1
        text = re.sub(r"\s+", " ", action.help)
        if "(default" in text:
            assert f"{text} (default:" not in out, f"{action.option_strings}: said twice"
        else:
            assert f"{text} (default: {default})" in out, f"nmtkit {command} {action.option_strings}"
    if command in ("serve", "tune", "translate", "plot", "export"):
        assert checked, command  # (this test checks something there)


@pytest.mark.parametrize("command", [None, *NAMES])
def test_help_prints_without_markup(command, capsys):
    with pytest.raises(SystemExit) as e:
        main([command, "--help"] if command else ["--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: nmtkit")
    assert not re.search(r"``|:class:|:func:|:meth:|\*\*", out), out
    if command is not None:
        examples = out.split("examples:\n\n")[1]
        assert examples.startswith("  ") and f"nmtkit {command} " in examples


def test_defaults_are_shown(capsys):
    with pytest.raises(SystemExit):
        main(["serve", "--help"])
    out = re.sub(r"\s+", " ", capsys.readouterr().out)
    assert "TCP port (0 = any free port) (default: 8000)" in out
    assert "address to bind (default loopback only)" in out  # already said: not twice
    assert "(default: None)" not in out and "(default: False)" not in out
    assert "intra-op threads (0 = the library's own choice) (default: 0)" in out  # 0 is shown
    with pytest.raises(SystemExit):
        main(["plot", "--help"])
    assert "(default: 100)" in capsys.readouterr().out  # --dpi


@pytest.mark.slow
def test_python_m_runs_the_same_command():
    import subprocess
    import sys

    for module in ("nmtkit", "nmtkit.cli"):
        proc = subprocess.run([sys.executable, "-m", module, "--help"], capture_output=True,
                              text=True, check=True)
        assert "Commands: prepare, train, translate, evaluate, tune," in re.sub(r"\s+", " ",
                                                                             proc.stdout)
