"""bf16-product-words A/B (sessions 47, 48): a compiled bf16 autocast training step's forward and backward with the
cpu pipeline as it is (bf16 products and convolutions on the graph's bf16 words) and without the pass (products and
convolutions narrowing their float32-held operands for ATen's bf16 kernels and widening their results, as before
session 47), on neuron tensors and on CPU tensors, eager beside each, in one process, interleaved.

Run: ``/work/bin/heavy x python benchmarks/bench_product_words.py [--model mlp|cnn] [--threads 2] [--repeats 40]``.

* ``mlp`` (session 47): ``bench_device.py --rows amp``'s 512-2048-512 MLP at batch 128 (its optimizer step left out:
  eager in every row).
* ``cnn`` (session 48): three conv-BatchNorm-ReLU blocks (3 -> 32 -> 64 -> 128 channels, the last two of stride 2),
  global average pooling and a Linear, on [32, 3, 64, 64]. Beside the two pipelines, the pass with its products
  only (its convolutions left on float32 buffers, as in session 47: the pass's rule limited to matrix products
  while the graphs compile, under a pipeline string of its own so no cache serves another's graphs).
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import ensure_environment, interleaved_samples, table  # noqa: E402


def _mlp(torch, device: str):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(512, 2048), torch.nn.GELU(), torch.nn.Linear(2048, 512)).to(device)
    return model, torch.randn(128, 512, device=device), torch.randn(128, 512, device=device)


def _cnn(torch, device: str):
    torch.manual_seed(0)
    nn = torch.nn

    def block(c_in: int, c_out: int, stride: int):
        return [nn.Conv2d(c_in, c_out, 3, stride=stride, padding=1, bias=False), nn.BatchNorm2d(c_out), nn.ReLU()]

    model = nn.Sequential(*block(3, 32, 1), *block(32, 64, 2), *block(64, 128, 2), nn.AdaptiveAvgPool2d(1),
                          nn.Flatten(), nn.Linear(128, 10)).to(device)
    return model, torch.randn(32, 3, 64, 64, device=device), torch.randn(32, 10, device=device)


@contextlib.contextmanager
def _products_only():
    """bf16-product-words with its rule limited to matrix products while graphs compile (session 47's pass)."""
    from neuroncc.ir import Trait
    from neuroncc.passes import product_words
    from neuroncc.passes.rewrite import Rule

    def products(site):
        return product_words.on_words(site) if site.op.has(Trait.MATRIX_PRODUCT) else None

    rules = product_words.RULES
    product_words.RULES = (Rule("*", products),) + rules[1:]
    try:
        yield
    finally:
        product_words.RULES = rules


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=("mlp", "cnn"), default="mlp")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=40)
    args = parser.parse_args()
    ensure_environment(args.threads)
    import torch

    from neuroncc.passes import default_pipeline  # (importing neuroncc registers the neuron device and backend)

    words = default_pipeline("cpu")
    pipelines = {"words": (words, contextlib.nullcontext),
                 "float32 buffers": (words.replace("bf16-product-words,", ""), contextlib.nullcontext)}
    if args.model == "cnn":  # (an extra canonicalize: a pipeline string, so a cache key, of its own)
        pipelines["products only"] = (words.replace("bf16-product-words,", "bf16-product-words,canonicalize,"),
                                      _products_only)
    make = {"mlp": _mlp, "cnn": _cnn}[args.model]

    def step(model, x, target) -> None:
        with torch.autocast(x.device.type, dtype=torch.bfloat16):
            loss = torch.nn.functional.mse_loss(model(x), target)
        loss.backward()
        for parameter in model.parameters():
            parameter.grad = None

    calls = {}
    for device in ("neuron", "cpu"):
        for name, (pipeline, compiling) in pipelines.items():
            model, x, target = make(torch, device)
            compiled = torch.compile(model, backend="neuron", dynamic=False, options={"pipeline": pipeline})
            with compiling():
                step(compiled, x, target)  # (compiles the forward and backward graphs)
            calls[f"{device} compiled, {name}"] = lambda m=compiled, x=x, t=target: step(m, x, t)
        model, x, target = make(torch, device)
        calls[f"{device} eager"] = lambda m=model, x=x, t=target: step(m, x, t)
    samples = interleaved_samples(calls, repeats=args.repeats)
    ms = {name: statistics.median(times) * 1e3 for name, times in samples.items()}
    rows = []
    for device in ("neuron", "cpu"):
        on_words = samples[f"{device} compiled, words"]
        ratios = [statistics.median(w / b for w, b in zip(on_words, samples[f"{device} compiled, {name}"]))
                  for name in pipelines if name != "words"]  # per round: calls moments apart
        compiled = [ms[f"{device} compiled, {name}"] for name in pipelines]
        rows.append([device, *(f"{t:.2f}" for t in compiled), *(f"{r:.2f}" for r in ratios),
                     f"{ms[f'{device} eager']:.2f}"])
    load = Path("/proc/loadavg").read_text().split()[:3] if Path("/proc/loadavg").exists() else ["?"]
    print(f"{args.model}: torch {torch.__version__}, {args.threads} thread(s), {args.repeats} rounds, "
          f"load {' '.join(load)}")
    print(table(rows, ["forward+backward, bf16 autocast, tensors on", *(f"{name} ms" for name in pipelines),
                       *(f"words / {name} (per round)" for name in pipelines if name != "words"), "eager ms"]))


if __name__ == "__main__":
    main()
