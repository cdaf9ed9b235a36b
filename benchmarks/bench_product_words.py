"""bf16-product-words A/B (session 47): a compiled bf16 autocast training step's forward and backward with the cpu
pipeline as it is (bf16 products on the graph's bf16 words) and without the pass (products narrowing their
float32-held operands for ATen's bf16 kernel and widening their results, as before session 47), on neuron tensors
and on CPU tensors, eager beside each, in one process, interleaved.

Run: ``/work/bin/heavy x python benchmarks/bench_product_words.py [--threads 2] [--repeats 40]``. The model is
``bench_device.py --rows amp``'s 512-2048-512 MLP at batch 128 (its optimizer step left out: eager in every row).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import ensure_environment, interleaved_samples, table  # noqa: E402


def _mlp(torch, device: str):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(512, 2048), torch.nn.GELU(), torch.nn.Linear(2048, 512)).to(device)
    return model, torch.randn(128, 512, device=device), torch.randn(128, 512, device=device)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=40)
    args = parser.parse_args()
    ensure_environment(args.threads)
    import torch

    from neuroncc.passes import default_pipeline  # (importing neuroncc registers the neuron device and backend)

    pipelines = {"words": default_pipeline("cpu"),
                 "float32 buffers": default_pipeline("cpu").replace("bf16-product-words,", "")}

    def step(model, x, target) -> None:
        with torch.autocast(x.device.type, dtype=torch.bfloat16):
            loss = torch.nn.functional.mse_loss(model(x), target)
        loss.backward()
        for parameter in model.parameters():
            parameter.grad = None

    calls = {}
    for device in ("neuron", "cpu"):
        for name, pipeline in pipelines.items():
            model, x, target = _mlp(torch, device)
            compiled = torch.compile(model, backend="neuron", dynamic=False, options={"pipeline": pipeline})
            calls[f"{device} compiled, {name}"] = lambda m=compiled, x=x, t=target: step(m, x, t)
        model, x, target = _mlp(torch, device)
        calls[f"{device} eager"] = lambda m=model, x=x, t=target: step(m, x, t)
    samples = interleaved_samples(calls, repeats=args.repeats)
    ms = {name: statistics.median(times) * 1e3 for name, times in samples.items()}
    rows = []
    for device in ("neuron", "cpu"):
        words, buffers = samples[f"{device} compiled, words"], samples[f"{device} compiled, float32 buffers"]
        ratio = statistics.median(w / b for w, b in zip(words, buffers))  # per round: calls moments apart
        compiled = [ms[f"{device} compiled, {name}"] for name in pipelines]
        rows.append([device, *(f"{t:.2f}" for t in compiled), f"{ratio:.2f}", f"{ms[f'{device} eager']:.2f}"])
    load = Path("/proc/loadavg").read_text().split()[:3] if Path("/proc/loadavg").exists() else ["?"]
    print(f"torch {torch.__version__}, {args.threads} thread(s), {args.repeats} rounds, load {' '.join(load)}")
    print(table(rows, ["forward+backward, bf16 autocast, tensors on", "words ms", "float32 buffers ms",
                       "words / float32 buffers (per round)", "eager ms"]))


if __name__ == "__main__":
    main()
