#!/usr/bin/env python
"""Sweep PyTorch's OpInfo database on the neuron device (eager, per-op compiled) and compare with CPU.

    python tools/opinfo_device_sweep.py --all --jobs 2 --collect   # everything; rewrite the table and docs/ops.md
    python tools/opinfo_device_sweep.py --ops add,sum              # a few ops; report changes vs the table
    python tools/opinfo_device_sweep.py --docs                     # regenerate docs/ops.md's device section
    python tools/opinfo_device_sweep.py --dtype bfloat16 --all --collect   # the samples in bf16 (fwd)

The table is tests/device/opinfo_status.json (letters per sample: see neuroncc.testing.opinfo_device);
without --collect the exit status is 1 when any sample's letter differs from it.

--dtype (bfloat16, float16, int64, int32, bool, uint8) sweeps the OpInfos that support that dtype on CPU with
their samples in it, forward only unless --modes says otherwise, compared as torch's OpInfo tests compare a
device with CPU (torch.testing's tolerance for the dtype: exact for integers and bool); its table is
tests/device/opinfo_status_<dtype>.json and docs/ops.md is not touched.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from neuroncc.testing.opinfo import ModeResult, SweepConfig  # noqa: E402
from neuroncc.testing.opinfo_device import DEVICE_MODES, SWEEP_DTYPES, device_status  # noqa: E402
from neuroncc.testing.opinfo_table import device_table_path, write_device_docs  # noqa: E402
from neuroncc.testing.opinfo_runner import Task, run_ops  # noqa: E402
from neuroncc.testing.opinfo_table import StatusTable, letter_changes  # noqa: E402

DEFAULT_MAX_SAMPLES = 8
RUNNER = "neuroncc.testing.opinfo_device:run_device_mode"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--all", action="store_true", help="every OpInfo supporting the dtype")
    which.add_argument("--ops", help="comma-separated op keys (name or name:variant)")
    parser.add_argument("--dtype", choices=SWEEP_DTYPES, default="float32")
    parser.add_argument("--modes", help=f"default: {','.join(DEVICE_MODES)} in float32, fwd in other dtypes")
    parser.add_argument("--first", type=int, default=0, help="with --all: start at this op (for chunked runs)")
    parser.add_argument("--count", type=int, default=0, help="with --all: run this many ops (0: all)")
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--max-samples", type=int, default=DEFAULT_MAX_SAMPLES)
    parser.add_argument("--sample-timeout", type=float, default=120.0)
    parser.add_argument("--op-timeout", type=float, default=900.0)
    parser.add_argument("--collect", action="store_true")
    parser.add_argument("--docs", action="store_true")
    args = parser.parse_args(argv)
    path = device_table_path(args.dtype)
    table = StatusTable.load(path) if path.exists() else StatusTable()
    if args.docs:
        print(f"wrote {write_device_docs(table)}")
        return 0

    import torch

    from neuroncc.testing.opinfo import modes_for, op_key, opinfos_for

    dtype = getattr(torch, args.dtype)
    opinfos = {op_key(op): op for op in opinfos_for(dtype)}
    keys = sorted(opinfos) if args.all else [k.strip() for k in (args.ops or "").split(",") if k.strip()]
    if args.all and (args.first or args.count):
        keys = keys[args.first:args.first + args.count if args.count else None]
    if not keys or any(k not in opinfos for k in keys):
        print(f"say which ops: --all or --ops with known OpInfo keys supporting {args.dtype}", file=sys.stderr)
        return 2
    wanted = tuple(m for m in (args.modes or ",".join(DEVICE_MODES if dtype is torch.float32 else ("fwd",)))
                   .split(",") if m)
    config = SweepConfig(backend="neuron-device", baseline=None, max_samples=args.max_samples or None,
                         sample_timeout_s=args.sample_timeout, dtype="" if dtype is torch.float32 else args.dtype)

    def applicable(op: object) -> tuple[str, ...]:
        modes = modes_for(op) if dtype is torch.float32 else \
            ("fwd", "bwd") if op.supports_autograd and dtype in op.supported_backward_dtypes("cpu") else ("fwd",)
        return tuple(m for m in modes if m in wanted)

    tasks = [Task(k, applicable(opinfos[k]), {}) for k in keys]
    tasks = [t for t in tasks if t.modes]
    total, done, start = sum(len(t.modes) for t in tasks), [0], time.monotonic()

    def report(result: ModeResult) -> None:
        done[0] += 1
        was = table.letters.get(result.key, {}).get(result.mode)
        changed = "" if was is None or was == result.letters else f"  (was {was})"
        status = device_status(result.letters)
        print(f"[{done[0]}/{total} {time.monotonic() - start:6.0f}s] {result.key} {result.mode} {result.letters} "
              f"{status} {result.seconds:.1f}s{changed}{'  ' + result.note[:160] if status != 'device' else ''}",
              flush=True)

    results = run_ops(tasks, config, jobs=args.jobs, op_timeout_s=args.op_timeout, on_result=report,
                      mode_runner=RUNNER)
    if args.collect:
        if args.all and not (args.first or args.count):
            table.letters = {k: v for k, v in table.letters.items() if k in opinfos}
        for result in results:
            table.record(result)
        table.meta = {"torch": torch.__version__, "max_samples": args.max_samples, "seed": config.seed,
                      **({"dtype": args.dtype} if config.dtype else {})}
        table.save(path)
        print(f"wrote {path}" + ("" if config.dtype else f" and {write_device_docs(table)}"))
        return 0
    changed = sorted({r.key for r in results if letter_changes(table.letters.get(r.key, {}).get(r.mode, r.letters),
                                                                r.letters)})
    if changed:
        print(f"{len(changed)} ops changed; if intended: python tools/opinfo_device_sweep.py --collect --ops "
              + ",".join(changed))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
