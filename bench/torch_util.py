"""Timing and output shared by bench/torch_bench.py and its family modules
(bench/torch_<family>.py, each with a benches() list like torch_bench's)."""
import contextlib
import ctypes
import gc
import json
import re
import statistics
import time


# torch_bench.py --autocast bf16 sets this: the bf16 workloads (gpt_char_bf16,
# cnn_b64_bf16) then run their forward and loss under CPU bf16 autocast;
# otherwise they run the f32 workload.
BF16_AUTOCAST = False


def bf16_autocast():
    """What a bf16 workload's forward and loss run under: torch.autocast("cpu",
    dtype=torch.bfloat16) with --autocast bf16 (PyTorch's mixed precision: f32
    weights, bf16 matmul/conv inputs and outputs), else nothing (f32)."""
    if not BF16_AUTOCAST:
        return contextlib.nullcontext()
    import torch
    return torch.autocast("cpu", dtype=torch.bfloat16)


def seconds_per_call(fn, reps, rep_seconds):
    """Median over `reps` repetitions of the seconds one call takes."""
    for _ in range(3):
        fn()
    calls = 1
    while True:  # calibrate
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        sec = time.perf_counter() - t0
        if sec >= rep_seconds / 4:
            calls = max(1, int(calls * rep_seconds / max(sec, 1e-9)))
            break
        calls *= 4
    per_call = []
    for _ in range(reps):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        per_call.append((time.perf_counter() - t0) / calls)
    return statistics.median(per_call)


def emit(bench, metric, unit, value):
    print(json.dumps({"bench": bench, "metric": metric, "unit": unit, "value": value}), flush=True)


class MemoryProbe:
    """Peak-RSS probe (bench/bench.h's MemoryProbe): construction resets the
    kernel's high-water mark and records the current RSS."""

    def __init__(self):
        gc.collect()
        ctypes.CDLL("libc.so.6").malloc_trim(0)
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        self.base_kb = _status_kb("VmRSS")

    def peak_mb(self):
        return _status_kb("VmHWM") / 1024.0

    def added_mb(self):
        return (_status_kb("VmHWM") - self.base_kb) / 1024.0


def _status_kb(key):
    with open("/proc/self/status") as f:
        return int(re.search(key + r":\s+(\d+)", f.read()).group(1))


def update(loss, opt):
    """The tail of every training workload's step (kiln: train::update)."""
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)


def run_workload(name, reps, step, mem, unit="samples/s", items_per_step=0, flops_per_step=0):
    """bench/bench.h's run_workload: times one full step, emits throughput
    (or time in us/call), gflops, peak_mem and peak_rss."""
    sec = seconds_per_call(step, reps, 0.5)
    if unit == "us/call":
        emit(name, "time", unit, sec * 1e6)
    else:
        emit(name, "throughput", unit, items_per_step / sec)
    emit(name, "gflops", "GFLOP/s", flops_per_step / sec * 1e-9)
    emit(name, "peak_mem", "MB", mem.added_mb())
    emit(name, "peak_rss", "MB", mem.peak_mb())
