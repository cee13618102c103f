"""Timing and output shared by bench/torch_bench.py and its family modules
(bench/torch_<family>.py, each with a benches() list like torch_bench's)."""
import json
import statistics
import time


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
