#!/usr/bin/python3
"""PyTorch's half of bench/run: the same workloads as kiln_bench, timed the
same way (median over repetitions), one JSON line per measurement:
{"bench", "metric", "unit", "value"}.

Run with Debian's interpreter (python3-torch 1.13):
    /usr/bin/python3 bench/torch_bench.py [--reps N] [--threads T] [--autocast bf16] [NAME...]
--threads: torch.set_num_threads(T) (default 1); bench/run runs this script at 1
thread and at all CPUs and keeps the better figure. --autocast bf16: the bf16
workloads (gpt_char_bf16, cnn_b64_bf16) run under CPU bf16 autocast instead of
f32 (torch_util.bf16_autocast). Last line: {"bench": "_torch", "metric":
"blas", ...}, the BLAS library torch loaded, then the settings it ran with.
"""
import importlib
import pathlib
import sys

import torch

import torch_util
from torch_util import emit, seconds_per_call

MATMUL_SHAPES = [(64, 64, 64), (128, 128, 128), (256, 256, 256), (512, 512, 512), (1024, 1024, 1024),
                 (2048, 2048, 2048), (64, 784, 256), (768, 128, 512), (32, 256, 1024)]


def bench_add(name, requires_grad, reps):
    g = torch.Generator().manual_seed(0)
    a = torch.randn(1, 10, generator=g)
    b = torch.randn(1, 10, generator=g)
    if requires_grad:
        a.requires_grad_(True)
    add = torch.add
    emit(name, "time", "us/op", seconds_per_call(lambda: add(a, b), reps, 0.1) * 1e6)


def bench_matmul(name, m, k, n, reps):
    g = torch.Generator().manual_seed(1)
    a = torch.randn(m, k, generator=g)
    b = torch.randn(k, n, generator=g)
    mm = torch.matmul
    sec = seconds_per_call(lambda: mm(a, b), reps, 0.2)
    emit(name, "gflops", "GFLOP/s", 2.0 * m * k * n / sec * 1e-9)


def core_benches():
    out = [("add_1x10", lambda n, r: bench_add(n, False, r)), ("add_1x10_grad", lambda n, r: bench_add(n, True, r))]
    for m, k, n in MATMUL_SHAPES:
        out.append((f"matmul_{m}x{k}x{n}", lambda name, r, m=m, k=k, n=n: bench_matmul(name, m, k, n, r)))
    return out


def benches():
    """This file's benches, then each bench/torch_<family>.py module's."""
    out = core_benches()
    here = pathlib.Path(__file__).resolve().parent
    for path in sorted(here.glob("torch_*.py")):
        if path.stem not in ("torch_bench", "torch_util"):
            out += importlib.import_module(path.stem).benches()
    return out


def blas_library():
    """The BLAS shared library this process loaded (torch's matmul backend)."""
    with open("/proc/self/maps") as f:
        for entry in f:
            path = entry.split()[-1]
            if "blas" in path.rsplit("/", 1)[-1]:
                return path
    return "none"


def main(argv):
    reps, threads, filters = 7, 1, []
    i = 0
    while i < len(argv):
        if argv[i] in ("--reps", "--threads", "--autocast") and i + 1 < len(argv):
            opt, value = argv[i], argv[i + 1]
            if opt == "--reps":
                reps = max(1, int(value))
            elif opt == "--threads":
                threads = max(1, int(value))
            elif value == "bf16":
                torch_util.BF16_AUTOCAST = True
            else:
                sys.exit(f"torch_bench.py: --autocast takes bf16, not {value}")
            i += 2
            continue
        filters.append(argv[i])
        i += 1
    torch.set_num_threads(threads)
    table = benches()
    names = [name for name, _ in table]
    for name, run in table:
        if not filters or any(name == f or (f not in names and name.startswith(f)) for f in filters):
            run(name, reps)
    emit("_torch", "blas", "path", blas_library())
    emit("_torch", "threads", "count", torch.get_num_threads())
    emit("_torch", "autocast", "dtype", "bf16" if torch_util.BF16_AUTOCAST else "none")
    emit("_torch", "version", "version", torch.__version__)


if __name__ == "__main__":
    main(sys.argv[1:])
