"""``neuroncc opt FILE.nir|- [-p PIPELINE]``: parse, verify, transform and print IR (the pass developer's tool).

    neuroncc opt f.nir -p 'canonicalize,fuse,tile{target=trn2}' --print-ir-after-all
    neuroncc opt f.nir -p static-shape --split-input-file --verify-diagnostics
    neuroncc opt f.nir -p 'fuse,tile{target=cpu}' --emit llvm      the generated code instead of the IR
    neuroncc opt --list-passes

The verifier runs after every pass. ``--print-ir-after-all`` / ``--print-ir-after=PASS`` print the IR to
stderr under MLIR-style ``// -----// IR Dump After PASS //----- //`` headers. ``--split-input-file`` treats
``// -----`` lines as separators between independent inputs: each is processed on its own, an error in one is
reported (on stderr, at its line in the whole file) and the others still run, as in MLIR's tests.
``--verify-diagnostics`` checks the errors against ``// expected-error@+1 {{...}}`` annotations instead of
reporting them (see :mod:`neuroncc.cli.diagnostics`): exit 0 if they agree, 1 with a report if not.
``--emit llvm`` prints, instead of the IR, the LLVM IR the cpu code generator makes of it (one module per
kernel phase, before LLVM optimizes it, after comments saying which donated outputs it computes in place),
``--emit nki`` the NKI kernel module for ``--nki-target``: the code
follows the kernels' tile decisions, so a test can change one and see the code change.

Exit codes: 0 success; 1 ``--verify-diagnostics`` found a mismatch; 2 bad input or an error in the IR (one
line per error on stderr). This module must not import torch: pass developers run it hundreds of times.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from neuroncc.cli.commands import COMMANDS
from neuroncc.cli.diagnostics import Diagnostic, check_expected, expected_errors, locate
from neuroncc.codegen.llvm.regions import wrap_remaining_ops
from neuroncc.codegen.nki import emit_program
from neuroncc.errors import InputError, NeuronccError, PipelineError
from neuroncc.cli.cpu_option import add_cpu_argument
from neuroncc.hardware.host import target_cpu
from neuroncc.ir import Function, parse_module, print_module
from neuroncc.ir.cases import has_code, split_input
from neuroncc.passes.manager import PassContext, Pipeline, format_option
from neuroncc.passes.pipeline import ENTRY_POINT_GROUP, IN_TREE_PASSES, parse_pipeline, pass_registry

SPLIT_MARKER = "// -----"
EXIT_OK, EXIT_DIAGNOSTICS_MISMATCH, EXIT_ERROR = 0, 1, 2


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


@dataclass(frozen=True)
class CaseResult:
    """One input (or ``// -----`` case): its first line in the file, and its printed output or its error."""

    first_line: int
    output: str | None
    diagnostic: Diagnostic | None


def run_case(text: str, first_line: int, source: str, pipeline: Pipeline, ctx: PassContext,
             emit: str = "nir", nki_target: str = "trn2") -> CaseResult:
    try:
        functions: list[Function] = [pipeline.run(fn, ctx) for fn in parse_module(text, source=source)]
        output = print_module(functions) if emit == "nir" else "".join(generated_code(fn, emit, nki_target)
                                                                       for fn in functions)
    except NeuronccError as exc:
        return CaseResult(first_line, None, locate(exc, text, source, first_line))
    return CaseResult(first_line, output, None)


def generated_code(fn: Function, emit: str, nki_target: str) -> str:
    """The code a target's code generator makes of ``fn`` (after the pipeline): ``llvm`` (the cpu target's LLVM
    IR, one module per kernel phase; kernels it cannot compile run in the interpreter, said in a comment) or
    ``nki`` (the NKI kernel module for ``nki_target``)."""
    if emit == "nki":
        return emit_program(fn, nki_target).source
    from neuroncc.codegen.llvm.program import plan_launch  # llvmlite: only when LLVM IR is asked for

    host = target_cpu()
    plan, texts = plan_launch(wrap_remaining_ops(fn), host.name, host.features)
    notes = [f"; func @{fn.name} (LLVM IR of its kernels, before optimization, for CPU {host.name})\n"]
    for step in plan.steps:
        if step.reason:
            notes.append(f"; op #{step.op_index} ({step.kind}) runs in the interpreter: {step.reason}\n")
        if step.row_block:
            notes.append(f"; op #{step.op_index} ({step.kind}): its matmul and epilogue run in blocks of "
                         f"{step.row_block} rows\n")
    in_place = set(plan.in_place)
    for output, param in fn.metadata.get("donated", ()):
        done = "computed in place in" if (output, param) in in_place else "kept apart from (then copied into)"
        notes.append(f"; output #{output} is {done} parameter #{param}'s buffer\n")
    return "".join(notes) + "".join(texts)


def run_opt(args: argparse.Namespace) -> int:
    if args.list_passes:
        sys.stdout.write(list_passes())
        return EXIT_OK
    if args.file is None:
        raise InputError("opt: give a .nir file, or - to read stdin")
    text, source = read_source(args.file)
    pipeline = parse_pipeline(args.pipeline) if args.pipeline else Pipeline(())
    known = set(pass_registry().names())
    for name in args.print_ir_after:
        if name not in known:
            raise PipelineError(f"--print-ir-after: unknown pass '{name}'")
    ctx = PassContext(verify_each=not args.no_verify_each, print_after_all=args.print_ir_after_all,
                      print_after=frozenset(args.print_ir_after), ir_stream=sys.stderr)
    cases = split_input(text) if args.split_input_file else [text]
    results = []
    for case in cases:
        first_line = case.count("\n", 0, len(case) - len(case.lstrip("\n"))) + 1
        if args.split_input_file and not has_code(case):
            results.append(CaseResult(first_line, None, None))
            continue
        results.append(run_case(case, first_line, source, pipeline, ctx, args.emit, args.nki_target))
    outputs = [r.output for r in results if r.output is not None]
    write_output(f"{SPLIT_MARKER}\n".join(outputs), args.output)
    diagnostics = [r.diagnostic for r in results if r.diagnostic is not None]
    if args.verify_diagnostics:
        problems = check_expected(expected_errors(text, source), diagnostics, source)
        for problem in problems:
            print(f"neuroncc: error: {problem}", file=sys.stderr)
        return EXIT_DIAGNOSTICS_MISMATCH if problems else EXIT_OK
    for diagnostic in diagnostics:
        print(f"neuroncc: error: {diagnostic.format(source)}", file=sys.stderr)
    return EXIT_ERROR if diagnostics else EXIT_OK


def write_output(text: str, path: str | None) -> None:
    if path is None or path == "-":
        sys.stdout.write(text)
        return
    try:
        Path(path).write_text(text, encoding="utf-8")
    except OSError as exc:
        raise InputError(f"-o {path}: cannot write: {exc.strerror}") from None


def list_passes() -> str:
    """Every available pass with its options and defaults, and where it comes from (a plug-in's distribution)."""
    registry = pass_registry()
    in_tree = {cls.name for cls in IN_TREE_PASSES}
    origins = {ep.name: f"{ep.dist.name} {ep.dist.version}" if ep.dist else ep.value
               for ep in metadata.entry_points(group=ENTRY_POINT_GROUP)}
    lines = []
    for name in registry.names():
        origin = "" if name in in_tree else f"  [{origins.get(name, 'plug-in')}]"
        try:
            cls = registry.get(name)
        except PipelineError as exc:
            lines.append(f"{name}{origin}\n    cannot load: {exc}\n")
            continue
        summary = (cls.__doc__ or "").strip().splitlines()
        lines.append(f"{name}{origin}\n    {summary[0] if summary else '(no description)'}\n")
        for field in dataclasses.fields(cls):
            default = "(required)" if field.default is dataclasses.MISSING else format_option(field.default)
            lines.append(f"    {field.name}={default}\n")
    return "".join(lines)


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("opt", help=COMMANDS["opt"].help)
    parser.add_argument("file", nargs="?", help="a .nir file, or - for stdin")
    parser.add_argument("-p", "--pipeline", default="",
                        help="passes to run, e.g. 'canonicalize,fuse,tile{target=trn2 tile=[128,512]}'")
    parser.add_argument("-o", "--output", metavar="FILE", help="write the IR there instead of stdout")
    parser.add_argument("--print-ir-after-all", action="store_true", help="print the IR after every pass (stderr)")
    parser.add_argument("--print-ir-after", action="append", default=[], metavar="PASS",
                        help="print the IR after this pass (stderr); may be repeated")
    parser.add_argument("--split-input-file", action="store_true",
                        help="process each '// -----'-separated chunk of the input on its own")
    parser.add_argument("--verify-diagnostics", action="store_true",
                        help="check errors against '// expected-error@+1 {{text}}' annotations in the input "
                             "(exit 1 on a mismatch)")
    parser.add_argument("--no-verify-each", action="store_true", help="do not verify the IR after every pass")
    parser.add_argument("--emit", choices=("nir", "llvm", "nki"), default="nir",
                        help="print the IR (nir, the default), or the code generated from it: the cpu target's LLVM "
                             "IR (llvm) or the NKI kernels for --nki-target (nki)")
    parser.add_argument("--nki-target", choices=("trn1", "trn2", "trn3"), default="trn2",
                        help="the NeuronCore generation --emit nki generates for (default trn2)")
    add_cpu_argument(parser, help="the CPU --emit llvm and the cpu tile pass generate for, as -march does (an "
                                  "LLVM CPU name whose features this host has: znver3, x86-64-v3, ...; default: "
                                  "$NEURONCC_CPU, else the host's)")
    parser.add_argument("--list-passes", action="store_true",
                        help="list every available pass (plug-ins included) with its options")
    parser.set_defaults(func=run_opt)
