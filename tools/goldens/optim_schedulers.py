"""Goldens for kiln/optim/schedulers.h: learning-rate (and cycled momentum)
sequences of PyTorch's schedulers driving a real SGD optimizer, as a training
loop sees them: lr[k] is param_groups[0]['lr'] during optimizer step k
(k = 0 right after construction), read after k scheduler.step() calls.

Each case is {"name", "kind", "args": the torch arguments, "lr": [...],
"momentum": [...] where cycled}; tests/optim/scheduler_test.cpp builds the
matching kiln scheduler from "args". Plateau cases also carry the scripted
"metrics" (lr[k] is the lr after metric k) and the counters after each.
"""
import warnings

import torch
from torch.optim import lr_scheduler as S

from . import common


def _sgd(lr=0.1, momentum=0.0):
    p = torch.nn.Parameter(torch.zeros(2, dtype=torch.float64))
    return torch.optim.SGD([p], lr=lr, momentum=momentum)


def _run(opt, sched, steps, momentum=False):
    lrs, moms = [], []
    for k in range(steps):
        if k > 0:
            opt.step()  # no gradients: a no-op, but keeps PyTorch's step order
            sched.step()
        lrs.append(opt.param_groups[0]["lr"])
        moms.append(opt.param_groups[0]["momentum"])
    out = {"lr": lrs}
    if momentum:
        out["momentum"] = moms
    return out


class _Cases:
    def __init__(self):
        self.cases = []

    def add(self, name, kind, args, make, steps, lr=0.1, momentum=False):
        opt = _sgd(lr=lr, momentum=0.9 if momentum else 0.0)
        sched = make(opt)
        self.cases.append({"name": name, "kind": kind, "args": args, **_run(opt, sched, steps, momentum)})


def _plateau_metrics(seed, n):
    """A loss-like curve: drops, then plateaus with noise, then a late drop."""
    g = common.gen(seed)
    noise = (torch.rand(n, generator=g, dtype=torch.float64) - 0.5) * 0.02
    base = [1.0 / (1 + k) if k < 8 else (0.125 if k < 30 else 0.08) for k in range(n)]
    return [round(b + float(e), 4) for b, e in zip(base, noise)]


def _plateau(name, args, metrics, lr=0.1):
    opt = _sgd(lr=lr)
    sched = S.ReduceLROnPlateau(opt, **args)
    lrs, bad, cool, best = [], [], [], []
    for m in metrics:
        sched.step(m)
        lrs.append(opt.param_groups[0]["lr"])
        bad.append(sched.num_bad_epochs)
        cool.append(sched.cooldown_counter)
        best.append(sched.best)
    return {"name": name, "kind": "plateau", "args": {"lr": lr, **args}, "metrics": metrics, "lr": lrs,
            "num_bad_epochs": bad, "cooldown_counter": cool, "best": best}


