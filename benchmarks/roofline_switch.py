"""A ``CpuTarget`` switch (``bench_bf16_words.py``'s :data:`SWITCHES`) measured in roofline.py's own rounds.

``roofline.py`` runs every implementation of a row interleaved, its input left wherever the other calls and the
memory streams leave it (neither ``bench_bf16_words.py``'s warm L3 nor its ``--cold`` memory), and its "kernel alone
of roofline" is the number issue #19 counts; a switch forced on and off in two roofline processes compares two
host modes as often as two builds (session 45 bfln45: the same code 45-74% of its roof in four processes). This runs
roofline.py with two more calls in each row's rounds: the row's graph (``bench_bf16_words.backend_graph``) built with
the switch off and on (``bench_bf16_words.build``, ``--force``: on whatever the host's default), each into the kernel
alone's held output on the row's own inputs; their bits are asserted equal (counted for a switch whose bits may
differ, ``REORDERS``). The row's table line is printed three
times: as roofline's, then with the off build, then the on build in its "kernel alone" columns, and the ratio
on / off of the medians.

    /work/bin/heavy x python benchmarks/roofline_switch.py --switch NAME [--force] --rows c16 --threads 1
        [roofline.py's other options]
"""

from __future__ import annotations

import argparse
import sys

import numpy as np
import torch

import bench_bf16_words as words
import roofline
from neuroncc.executors.cpu.address_call import AddressCall

_row_calls, _table_row = roofline.row_calls, roofline.table_row
#: row key -> the row's backend graph (built before roofline's rows: ``backend_graph`` resets TorchDynamo)
GRAPHS: dict[str, object] = {}
SETTINGS: dict[str, object] = {}


def row_calls(machine, case, inputs, threads, numpy_path, buffers=False, served=False):
    """roofline's calls of the row and the switch's two builds, into the kernel alone's held output."""
    calls, memory_calls, path = _row_calls(machine, case, inputs, threads, numpy_path, buffers, served)
    held = row_calls.last_held  # (``roofline.row_calls`` keeps it on the name it is called by: this function)
    arrays = [t.view(torch.int16).numpy() if t.dtype == torch.bfloat16 else t.numpy() for t in inputs]
    results = []
    for name, on in (("off", False), ("on", True)):
        exe = words.build(GRAPHS[case.key], threads, SETTINGS["switch"], on, SETTINGS["force"])
        order = words.graph_order(case, exe, inputs, arrays)
        call, addresses, outputs = AddressCall(exe), [a.ctypes.data for a in order], [held.data_ptr()]
        call(addresses, outputs)
        results.append(held.clone())
        calls[f"neuroncc kernel {name}"] = lambda call=call, addresses=addresses, outputs=outputs: \
            call(addresses, outputs)
    if SETTINGS["switch"] in words.REORDERS:  # (a switch whose bits may differ: counted)
        differ = torch.count_nonzero(results[0].view(torch.int16) != results[1].view(torch.int16))
        print(f"  {case.key}: {differ} of {results[0].numel()} words differ", flush=True)
    else:
        assert torch.equal(results[0], results[1]), "the switch's builds differ"
    return calls, memory_calls, path


def table_row(machine, case, threads, path, times, memories, held, whole):
    """roofline's row, then the row with each build as its kernel alone, and on / off."""
    row = _table_row(machine, case, threads, path, times, memories, held, whole)
    for name in ("off", "on"):
        _table_row(machine, case, threads, f"{path} [kernel {name}]",
                   {**times, "neuroncc kernel alone": times[f"neuroncc kernel {name}"]}, memories, held, whole)
    print(f"  {SETTINGS['switch']} on / off: {times['neuroncc kernel on'] / times['neuroncc kernel off']:.3f}",
          flush=True)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--switch", choices=sorted(words.SWITCHES), required=True)
    parser.add_argument("--force", action="store_true", help="the 'on' build with the switch on whatever the host")
    parser.add_argument("--rows", required=True, help="roofline.py's row keys (one graph a row: c16, b16, ...)")
    args, rest = parser.parse_known_args()
    SETTINGS.update(switch=args.switch, force=args.force)
    for case in (c for c in words.bench_rows() if c.key in args.rows.split(",")):
        GRAPHS[case.key] = words.backend_graph(case, case.make(np.random.default_rng(1)))
    torch._dynamo.reset()
    roofline.row_calls, roofline.table_row = row_calls, table_row
    sys.argv = ["roofline.py", "--rows", args.rows, *rest]
    roofline.main()


if __name__ == "__main__":
    main()
