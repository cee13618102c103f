#!/usr/bin/python3
"""The MoE GPT figures of docs/moe.md (issue 26): dense GPT against the MoE
GPT (E 4, top-2, expert width 2 n_embd = 256, so a token's active FLOPs equal
the dense MLP's) with each balancing mode, on tiny Shakespeare, 3 seeds each.

    /usr/bin/python3 tools/moe_figures.py --kiln build/kiln \\
        --data ../shared/data/tinyshakespeare.txt --out runs/moe-figures [--seeds 0 1 2] \\
        [--configs dense none aux bias] [--threads 1] [--iters N --eval-interval N --eval-iters N --warmup N]

Runs `kiln train lm` once per (config, seed) into OUT/<config>-<seed> (a run
whose metrics.csv already has its last step is not run again), then prints a
markdown table: per config the final val loss of each seed and their median,
the median's difference to the dense median (target <= +0.03), and over the
last 200 steps of each run the largest `moe/max_violation` (target for
bias: <= 0.3). The GPT recipe's defaults (2000 steps) unless --iters is given:
a short version (--iters 100 --eval-interval 50 --eval-iters 10) shows the
commands work. Step time is not measured here (a quiet machine: bench/run
gpt_char moe_gpt_char).
"""

import argparse
import csv
import os
import statistics
import subprocess
import sys

CONFIGS = {
    "dense": [],
    "none": ["--moe-experts", "4", "--moe-top-k", "2", "--moe-balance", "none"],
    "aux": ["--moe-experts", "4", "--moe-top-k", "2", "--moe-balance", "aux"],
    "bias": ["--moe-experts", "4", "--moe-top-k", "2", "--moe-balance", "bias"],
}


def read_rows(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def last_value(rows, key):
    for r in reversed(rows):
        if r.get(key, "") != "":
            return float(r[key])
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kiln", default="build/kiln")
    ap.add_argument("--data", required=True)
    ap.add_argument("--out", default="runs/moe-figures")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--configs", nargs="+", default=list(CONFIGS), choices=list(CONFIGS))
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--iters", type=int)
    ap.add_argument("--eval-interval", type=int)
    ap.add_argument("--eval-iters", type=int)
    ap.add_argument("--warmup", type=int, help="default: the recipe's, or iters / 10 with --iters")
    ap.add_argument("--last", type=int, default=200, help="steps over which the max violation is taken")
    a = ap.parse_args()

    if a.iters is not None and a.warmup is None:
        a.warmup = a.iters // 10
    extra = []
    for flag, v in (("--iters", a.iters), ("--eval-interval", a.eval_interval), ("--eval-iters", a.eval_iters),
                    ("--warmup", a.warmup)):
        if v is not None:
            extra += [flag, str(v)]
    results = {}
    for cfg in a.configs:
        for seed in a.seeds:
            out = os.path.join(a.out, f"{cfg}-{seed}")
            csv_path = os.path.join(out, "metrics.csv")
            want_steps = a.iters if a.iters else None
            done = False
            if os.path.exists(csv_path):
                rows = read_rows(csv_path)
                done = bool(rows) and (want_steps is None or int(rows[-1]["global_step"]) >= want_steps)
            if not done:
                cmd = [a.kiln, "train", "lm", "--data", a.data, "--seed", str(seed), "--out", out, "--threads",
                       str(a.threads), "--overwrite"] + CONFIGS[cfg] + extra
                print("+", " ".join(cmd), file=sys.stderr, flush=True)
                subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
            rows = read_rows(csv_path)
            tail = rows[-a.last:]
            viol = [float(r["moe/max_violation"]) for r in tail if r.get("moe/max_violation", "") != ""]
            results[(cfg, seed)] = (last_value(rows, "val/loss"), max(viol) if viol else None)

    dense = [results[("dense", s)][0] for s in a.seeds if ("dense", s) in results]
    dense_median = statistics.median(dense) if dense else None
    print(f"| config | val loss per seed ({', '.join(map(str, a.seeds))}) | median | median - dense | "
          f"max violation, last {a.last} steps, per seed |")
    print("| --- | --- | --- | --- | --- |")
    for cfg in a.configs:
        losses = [results[(cfg, s)][0] for s in a.seeds]
        viols = [results[(cfg, s)][1] for s in a.seeds]
        med = statistics.median(losses)
        diff = f"{med - dense_median:+.4f}" if dense_median is not None and cfg != "dense" else "-"
        vtext = ", ".join("-" if v is None else f"{v:.3f}" for v in viols)
        print(f"| {cfg} | {', '.join(f'{x:.4f}' for x in losses)} | {med:.4f} | {diff} | {vtext} |")


if __name__ == "__main__":
    main()
