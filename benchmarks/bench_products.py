"""float32 mm/addmm on MKL against oneDNN: the measurement behind ``CpuTarget.onednn_takes``.

    PYTHONPATH=. python benchmarks/bench_products.py [--threads 1,2] [--big]

Per product, interleaved medians in one process: ATen's ``torch.mm``/``addmm`` (MKL's sgemm), the same sgemm
called directly as the cpu launcher calls it (``executors/cpu/blas.py``), and oneDNN's linear
(``torch.ops.mkldnn._linear_pointwise``) with its fresh tensor kept ("adopted", as the launcher does) and copied
into an output. Ratios to ATen's time, and GFLOP/s. The default shapes are issue #18's classifier's (d=64, 512
tokens: its forward products and data gradients); ``--big`` the products around the threshold and above it.
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from common import ensure_environment, interleaved, table  # noqa: E402

#: (M, K, N, bias)
SMALL = [(512, 64, 192, False), (512, 64, 64, True), (512, 64, 128, True), (512, 128, 64, True),
         (512, 192, 64, False), (512, 64, 128, False), (512, 128, 64, False), (512, 64, 64, False)]
BIG = [(512, 256, 256, True), (1024, 256, 512, True), (512, 512, 512, False), (2048, 256, 256, True),
       (2048, 512, 512, True), (256, 1024, 4096, True), (4096, 256, 1024, False)]


def product_rows(shapes, repeat: int) -> list[list[str]]:
    import torch

    from neuroncc.executors.cpu import blas

    rows = []
    for m, k, n, has_bias in shapes:
        a, w, bias, out = torch.randn(m, k), torch.randn(n, k), torch.randn(n), torch.empty(m, n)
        b = w.t()  # [K, N], a linear's weight transposed
        operands = [((m, k), (k, 1)), ((k, n), (1, k))]
        if has_bias:
            aten = lambda: torch.addmm(bias, a, b, out=out)  # noqa: E731
            prepared = blas.prepare("addmm", {"alpha": 1, "beta": 1}, [((n,), (1,)), *operands], ((m, n), (n, 1)),
                                    ["f32"] * 4)
            pointers = [bias.data_ptr(), a.data_ptr(), w.data_ptr(), out.data_ptr()]
        else:
            aten = lambda: torch.mm(a, b, out=out)  # noqa: E731
            prepared = blas.prepare("mm", {}, operands, ((m, n), (n, 1)), ["f32"] * 3)
            pointers = [a.data_ptr(), w.data_ptr(), out.data_ptr()]
        assert prepared is not None
        linear_bias = bias if has_bias else None
        adopted = lambda: torch.ops.mkldnn._linear_pointwise(a, w, linear_bias, "none", [], "")  # noqa: E731
        times = interleaved({"aten (MKL)": aten, "direct sgemm": lambda: prepared(pointers),
                             "oneDNN adopted": adopted, "oneDNN + copy": lambda: out.copy_(adopted())},
                            repeats=repeat, warmup=10)
        base, flops = times["aten (MKL)"], 2 * m * k * n
        rows.append([f"{m} x {k} x {n}{' + bias' if has_bias else ''}", f"{m * k * n / 1e6:.1f}M",
                     f"{base * 1e6:.1f}"] + [f"{t / base:.2f} ({flops / t / 1e9:.0f})" for t in times.values()])
    return rows


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--big", action="store_true", help="the products around oneDNN's threshold and above")
    parser.add_argument("--repeat", type=int, default=None)
    args = parser.parse_args()
    ensure_environment(1)
    import torch

    from neuroncc.executors.cpu.extern import _onednn_available

    if not _onednn_available(torch):
        sys.exit("this torch has no oneDNN linear")
    for threads in (int(t) for t in args.threads.split(",")):
        torch.set_num_threads(threads)
        rows = product_rows(BIG if args.big else SMALL, args.repeat or (40 if args.big else 300))
        print(f"\n{threads} thread(s), load {', '.join(f'{x:.2f}' for x in os.getloadavg())}; x ATen's time "
              "(GFLOP/s)")
        print(table(rows, ["product", "MACs", "aten us", "aten (MKL)", "direct sgemm", "oneDNN adopted",
                           "oneDNN + copy"]))


if __name__ == "__main__":
    main()
