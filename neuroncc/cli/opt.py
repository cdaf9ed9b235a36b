"""``neuroncc opt FILE.nir|- [-p PIPELINE]``: parse, verify, transform and print IR (the pass developer's tool).

    neuroncc opt f.nir -p 'canonicalize,fuse,tile{target=trn2}' --print-ir-after-all

The verifier runs after every pass. ``--print-ir-after-all`` / ``--print-ir-after=PASS`` print the IR to
stderr under MLIR-style ``// -----// IR Dump After PASS //----- //`` headers. ``--split-input-file`` treats
``// -----`` lines as separators between independent inputs: each is processed on its own, an error in one is
reported (on stderr, with its line in the whole file) and the others still run, as in MLIR's tests.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from neuroncc.errors import InputError, NeuronccError, PipelineError
from neuroncc.ir import parse_module, print_module
from neuroncc.passes.manager import PassContext, Pipeline
from neuroncc.passes.pipeline import parse_pipeline, pass_registry

SPLIT_MARKER = "// -----"


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


def split_input(text: str) -> list[str]:
    """Split at ``// -----`` lines; each chunk is padded with newlines so its line numbers stay those of the file."""
    chunks, lines_before = [], 0
    for chunk in re.split(r"^//\s*-----\s*$", text, flags=re.MULTILINE):
        chunks.append("\n" * lines_before + chunk)
        lines_before += chunk.count("\n")
    return chunks


def run_opt(args: argparse.Namespace) -> int:
    text, source = read_source(args.file)
    pipeline = parse_pipeline(args.pipeline) if args.pipeline else Pipeline(())
    known = set(pass_registry().names())
    for name in args.print_ir_after:
        if name not in known:
            raise PipelineError(f"--print-ir-after: unknown pass '{name}'")
    ctx = PassContext(verify_each=not args.no_verify_each, print_after_all=args.print_ir_after_all,
                      print_after=frozenset(args.print_ir_after), ir_stream=sys.stderr)
    if not args.split_input_file:
        functions = [pipeline.run(fn, ctx) for fn in parse_module(text, source=source)]
        sys.stdout.write(print_module(functions))
        return 0
    printed, failed = [], False
    for chunk in split_input(text):
        if not chunk.strip():
            continue
        try:
            functions = [pipeline.run(fn, ctx) for fn in parse_module(chunk, source=source)]
            printed.append(print_module(functions))
        except NeuronccError as exc:
            message = "; ".join(line.strip() for line in str(exc).splitlines() if line.strip())
            print(f"neuroncc: error: {message}", file=sys.stderr)
            failed = True
    sys.stdout.write(f"{SPLIT_MARKER}\n".join(printed))
    return 2 if failed else 0


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("opt", help="parse, verify, transform and print .nir IR")
    parser.add_argument("file", help="a .nir file, or - for stdin")
    parser.add_argument("-p", "--pipeline", default="",
                        help="passes to run, e.g. 'canonicalize,fuse,tile{target=trn2 tile=[128,512]}'")
    parser.add_argument("--print-ir-after-all", action="store_true", help="print the IR after every pass (stderr)")
    parser.add_argument("--print-ir-after", action="append", default=[], metavar="PASS",
                        help="print the IR after this pass (stderr); may be repeated")
    parser.add_argument("--split-input-file", action="store_true",
                        help="process each '// -----'-separated chunk of the input on its own")
    parser.add_argument("--no-verify-each", action="store_true", help="do not verify the IR after every pass")
    parser.set_defaults(func=run_opt)
