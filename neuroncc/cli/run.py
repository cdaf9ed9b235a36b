"""``neuroncc run MODEL.pt2``: compile (through the cache) and run an exported program on given or random inputs.

    neuroncc run model.pt2 --random --check             random inputs; compare with eager PyTorch
    neuroncc run model.pt2 --inputs x.npz --repeat 20   inputs from numpy.savez(x=..., ...); time 20 calls
    neuroncc run model.pt2 --random --save-outputs y.npz
    neuroncc run model.pt2 --trace run.json --plot run.svg   the measured timeline of one call, and a picture

Inputs are named as the program's inputs (the exported forward's argument names); ``--random`` draws floats
from N(0, 1), integers from {0, 1} (valid indices for any table) and bools at random, shaped as the graph says.
``--check`` runs the program with eager PyTorch on the same inputs and compares every output with
``torch.testing.assert_close``'s tolerances for its dtype, printing the max absolute and relative error;
a float16/bfloat16 output outside them passes when it is as close to a float64 run of the program as eager's
(eager's rounding is no reference at those precisions); a mismatch exits 1.
"""

from __future__ import annotations

import argparse
import functools
import statistics
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from neuroncc.cli import programs
from neuroncc.cli.commands import COMMANDS
from neuroncc.cli.progress import format_seconds
from neuroncc.errors import InputError, RuntimeCheckError
from neuroncc.evaluation.plots import check_plot_path, plot_timeline, save
from neuroncc.executors.tracing import TimelineRecorder, installed
import numpy as np

if TYPE_CHECKING:
    import torch

EXIT_OK, EXIT_CHECK_FAILED = 0, 1
MAX_REPEAT = 100_000


def run_run(args: argparse.Namespace) -> int:
    if not 0 <= args.repeat <= MAX_REPEAT:
        raise InputError(f"--repeat must be between 0 and {MAX_REPEAT}, got {args.repeat}")
    if args.inputs is not None:
        programs.check_readable_file(args.inputs, "an .npz file (numpy.savez)")
    if args.save_outputs:
        programs.check_output_file(args.save_outputs)
    for path in filter(None, (args.trace, args.plot)):
        programs.check_output_file(path)
    if args.plot:
        check_plot_path(args.plot)
    progress = programs.progress_for(args)
    with programs.one_line_warnings():
        program = programs.load_model(args, progress)  # the model's cheap checks come before torch is imported
        from neuroncc.cli.inputs import user_inputs
        from neuroncc.frontend.exported import fixed_inputs, specialize, unflatten_user_inputs
        from torch.utils._pytree import tree_leaves

        expected, flat_inputs = user_inputs(program, args.inputs, args.seed, args.model)
        dynamic = [(spec, dim) for spec in expected for dim in spec.dynamic]
        if dynamic:
            with progress.step("fix the dynamic sizes (re-export)"):
                static = specialize(program, flat_inputs, args.model)
        served, compiled = programs.served_inference(args, static if dynamic else program, progress)
        graph = served.graph
        # a program updating its inputs in place updates them at every call: eager's reference starts from copies
        pristine = [tensor.clone() for tensor in flat_inputs] if args.check and graph.input_mutations else flat_inputs
        call_args, call_kwargs = unflatten_user_inputs(program, flat_inputs)  # the program's own signature
        with progress.step("run"):
            start = time.perf_counter()
            try:
                returned = served(*call_args, **call_kwargs)
            except RuntimeCheckError as error:  # a zero divisor, an index out of range: the inputs' fault
                if args.inputs:
                    raise
                raise type(error)(f"{error}{_RANDOM_INPUTS_HINT}", op=error.op, detail=error.detail,
                                  kernel=error.kernel, location=error.location) from error
            first = time.perf_counter() - start
            # the state the first call left (buffers and inputs it updated), compared with eager's by --check
            updated = [served.state[fqn].clone() for _, fqn in graph.buffer_mutations] + \
                [flat_inputs[position].clone() for _, position in graph.input_mutations]
        if args.trace or args.plot:  # one more call, recorded step by step (after a warm-up call)
            served(*call_args, **call_kwargs)
            recorder = TimelineRecorder()
            with progress.step("record one call's timeline"), installed(recorder):
                served(*call_args, **call_kwargs)
            _write_timeline(args, recorder, compiled)
        times = []
        with progress.step("run"):
            for _ in range(args.repeat):  # the served call, as a caller of neuroncc.compile_program times it
                start = time.perf_counter()
                served(*call_args, **call_kwargs)
                times.append(time.perf_counter() - start)
        outputs = tree_leaves(returned)  # the user outputs, flat, in the graph's order (output_names)
        output_names = served.graph.output_names
        if args.save_outputs:
            _save_outputs(args.save_outputs, output_names, outputs)
        eager = None
        if args.check:
            with progress.step("run eager PyTorch"):
                eager = _checked_values(_eager(program, pristine, args), graph, expected)
    print(f"{args.model}: target {args.target}, {_cache_words(compiled)}")
    described = ", ".join([f"{spec.target} {_describe(tensor)}" for spec, tensor in zip(expected, flat_inputs)] +
                          [f"{name}={value!r} (fixed at export)" for name, value in fixed_inputs(program).values()])
    print(f"  inputs   {described or '(none)'}"
          f"  ({'from ' + args.inputs if args.inputs else f'random, seed {args.seed}'})")
    if dynamic:
        sizes = ", ".join(f"{spec.target} dim {dim.dim} = {tensor.shape[dim.dim]} ({dim.symbol})"
                          for spec, tensor in zip(expected, flat_inputs) for dim in spec.dynamic)
        print(f"  dynamic  {sizes}: compiled at these sizes "
              f"(from {'the arrays' if args.inputs else 'the exported example'}; other sizes: --inputs X.npz)")
    for index, (name, tensor) in enumerate(zip(output_names, outputs)):
        print(f"  output {index} {name}: {_describe(tensor)}  {_values(tensor)}")
    timing = f"first call {format_seconds(first)}"
    if times:
        timing += f", then median {format_seconds(statistics.median(times))} over {len(times)} calls"
    print(f"  time     {timing}")
    if eager is None:
        return EXIT_OK
    names = output_names + tuple(f"buffer {fqn}" for _, fqn in graph.buffer_mutations) + \
        tuple(f"input {expected[position].target} (updated in place)" for _, position in graph.input_mutations)
    return _check(outputs + updated, eager, names,
                  functools.cache(lambda: _exact(program, pristine, graph, expected)), len(outputs))


