"""The ``neuroncc`` command line. Each subcommand lives in its own module and registers its parser here.

Exit codes: 0 success; 1 a check failed (``run --check`` mismatch, ``cache verify`` found bad entries);
2 bad input or a typed neuroncc error (one line on stderr, no traceback); 3 an internal error (a bug: the
message asks for a report; ``NEURONCC_TRACEBACK=1`` shows the traceback).

The console script and ``python -m neuroncc.cli`` run :func:`run_and_exit`, which ends the process without
Python's teardown once what later processes read is finished (``process_exit.py``); :func:`main` returns.

May import: everything in neuroncc (the front end only inside the commands that need torch).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence
from typing import NoReturn

from neuroncc import __version__
from neuroncc.cli.commands import COMMANDS
from neuroncc.cli.process_exit import exit_process, exit_status
from neuroncc.errors import NeuronccError

EXIT_OK, EXIT_CHECK_FAILED, EXIT_USAGE, EXIT_INTERNAL = 0, 1, 2, 3

class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # argparse's default exit code 2 matches ours; keep one line
        self.exit(EXIT_USAGE, f"neuroncc: error: {message}\n")


def build_parser(only: str | None = None, *, listing: bool = False) -> argparse.ArgumentParser:
    """The command-line parser; with ``only``, just that subcommand's module is imported (``neuroncc opt`` runs
    hundreds of times in a pass test suite and should not pay for importing the others). With ``listing``, no
    subcommand's module is imported: each command is its name and help (commands.py), enough for ``--version``,
    ``--help`` and a command line that names no command (a usage error)."""
    parser = _Parser(prog="neuroncc", description="neuroncc: a tensor-program compiler for PyTorch")
    parser.add_argument("--version", action="version", version=f"neuroncc {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name, command in COMMANDS.items():
        if listing:
            subparsers.add_parser(name, help=command.help)
        elif only is None or name == only:
            importlib.import_module(command.module).add_parser(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    arguments = list(sys.argv[1:] if argv is None else argv)
    # the top level has no option but --version and --help: a command, if any, is the first argument
    command = arguments[0] if arguments and arguments[0] in COMMANDS else None
    parser = build_parser(only=command, listing=command is None)
    args = parser.parse_args(arguments)
    if getattr(args, "func", None) is None:
        parser.print_help()
        return EXIT_USAGE
    try:
        if getattr(args, "apply_cpu", None) is not None:
            args.apply_cpu(args)  # --cpu NAME (cli/cpu_option.py): checked before anything is compiled
        return int(args.func(args) or 0)
    except NeuronccError as exc:
        message = "; ".join(line.strip() for line in str(exc).splitlines() if line.strip())
        print(f"neuroncc: error: {message}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("neuroncc: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return EXIT_OK
    except Exception as exc:  # a bug in neuroncc: say so in one line unless asked for the traceback
        if os.environ.get("NEURONCC_TRACEBACK"):
            raise
        print(f"neuroncc: internal error: {type(exc).__name__}: {exc} (set NEURONCC_TRACEBACK=1 for details; "
              "please report this)", file=sys.stderr)
        return EXIT_INTERNAL


def run_and_exit() -> NoReturn:
    """The ``neuroncc`` command as a process (the console script, ``python -m neuroncc.cli``): :func:`main`, then
    the process ends with its exit code (``process_exit.exit_process``: fast, after finishing what it must)."""
    try:
        code = main()
    except SystemExit as exc:  # argparse: usage errors, --help, --version
        code = exit_status(exc.code)
    exit_process(code)


if __name__ == "__main__":
    run_and_exit()
