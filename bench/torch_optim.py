"""PyTorch's side of bench/optim_bench.cpp: one steady-state AdamW step
(lr 1e-3, betas 0.9/0.999, eps 1e-8, weight_decay 1e-2) over the same f32
parameter lists, every parameter with a fixed gradient.

Metrics (see bench/optim_bench.cpp): "time" (ms/step) with
torch.optim.AdamW(foreach=True), its fastest CPU path in 1.13; "time_single"
with foreach=False (one parameter at a time); "gbps" (7 x 4 bytes per element
per step / time, 1e9 bytes per GB); "copy_gbps", this side's copy probe:
dst.copy_(src) of twice the last-level cache (at least 256 MiB) of f32, read + write bytes counted, the median of the
repetitions, on 1 thread and on os.cpu_count() threads, the better of the two
(the harness's --threads setting is restored afterwards); "copy_fraction" = gbps /
copy_gbps; "time_malloc_tuned": "time" again in a child process whose glibc
malloc keeps freed memory (MALLOC_MMAP_THRESHOLD_ = 32 MiB, the most glibc
takes, and MALLOC_TRIM_THRESHOLD_ = 4 GiB). With glibc's defaults each step's
temporaries (torch._foreach_sqrt, _foreach_add ...) go back to the kernel when
freed and fault in again at the next step, which on this VM costs about
10 us per 4 KiB page: most of "time" at 1M, and 10x on many 10M steps.
"""
import functools
import os
import statistics
import subprocess
import sys
import time

import torch

from torch_util import emit, seconds_per_call


def _model_shapes(vocab, d, h, classes):
    # An embedding, an MLP block, a norm's scale and shift, a classifier head.
    return [(vocab, d), (h, d), (h,), (d, h), (d,), (d,), (d,), (classes, d), (classes,)]


# 1,000,016 and 10,000,360 elements; keep in step with bench/optim_bench.cpp.
SHAPES = {"adamw_1m": _model_shapes(1000, 256, 1024, 848), "adamw_10m": _model_shapes(14427, 512, 2048, 1000)}


def _probe_bytes():
    """Twice the last-level cache, at least 256 MiB (as bench/optim_bench.cpp)."""
    try:
        l3 = int(subprocess.run(["getconf", "LEVEL3_CACHE_SIZE"], stdout=subprocess.PIPE, text=True).stdout or 0)
    except (OSError, ValueError):
        l3 = 0
    step = 256 << 20
    return max(step, (2 * l3 + step - 1) // step * step)


def _copy_gbps(reps, threads):
    saved = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        n = _probe_bytes() // 4
        src = torch.ones(n)  # written, so every page is faulted in before timing
        dst = torch.zeros(n)
        dst.copy_(src)
        rates = []
        for _ in range(max(reps, 11)):
            t0 = time.perf_counter()
            dst.copy_(src)
            rates.append(2.0 * n * 4 / (time.perf_counter() - t0) * 1e-9)
        return statistics.median(rates)
    finally:
        torch.set_num_threads(saved)


@functools.lru_cache(maxsize=None)
def _copy_probe(reps):
    """Measured once per process, so both benches divide by the same figure."""
    best = _copy_gbps(reps, 1)
    if (os.cpu_count() or 1) > 1:
        best = max(best, _copy_gbps(reps, os.cpu_count()))
    return best


def _params(shapes):
    g = torch.Generator().manual_seed(0)
    params = []
    for s in shapes:
        p = torch.randn(s, generator=g).requires_grad_()
        p.grad = torch.randn(s, generator=g)
        params.append(p)
    return params


def _step_seconds(shapes, foreach, reps):
    params = _params(shapes)
    opt = torch.optim.AdamW(params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2, foreach=foreach)
    # seconds_per_call's warm-up steps create the moments; only steady-state steps are timed.
    return seconds_per_call(opt.step, reps, 0.3)


def _malloc_tuned_seconds(name, reps):
    """_step_seconds(foreach=True) in a child process with glibc malloc told to keep freed memory."""
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_=str(32 << 20), MALLOC_TRIM_THRESHOLD_=str(4 << 30))
    cmd = [sys.executable, __file__, name, str(reps), str(torch.get_num_threads())]
    out = subprocess.run(cmd, env=env, check=True, stdout=subprocess.PIPE, text=True).stdout
    return float(out)


def _bench(name, reps):
    shapes = SHAPES[name]
    numel = sum(functools.reduce(lambda a, b: a * b, s, 1) for s in shapes)
    sec = _step_seconds(shapes, True, reps)
    gbps = 7 * 4 * numel / sec * 1e-9
    copy = _copy_probe(reps)
    emit(name, "time", "ms/step", sec * 1e3)
    emit(name, "time_single", "ms/step", _step_seconds(shapes, False, reps) * 1e3)
    emit(name, "time_malloc_tuned", "ms/step", _malloc_tuned_seconds(name, reps) * 1e3)
    emit(name, "gbps", "GB/s", gbps)
    emit(name, "copy_fraction", "fraction of copy_gbps", gbps / copy)
    emit(name, "copy_gbps", "GB/s", copy)


def benches():
    return [(name, _bench) for name in SHAPES]


if __name__ == "__main__":  # the child of _malloc_tuned_seconds: NAME REPS THREADS -> seconds per step
    torch.set_num_threads(int(sys.argv[3]))
    print(_step_seconds(SHAPES[sys.argv[1]], True, int(sys.argv[2])))
