"""PyTorch's side of bench/mha_bench.cpp: nn.MultiheadAttention(256, 4) self-attention
and TransformerEncoderLayer(256, 4, 1024, gelu, norm_first, batch_first, dropout 0),
forward + backward on x [8, 128, 256] f32, one thread."""
import torch

from torch_util import emit, seconds_per_call

B, T, D, H = 8, 128, 256, 4


def _bench(name, module, forward, reps):
    g = torch.Generator().manual_seed(5)
    x = torch.randn(B, T, D, generator=g).requires_grad_(True)

    def step():
        forward(module, x).sum().backward()
        module.zero_grad(set_to_none=True)
        x.grad = None

    emit(name, "time", "us/iter", seconds_per_call(step, reps, 0.5) * 1e6)


def benches():
    torch.manual_seed(0)
    mha = torch.nn.MultiheadAttention(D, H, batch_first=True)
    block = torch.nn.TransformerEncoderLayer(D, H, dim_feedforward=4 * D, dropout=0.0, activation="gelu",
                                             batch_first=True, norm_first=True)
    return [
        ("mha_b8t128d256h4", lambda n, r: _bench(n, mha, lambda m, x: m(x, x, x, need_weights=False)[0], r)),
        ("transformer_block_b8t128d256h4", lambda n, r: _bench(n, block, lambda m, x: m(x), r)),
    ]
