#!/usr/bin/env python
"""Differential fuzzing: random torch programs, eager vs torch.compile(backend="neuron") on each target.

    python tools/fuzz.py --n 500 --seed 1                       # every available target, fwd + bwd
    python tools/fuzz.py --n 10000 --seed 7 --jobs 2 --report fuzz.json
    python tools/fuzz.py --n 200 --targets interp --no-backward
    python tools/fuzz.py --n 200 --backend aot_eager            # check the fuzzer itself

Targets whose backend has not landed are reported and skipped. Each mismatch or crash is shrunk and written
to tests/fuzz/regressions/ as a ready pytest file. Exit status 1 when any bug was found.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from neuroncc.cli.progress import format_eta  # noqa: E402
from neuroncc.testing.fuzz import FuzzConfig, FuzzStats  # noqa: E402
from neuroncc.testing.fuzz_campaign import (  # noqa: E402
    Campaign,
    available_targets,
    neuron_backend_available,
    run_campaign,
)

REGRESSIONS = Path(__file__).resolve().parents[1] / "tests" / "fuzz" / "regressions"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=200, help="number of programs")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--targets", help="comma-separated: interp,cpu,nki-sim (default: all available)")
    parser.add_argument("--backend", default="neuron", help="dynamo backend under test")
    parser.add_argument("--no-backward", action="store_true", help="forward only")
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--max-ops", type=int, default=FuzzConfig().max_ops)
    parser.add_argument("--shrink-budget", type=int, default=150, help="checks spent shrinking one failure")
    parser.add_argument("--out", type=Path, default=REGRESSIONS, help="where regression tests go")
    parser.add_argument("--report", type=Path, help="write the totals as JSON")
    args = parser.parse_args(argv)

    if args.backend == "neuron" and not neuron_backend_available():
        print("the neuron backend (neuroncc.frontend.backend) is not in this tree yet; "
              "try --backend aot_eager to exercise the fuzzer", file=sys.stderr)
        return 2
    requested = args.targets.split(",") if args.targets else None
    targets, missing = available_targets(requested)
    for target, why in missing.items():
        print(f"skipping target {target}: {why}", file=sys.stderr)
    if args.backend != "neuron":
        targets = targets[:1]  # other backends ignore the target option
    if not targets:
        print("no target to run", file=sys.stderr)
        return 2

    campaign = Campaign(seed=args.seed, targets=tuple(targets), backend=args.backend,
                        backward=not args.no_backward, out_dir=args.out, shrink_budget=args.shrink_budget,
                        config=FuzzConfig(max_ops=args.max_ops))

    def progress(stats: FuzzStats, seconds: float) -> None:
        counts = ", ".join(f"{t}/{s}={n}" for (t, s), n in sorted(stats.counts.items()))
        print(f"[{stats.programs}/{args.n} {seconds:6.0f}s, {format_eta(stats.programs, args.n, seconds)}] {counts}",
              flush=True)

    print(f"fuzzing {args.n} programs (seed {args.seed}) on {', '.join(targets)} with backend={args.backend}, "
          f"{'forward only' if args.no_backward else 'forward and backward'}", flush=True)
    stats = run_campaign(campaign, args.n, jobs=args.jobs, progress=progress)
    for index, finding, path in sorted(stats.bugs, key=lambda b: b[0]):
        print(f"BUG program {index} on {finding.target}: {finding.status} ({finding.phase}) {finding.detail[:200]}"
              f"{' -> ' + path if path else ''}")
    top_refusals = sorted(stats.refusals.items(), key=lambda kv: -kv[1])[:15]
    for reason, count in top_refusals:
        print(f"refused x{count}: {reason}")
    if args.report:
        args.report.write_text(json.dumps({
            "programs": stats.programs, "seed": args.seed, "targets": targets, "backend": args.backend,
            "backward": not args.no_backward,
            "counts": {f"{t}/{s}": n for (t, s), n in sorted(stats.counts.items())},
            "bugs": [{"program": i, "target": f.target, "status": f.status, "detail": f.detail, "test": p}
                     for i, f, p in stats.bugs],
            "refusals": dict(top_refusals),
        }, indent=1) + "\n")
    return 1 if stats.bugs else 0


if __name__ == "__main__":
    sys.exit(main())
