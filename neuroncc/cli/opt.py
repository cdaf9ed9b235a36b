"""``neuroncc opt FILE.nir|-``: parse, verify and print IR (the pass developer's main tool)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from neuroncc.errors import InputError
from neuroncc.ir import parse_module, print_module


def read_source(path: str) -> tuple[str, str]:
    """The text of ``path`` (``-`` is stdin) and the name to show in error messages."""
    if path == "-":
        try:
            return sys.stdin.buffer.read().decode("utf-8"), "<stdin>"
        except UnicodeDecodeError:
            raise InputError("<stdin>: not UTF-8 text") from None
    file = Path(path)
    try:
        return file.read_text(encoding="utf-8"), str(file)
    except FileNotFoundError:
        raise InputError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise InputError(f"{path}: is a directory, expected a .nir file") from None
    except UnicodeDecodeError:
        raise InputError(f"{path}: not a UTF-8 text file") from None


def run_opt(args: argparse.Namespace) -> int:
    text, source = read_source(args.file)
    functions = parse_module(text, source=source)
    sys.stdout.write(print_module(functions))
    return 0


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("opt", help="parse, verify, transform and print .nir IR")
    parser.add_argument("file", help="a .nir file, or - for stdin")
    parser.set_defaults(func=run_opt)
