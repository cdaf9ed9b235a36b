"""Diagnostics for ``neuroncc opt``: where in the input an error belongs, and ``--verify-diagnostics``.

Parse and verifier errors carry their line and column. Pass errors (:class:`neuroncc.errors.PassError`) and
verifier errors after a pass name what they refuse as it prints (``func @f``, ``%big``, ``op 'expand'``,
``kernel 'fused_0_sum'``) but not where it came from, so :func:`locate` looks those names up in the input text:
the definition of the first value named, else the one op of that name, else the function's ``func`` line.
(Values keep their names through a pipeline when the input names them; numbered values like ``%3`` are
renumbered by passes that add or remove ops, so name values you expect an error on.)

``--verify-diagnostics`` checks annotations in the input, as MLIR's tests do::

    // expected-error@+1 {{has a dimension of size 100000}}
    %big = expand %x {shape = [4, 100000]} : tensor<4x100000xf32>

``expected-error`` (same line), ``@+N`` / ``@-N`` (N lines below / above), ``@N`` (line N of the file). The
text in ``{{...}}`` must occur in the message. Every expected error must be produced and every error
produced must be expected.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from neuroncc.errors import InputError, NeuronccError, ParseError
from neuroncc.ir import REGISTRY, Category


@dataclass(frozen=True)
class Diagnostic:
    """An error reported for the input: a 1-based line and column (0: unknown column) and a one-line message."""

    line: int
    column: int
    message: str

    def where(self, source: str) -> str:
        return f"{source}:{self.line}:{self.column}" if self.column else f"{source}:{self.line}"

    def format(self, source: str) -> str:
        return f"{self.where(source)}: {self.message}"


@dataclass(frozen=True)
class ExpectedError:
    """An ``expected-error`` annotation: the line it applies to, the line it is written on, the text to find."""

    line: int
    annotation_line: int
    text: str


def one_line(message: str) -> str:
    return "; ".join(line.strip() for line in message.splitlines() if line.strip())


# ---- where an error belongs ------------------------------------------------------------------------------

_FUNC = re.compile(r"^\s*func\s+@\"?([\w.]+)")
_RESULTS = re.compile(r"^\s*(%[\w.]+(?:\s*,\s*%[\w.]+)*)\s*=\s*([A-Za-z_][\w.]*)")
_PARAM = re.compile(r"(%[\w.]+)\s*:")
_VALUE = re.compile(r"%[\w.]+")
_FUNC_IN_MESSAGE = re.compile(r"func @\"?([\w.]+)")
_KERNEL_IN_MESSAGE = re.compile(r"kernel '([\w.]+)'")
_OP_IN_MESSAGE = re.compile(r"op '([\w.]+)'")


@dataclass(frozen=True)
class _Definition:
    line: int
    column: int


class SourceIndex:
    """Where each function, value definition and op sits in the text of one input (or ``// -----`` case)."""

    def __init__(self, text: str, first_line: int = 1):
        self.functions: dict[str, _Definition] = {}  # name -> its `func` line
        self.values: dict[tuple[str, str], _Definition] = {}  # (function, %name) -> definition
        self.ops: dict[tuple[str, str], list[_Definition]] = {}  # (function, op name) -> where it appears
        self.kernels: dict[str, _Definition] = {}  # kernel name attribute -> the kernel op
        current = ""
        for number, line in enumerate(text.splitlines(), start=1):
            if number < first_line or line.lstrip().startswith("//"):
                continue
            code = line.split("//", 1)[0]
            func = _FUNC.match(code)
            if func:
                current = func.group(1)
                self.functions[current] = _Definition(number, code.index("func") + 1)
            header = code.find("(") if func else code.find("region(")
            if header >= 0:  # parameters: of the function, or of a kernel's region
                for param in _PARAM.finditer(code, header):
                    self.values.setdefault((current, param.group(1)), _Definition(number, param.start(1) + 1))
            results = _RESULTS.match(code)
            if results:
                for name in _VALUE.finditer(code, results.start(1), results.end(1)):  # located at their op
                    self.values.setdefault((current, name.group(0)), _Definition(number, results.start(1) + 1))
                op_name = results.group(2)
                self.ops.setdefault((current, op_name), []).append(_Definition(number, results.start(1) + 1))
                is_kernel = op_name in REGISTRY and REGISTRY.get(op_name).category is Category.KERNEL
                kernel_name = re.search(r'\bname\s*=\s*"([\w.]+)"', code) if is_kernel else None
                if kernel_name:
                    self.kernels.setdefault(kernel_name.group(1), _Definition(number, results.start(1) + 1))

    def locate(self, message: str) -> tuple[int, int] | None:
        """The line and column of what ``message`` names, or None if it names nothing in this text."""
        named = _FUNC_IN_MESSAGE.search(message)
        functions = [named.group(1)] if named and named.group(1) in self.functions else list(self.functions)
        for value in _VALUE.findall(message):
            for function in functions:
                found = self.values.get((function, value))
                if found:
                    return found.line, found.column
        kernel = _KERNEL_IN_MESSAGE.search(message)
        if kernel and kernel.group(1) in self.kernels:
            found = self.kernels[kernel.group(1)]
            return found.line, found.column
        op = _OP_IN_MESSAGE.search(message)
        if op:
            places = [d for function in functions for d in self.ops.get((function, op.group(1)), [])]
            if len(places) == 1:
                return places[0].line, places[0].column
        if functions:
            found = self.functions[functions[0]]
            return found.line, found.column
        return None


_LOCATED = re.compile(r"^(?P<source>.*?):(?P<line>\d+):(?P<column>\d+): (?P<message>.*)$", re.DOTALL)


def locate(error: NeuronccError, text: str, source: str, first_line: int = 1) -> Diagnostic:
    """The :class:`Diagnostic` for ``error`` raised while processing ``text`` (read from ``source``).

    ``first_line`` is where this input starts in the file (with ``--split-input-file``); an error that names
    nothing found in the text is put on the input's first non-blank line.
    """
    if isinstance(error, ParseError):
        return Diagnostic(error.line, error.column, one_line(error.message))
    message = str(error)
    located = _LOCATED.match(message)
    if located and located.group("source") == source:
        return Diagnostic(int(located.group("line")), int(located.group("column")), one_line(located.group("message")))
    message = one_line(message)
    found = SourceIndex(text, first_line).locate(message)
    if found is None:
        lines = text.splitlines()
        blank = next((i for i in range(first_line - 1, len(lines)) if lines[i].strip()), first_line - 1)
        found = (blank + 1, 0)
    return Diagnostic(found[0], found[1], message)


# ---- expected-error annotations --------------------------------------------------------------------------

_ANNOTATION = re.compile(r"//\s*expected-(?P<kind>[a-z]+)(?P<rest>.*)$")
_OFFSET_AND_TEXT = re.compile(r"(?P<offset>@\S*?)?\s*\{\{(?P<text>.*?)\}\}")


def expected_errors(text: str, source: str, lines: Iterable[int] | None = None) -> list[ExpectedError]:
    """The ``expected-error`` annotations in ``text`` (only on ``lines``, 1-based, when given)."""
    wanted = set(lines) if lines is not None else None
    all_lines = text.splitlines()
    found: list[ExpectedError] = []
    for number, line in enumerate(all_lines, start=1):
        if wanted is not None and number not in wanted:
            continue
        match = _ANNOTATION.search(line)
        if not match:
            continue
        where = f"{source}:{number}"
        if match.group("kind") != "error":
            raise InputError(f"{where}: expected-{match.group('kind')} is not supported (neuroncc reports errors "
                             "only: use expected-error)")
        parts = _OFFSET_AND_TEXT.match(match.group("rest"))
        if parts is None:
            raise InputError(f"{where}: expected-error needs the message text in {{{{...}}}}, right after it or "
                             "after its @line")
        target = _annotation_target(parts.group("offset"), number, where)
        if not 1 <= target <= len(all_lines):
            raise InputError(f"{where}: expected-error{parts.group('offset')} points outside the file")
        found.append(ExpectedError(target, number, parts.group("text")))
    return found


def _annotation_target(offset: str | None, line: int, where: str) -> int:
    if not offset:
        return line
    spec = offset[1:]
    if re.fullmatch(r"[+-]\d+", spec):
        return line + int(spec)
    if re.fullmatch(r"\d+", spec):
        return int(spec)
    raise InputError(f"{where}: cannot read the line offset '{offset}' (use @+N, @-N or @N)")


def check_expected(expected: Sequence[ExpectedError], produced: Sequence[Diagnostic], source: str) -> list[str]:
    """Problems (one line each) with ``produced`` against ``expected``; empty when they agree exactly."""
    problems: list[str] = []
    unmatched = list(produced)
    for want in expected:
        match = next((d for d in unmatched if d.line == want.line and want.text in d.message), None)
        if match is not None:
            unmatched.remove(match)
            continue
        problem = f"{source}:{want.annotation_line}: expected error on line {want.line} was not produced: " \
                  f"{{{{{want.text}}}}}"
        near = [d for d in unmatched if d.line == want.line]
        if near:
            problem += f" (line {want.line} got: {near[0].message})"
        problems.append(problem)
    problems += [f"{d.where(source)}: unexpected error: {d.message}" for d in unmatched]
    return problems
