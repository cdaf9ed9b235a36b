"""The lit setup for ``.nir`` pass tests: round-trip every input through the printer, then run its RUN lines.

A test suite (neuroncc's ``tests/filecheck`` or a plug-in's) needs a two-line ``lit.cfg.py``::

    from neuroncc.testing.lit_format import configure
    configure(config, __file__)

Round trip: each ``// -----`` case is parsed, printed, parsed again and must print the same text. A case
that does not parse is allowed only if it carries an ``expected-error`` annotation (it tests that error);
a file holding other deliberately unparsable IR opts out with a ``// NO-ROUNDTRIP`` line.

The format lives in an importable module (not in lit.cfg.py) because lit sends it to its worker processes.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import lit.formats
import lit.Test

from neuroncc.errors import NeuronccError
from neuroncc.ir import parse_module, print_module
from neuroncc.ir.cases import has_code, split_input

#: The neuroncc checkout (or installation) this module belongs to: RUN lines run this copy of neuroncc.
NEURONCC_ROOT = Path(__file__).resolve().parents[2]


def round_trip_problem(path: str) -> str | None:
    """None if every case of ``path`` prints, re-parses and prints again to the same text."""
    with open(path, encoding="utf-8") as handle:
        text = handle.read()
    if "// NO-ROUNDTRIP" in text:
        return None
    for case in split_input(text):
        if not has_code(case):
            continue
        try:
            first = print_module(parse_module(case, source=path, verify=False))
        except NeuronccError as exc:
            if "expected-error" in case:
                continue  # the case tests this very error
            return f"round trip failed: {exc}"
        try:
            second = print_module(parse_module(first, source=f"{path} (printed)", verify=False))
        except NeuronccError as exc:
            return f"round trip failed: the printed IR does not parse: {exc}\n{first}"
        if first != second:
            return f"round trip changed the IR:\n{first}\n---\n{second}"
    return None


class RoundTripShTest(lit.formats.ShTest):
    """lit's shell-test format, after a print/parse round trip of the test's input."""

    def execute(self, test, litConfig):
        problem = round_trip_problem(test.getSourcePath())
        if problem is not None:
            return lit.Test.Result(lit.Test.FAIL, problem)
        return super().execute(test, litConfig)


def configure(config: Any, cfg_file: str, *, name: str | None = None) -> None:
    """Set up a lit suite of ``.nir`` tests in the directory of ``cfg_file`` (call it from lit.cfg.py).

    The suite is called ``name``, else after its folder (after the project folder for ``tests/``).

    In RUN lines, ``neuroncc`` runs ``python -m neuroncc.cli`` with the python running lit (no installed
    script needed) and ``filecheck`` is the one installed beside that python. The environment's PYTHONPATH
    reaches the tests, after this neuroncc's root.
    """
    suite = os.path.dirname(os.path.abspath(cfg_file))
    folder = os.path.basename(suite)
    config.name = name or (os.path.basename(os.path.dirname(suite)) if folder in ("tests", "test") else folder)
    config.test_format = RoundTripShTest(execute_external=False)
    config.suffixes = [".nir"]
    config.test_source_root = suite
    config.test_exec_root = os.path.join(suite, "Output")
    config.excludes = ["Output", "lit.cfg.py"]
    paths = [str(NEURONCC_ROOT), os.environ.get("PYTHONPATH", "")]
    config.environment["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
    config.environment["PATH"] = os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", "")])
    # Only the word `neuroncc` used as a command: never inside a path, nor the module name it becomes.
    config.substitutions.append((r"(?<![\w/.\-])neuroncc(?![\w/.\-])", f'"{sys.executable}" -m neuroncc.cli'))
