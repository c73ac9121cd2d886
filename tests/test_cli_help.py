"""`nmtkit <command> --help` (issue 14, item 7): every argument has help, defaults are shown,
every subcommand ends with examples, and no text carries markup."""

import argparse
import re

import pytest

from nmtkit.cli import EXAMPLES, HelpFormatter, build_parser, main

COMMANDS = ["prepare", "train", "translate", "evaluate", "backtranslate", "distill", "average", "tune",
            "serve",
            "plot", "export"]


def subcommands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def test_every_argument_has_help_and_every_command_an_example():
    subs = subcommands()
    assert sorted(subs) == sorted(COMMANDS) == sorted(EXAMPLES)
    for action in build_parser()._actions:
        assert action.help, action.option_strings
    for name, sub in subs.items():
        assert sub.formatter_class is HelpFormatter, name
        assert f"nmtkit {name}" in (sub.epilog or ""), name
        for action in sub._actions:
            assert action.help, f"nmtkit {name} {'/'.join(action.option_strings) or action.dest}: no help"


@pytest.mark.parametrize("command", [None, *COMMANDS])
def test_help_prints_without_markup(command, capsys):
    with pytest.raises(SystemExit) as e:
        main([command, "--help"] if command else ["--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: nmtkit")
    assert not re.search(r"``|:class:|:func:|:meth:|\*\*", out), out
    if command is None:
        for name in COMMANDS:
            assert name in out
    else:
        examples = out.split("examples:\n\n")[1]
        assert examples.startswith("  ") and f"nmtkit {command} " in examples


def test_defaults_are_shown(capsys):
    with pytest.raises(SystemExit):
        main(["serve", "--help"])
    out = re.sub(r"\s+", " ", capsys.readouterr().out)
    assert "TCP port (0 = any free port) (default: 8000)" in out
    assert "address to bind (default loopback only)" in out  # already said: not twice
    assert "(default: None)" not in out and "(default: False)" not in out
    with pytest.raises(SystemExit):
        main(["plot", "--help"])
    assert "(default: 100)" in capsys.readouterr().out  # --dpi
