#!/usr/bin/env python
"""Train a small transformer language model on several processes on the neuron device, with DDP or FSDP2.

    torchrun --nproc-per-node 2 examples/train_distributed.py                 # DistributedDataParallel
    torchrun --nproc-per-node 2 examples/train_distributed.py --fsdp          # FSDP2 (fully_shard per block)
    torchrun --nproc-per-node 2 examples/train_distributed.py --compile       # DDP(torch.compile(model))
    torchrun --nproc-per-node 2 examples/train_distributed.py --device cpu    # the same on CPU with gloo

The process group is ``init_process_group("neuron")``: gloo moves the bytes of the device's host memory.
Each rank trains on its own slice of every batch and prints the loss per step; the ranks end with the same
parameters (checked at the end). Every process runs its rank on its own neuron device, which it sees as
``neuron:0`` (torch's autograd engine runs the backward of a Python-registered device on index 0 only, so a
rank never trains on ``neuron:1``: the same isolation as one visible device per process).

Compiles are shared: the ranks compile each kernel once per machine (the compile cache's per-key locks), and
with ``NEURONCC_REMOTE_CACHE``/``NEURONCC_REMOTE_CACHE_KEY`` once for every machine (docs/cache.md).
"""

from __future__ import annotations

import argparse
import datetime
import os
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    """Pre-norm attention (causal, written out: matmuls and a softmax) and an MLP."""

    def __init__(self, width: int, heads: int):
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.qkv, self.out = nn.Linear(width, 3 * width), nn.Linear(width, width)
        self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, length, width = x.shape
        q, k, v = self.qkv(self.norm1(x)).chunk(3, dim=-1)
        q, k, v = (t.reshape(batch, length, self.heads, -1).transpose(1, 2) for t in (q, k, v))
        scores = q @ k.transpose(-1, -2) / (width // self.heads) ** 0.5
        mask = torch.ones(length, length, dtype=torch.bool, device=x.device).triu(1)
        attention = scores.masked_fill(mask, float("-inf")).softmax(-1) @ v
        x = x + self.out(attention.transpose(1, 2).reshape(batch, length, width))
        return x + self.mlp(self.norm2(x))


class TinyLM(nn.Module):
    def __init__(self, vocab: int = 64, width: int = 32, heads: int = 2, layers: int = 2, length: int = 16):
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        self.position = nn.Parameter(torch.randn(length, width) * 0.02)
        self.blocks = nn.ModuleList(Block(width, heads) for _ in range(layers))
        self.norm = nn.LayerNorm(width)
        self.head = nn.Linear(width, vocab)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens) + self.position[: tokens.shape[1]]
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))


def batches(steps: int, batch: int, length: int, vocab: int):
    """A learnable synthetic language: each token is the previous one plus a fixed stride (mod vocab)."""
    generator = torch.Generator().manual_seed(0)
    for _ in range(steps):
        start = torch.randint(vocab, (batch, 1), generator=generator)
        stride = torch.randint(1, 4, (batch, 1), generator=generator)
        yield (start + stride * torch.arange(length + 1)) % vocab


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--fsdp", action="store_true", help="shard with FSDP2 instead of DDP")
    parser.add_argument("--compile", action="store_true", help='DDP(torch.compile(model, backend="neuron"))')
    parser.add_argument("--device", default="neuron", choices=["neuron", "cpu"])
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--batch", type=int, default=8, help="global batch (split across the ranks)")
    args = parser.parse_args()

    backend = "neuron" if args.device == "neuron" else "gloo"
    dist.init_process_group(backend, timeout=datetime.timedelta(seconds=120))
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device(args.device, 0) if args.device == "neuron" else torch.device("cpu")
    torch.manual_seed(0)  # the same initial weights on every rank
    model = TinyLM().to(device)
    if args.fsdp:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard

        mesh = init_device_mesh(device.type, (world,))
        for block in model.blocks:
            fully_shard(block, mesh=mesh)
        trained = fully_shard(model, mesh=mesh)
    else:
        from torch.nn.parallel import DistributedDataParallel

        inner = torch.compile(model, backend="neuron", dynamic=False) if args.compile else model
        trained = DistributedDataParallel(inner)
    optimizer = torch.optim.AdamW(trained.parameters(), lr=3e-3)
    per_rank = args.batch // world
    mode = "FSDP2" if args.fsdp else "DDP" + (" + torch.compile" if args.compile else "")
    if rank == 0:
        print(f"{mode} on {world} ranks, device {device.type}, process group {dist.get_backend()}")
    for step, tokens in enumerate(batches(args.steps, args.batch, 16, 64)):
        tokens = tokens[rank * per_rank:(rank + 1) * per_rank].to(device)
        start = time.perf_counter()
        optimizer.zero_grad()
        logits = trained(tokens[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tokens[:, 1:].reshape(-1))
        loss.backward()
        optimizer.step()
        total = loss.detach().clone()
        dist.all_reduce(total, op=dist.ReduceOp.AVG)
        if rank == 0:
            print(f"step {step}  loss {float(total.cpu()):.4f}  ({(time.perf_counter() - start) * 1000:.0f} ms)")
    # every rank ends with the same parameters
    first = next(iter(model.parameters()))
    full = (first.full_tensor() if hasattr(first, "full_tensor") else first).detach().sum().reshape(1)
    spread = full.clone()
    dist.all_reduce(spread, op=dist.ReduceOp.MAX)
    dist.all_reduce(full, op=dist.ReduceOp.MIN)
    if rank == 0:
        print(f"ranks agree on the parameters: {bool((spread - full).abs().cpu() < 1e-5)}")
    dist.destroy_process_group()


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