def _checked_values(run, graph, expected) -> list[torch.Tensor]:
    """What ``--check`` compares, from one eager run (:class:`~neuroncc.frontend.exported.EagerRun`): the user
    outputs, then each buffer and input the program updates, in the graph's order of its updates."""
    return run.outputs + [run.buffers[fqn] for _, fqn in graph.buffer_mutations] + \
        [run.inputs[position] for _, position in graph.input_mutations]


#: what a failure on random inputs (no ``--inputs``) adds
_RANDOM_INPUTS_HINT = " (random integers are drawn from {0, 1}: give fitting ones with --inputs X.npz)"


def _eager(program, flat_inputs: list[torch.Tensor], args: argparse.Namespace):
    """``--check``'s reference: the program's eager module on copies of the same inputs (an
    :class:`~neuroncc.frontend.exported.EagerRun`); its failure is the inputs' (eager PyTorch refuses them: an
    integer division by zero, an index out of range, ...)."""
    from neuroncc.frontend.exported import call_eager_with_state

    try:
        return call_eager_with_state(program, [tensor.clone() for tensor in flat_inputs])
    except Exception as exc:
        first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        hint = "" if args.inputs else _RANDOM_INPUTS_HINT
        raise InputError(f"{args.model}: eager PyTorch fails on these inputs, so --check has nothing to compare "
                         f"with: {type(exc).__name__}: {first_line}{hint}") from None


def _exact(program, flat_inputs: list[torch.Tensor], graph, expected) -> list[torch.Tensor] | str:
    """The float64 reference a float16/bfloat16 output or updated state is judged by, or why there is none."""
    from neuroncc.frontend.exported import call_eager_with_state

    try:
        return _checked_values(call_eager_with_state(program, flat_inputs, float64=True), graph, expected)
    except Exception as exc:  # a program whose ops insist on their dtypes: judged by eager's rounding alone
        first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return f"no float64 reference ({type(exc).__name__}: {first_line})"


