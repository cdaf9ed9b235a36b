"""The ``neuroncc`` subcommands: each one's module and its one-line help, known without importing the module.

``neuroncc --version``, ``neuroncc --help``, a bare ``neuroncc`` and a mistyped command list the commands from this
table alone; a command's own module (and what it imports: the IR, the passes, the code generators, the driver,
~0.25 s) is imported only when that command runs. Each module's ``add_parser`` takes its help from here.

May import: nothing of neuroncc.
"""

from __future__ import annotations

from typing import NamedTuple


class Command(NamedTuple):
    """A subcommand: the module defining ``add_parser(subparsers)`` (its parser sets ``func``), its one-line help."""

    module: str
    help: str


#: Subcommand name -> its module and help, in the order ``neuroncc --help`` lists them.
COMMANDS = {
    "opt": Command("neuroncc.cli.opt", "parse, verify, transform and print .nir IR"),
    "demo": Command("neuroncc.cli.demo", "export, compile, train and inspect the bundled example model (start here)"),
    "compile": Command("neuroncc.cli.compile", "compile an exported program (.pt2) through the compile cache"),
    "run": Command("neuroncc.cli.run", "compile and run an exported program (.pt2) on given or random inputs"),
    "inspect": Command("neuroncc.cli.inspect",
                       "print the IR, per-pass IR, kernels (and NKI code) of an exported program"),
    "evaluate": Command("neuroncc.cli.evaluate",
                        "evaluate an exported program under neuroncc: fallbacks, numerics, compile and run time"),
    "cache": Command("neuroncc.cli.cache", "list, explain, verify or clear the compile cache"),
}
