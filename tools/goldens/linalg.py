"""Goldens for kiln/ops/linalg.h: matmul (1-D, 2-D, batch broadcast), mm, bmm,
linear, addmm, outer, dot in f32, plus linear's gradients."""
import torch

from . import common


def _q(x):
    """Values on a 1/8 grid: products and sums stay exact in f32, so the files
    are short and the expected values exact."""
    return torch.round(x * 8) / 8


def _case(name, fn, *inputs):
    xs = [_q(x).to(torch.float32) for x in inputs]
    return {"name": name, "inputs": [common.t(x) for x in xs], "out": common.t(fn(*xs))}


def generate():
    def r(*shape, seed):
        return _q(common.randn(*shape, seed=seed))

    cases = [
        _case("mm", torch.mm, r(3, 4, seed=1), r(4, 5, seed=2)),
        _case("matmul_2d", torch.matmul, r(2, 3, seed=3), r(3, 4, seed=4)),
        _case("matmul_1d_2d", torch.matmul, r(3, seed=5), r(3, 4, seed=6)),
        _case("matmul_2d_1d", torch.matmul, r(2, 3, seed=7), r(3, seed=8)),
        _case("matmul_1d_1d", torch.matmul, r(5, seed=9), r(5, seed=10)),
        _case("matmul_1d_3d", torch.matmul, r(3, seed=11), r(2, 3, 4, seed=12)),
        _case("matmul_3d_1d", torch.matmul, r(2, 3, 4, seed=13), r(4, seed=14)),
        _case("matmul_3d_2d", torch.matmul, r(2, 3, 4, seed=15), r(4, 2, seed=16)),
        _case("matmul_bcast", torch.matmul, r(2, 1, 3, 4, seed=17), r(5, 4, 2, seed=18)),
        _case("bmm", torch.bmm, r(3, 2, 4, seed=19), r(3, 4, 3, seed=20)),
        _case("linear_bias", torch.nn.functional.linear, r(2, 3, 4, seed=21), r(5, 4, seed=22), r(5, seed=23)),
        _case("linear_nobias", torch.nn.functional.linear, r(3, 4, seed=24), r(2, 4, seed=25)),
        _case("linear_1d", torch.nn.functional.linear, r(4, seed=26), r(3, 4, seed=27), r(3, seed=28)),
        _case("addmm_row", lambda i, a, b: torch.addmm(i, a, b), r(4, seed=29), r(3, 2, seed=30), r(2, 4, seed=31)),
        _case("addmm_scaled", lambda i, a, b: torch.addmm(i, a, b, beta=0.5, alpha=2.0),
              r(3, 1, seed=32), r(3, 2, seed=33), r(2, 4, seed=34)),
        _case("outer", torch.outer, r(3, seed=35), r(4, seed=36)),
        _case("dot", torch.dot, r(6, seed=37), r(6, seed=38)),
    ]
    # linear's gradients for loss = sum(linear(x, w, b) * c).
    x = r(2, 3, 4, seed=40).float().requires_grad_()
    w = r(5, 4, seed=41).float().requires_grad_()
    b = r(5, seed=42).float().requires_grad_()
    c = r(2, 3, 5, seed=43).float()
    (torch.nn.functional.linear(x, w, b) * c).sum().backward()
    grads = {"x": common.t(x), "w": common.t(w), "b": common.t(b), "c": common.t(c),
             "gx": common.t(x.grad), "gw": common.t(w.grad), "gb": common.t(b.grad)}
    common.dump("linalg", {"cases": cases})
    common.dump("linalg_linear_grads", grads)