def _write_timeline(args: argparse.Namespace, recorder: TimelineRecorder,
                    compiled: programs.CompiledFunction) -> None:
    """``--trace``: the recorded call as Chrome trace JSON; ``--plot``: its per-step times as a picture."""
    title = f"{args.model}: one call on target {args.target} (measured)"
    if args.trace:
        programs.write_json(args.trace, recorder.chrome_trace(f"neuroncc run {args.model}"))
    if args.plot:
        save(plot_timeline(recorder.steps, title), args.plot)


def _check(outputs: list[torch.Tensor], eager: list[torch.Tensor], names: tuple[str, ...],
           exact: Callable[[], list[torch.Tensor] | str], returned: int | None = None) -> int:
    """Every output (the first ``returned`` values; then the buffers and inputs the program updated) against
    eager's within ``assert_close``'s tolerances for its dtype; a float16/bfloat16 value outside them passes when
    it is as close to the float64 reference as eager's (:func:`_as_exact_as_eager`)."""
    import torch

    returned = len(outputs) if returned is None else returned
    if len(outputs) != len(eager):
        print(f"check FAILED: neuroncc returned {returned} outputs, eager PyTorch "
              f"{len(eager) - len(outputs) + returned}")
        return EXIT_CHECK_FAILED
    failed = by_float64 = 0
    for index, (name, ours, theirs) in enumerate(zip(names, outputs, eager)):
        theirs = theirs.detach()
        problem = None
        try:
            torch.testing.assert_close(ours, theirs)
        except AssertionError as exc:
            problem = str(exc).strip().splitlines()[0]
        abs_error, rel_error = _errors(ours, theirs)
        verdict = "ok" if problem is None else f"MISMATCH ({problem})"
        if problem is not None and ours.dtype in (torch.float16, torch.bfloat16) and ours.shape == theirs.shape:
            reference = exact()
            if isinstance(reference, str):
                verdict += f"; {reference}"
            else:
                judged, words = _as_exact_as_eager(ours, theirs, reference[index])
                verdict = f"ok ({words})" if judged else f"{verdict}; {words}"
                problem = None if judged else problem
                by_float64 += judged
        what = f"output {index} {name}" if index < returned else name  # "buffer bn.running_mean"
        print(f"  check    {what}: max abs error {abs_error:.3g}, max rel error {rel_error:.3g}: {verdict}")
        failed += problem is not None
    state = " and updated buffer or input" if len(outputs) > returned else ""
    print(f"check passed: every output{state} matches eager PyTorch" + (" or is as close to float64 as eager's" if
                                                                        by_float64 else "") if not failed else
          f"check FAILED: {failed} of {len(outputs)} outputs{' (and updated state)' if state else ''} differ from "
          "eager PyTorch")
    return EXIT_CHECK_FAILED if failed else EXIT_OK


def _as_exact_as_eager(ours: torch.Tensor, eager: torch.Tensor, exact: torch.Tensor) -> tuple[bool, str]:
    """Whether a low-precision output is as accurate as eager's: its largest distance from the float64 reference
    at most twice eager's, plus one unit of the dtype's rounding at the reference's largest magnitude (eager may
    be exact where ours is a rounding off), with the same non-finite values. Eager's own rounding is no reference
    at float16/bfloat16: two correct programs differ by a rounding per element, amplified through the layers
    (a 6-layer float16 MLP: eager and neuroncc equally far from float64, beyond ``assert_close``'s float16
    tolerance from each other)."""
    import torch

    unit, dtype_name = torch.finfo(ours.dtype).eps, str(ours.dtype).removeprefix("torch.")
    exact = exact.detach().to(torch.float64)
    ours, eager = ours.detach().to(torch.float64), eager.detach().to(torch.float64)
    if exact.shape != ours.shape:
        return False, f"the float64 reference has shape {list(exact.shape)}"
    finite = torch.isfinite(eager)
    if not torch.equal(torch.isfinite(ours), finite) or \
            not torch.equal(ours[~finite].nan_to_num(), eager[~finite].nan_to_num()):
        return False, "its infinities or NaNs are not eager's"
    finite &= torch.isfinite(exact)
    if not finite.any():
        return True, "its values are eager's non-finite ones"
    ours_error = float((ours - exact)[finite].abs().max())
    eager_error = float((eager - exact)[finite].abs().max())
    allowed = 2 * eager_error + unit * float(exact[finite].abs().max())
    words = f"{dtype_name}: {ours_error:.3g} from float64 against eager's {eager_error:.3g}"
    return ours_error <= allowed, words


