"""Random numbers: eager, Inductor and neuroncc, and neuroncc's two ways to give the backward a dropout mask.

    (r1) torch.rand [4096, 1024]                      (r2) torch.randn [4096, 1024]
    (r3) F.dropout(x, 0.1) forward, x [4096, 1024]
    (t1) training step of dropout alone: loss = (dropout(x) * g).sum(), backward to x  (the mask's whole cost)
    (t2) training step of an MLP block with dropout: dropout(gelu(x @ W1)) @ W2, x [2048, 1024], hidden 4096
    (t3) training step of a GPT-2 block (d 512, 8 heads, seq 256, batch 8) with its four dropouts (p = 0.1)

neuroncc runs twice: ``random_masks="save"`` (the forward writes the mask, 1 byte per element, the backward
reads it) and ``"regenerate"`` (the backward recomputes the mask from the 16-byte random state: Philox again).
Every implementation is interleaved call by call in one process, medians of ``--repeat``; the "saved" column
is the bytes of tensors autograd keeps for the backward (a saved_tensors_hooks count over one forward).

Run: ``python benchmarks/bench_random.py [--rows r1,r2,r3,t1,t2,t3] [--repeat 15]``.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import ensure_environment, interleaved, table  # noqa: E402

ensure_environment(threads=2)

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402

IMPLS = ("eager", "inductor", "neuron", "neuron-regenerate")


class GPT2Block(nn.Module):
    def __init__(self, d: int = 512, heads: int = 8, p: float = 0.1):
        super().__init__()
        self.heads = heads
        self.ln_1, self.ln_2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.c_attn, self.c_proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.attn_dropout, self.resid_dropout = nn.Dropout(p), nn.Dropout(p)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(approximate="tanh"), nn.Linear(4 * d, d), nn.Dropout(p))

    def forward(self, x):
        batch, seq, d = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(d, dim=2)
        q, k, v = (t.view(batch, seq, self.heads, d // self.heads).transpose(1, 2) for t in (q, k, v))
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(d // self.heads)
        causal = torch.ones(seq, seq, dtype=torch.bool).tril()
        y = self.attn_dropout(scores.masked_fill(~causal, float("-inf")).softmax(-1)) @ v
        x = x + self.resid_dropout(self.c_proj(y.transpose(1, 2).reshape(batch, seq, d)))
        return x + self.mlp(self.ln_2(x))


def _compiled(fn: Callable, impl: str) -> Callable:
    if impl == "eager":
        return fn
    if impl == "inductor":
        return torch.compile(fn, dynamic=False)
    masks = "regenerate" if impl == "neuron-regenerate" else "save"
    return torch.compile(fn, backend="neuron", dynamic=False, options={"random_masks": masks})


def row_r1(impl: str) -> Callable[[], object]:
    fn = _compiled(lambda: torch.rand(4096, 1024), impl)
    return lambda: fn()


def row_r2(impl: str) -> Callable[[], object]:
    fn = _compiled(lambda: torch.randn(4096, 1024), impl)
    return lambda: fn()


def row_r3(impl: str) -> Callable[[], object]:
    x = torch.randn(4096, 1024)
    fn = _compiled(lambda x: F.dropout(x, 0.1, training=True), impl)
    return lambda: fn(x)


def row_t1(impl: str) -> Callable[[], object]:
    x = torch.randn(4096, 1024, requires_grad=True)
    g = torch.randn(4096, 1024)
    fn = _compiled(lambda x, g: (F.dropout(x, 0.1, training=True) * g).sum(), impl)

    def step() -> object:
        x.grad = None
        fn(x, g).backward()
        return x.grad
    return step


def _module_step(model: nn.Module, x: torch.Tensor, impl: str) -> Callable[[], object]:
    run = _compiled(model, impl)

    def step() -> object:
        model.zero_grad(set_to_none=True)
        run(x).square().mean().backward()
        return None
    return step


def row_t2(impl: str) -> Callable[[], object]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(1024, 4096), nn.GELU(), nn.Dropout(0.1), nn.Linear(4096, 1024))
    return _module_step(model, torch.randn(2048, 1024), impl)


def row_t3(impl: str) -> Callable[[], object]:
    torch.manual_seed(0)
    return _module_step(GPT2Block(), torch.randn(8, 256, 512), impl)


ROWS: dict[str, tuple[str, Callable[[str], Callable[[], object]], bool]] = {
    "r1": ("(r1) torch.rand [4096, 1024]", row_r1, False),
    "r2": ("(r2) torch.randn [4096, 1024]", row_r2, False),
    "r3": ("(r3) dropout p=0.1 forward [4096, 1024]", row_r3, False),
    "t1": ("(t1) dropout training step [4096, 1024]", row_t1, True),
    "t2": ("(t2) MLP+dropout training step [2048, 1024->4096]", row_t2, True),
    "t3": ("(t3) GPT-2 block training step [8, 256, 512]", row_t3, True),
}


def saved_bytes(step: Callable[[], object]) -> int:
    """Bytes of the tensors autograd saves for the backward during one call of ``step``."""
    total = 0

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        nonlocal total
        total += tensor.numel() * tensor.element_size()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        step()
    return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", default=",".join(ROWS))
    parser.add_argument("--repeat", type=int, default=15)
    args = parser.parse_args()
    header = ["row", *(f"{impl} ms" for impl in IMPLS), "neuron / eager", "regenerate / save", "saved MiB (save / regen)"]
    lines = []
    for row in args.rows.split(","):
        label, make, train = ROWS[row]
        impls = {impl: make(impl) for impl in IMPLS if train or impl != "neuron-regenerate"}
        for step in impls.values():
            step()  # compile outside the timing
        times = interleaved(impls, repeats=args.repeat)
        ms = {impl: times[impl] * 1e3 for impl in times}
        regen = ms.get("neuron-regenerate")
        saved = ""
        if train:
            saved = f"{saved_bytes(impls['neuron']) / 2**20:.1f} / {saved_bytes(impls['neuron-regenerate']) / 2**20:.1f}"
        lines.append([label, *(f"{ms[i]:.2f}" if i in ms else "-" for i in IMPLS),
                      f"{ms['neuron'] / ms['eager']:.2f}", f"{regen / ms['neuron']:.2f}" if regen else "-", saved])
        print(table(lines[-1:], header), flush=True)
    print()
    print(table(lines, header))


if __name__ == "__main__":
    main()
