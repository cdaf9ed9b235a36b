#!/usr/bin/env python
"""Sweep PyTorch's OpInfo database on the neuron device (eager, per-op compiled) and compare with CPU.

    python tools/opinfo_device_sweep.py --all --jobs 2 --collect   # everything; rewrite the table and docs/ops.md
    python tools/opinfo_device_sweep.py --ops add,sum              # a few ops; report changes vs the table
    python tools/opinfo_device_sweep.py --docs                     # regenerate docs/ops.md's device section

The table is tests/device/opinfo_status.json (letters per sample: see neuroncc.testing.opinfo_device);
without --collect the exit status is 1 when any sample's letter differs from it.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from neuroncc.testing.opinfo import ModeResult, SweepConfig  # noqa: E402
from neuroncc.testing.opinfo_device import DEVICE_MODES, device_status  # noqa: E402
from neuroncc.testing.opinfo_table import DEVICE_TABLE_PATH, write_device_docs  # noqa: E402
from neuroncc.testing.opinfo_runner import Task, run_ops  # noqa: E402
from neuroncc.testing.opinfo_table import StatusTable, letter_changes  # noqa: E402

DEFAULT_MAX_SAMPLES = 8
RUNNER = "neuroncc.testing.opinfo_device:run_device_mode"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--all", action="store_true", help="every float32 OpInfo")
    which.add_argument("--ops", help="comma-separated op keys (name or name:variant)")
    parser.add_argument("--modes", default=",".join(DEVICE_MODES))
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--max-samples", type=int, default=DEFAULT_MAX_SAMPLES)
    parser.add_argument("--sample-timeout", type=float, default=120.0)
    parser.add_argument("--op-timeout", type=float, default=900.0)
    parser.add_argument("--collect", action="store_true")
    parser.add_argument("--docs", action="store_true")
    args = parser.parse_args(argv)
    table = StatusTable.load(DEVICE_TABLE_PATH) if DEVICE_TABLE_PATH.exists() else StatusTable()
    if args.docs:
        print(f"wrote {write_device_docs(table)}")
        return 0

    import torch

    from neuroncc.testing.opinfo import float32_opinfos, modes_for, op_key

    opinfos = {op_key(op): op for op in float32_opinfos()}
    keys = sorted(opinfos) if args.all else [k.strip() for k in (args.ops or "").split(",") if k.strip()]
    if not keys or any(k not in opinfos for k in keys):
        print("say which ops: --all or --ops with known OpInfo keys", file=sys.stderr)
        return 2
    wanted = tuple(m for m in args.modes.split(",") if m)
    config = SweepConfig(backend="neuron-device", baseline=None, max_samples=args.max_samples or None,
                         sample_timeout_s=args.sample_timeout)
    tasks = [Task(k, tuple(m for m in modes_for(opinfos[k]) if m in wanted), {}) for k in keys]
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
        if args.all:
            table.letters = {k: v for k, v in table.letters.items() if k in opinfos}
        for result in results:
            table.record(result)
        table.meta = {"torch": torch.__version__, "max_samples": args.max_samples, "seed": config.seed}
        table.save(DEVICE_TABLE_PATH)
        print(f"wrote {DEVICE_TABLE_PATH} and {write_device_docs(table)}")
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
