"""Optimizer trajectories from PyTorch 1.13, for tests/optim/optimizer_test.cpp.

A small model (w1 [3, 2], b1 [3], w2 [2, 3]: a tall and a wide matrix and a
bias) is trained for 50 steps on a fixed regression batch,
loss = mean((tanh(x w1^T + b1) w2^T - y)^2). Each case records the initial
parameters, the batch (x [8, 2], y [8, 2]), the gradients PyTorch computed at every step ("grads" [50, 15]:
w1, b1, w2 flattened and concatenated) and the parameters after the steps in
"checkpoints" ("params" [9, 15], the same layout). kiln replays the same gradients through its optimizer
(step(grads)), so the comparison isolates the update rule; a second test
computes its own gradients from x and y end to end.

The bias has its decay flag off in kiln; the PyTorch side puts it in a group
with weight_decay 0. Muon has no PyTorch 1.13 implementation: muon_reference
below follows the published algorithm (github.com/KellerJordan/Muon; Liu et
al., arXiv 2502.16982 for the AdamW-matching scale), in f32 rather than bf16.
"""
import torch

from goldens import common

STEPS = 50
CHECKPOINTS = [1, 2, 3, 5, 10, 20, 30, 40, 50]


def t32(x):
    """A tensor as golden JSON, f32 values printed with 9 significant digits (exact for f32)."""
    x = x.detach()
    data = [float(f"{v:.9g}") for v in x.reshape(-1).tolist()]
    return {"shape": list(x.shape), "dtype": common.DTYPES[x.dtype], "data": data}


def newton_schulz5(u, steps, eps):
    a, b, c = 3.4445, -4.7750, 2.0315
    x = u.clone()
    tall = x.size(0) > x.size(1)
    if tall:
        x = x.T
    x = x / (x.norm() + eps)
    for _ in range(steps):
        A = x @ x.T
        B = b * A + c * A @ A
        x = a * x + B @ x
    return x.T if tall else x


class MuonReference:
    """Momentum, Newton-Schulz-5 for rank-2 parameters, decoupled decay."""

    def __init__(self, groups, lr, momentum, weight_decay, nesterov, ns_steps, eps=1e-7, match_adamw_rms=False):
        self.groups = [dict(g) for g in groups]
        self.opts = dict(lr=lr, momentum=momentum, weight_decay=weight_decay, nesterov=nesterov,
                         ns_steps=ns_steps, eps=eps, match_adamw_rms=match_adamw_rms)
        self.bufs = {}

    @torch.no_grad()
    def step(self):
        for group in self.groups:
            o = dict(self.opts)
            o.update({k: v for k, v in group.items() if k != "params"})
            for p in group["params"]:
                g = p.grad
                buf = self.bufs.setdefault(id(p), torch.zeros_like(p))
                buf.lerp_(g, 1 - o["momentum"])
                u = g.lerp(buf, o["momentum"]) if o["nesterov"] else buf.clone()
                scale = 1.0
                if p.ndim == 2:
                    u = newton_schulz5(u, o["ns_steps"], o["eps"])
                    rows, cols = p.shape
                    scale = 0.2 * max(rows, cols) ** 0.5 if o["match_adamw_rms"] else max(1, rows / cols) ** 0.5
                p.mul_(1 - o["lr"] * o["weight_decay"])
                p.add_(u, alpha=-o["lr"] * scale)

    def zero_grad(self):
        for group in self.groups:
            for p in group["params"]:
                p.grad = None


# name -> (constructor, kiln options for every group, extra options of the bias group)
CASES = {
    "sgd": ("SGD", {"lr": 0.1}, {}),
    "sgd_momentum": ("SGD", {"lr": 0.05, "momentum": 0.9, "dampening": 0.1, "weight_decay": 0.01}, {}),
    "sgd_nesterov_maximize": ("SGD", {"lr": 0.02, "momentum": 0.8, "nesterov": 1, "weight_decay": 0.05,
                                      "maximize": 1}, {}),
    "adam": ("Adam", {"lr": 0.01}, {}),
    "adam_l2_amsgrad": ("Adam", {"lr": 0.01, "beta1": 0.8, "beta2": 0.95, "weight_decay": 0.1, "amsgrad": 1}, {}),
    "adam_groups": ("Adam", {"lr": 0.01}, {"lr": 0.05}),
    "adamw": ("AdamW", {"lr": 0.01, "weight_decay": 0.1}, {}),
    "adamw_amsgrad_maximize": ("AdamW", {"lr": 0.005, "beta1": 0.85, "beta2": 0.99, "eps": 1e-6,
                                         "weight_decay": 0.2, "amsgrad": 1, "maximize": 1}, {}),
    "muon": ("Muon", {"lr": 0.02, "momentum": 0.95, "nesterov": 1, "weight_decay": 0.1, "ns_steps": 5}, {}),
    "muon_rms": ("Muon", {"lr": 0.01, "momentum": 0.9, "nesterov": 0, "weight_decay": 0.05, "ns_steps": 4,
                          "match_adamw_rms": 1}, {}),
}


def torch_optimizer(kind, groups, o):
    bool_ = lambda k: bool(o.get(k, 0))  # noqa: E731
    if kind == "SGD":
        return torch.optim.SGD(groups, lr=o["lr"], momentum=o.get("momentum", 0), dampening=o.get("dampening", 0),
                               weight_decay=o.get("weight_decay", 0), nesterov=bool_("nesterov"),
                               maximize=bool_("maximize"))
    if kind in ("Adam", "AdamW"):
        cls = torch.optim.Adam if kind == "Adam" else torch.optim.AdamW
        return cls(groups, lr=o["lr"], betas=(o.get("beta1", 0.9), o.get("beta2", 0.999)), eps=o.get("eps", 1e-8),
                   weight_decay=o.get("weight_decay", 0 if kind == "Adam" else 1e-2), amsgrad=bool_("amsgrad"),
                   maximize=bool_("maximize"))
    return MuonReference(groups, o["lr"], o["momentum"], o["weight_decay"], bool_("nesterov"), o["ns_steps"],
                         match_adamw_rms=bool_("match_adamw_rms"))


def case(kind, options, bias_options):
    g = common.gen(5)
    w1 = (torch.randn(3, 2, generator=g) * 0.5).requires_grad_()
    b1 = (torch.randn(3, generator=g) * 0.1).requires_grad_()
    w2 = (torch.randn(2, 3, generator=g) * 0.5).requires_grad_()
    x = torch.randn(8, 2, generator=g)
    y = torch.randn(8, 2, generator=g)
    flat = lambda ts: torch.cat([t.detach().reshape(-1) for t in ts])  # noqa: E731
    init = [t32(p) for p in (w1, b1, w2)]
    bias_group = {"params": [b1], "weight_decay": 0.0}
    bias_group.update(bias_options)
    opt = torch_optimizer(kind, [{"params": [w1, w2]}, bias_group], options)
    grads, params = [], []
    for step in range(1, STEPS + 1):
        opt.zero_grad()
        loss = ((torch.tanh(x @ w1.T + b1) @ w2.T - y) ** 2).mean()
        loss.backward()
        grads.append(flat([p.grad for p in (w1, b1, w2)]))
        opt.step()
        if step in CHECKPOINTS:
            params.append(flat([w1, b1, w2]))
    return {"optimizer": kind, "options": options, "bias_options": bias_options, "init": init, "x": t32(x), "y": t32(y),
            "grads": t32(torch.stack(grads)), "checkpoints": CHECKPOINTS, "params": t32(torch.stack(params))}


def generate():
    common.dump("optim_trajectories", {name: case(*spec) for name, spec in CASES.items()})
