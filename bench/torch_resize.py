"""PyTorch's side of bench/resize_bench.cpp: forward + backward per iteration
in f32 on the same shapes (grads cleared each iteration, as on kiln's side).
RoPE is written the usual way (GPT-NeoX / LLaMA-HF): x * cos + rotate_half(x)
* sin with the cos/sin tables computed once, outside the timed step."""
import torch
import torch.nn.functional as F

from torch_util import emit, seconds_per_call


def _time(name, step, reps):
    emit(name, "time", "ms/iter", seconds_per_call(step, reps, 0.2) * 1e3)


def bench_upsample(mode):
    def run(name, reps):
        g = torch.Generator().manual_seed(0)
        x = torch.randn(32, 64, 32, 32, generator=g).requires_grad_()
        gy = torch.randn(32, 64, 64, 64, generator=g)

        def step():
            F.interpolate(x, scale_factor=2, mode=mode, align_corners=False if mode == "bilinear" else None).backward(gy)
            x.grad = None

        _time(name, step, reps)
    return run


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


def bench_rotary(name, reps):
    g = torch.Generator().manual_seed(1)
    x = torch.randn(8, 8, 256, 64, generator=g).requires_grad_()
    gy = torch.randn(8, 8, 256, 64, generator=g)
    inv_freq = 1.0 / (10000 ** (torch.arange(0, 64, 2).float() / 64))
    freqs = torch.outer(torch.arange(256).float(), inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos(), emb.sin()  # cached [T, D]

    def step():
        (x * cos + rotate_half(x) * sin).backward(gy)
        x.grad = None

    _time(name, step, reps)


def benches():
    return [("upsample_nearest_x2", bench_upsample("nearest")), ("upsample_bilinear_x2", bench_upsample("bilinear")),
            ("rotary_b8h8t256d64", bench_rotary)]
