#!/usr/bin/python3
"""PyTorch's half of bench/run: the same workloads as kiln_bench, timed the
same way (median over repetitions), one JSON line per measurement:
{"bench", "metric", "unit", "value"}.

Run with Debian's interpreter (python3-torch 1.13):
    /usr/bin/python3 bench/torch_bench.py [--reps N] [NAME...]
torch runs with torch.set_num_threads(1), its fastest setting on this machine
(its OpenMP pool and OpenBLAS's pool otherwise fight over the two cores).
"""
import importlib
import pathlib
import sys

import torch

from torch_util import emit, seconds_per_call

torch.set_num_threads(1)

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
    reps, filters = 7, []
    i = 0
    while i < len(argv):
        if argv[i] == "--reps" and i + 1 < len(argv):
            reps = max(1, int(argv[i + 1]))
            i += 2
            continue
        filters.append(argv[i])
        i += 1
    table = benches()
    names = [name for name, _ in table]
    for name, run in table:
        if not filters or any(name == f or (f not in names and name.startswith(f)) for f in filters):
            run(name, reps)
    emit("_torch", "blas", "path", blas_library())


if __name__ == "__main__":
    main(sys.argv[1:])
