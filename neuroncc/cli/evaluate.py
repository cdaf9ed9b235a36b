"""``neuroncc evaluate MODEL.pt2``: is this model ready for neuroncc? One report answering the usual questions.

    neuroncc evaluate model.pt2                       forward: fallbacks, numerics, compile and steady-state time
    neuroncc evaluate model.pt2 --train               a training step: also gradients and one SGD step
    neuroncc evaluate model.pt2 --shapes 4x16 --shapes 32x16    recompiles seen for other input shapes
    neuroncc evaluate model.pt2 --json                the report as JSON on stdout
    neuroncc evaluate model.pt2 --html report.html    ... and as an HTML page with plots

The program runs as an eager module (``ExportedProgram.module()``) three ways on the same inputs (random, or
``--inputs X.npz`` as for ``neuroncc run``): through ``torch.compile(backend="neuron")`` with fallback to
eager PyTorch for ops neuroncc cannot compile (listed, with counts and source lines), eagerly in float32 and
eagerly in float64. Every output, every buffer and tensor input the call updates in place (a training-mode
BatchNorm's running statistics, a KV cache, an input written with ``add_``: by name, after one call), and with
--train every gradient and updated parameter, is compared: within ``--rtol``/``--atol`` of eager float32 or the
command exits 1. Compile time is split into tracing (TorchDynamo,
AOTAutograd, FX -> IR), passes, code generation and the compile cache; steady-state time is the median and
spread of ``--repeat`` calls of each, interleaved. ``--shapes`` gives extra input shapes, one ``AxB`` per tensor
input joined by commas (or for the first input only); a program exported with static shapes may refuse them,
which the report says.
"""

from __future__ import annotations

import argparse
import os
import sys

from neuroncc.cli import programs
from neuroncc.cli.commands import COMMANDS
from neuroncc.driver.cache import CACHE_DIR_VARIABLE, DISABLE_VARIABLE
from neuroncc.errors import InputError
from neuroncc.evaluation.html import render_html
from neuroncc.evaluation.report import DEFAULT_ATOL, DEFAULT_RTOL

EXIT_OK, EXIT_CHECK_FAILED = 0, 1
MAX_REPEAT = 10_000


def parse_shapes(text: str) -> tuple[tuple[int, ...], ...]:
    """``"4x16,4"`` -> ``((4, 16), (4,))``: one shape per tensor input."""
    shapes = []
    for part in text.split(","):
        try:
            dims = tuple(int(n) for n in part.strip().lower().split("x"))
        except ValueError:
            raise InputError(f"--shapes {text!r}: write each shape as sizes joined by 'x', e.g. 4x16") from None
        if not dims or any(n < 0 for n in dims):
            raise InputError(f"--shapes {text!r}: sizes must be non-negative integers")
        shapes.append(dims)
    return tuple(shapes)


def run_evaluate(args: argparse.Namespace) -> int:
    from neuroncc.cli.inputs import user_inputs
    from neuroncc.evaluation.runner import evaluate
    from neuroncc.frontend.exported import flat_module, torch_internal_warnings_hidden

    if not 1 <= args.repeat <= MAX_REPEAT:
        raise InputError(f"--repeat must be between 1 and {MAX_REPEAT}, got {args.repeat}")
    shapes = [parse_shapes(text) for text in args.shapes]
    if args.inputs is not None:
        programs.check_readable_file(args.inputs, "an .npz file (numpy.savez)")
    if args.html:
        programs.check_output_file(args.html)
    progress = programs.progress_for(args)
    with programs.one_line_warnings():
        program = programs.load_model(args, progress)
        expected, inputs = user_inputs(program, args.inputs, args.seed, args.model)
        # the program's module called with the flat tensors (pytrees and fixed Python values filled in); its
        # train/eval behaviour is baked in at export (module.eval() is refused)
        module = flat_module(program)
        _cache_environment(args)
        options = {"pipeline": args.pipeline} if args.pipeline else {}
        with torch_internal_warnings_hidden():  # the module's deep copies would warn from inside torch
            report = evaluate(module, tuple(inputs), train=args.train,
                              target=args.target, shapes=shapes, repeat=args.repeat, rtol=args.rtol,
                              atol=args.atol, options=options, name=args.model,
                              input_names=[spec.target for spec in expected],
                              progress=lambda title: progress.step(title, log=True))
    if args.html:
        try:
            with open(args.html, "w", encoding="utf-8") as out:
                out.write(render_html(report))
        except OSError as exc:
            raise InputError(f"{args.html}: cannot write the report ({exc.strerror or exc})") from None
    if args.json:
        sys.stdout.write(report.to_json() + "\n")
    else:
        print(report.text())
    return EXIT_OK if report.passed else EXIT_CHECK_FAILED


def _cache_environment(args: argparse.Namespace) -> None:
    """--cache-dir / --no-cache reach the torch backend's compiles through the environment it reads."""
    if args.cache_dir:
        os.environ[CACHE_DIR_VARIABLE] = args.cache_dir
    if args.no_cache:
        os.environ[DISABLE_VARIABLE] = "1"


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = programs.add_command(
        subparsers, "evaluate", __doc__,
        help=COMMANDS["evaluate"].help,
        description="Run an exported program under neuroncc and under eager PyTorch (float32 and float64) and "
                    "report fallback ops, numeric differences, compile time by stage, steady-state time and "
                    "recompiles over input shapes.",
        exit_codes="0 within tolerance, 1 numerics outside the tolerance, "
                   "2 bad input (one line on stderr), 3 internal error")
    programs.add_model_arguments(parser)
    parser.add_argument("--inputs", metavar="X.npz", help="the inputs, one array per program input (numpy.savez)")
    parser.add_argument("--seed", type=int, default=0, help="the seed of the random inputs (default 0)")
    parser.add_argument("--shapes", action="append", default=[], metavar="AxB[,CxD]",
                        help="extra input shapes to try (repeat the flag for several)")
    parser.add_argument("--repeat", type=int, default=20, metavar="N",
                        help="calls of each (neuroncc, eager) timed for the steady state (default 20)")
    parser.add_argument("--rtol", type=float, default=DEFAULT_RTOL, help=f"relative tolerance (default {DEFAULT_RTOL:g})")
    parser.add_argument("--atol", type=float, default=DEFAULT_ATOL, help=f"absolute tolerance (default {DEFAULT_ATOL:g})")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument("--html", metavar="FILE", help="also write the report as an HTML page with plots")
    parser.set_defaults(func=run_evaluate)
