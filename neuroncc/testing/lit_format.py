"""A lit test format for ``.nir`` tests: round-trip every input through the printer, then run its RUN lines.

Defined in an importable module (not in lit.cfg.py) because lit sends the format to its worker processes.
Round trip: each ``// -----`` chunk is parsed, printed, parsed again and must print the same text; a file
holding deliberately unparsable IR opts out with a ``// NO-ROUNDTRIP`` line.
"""

from __future__ import annotations

import lit.formats
import lit.Test

from neuroncc.errors import NeuronccError


def round_trip_problem(path: str) -> str | None:
    """None if every chunk of ``path`` prints, re-parses and prints again to the same text."""
    from neuroncc.cli.opt import split_input
    from neuroncc.ir import parse_module, print_module

    with open(path, encoding="utf-8") as handle:
        text = handle.read()
    if "// NO-ROUNDTRIP" in text:
        return None
    for chunk in split_input(text):
        if all(not line.strip() or line.strip().startswith("//") for line in chunk.splitlines()):
            continue
        try:
            first = print_module(parse_module(chunk, source=path, verify=False))
            second = print_module(parse_module(first, source=f"{path} (printed)", verify=False))
        except NeuronccError as exc:
            return f"round trip failed: {exc}"
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