def _errors(ours: torch.Tensor, theirs: torch.Tensor) -> tuple[float, float]:
    import torch

    if ours.shape != theirs.shape or ours.numel() == 0:
        return float("nan"), float("nan")
    a, b = ours.detach().double(), theirs.double()
    diff = (a - b).abs()
    finite = torch.isfinite(diff)
    if not finite.any():
        return 0.0 if torch.equal(a, b) else float("inf"), 0.0 if torch.equal(a, b) else float("inf")
    diff = torch.where(finite, diff, torch.zeros_like(diff))
    rel = diff / b.abs().clamp_min(1e-12)
    return float(diff.max()), float(rel.max())


def _describe(tensor: torch.Tensor) -> str:
    return f"{str(tensor.dtype).removeprefix('torch.')}{list(tensor.shape)}"


def _values(tensor: torch.Tensor) -> str:
    import torch

    tensor = tensor.detach()
    if tensor.numel() == 0:
        return "(empty)"
    if tensor.numel() <= 6:
        return "= " + np.array2string(tensor.float().numpy() if tensor.dtype == torch.bfloat16 else tensor.numpy(),
                                      precision=5, separator=", ")
    if tensor.dtype.is_floating_point:
        t = tensor.float()
        return f"mean {t.mean():.5g}  min {t.min():.5g}  max {t.max():.5g}"
    return f"min {int(tensor.min())}  max {int(tensor.max())}"


def _cache_words(compiled: programs.CompiledFunction) -> str:
    words = {"hit": "loaded from the compile cache", "compiled": "compiled and cached",
             "uncached": "compiled (not cached)"}[compiled.cache]
    return f"{words} in {format_seconds(compiled.seconds)}" + (f", key {compiled.key[:16]}" if compiled.key else "")


def _save_outputs(path: str, names: tuple[str, ...], outputs: list[torch.Tensor]) -> None:
    import torch

    arrays = {}
    for name, tensor in zip(names, outputs):
        tensor = tensor.detach()
        arrays[name] = (tensor.float() if tensor.dtype == torch.bfloat16 else tensor).numpy()
    try:
        with open(path, "wb") as file:
            np.savez(file, **arrays)
    except OSError as exc:
        raise InputError(f"{path}: cannot write the outputs ({exc.strerror or exc})") from None


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = programs.add_command(
        subparsers, "run", __doc__,
        help=COMMANDS["run"].help,
        description="Compile a torch.export program through the compile cache, run it, print its outputs and "
                    "timings; with --check, compare with eager PyTorch.",
        exit_codes="0 ok, 1 --check found a mismatch, 2 bad input (one line on stderr), 3 internal error")
    programs.add_model_arguments(parser, train=False)
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--inputs", metavar="X.npz", help="the inputs, one array per program input (numpy.savez)")
    source.add_argument("--random", action="store_true", help="random inputs shaped as the graph says (the default)")
    parser.add_argument("--seed", type=int, default=0, help="the seed of --random (default 0)")
    parser.add_argument("--check", action="store_true",
                        help="compare every output with eager PyTorch; exit 1 on a mismatch")
    parser.add_argument("--repeat", type=int, default=0, metavar="N",
                        help="after the first call, time N more and report their median (default 0)")
    parser.add_argument("--save-outputs", metavar="Y.npz", help="write the outputs to an .npz")
    parser.add_argument("--trace", metavar="FILE.json",
                        help="write the measured timeline of one call (every kernel, extern call and host step) "
                             "as Chrome trace JSON (open it in Perfetto or chrome://tracing)")
    parser.add_argument("--plot", metavar="FILE.svg|png", help="draw the measured time of each step of one call")
    parser.set_defaults(func=run_run)
