#!/usr/bin/env python
"""Sweep PyTorch's OpInfo database through torch.compile(backend="neuron") and compare with eager.

    python tools/opinfo_sweep.py --all --jobs 2              # everything; report changes vs the table
    python tools/opinfo_sweep.py --all --jobs 2 --collect    # ... and rewrite the table and docs/ops.md
    python tools/opinfo_sweep.py --ops add,sum --collect     # re-collect a few ops after a fix
    python tools/opinfo_sweep.py --ci                        # the seeded subset CI runs
    python tools/opinfo_sweep.py --docs                      # regenerate docs/ops.md from the table
    python tools/opinfo_sweep.py --all --backend aot_eager   # check the harness itself

Without --collect the exit status is 1 when any sample's status differs from tests/opinfo/expected_status.json.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from neuroncc.cli.progress import format_eta  # noqa: E402
from neuroncc.testing.opinfo import MODES, ModeResult, SweepConfig, op_status  # noqa: E402
from neuroncc.testing.opinfo_runner import Task, run_ops  # noqa: E402
from neuroncc.testing.opinfo_table import (  # noqa: E402
    DOCS_PATH,
    RECOLLECT_HINT,
    TABLE_PATH,
    StatusTable,
    ci_subset,
    letter_changes,
    render_ops_md,
    summarize,
)

#: The table's collection settings; CI reruns a prefix of these samples.
DEFAULT_MAX_SAMPLES = 16
CI_OPS, CI_SEED = 80, 0


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--all", action="store_true", help="every float32 OpInfo")
    which.add_argument("--ops", help="comma-separated op keys (name or name:variant)")
    which.add_argument("--ci", action="store_true", help=f"the seeded CI subset ({CI_OPS} ops)")
    parser.add_argument("--modes", default=",".join(MODES), help="comma-separated subset of fwd,bwd,bf16")
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--backend", default="neuron")
    parser.add_argument("--target", help='the neuron backend\'s options={"target": ...}')
    parser.add_argument("--max-samples", type=int, default=None,
                        help=f"samples per op and mode (default: the table's, else {DEFAULT_MAX_SAMPLES}; 0 = all)")
    parser.add_argument("--sample-timeout", type=float, default=60.0, help="seconds per sample")
    parser.add_argument("--op-timeout", type=float, default=900.0, help="seconds per op before its worker is killed")
    parser.add_argument("--fresh-baseline", action="store_true",
                        help="rerun dynamo's eager backend even on samples the table already classified")
    parser.add_argument("--collect", action="store_true", help="write the results into the table and docs/ops.md")
    parser.add_argument("--docs", action="store_true", help="only regenerate docs/ops.md from the table")
    parser.add_argument("--table", type=Path, default=TABLE_PATH)
    parser.add_argument("--docs-out", type=Path, help="where --collect/--docs write the docs "
                        "(default: docs/ops.md for the default table, else next to the table)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    table = StatusTable.load(args.table) if args.table.exists() else StatusTable()
    docs_out = args.docs_out or (DOCS_PATH if args.table == TABLE_PATH else args.table.with_suffix(".md"))
    if args.docs:
        docs_out.write_text(render_ops_md(table))
        print(f"wrote {docs_out}")
        return 0

    import torch

    from neuroncc.testing.opinfo import float32_opinfos, modes_for, op_key

    opinfos = {op_key(op): op for op in float32_opinfos()}
    if args.all:
        keys = sorted(opinfos)
    elif args.ci:
        keys = ci_subset(opinfos, CI_OPS, CI_SEED)
    elif args.ops:
        keys = [k.strip() for k in args.ops.split(",") if k.strip()]
        unknown = [k for k in keys if k not in opinfos]
        if unknown:
            print(f"unknown OpInfo keys: {', '.join(unknown)}", file=sys.stderr)
            return 2
    else:
        print("say which ops: --all, --ops or --ci", file=sys.stderr)
        return 2

    wanted_modes = tuple(m for m in args.modes.split(",") if m)
    max_samples = args.max_samples if args.max_samples is not None else table.meta.get("max_samples", DEFAULT_MAX_SAMPLES)
    options = {"target": args.target} if args.target else {}
    same_settings = table.meta.get("torch") == torch.__version__ and table.meta.get("max_samples") == max_samples
    trust_table = same_settings and not args.fresh_baseline
    config = SweepConfig(backend=args.backend, options=options, baseline=None if trust_table else "eager",
                         max_samples=max_samples or None, sample_timeout_s=args.sample_timeout)
    tasks = []
    for key in keys:
        modes = tuple(m for m in modes_for(opinfos[key]) if m in wanted_modes)
        known = table.letters.get(key, {}) if trust_table else {}
        tasks.append(Task(key, modes, dict(known)))

    total_modes = sum(len(t.modes) for t in tasks)
    done = [0]
    start = time.monotonic()

    def report(result: ModeResult) -> None:
        done[0] += 1
        expected = table.letters.get(result.key, {}).get(result.mode)
        changed = "" if expected is None or expected == result.letters else f"  (was {expected})"
        elapsed = time.monotonic() - start
        print(f"[{done[0]}/{total_modes} {elapsed:6.0f}s, {format_eta(done[0], total_modes, elapsed)}] "
              f"{result.key} {result.mode} "
              f"{result.letters} {op_status(result.letters)} {result.seconds:.1f}s{changed}"
              f"{'  ' + result.note[:150] if result.note and op_status(result.letters) != 'pass' else ''}",
              flush=True)

    results = run_ops(tasks, config, jobs=args.jobs, op_timeout_s=args.op_timeout, on_result=report)

    if args.collect:
        if args.all:
            table.letters = {k: v for k, v in table.letters.items() if k in opinfos}  # drop OpInfos torch removed
        for result in results:
            table.record(result)
        table.meta = {"torch": torch.__version__, "max_samples": max_samples, "backend": args.backend,
                      "options": options, "seed": config.seed}
        table.save(args.table)
        docs_out.write_text(render_ops_md(table))
        print(f"wrote {args.table} and {docs_out}")
    current = StatusTable()
    for result in results:
        current.record(result)
    for mode in wanted_modes:
        s = summarize(current, mode)
        print(f"{mode}: {s.counted} counted (of {s.swept} swept; {s.eager_fails} eager-fails, {s.metadata_only} "
              f"shape-only): {dict(sorted(s.statuses.items()))}, pass rate {100 * s.pass_rate:.1f}%")
    if args.collect:
        return 0
    changed = sorted({r.key for r in results
                      if letter_changes(table.letters.get(r.key, {}).get(r.mode, r.letters), r.letters)})
    if changed:
        print(f"{len(changed)} ops changed status; if intended, re-collect: "
              + RECOLLECT_HINT.format(ops=",".join(changed)))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
