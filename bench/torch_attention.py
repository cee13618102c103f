"""PyTorch's side of bench/attention_bench.cpp: causal self-attention forward +
backward written with plain 1.13 ops (1.13 has no scaled_dot_product_attention):
softmax(masked_fill(q k^T * scale, ~causal, -inf)) v, then sum(out).backward().
The memory benches have no torch figure (1.13 cannot report CPU peak bytes)."""
import torch

from torch_util import emit, seconds_per_call


def _attention(q, k, v, causal):
    s = torch.matmul(q, k.transpose(-2, -1)) * (q.shape[-1] ** -0.5)
    s = s.masked_fill(~causal, float("-inf"))
    return torch.matmul(torch.softmax(s, -1), v)


def bench_time(name, b, h, t, d, reps):
    g = torch.Generator().manual_seed(5)
    q, k, v = (torch.randn(b, h, t, d, generator=g).requires_grad_(True) for _ in range(3))
    causal = torch.ones(t, t, dtype=torch.bool).tril()

    def step():
        _attention(q, k, v, causal).sum().backward()
        q.grad = k.grad = v.grad = None

    emit(name, "time", "us/iter", seconds_per_call(step, reps, 0.3) * 1e6)


def benches():
    return [("attention_b12h4t64", lambda n, r: bench_time(n, 12, 4, 64, 32, r))]
