"""PyTorch's side of bench/norm_bench.cpp: forward + backward per iteration in
f32 on the same shapes (grads cleared each iteration, as on kiln's side)."""
import torch
import torch.nn.functional as F

from torch_util import emit, seconds_per_call


def _time(name, step, reps):
    emit(name, "time", "us/iter", seconds_per_call(step, reps, 0.2) * 1e6)


def bench_layer_norm(name, reps):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(768, 128, generator=g).requires_grad_()
    w = torch.randn(128, generator=g).requires_grad_()
    b = torch.randn(128, generator=g).requires_grad_()
    gy = torch.randn(768, 128, generator=g)

    def step():
        F.layer_norm(x, (128,), w, b).backward(gy)
        x.grad = w.grad = b.grad = None

    _time(name, step, reps)


def bench_cross_entropy(name, reps):
    g = torch.Generator().manual_seed(1)
    x = torch.randn(768, 65, generator=g).requires_grad_()
    t = torch.randint(0, 65, (768,), generator=g)

    def step():
        F.cross_entropy(x, t).backward()
        x.grad = None

    _time(name, step, reps)


def bench_batch_norm(name, reps):
    g = torch.Generator().manual_seed(2)
    x = torch.randn(64, 32, 14, 14, generator=g).requires_grad_()
    gy = torch.randn(64, 32, 14, 14, generator=g)
    w = torch.ones(32).requires_grad_()
    b = torch.zeros(32).requires_grad_()
    rm, rv = torch.zeros(32), torch.ones(32)

    def step():
        F.batch_norm(x, rm, rv, w, b, training=True).backward(gy)
        x.grad = w.grad = b.grad = None

    _time(name, step, reps)


def benches():
    return [("layer_norm_768x128", bench_layer_norm), ("cross_entropy_768x65", bench_cross_entropy),
            ("batch_norm_64x32x14x14", bench_batch_norm)]
