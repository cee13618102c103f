"""PyTorch's side of bench/conv_bench.cpp: forward + backward (input, weight
and bias gradients) per iteration, f32, the same shapes."""
import torch
import torch.nn.functional as F

from torch_util import emit, seconds_per_call


def bench_conv2d(name, reps, b, c, h, w, o, fresh=False):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(b, c, h, w, generator=g).requires_grad_()
    wt = (torch.randn(o, c, 3, 3, generator=g) * 0.1).requires_grad_()
    bias = torch.zeros(o).requires_grad_()
    gy = torch.randn(b, o, h, w, generator=g)

    def step():
        if fresh:  # the same in-place rewrite as kiln's side
            with torch.no_grad():
                x.mul_(1.0), wt.mul_(1.0), gy.mul_(1.0)
        y = F.conv2d(x, wt, bias, 1, 1)
        y.backward(gy)
        x.grad = wt.grad = bias.grad = None

    emit(name, "time", "ms/iter", seconds_per_call(step, reps, 0.3) * 1e3)


def bench_max_pool2d(name, reps):
    g = torch.Generator().manual_seed(1)
    x = torch.randn(64, 32, 28, 28, generator=g).requires_grad_()
    gy = torch.randn(64, 32, 14, 14, generator=g)

    def step():
        F.max_pool2d(x, 2).backward(gy)
        x.grad = None

    emit(name, "time", "ms/iter", seconds_per_call(step, reps, 0.3) * 1e3)


def benches():
    return [
        ("conv2d_cnn1", lambda n, r: bench_conv2d(n, r, 64, 1, 28, 28, 32)),
        ("conv2d_cnn2", lambda n, r: bench_conv2d(n, r, 64, 32, 14, 14, 64)),
        ("conv2d_cnn1_fresh", lambda n, r: bench_conv2d(n, r, 64, 1, 28, 28, 32, True)),
        ("conv2d_cnn2_fresh", lambda n, r: bench_conv2d(n, r, 64, 32, 14, 14, 64, True)),
        ("max_pool2d_64x32x28x28", lambda n, r: bench_max_pool2d(n, r)),
    ]
