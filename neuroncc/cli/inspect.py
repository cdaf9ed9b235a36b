"""``neuroncc inspect MODEL.pt2``: look at what neuroncc makes of an exported program.

    neuroncc inspect model.pt2                   the imported IR (the same as --ir)
    neuroncc inspect model.pt2 --train --ir      the forward and backward graphs' IR
    neuroncc inspect model.pt2 --after all       the IR after every pass of the target's pipeline
    neuroncc inspect model.pt2 --after fuse      ... after one pass (by its pipeline name)
    neuroncc inspect model.pt2 --kernels         the kernel summary of the compiled graph(s)
    neuroncc inspect model.pt2 --nki             the generated NKI kernels (Python source, for trn2)
    neuroncc inspect model.pt2 --cost            the per-kernel NKI cost-model estimate on trn2
    neuroncc inspect model.pt2 --cost --nki-target trn3   ... on another NeuronCore (trn1, trn2, trn3)
    neuroncc inspect model.pt2 --cost --trace cost.json --plot cost.svg
                                                 ... and its timeline (Perfetto) and per-kernel picture

IR is printed in the .nir text form that ``neuroncc opt`` reads; large constants print as resources.
--nki and --cost trace the graphs as the nki-sim target does (attention as matmuls and softmax, not the cpu
target's library op), run the ``nki`` pipeline for --nki-target (not --target) and emit the kernels; the cost
table (estimated latency, engine utilisation, DMA- or compute-bound) comes from the simulator's cost-only
mode, so it runs nothing on data. A graph the NKI emitter cannot compile is a one-line error naming the op.
"""

from __future__ import annotations

import argparse

from neuroncc.cli import cpu_option, programs
from neuroncc.cli.commands import COMMANDS
from neuroncc.cli.summary import summarize
from neuroncc.errors import InputError
from neuroncc.ir import Function, print_function
from neuroncc.evaluation.plots import check_plot_path, plot_costs, save
from neuroncc.executors.nki_sim.costs import CostTable, estimate_costs
from neuroncc.executors.nki_sim.timeline import cost_trace
from neuroncc.executors.nki_sim.executable import nki_program
from neuroncc.passes.manager import PassContext
from neuroncc.passes.pipeline import as_pipeline, run_pipeline
from neuroncc.driver.compile import make_request

EXIT_OK = 0
NKI_TARGET_CHOICES = ("trn1", "trn2", "trn3")


def run_inspect(args: argparse.Namespace) -> int:
    if (args.trace or args.plot) and not args.cost:
        raise InputError("inspect --trace/--plot draw the cost model's estimate: add --cost")
    for path in filter(None, (args.trace, args.plot)):
        programs.check_output_file(path)
    if args.plot:
        check_plot_path(args.plot)
    show_ir = args.ir or not (args.after or args.kernels or args.nki or args.cost)
    progress = programs.progress_for(args)
    tables: list[CostTable] = []
    with programs.one_line_warnings():
        program = programs.load_model(args, progress)
        functions = _imported_functions(args, program, progress)
        sections: list[tuple[str, list[str]]] = []
        if show_ir:
            sections += [(f"IR of {kind} @{fn.name}", [print_function(fn)]) for kind, fn in functions]
        if args.after:
            for kind, fn in functions:
                sections += _after_sections(args, kind, fn, progress)
        if args.kernels:
            cache = programs.open_cache(args)
            for kind, fn in functions:
                compiled = programs.compile_function(fn, kind, target=args.target, pipeline=args.pipeline,
                                                     cache=cache, progress=progress)
                code_for = f", code for {cpu_option.cpu_line()}" if args.target == "cpu" else ""
                sections.append((f"kernels of {kind} @{fn.name} (target {args.target}{code_for})",
                                 summarize(compiled.ran_function).lines()))
        if args.nki or args.cost:
            if args.target != "nki-sim":  # the graphs nki-sim compiles (see frontend/lowering/attention.py)
                nki_args = argparse.Namespace(**{**vars(args), "target": "nki-sim"})
                functions = _imported_functions(nki_args, program, progress)
            for kind, fn in functions:
                sections += _nki_sections(args, kind, fn, progress, tables)
        if args.trace:
            programs.write_json(args.trace, cost_trace(tables))
        if args.plot:
            save(plot_costs(tables), args.plot)
    for index, (title, lines) in enumerate(sections):
        if index:
            print()
        print(f"// ----- {title} -----")
        for line in lines:
            print(line.rstrip("\n"))
    return EXIT_OK


