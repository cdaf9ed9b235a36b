"""``neuroncc --version``, ``--help``, a bare ``neuroncc`` and a mistyped command import no subcommand's module
(neuroncc/cli/commands.py lists the commands; until session 48 every module was imported for them, ~0.25 s of IR,
passes, code generators and driver), and say what they said when every module was imported."""

from __future__ import annotations

import contextlib
import io
import json
import subprocess
import sys

import pytest
from cli_testing import process_environment

from neuroncc.cli import build_parser, main
from neuroncc.cli.commands import COMMANDS

#: The CLI's main on ARGV in a fresh process, then the neuroncc modules imported, as JSON on the last line.
MODULES_AFTER = """
import json, sys
from neuroncc.cli import main
try:
    code = main(sys.argv[1:])
except SystemExit as exc:
    code = exc.code
print(json.dumps([code, sorted(name for name in sys.modules if name.startswith("neuroncc"))]))
"""


@pytest.mark.parametrize("argv", [("--version",), ("--help",), (), ("bogus",)], ids=["version", "help", "bare", "typo"])
def test_the_top_level_imports_no_subcommand(argv, tmp_path):
    child = subprocess.run([sys.executable, "-c", MODULES_AFTER, *argv], capture_output=True, text=True, timeout=120,
                           env=process_environment(tmp_path, tmp_path / "cache"))
    code, modules = json.loads(child.stdout.splitlines()[-1])
    assert code == (0 if argv in (("--version",), ("--help",)) else 2), child.stderr
    imported = [command.module for command in COMMANDS.values() if command.module in modules]
    assert not imported, f"neuroncc {' '.join(argv)} imported {imported}"
    assert "neuroncc.ir" not in modules and "neuroncc.driver" not in modules, modules


def _said(argv: list[str], parser) -> tuple[object, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = parser.parse_args(argv)
        except SystemExit as exc:
            code = exc.code
    return code, out.getvalue(), err.getvalue()


@pytest.mark.parametrize("argv", [["--help"], ["--version"], ["bogus"], []])
def test_the_listing_says_what_the_full_parser_says(argv):
    full, listing = build_parser(), build_parser(listing=True)
    assert _said(argv, listing) == _said(argv, full)


def test_each_commands_module_registers_the_listed_help():
    parser = build_parser()
    (subparsers,) = [action for action in parser._actions if action.dest == "command"]
    assert {choice.dest: choice.help for choice in subparsers._choices_actions} == \
        {name: command.help for name, command in COMMANDS.items()}


def test_a_command_still_gets_its_own_parser(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["opt", "--help"])
    assert exit_.value.code == 0 and "--pipeline" in capsys.readouterr().out
