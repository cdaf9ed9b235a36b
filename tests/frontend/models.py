"""Small models for the backend's acceptance tests (shapes kept tiny: the interp target is numpy)."""

from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class MLP(nn.Module):
    def __init__(self, d_in: int = 8, hidden: int = 16, d_out: int = 4):
        super().__init__()
        self.fc1 = nn.Linear(d_in, hidden)
        self.fc2 = nn.Linear(hidden, d_out)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


class LayerNormNet(nn.Module):
    def __init__(self, d: int = 16):
        super().__init__()
        self.norm = nn.LayerNorm(d)
        self.proj = nn.Linear(d, d)

    def forward(self, x):
        return self.proj(self.norm(x))


class GeluNet(nn.Module):
    def __init__(self, d: int = 12):
        super().__init__()
        self.fc1 = nn.Linear(d, 2 * d)
        self.fc2 = nn.Linear(2 * d, d)

    def forward(self, x):
        return self.fc2(F.gelu(self.fc1(x))) + F.gelu(x, approximate="tanh")


class SoftmaxNet(nn.Module):
    def __init__(self, d: int = 10):
        super().__init__()
        self.fc = nn.Linear(d, d)

    def forward(self, x):
        return torch.softmax(self.fc(x), dim=-1) * F.log_softmax(x, dim=0)


class CrossEntropyNet(nn.Module):
    """Classifier whose forward returns the loss (cross-entropy computed inside the compiled region)."""

    def __init__(self, d: int = 8, classes: int = 5):
        super().__init__()
        self.fc = nn.Linear(d, classes)

    def forward(self, x, target):
        return F.cross_entropy(self.fc(x), target, label_smoothing=0.1)


class EmbeddingNet(nn.Module):
    def __init__(self, vocab: int = 20, d: int = 8):
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.out = nn.Linear(d, vocab)

    def forward(self, tokens):
        return self.out(self.embed(tokens))


class CausalSelfAttention(nn.Module):
    """A pre-norm transformer block; ``sdpa`` picks F.scaled_dot_product_attention or a hand-written mask."""

    def __init__(self, d: int = 16, heads: int = 2, block: int = 8, sdpa: bool = True):
        super().__init__()
        self.heads, self.sdpa = heads, sdpa
        self.norm = nn.LayerNorm(d)
        # No bias on q/k/v: the key bias has a mathematically zero gradient, and AdamW turns its float noise
        # into full-size steps, which no two implementations agree on.
        self.qkv = nn.Linear(d, 3 * d, bias=False)
        self.proj = nn.Linear(d, d)
        self.register_buffer("mask", torch.tril(torch.ones(block, block)).view(1, 1, block, block))

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(self.norm(x)).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        if self.sdpa:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
            att = att.masked_fill(self.mask[:, :, :t, :t] == 0, float("-inf"))
            y = F.softmax(att, dim=-1) @ v
        y = y.transpose(1, 2).contiguous().view(b, t, c)
        return x + self.proj(y)


class RMSNorm(nn.Module):
    def __init__(self, d: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class LlamaMLP(nn.Module):
    """RMSNorm then a SiLU-gated MLP (Llama's feed-forward), with a residual."""

    def __init__(self, d: int = 12, hidden: int = 24):
        super().__init__()
        self.norm = RMSNorm(d)
        self.gate = nn.Linear(d, hidden, bias=False)
        self.up = nn.Linear(d, hidden, bias=False)
        self.down = nn.Linear(hidden, d, bias=False)

    def forward(self, x):
        h = self.norm(x)
        return x + self.down(F.silu(self.gate(h)) * self.up(h))


class ConvBNReLU(nn.Module):
    def __init__(self, c_in: int = 3, c_out: int = 4):
        super().__init__()
        self.conv = nn.Conv2d(c_in, c_out, 3, padding=1, bias=False)  # BatchNorm follows: a bias is redundant
        self.bn = nn.BatchNorm2d(c_out)

    def forward(self, x):
        return torch.relu(self.bn(self.conv(x)))


class PoolingCNN(nn.Module):
    """conv -> max pool -> conv -> avg pool (padding not counted) -> adaptive avg pool -> linear."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(2, 4, 3, padding=1)
        self.conv2 = nn.Conv2d(4, 4, 3, padding=1)
        self.head = nn.Linear(4, 3)

    def forward(self, x):
        x = F.max_pool2d(torch.relu(self.conv1(x)), 2)
        x = F.avg_pool2d(torch.relu(self.conv2(x)), 3, stride=2, padding=1, count_include_pad=False)
        x = F.avg_pool2d(x, 2, stride=1, padding=1) + 1
        return self.head(F.adaptive_avg_pool2d(x, 1).flatten(1))
