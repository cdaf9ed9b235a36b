"""A tiny transformer classifier and the synthetic task it learns: ``neuroncc demo``'s model.

The model reads 8 tokens from a 16-word vocabulary, runs one pre-norm transformer block (causal
self-attention through ``F.scaled_dot_product_attention``, a GELU MLP), pools, and scores 4 classes. The task:
the class is the most frequent of tokens 0-3 in the sequence (ties go to the smaller token), so attention and
pooling have something to do. ``ClassifierWithLoss`` returns the cross-entropy loss, so its exported program
has a scalar output whose backward neuroncc compiles.

Nothing here is a binary file: :func:`export_example` builds the model from a seed and writes the .pt2 with
``torch.export.save`` wherever it is asked to.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass(frozen=True)
class ClassifierConfig:
    vocab: int = 16
    length: int = 8
    width: int = 32
    heads: int = 2
    classes: int = 4
    batch: int = 32


class TinyTransformerClassifier(nn.Module):
    def __init__(self, config: ClassifierConfig = ClassifierConfig()):
        super().__init__()
        c = config
        self.heads = c.heads
        self.embed = nn.Embedding(c.vocab, c.width)
        self.position = nn.Parameter(torch.randn(c.length, c.width) * 0.02)
        self.norm1 = nn.LayerNorm(c.width)
        self.qkv = nn.Linear(c.width, 3 * c.width, bias=False)
        self.proj = nn.Linear(c.width, c.width)
        self.norm2 = nn.LayerNorm(c.width)
        self.up = nn.Linear(c.width, 2 * c.width)
        self.down = nn.Linear(2 * c.width, c.width)
        self.head = nn.Linear(c.width, c.classes)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens) + self.position
        b, t, c = x.shape
        q, k, v = self.qkv(self.norm1(x)).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        attended = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(attended.transpose(1, 2).reshape(b, t, c))
        x = x + self.down(F.gelu(self.up(self.norm2(x))))
        return self.head(x.mean(dim=1))


class ClassifierWithLoss(nn.Module):
    """The classifier and its loss in one module: ``(tokens, labels) -> mean cross-entropy``."""

    def __init__(self, config: ClassifierConfig = ClassifierConfig()):
        super().__init__()
        self.model = TinyTransformerClassifier(config)

    def forward(self, tokens: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(self.model(tokens), labels)


def make_batch(config: ClassifierConfig, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """A batch of random token sequences and their labels (the most frequent of tokens 0..classes-1)."""
    tokens = torch.randint(0, config.vocab, (config.batch, config.length), generator=generator)
    counts = torch.stack([(tokens == token).sum(dim=1) for token in range(config.classes)], dim=1)
    return tokens, counts.argmax(dim=1)


def build_example(seed: int = 0, config: ClassifierConfig = ClassifierConfig()) -> ClassifierWithLoss:
    """The example model with weights drawn from ``seed``."""
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        return ClassifierWithLoss(config)


def export_example(path: str | Path, seed: int = 0, config: ClassifierConfig = ClassifierConfig()) -> Path:
    """Export the example model (weights from ``seed``) to ``path`` with ``torch.export.save``."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    model = build_example(seed, config)
    example = make_batch(config, torch.Generator().manual_seed(seed))
    with sdpa_kernel(SDPBackend.MATH):
        program = torch.export.export(model, example)
    path = Path(path)
    torch.export.save(program, path)
    return path
