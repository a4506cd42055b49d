"""A small pre-norm transformer block in PyTorch whose norms, attention, projections and MLP
are kdsl operators, compared with the same block in plain torch on every available backend:
the output and the gradients of the input and every parameter, eager and under
`torch.compile(fullgraph=True)`.

    pip install 'kdsl[torch]'
    python examples/torch_transformer.py
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

import kdsl as kd
import kdsl.torch  # registers torch.ops.kdsl.*

ops = torch.ops.kdsl


class Block(nn.Module):
    """x + attn(rms_norm(x)), then + mlp(rms_norm(.)): grouped-query causal attention and a
    SwiGLU MLP.  `kdsl=True` runs the norms, attention and MLP as kdsl operators on `backend`;
    the projections are kdsl matmuls of the nn.Linear weights' transposed views (read in place)."""

    def __init__(self, dim: int = 64, heads: int = 4, kv_heads: int = 2, hidden: int = 128):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, dim // heads
        kv = kv_heads * self.head_dim
        self.norm1, self.norm2 = nn.Parameter(torch.ones(dim)), nn.Parameter(torch.ones(dim))
        self.wq, self.wk, self.wv = nn.Linear(dim, dim, False), nn.Linear(dim, kv, False), \
            nn.Linear(dim, kv, False)
        self.wo = nn.Linear(dim, dim, False)
        self.w_gate, self.w_up = nn.Linear(dim, hidden, False), nn.Linear(dim, hidden, False)
        self.w_down = nn.Linear(hidden, dim, False)
        self.kdsl, self.backend = False, None

    def _norm(self, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        if self.kdsl:
            return ops.rms_norm(x, w, 1e-6, self.backend)
        return F.rms_norm(x, (x.shape[-1],), w, 1e-6)

    def _linear(self, x: torch.Tensor, lin: nn.Linear) -> torch.Tensor:
        if self.kdsl:  # x [tokens, in] @ weight.t(): a column-major view of [out, in]
            return ops.matmul(x, lin.weight.t(), backend=self.backend)
        return lin(x)

    def _attention(self, h: torch.Tensor) -> torch.Tensor:
        B, S, D = h.shape
        flat = h.reshape(B * S, D)
        q = self._linear(flat, self.wq).view(B, S, self.heads, self.head_dim).transpose(1, 2)
        k = self._linear(flat, self.wk).view(B, S, self.kv_heads, self.head_dim).transpose(1, 2)
        v = self._linear(flat, self.wv).view(B, S, self.kv_heads, self.head_dim).transpose(1, 2)
        if self.kdsl:  # q, k, v are [B, heads, S, hd] views of [B, S, heads, hd]: read in place
            o = ops.attention(q, k, v, True, None, self.backend)
        else:
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        return self._linear(o.transpose(1, 2).reshape(B * S, D), self.wo).view(B, S, D)

    def _mlp(self, h: torch.Tensor) -> torch.Tensor:
        B, S, D = h.shape
        flat = h.reshape(B * S, D)
        if self.kdsl:
            out = ops.mlp(flat, self.w_gate.weight.t(), self.w_up.weight.t(),
                          self.w_down.weight.t(), self.backend)
        else:
            out = self.w_down(F.silu(self.w_gate(flat)) * self.w_up(flat))
        return out.view(B, S, D)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self._attention(self._norm(x, self.norm1))
        return x + self._mlp(self._norm(x, self.norm2))


def rel_error(a: torch.Tensor, b: torch.Tensor) -> float:
    """max |a - b| relative to max |b|."""
    a, b = a.detach().double(), b.detach().double()
    return float((a - b).abs().max() / b.abs().max().clamp_min(1e-30))


def _grads(block: Block, x: torch.Tensor, fn: Any = None) -> list[torch.Tensor]:
    """d sum(block(x)^2) / d (x, every parameter)."""
    block.zero_grad()
    x = x.clone().requires_grad_()
    (block if fn is None else fn)(x).square().sum().backward()
    return [x.grad] + [p.grad for p in block.parameters()]


def run(backend: str, seed: int = 0, batch: int = 2, seq: int = 16) -> dict[str, float]:
    """Relative errors of the kdsl block against the torch block on `backend`: the output
    (eager and compiled) and the gradients of the input and of every parameter."""
    torch.manual_seed(seed)
    block = Block()
    with torch.no_grad():  # weights of the scale a trained model has
        for p in block.parameters():
            p.mul_(0.5) if p.dim() == 2 else p.add_(0.1 * torch.randn_like(p))
    x = torch.randn(batch, seq, 64)
    want = block(x)
    want_grads = _grads(block, x)
    block.kdsl, block.backend = True, backend
    compiled = torch.compile(block, fullgraph=True, backend="aot_eager")
    return {
        "output": rel_error(block(x), want),
        "compiled": rel_error(compiled(x), want),
        "gradients": max(rel_error(g, w) for g, w in zip(_grads(block, x), want_grads)),
        "compiled gradients": max(rel_error(g, w) for g, w in
                                  zip(_grads(block, x, compiled), want_grads)),
    }


def main() -> None:
    print("relative error of the kdsl block against the torch block (float32)")
    for backend in kd.available_backends():
        errors = run(backend)
        print(f"{backend:7s} " + "  ".join(f"{k} {v:.1e}" for k, v in errors.items()))


if __name__ == "__main__":
    main()