def _imported_functions(args: argparse.Namespace, program, progress) -> list[tuple[str, Function]]:
    if args.train:
        graphs, _ = programs.training_graphs(args, program, cache=None, progress=progress, compile_graphs=False)
        return [("forward", graphs.forward.function), ("backward", graphs.backward.function)]
    return [("inference", programs.inference_graph(args, program, progress).imported.function)]


def _nki_sections(args: argparse.Namespace, kind: str, fn: Function, progress,
                  tables: list[CostTable]) -> list[tuple[str, list[str]]]:
    """The emitted NKI module and/or its cost table for one graph (emitted once for both views)."""

    target = args.nki_target
    with progress.step(f"emit NKI kernels of {kind} for {target}"):
        program = nki_program(fn, target)
    sections = []
    if args.nki:
        sections.append((f"NKI kernels of {kind} @{fn.name} (nki-target {target})", [program.source]))
    if args.cost:
        with progress.step(f"estimate NKI kernel costs of {kind} on {target}"):
            table = estimate_costs(program, target)
        tables.append(table)
        sections.append((f"NKI cost of {kind} @{fn.name} (nki-target {target})", str(table).splitlines()))
    return sections


def _after_sections(args: argparse.Namespace, kind: str, fn: Function, progress) -> list[tuple[str, list[str]]]:
    """The IR after the requested pass (or every pass) of the target's pipeline, through the pass manager's
    per-stage hook (the same pipeline string the compile driver, and so the cache key, uses)."""

    pipeline = make_request(fn, target=args.target, pipeline=args.pipeline).pipeline
    names = [p.name for p in as_pipeline(pipeline).passes]
    if args.after != "all" and args.after not in names:
        raise InputError(f"inspect --after {args.after}: no pass of that name in the pipeline '{pipeline}'")
    stages: list[tuple[str, Function]] = []
    with progress.step(f"run the {args.target} pipeline on {kind}"):
        run_pipeline(pipeline, fn, PassContext(verify_each=True,
                                               on_stage=lambda stage, ir, seconds: stages.append((stage, ir))))
    chosen = [(s, ir) for s, ir in stages if args.after == "all" or s.split("-", 1)[1] == args.after]
    return [(f"{kind} @{fn.name} after {stage}", [print_function(ir)]) for stage, ir in chosen]


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = programs.add_command(
        subparsers, "inspect", __doc__,
        help=COMMANDS["inspect"].help,
        description="Show what neuroncc makes of a torch.export program: the imported IR, the IR after "
                    "passes, the kernel summary, the generated NKI kernels and their cost estimate.",
        exit_codes="0 ok, 2 bad input or a graph the NKI emitter cannot compile (one line on stderr), 3 internal error")
    programs.add_model_arguments(parser)
    parser.add_argument("--ir", action="store_true", help="print the imported IR (the default view)")
    parser.add_argument("--after", metavar="PASS|all", help="print the IR after this pass of the pipeline, or all")
    parser.add_argument("--kernels", action="store_true", help="compile (through the cache) and summarize kernels")
    parser.add_argument("--nki", action="store_true", help="print the generated NKI kernels")
    parser.add_argument("--cost", action="store_true",
                        help="print the per-kernel NKI cost estimate (latency, engine use, DMA/compute bound)")
    parser.add_argument("--nki-target", choices=NKI_TARGET_CHOICES, default="trn2",
                        help="the NeuronCore generation --nki/--cost emit and estimate for (default trn2)")
    parser.add_argument("--trace", metavar="FILE.json",
                        help="with --cost: write the cost model's timeline (kernels back to back; one track per "
                             "engine and DMA queue) as Chrome trace JSON for Perfetto or chrome://tracing")
    parser.add_argument("--plot", metavar="FILE.svg|png",
                        help="with --cost: draw each kernel's engine busy times, latency and roofline bound")
    parser.set_defaults(func=run_inspect)