def generate():
    warnings.simplefilter("ignore")  # PyTorch's order-of-calls warnings
    c = _Cases()
    c.add("cosine", "cosine", {"lr": 0.1, "T_max": 50, "eta_min": 0.001},
          lambda o: S.CosineAnnealingLR(o, T_max=50, eta_min=0.001), 51)
    c.add("cosine_eta0", "cosine", {"lr": 0.05, "T_max": 40, "eta_min": 0.0},
          lambda o: S.CosineAnnealingLR(o, T_max=40), 41, lr=0.05)
    c.add("warm_restarts_mult1", "warm_restarts", {"lr": 0.1, "T_0": 10, "T_mult": 1, "eta_min": 0.01},
          lambda o: S.CosineAnnealingWarmRestarts(o, T_0=10, T_mult=1, eta_min=0.01), 60)
    c.add("warm_restarts_mult2", "warm_restarts", {"lr": 0.1, "T_0": 5, "T_mult": 2, "eta_min": 0.0},
          lambda o: S.CosineAnnealingWarmRestarts(o, T_0=5, T_mult=2), 80)
    for name, args in [
        ("one_cycle_cos", {"max_lr": 0.1, "total_steps": 100}),
        ("one_cycle_linear", {"max_lr": 0.2, "total_steps": 90, "pct_start": 0.25, "anneal_strategy": "linear",
                              "div_factor": 10.0, "final_div_factor": 100.0}),
        ("one_cycle_cos_three_phase", {"max_lr": 0.1, "total_steps": 90, "pct_start": 0.25, "three_phase": True}),
        ("one_cycle_linear_three_phase", {"max_lr": 0.1, "total_steps": 100, "anneal_strategy": "linear",
                                          "three_phase": True, "base_momentum": 0.8, "max_momentum": 0.9}),
    ]:
        c.add(name, "one_cycle", args, lambda o, a=args: S.OneCycleLR(o, **a), args["total_steps"], momentum=True)
    for name, args, steps in [
        ("cyclic_triangular", {"base_lr": 0.01, "max_lr": 0.1, "step_size_up": 10, "step_size_down": 5,
                               "mode": "triangular"}, 60),
        ("cyclic_triangular2", {"base_lr": 0.01, "max_lr": 0.1, "step_size_up": 8, "mode": "triangular2"}, 64),
        ("cyclic_exp_range", {"base_lr": 0.01, "max_lr": 0.1, "step_size_up": 10, "mode": "exp_range",
                              "gamma": 0.97}, 60),
    ]:
        c.add(name, "cyclic", args, lambda o, a=args: S.CyclicLR(o, **a), steps, momentum=True)

    def sequential(o):
        first = S.LinearLR(o, start_factor=0.1, end_factor=1.0, total_iters=10)
        second = S.CosineAnnealingLR(o, T_max=40, eta_min=0.001)
        return S.SequentialLR(o, [first, second], milestones=[12])
    c.add("sequential_linear_cosine", "sequential",
          {"lr": 0.1, "start_factor": 0.1, "end_factor": 1.0, "total_iters": 10, "T_max": 40, "eta_min": 0.001,
           "milestone": 12}, sequential, 53)

    c.add("step", "step", {"lr": 0.1, "step_size": 7, "gamma": 0.5},
          lambda o: S.StepLR(o, step_size=7, gamma=0.5), 40)
    c.add("multi_step", "multi_step", {"lr": 0.1, "milestones": [5, 12, 30], "gamma": 0.3},
          lambda o: S.MultiStepLR(o, milestones=[5, 12, 30], gamma=0.3), 40)
    c.add("exponential", "exponential", {"lr": 0.1, "gamma": 0.95},
          lambda o: S.ExponentialLR(o, gamma=0.95), 60)
    c.add("linear_up", "linear", {"lr": 0.1, "start_factor": 0.25, "end_factor": 0.9, "total_iters": 15},
          lambda o: S.LinearLR(o, start_factor=0.25, end_factor=0.9, total_iters=15), 25)
    c.add("linear_down", "linear", {"lr": 0.1, "start_factor": 1.0, "end_factor": 0.1, "total_iters": 20},
          lambda o: S.LinearLR(o, start_factor=1.0, end_factor=0.1, total_iters=20), 30)

    loss = _plateau_metrics(1, 48)
    acc = [round(1.0 - m, 4) for m in loss]
    c.cases += [
        _plateau("plateau_min_rel", {"mode": "min", "factor": 0.5, "patience": 2, "threshold": 0.01,
                                     "threshold_mode": "rel"}, loss),
        _plateau("plateau_min_abs_cooldown", {"mode": "min", "factor": 0.3, "patience": 1, "threshold": 0.005,
                                              "threshold_mode": "abs", "cooldown": 3, "min_lr": 0.002}, loss),
        _plateau("plateau_max_rel_cooldown", {"mode": "max", "factor": 0.5, "patience": 3, "threshold": 0.001,
                                              "threshold_mode": "rel", "cooldown": 2, "min_lr": 0.01}, acc),
        _plateau("plateau_max_abs", {"mode": "max", "factor": 0.2, "patience": 0, "threshold": 0.002,
                                     "threshold_mode": "abs", "eps": 1e-3}, acc),
    ]
    common.dump("optim_schedulers", {"cases": c.cases})
