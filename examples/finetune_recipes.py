#!/usr/bin/env python
"""A training loop as tutorials write it, on CPU or on the neuron device: a small transformer classifier over
padded token sequences, with gradient accumulation, OneCycleLR, gradient clipping, label smoothing and an EMA of
the weights (torch.optim.swa_utils), evaluated with the EMA model.

    python examples/finetune_recipes.py                 # on the neuron device (neuroncc installed)
    python examples/finetune_recipes.py --device cpu    # the same script on CPU: the same losses
    python examples/finetune_recipes.py --compile       # with torch.compile(backend="neuron") on top

docs/device.md ("Training recipes") lists the recipes tried on the device.
"""

from __future__ import annotations

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn

VOCAB, PAD, CLASSES = 64, 0, 3


class Classifier(nn.Module):
    def __init__(self, width: int = 32, heads: int = 4, layers: int = 2):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, width, padding_idx=PAD)
        layer = nn.TransformerEncoderLayer(width, heads, 4 * width, dropout=0.0, batch_first=True, norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = nn.Linear(width, CLASSES)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        padding = ids == PAD
        hidden = self.encoder(self.embed(ids), src_key_padding_mask=padding)
        keep = (~padding).unsqueeze(-1).to(hidden.dtype)
        return self.head((hidden * keep).sum(1) / keep.sum(1))  # mean over the real tokens


def batches(count: int, batch: int, length: int, seed: int):
    """A synthetic task: the class is the most frequent token's residue mod 3; rows end in padding."""
    generator = torch.Generator().manual_seed(seed)
    for _ in range(count):
        ids = torch.randint(1, VOCAB, (batch, length), generator=generator)
        lengths = torch.randint(length // 2, length + 1, (batch,), generator=generator)
        ids[torch.arange(length) >= lengths.unsqueeze(1)] = PAD
        labels = torch.mode(torch.where(ids == PAD, VOCAB, ids), dim=1).values % CLASSES
        yield ids, labels


def train(device: str, compile: bool = False, steps: int = 8, accumulate: int = 2, seed: int = 0) -> list[float]:
    """The losses of each micro-batch, then the EMA model's evaluation loss."""
    torch.manual_seed(seed)
    model = Classifier().to(device)
    ema = AveragedModel(model, multi_avg_fn=get_ema_multi_avg_fn(0.9))
    run = torch.compile(model, backend="neuron") if compile else model
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    schedule = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=3e-3, total_steps=steps)
    losses = []
    for index, (ids, labels) in enumerate(batches(steps * accumulate, 8, 16, seed)):
        ids, labels = ids.to(device), labels.to(device)
        loss = F.cross_entropy(run(ids), labels, label_smoothing=0.1)
        (loss / accumulate).backward()
        losses.append(loss.item())
        if (index + 1) % accumulate == 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            schedule.step()
            ema.update_parameters(model)
    ids, labels = next(batches(1, 32, 16, seed + 1))
    with torch.no_grad():
        losses.append(F.cross_entropy(ema(ids.to(device)), labels.to(device)).item())
    return losses


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="neuron")
    parser.add_argument("--compile", action="store_true")
    parser.add_argument("--steps", type=int, default=8)
    args = parser.parse_args()
    losses = train(args.device, args.compile, args.steps)
    for step, loss in enumerate(losses[:-1]):
        print(f"micro-batch {step}: loss {loss:.4f}")
    print(f"EMA model's evaluation loss: {losses[-1]:.4f}")


if __name__ == "__main__":
    main()
