"""Goldens for kiln/ops/reduce.h: sums, means, products, scans, extremes and
their indices, var/std, norms, logsumexp, all/any and softmax, in f32 (plus
integer and bool inputs where the output dtype matters). Each case is
{"name", "x", "out": [tensors]}; tests/ops/reduce_test.cpp and
softmax_test.cpp map the names back to kiln calls."""
import torch

from . import common


def _f32(*shape, seed):
    return common.randn(*shape, seed=seed).to(torch.float32)


class _File:
    """Inputs stored once by name; cases refer to them."""

    def __init__(self, **inputs):
        self.inputs = inputs
        self.cases = []

    def case(self, name, x, *outs):
        self.cases.append({"name": name, "x": x, "out": [common.t(o) for o in outs]})

    def json(self):
        return {"inputs": {k: common.t(v) for k, v in self.inputs.items()}, "cases": self.cases}


def _sums():
    x = _f32(2, 3, 4, seed=1)
    xi = torch.randint(-5, 6, (2, 3, 4), generator=common.gen(2), dtype=torch.int32)
    xb = torch.randint(0, 2, (3, 4), generator=common.gen(3)).bool()
    pos = (torch.rand(2, 3, 4, generator=common.gen(4), dtype=torch.float64) + 0.5).float()
    pz = pos.clone()
    pz[0, 1, 2] = 0
    pz[1, 2, 0] = 0
    pz[1, 2, 3] = 0
    empty = torch.zeros(0, 3)
    f = _File(x=x, xi=xi, xb=xb, pos=pos, pz=pz, empty=empty)
    f.case("sum_all", "x", x.sum())
    f.case("sum_1", "x", x.sum(1))
    f.case("sum_02_keep", "x", x.sum((0, 2), keepdim=True))
    f.case("sum_neg1", "x", x.sum(-1))
    f.case("sum_i32_all", "xi", xi.sum())
    f.case("sum_i32_2", "xi", xi.sum(2))
    f.case("sum_bool_0", "xb", xb.sum(0))
    f.case("sum_empty", "empty", empty.sum(), empty.sum(0), empty.sum(1))
    f.case("mean_all", "x", x.mean())
    f.case("mean_12", "x", x.mean((1, 2)))
    f.case("mean_0_keep", "x", x.mean(0, keepdim=True))
    f.case("prod_all", "pos", pos.prod())
    f.case("prod_1", "pos", pos.prod(1))
    f.case("prod_zeros_2", "pz", pz.prod(2))
    f.case("prod_i32_1", "xi", xi.prod(1))
    f.case("cumsum_0", "x", x.cumsum(0))
    f.case("cumsum_2", "x", x.cumsum(2))
    f.case("cumsum_i32_1", "xi", xi.cumsum(1))
    f.case("cumsum_bool_1", "xb", xb.cumsum(1))
    return f.json()


def _extremes():
    x = _f32(2, 3, 4, seed=5)
    # Ties: small integers, so every row has repeated values.
    xt = torch.randint(0, 3, (3, 5), generator=common.gen(6)).to(torch.float32)
    xi = torch.randint(-3, 4, (3, 5), generator=common.gen(7), dtype=torch.int64)
    xn = _f32(3, 4, seed=8)
    xn[0, 2] = float("nan")
    xn[2, 0] = float("nan")
    xinf = torch.tensor([[1.0, float("inf"), 2.0], [float("-inf"), -1.0, float("-inf")]])
    f = _File(x=x, xt=xt, xi=xi, xn=xn, xinf=xinf)
    f.case("max_all", "x", x.max())
    f.case("min_all", "x", x.min())
    f.case("max_1", "x", *x.max(1))
    f.case("min_0_keep", "x", *x.min(0, keepdim=True))
    f.case("max_neg1", "x", *x.max(-1))
    f.case("argmax_all", "x", x.argmax())
    f.case("argmin_2", "x", x.argmin(2))
    f.case("argmax_0_keep", "x", x.argmax(0, keepdim=True))
    f.case("max_ties_1", "xt", *xt.max(1))
    f.case("min_ties_0", "xt", *xt.min(0))
    f.case("argmax_ties_1", "xt", xt.argmax(1))
    f.case("argmin_ties_all", "xt", xt.argmin())
    f.case("max_i64_1", "xi", *xi.max(1))
    f.case("argmin_i64_0", "xi", xi.argmin(0))
    f.case("max_nan_1", "xn", *xn.max(1))
    f.case("min_nan_0", "xn", *xn.min(0))
    f.case("max_nan_all", "xn", xn.max())
    f.case("amax_nan_1", "xn", xn.amax(1))
    f.case("amax_02", "x", x.amax((0, 2)))
    f.case("amin_1_keep", "x", x.amin(1, keepdim=True))
    f.case("amax_all", "x", x.amax(()))
    f.case("amax_i64_1", "xi", xi.amax(1))
    f.case("max_inf_1", "xinf", *xinf.max(1))
    return f.json()


def _stats():
    x = _f32(2, 3, 4, seed=9)
    xr = x.round()
    xb = torch.tensor([[True, False, True], [True, True, True]])
    xi = torch.tensor([[0, 2, 3], [0, 0, 0]], dtype=torch.int32)
    ninf = float("-inf")
    xl = torch.tensor([[ninf, ninf, ninf], [1.0, ninf, 2.0], [1000.0, 1000.0, 999.0]])
    xu = (xi.abs() % 3).to(torch.uint8)
    f = _File(x=x, xr=xr, xb=xb, xi=xi, xl=xl, xu=xu)
    f.case("var_all", "x", x.var())
    f.case("var_1", "x", x.var(1))
    f.case("var_02_biased_keep", "x", x.var((0, 2), unbiased=False, keepdim=True))
    f.case("std_all_biased", "x", x.std(unbiased=False))
    f.case("std_2", "x", x.std(2))
    f.case("norm_2_all", "x", torch.norm(x))
    f.case("norm_1_2", "x", torch.norm(x, 1, dim=2))
    f.case("norm_inf_1", "x", torch.norm(x, float("inf"), dim=1))
    f.case("norm_neginf_1", "x", torch.norm(x, float("-inf"), dim=1))
    f.case("norm_3_02_keep", "x", torch.norm(x, 3, dim=(0, 2), keepdim=True))
    f.case("norm_half_2", "x", torch.norm(x, 0.5, dim=2))
    f.case("norm_0_1", "xr", torch.norm(xr, 0, dim=1))
    f.case("logsumexp_1", "x", torch.logsumexp(x, 1))
    f.case("logsumexp_02_keep", "x", torch.logsumexp(x, (0, 2), keepdim=True))
    f.case("logsumexp_inf_1", "xl", torch.logsumexp(xl, 1))
    f.case("all_bool", "xb", xb.all(), xb.all(0), xb.all(1, keepdim=True))
    f.case("any_i32", "xi", xi.any(), xi.any(0), xi.any(1))
    f.case("all_f32_1", "xr", xr.all(1))
    f.case("all_any_u8", "xu", xu.all(), xu.any(1), xu.all(0))
    return f.json()


def _softmax():
    x = _f32(2, 3, 4, seed=10) * 3
    ninf = float("-inf")
    xm = torch.tensor([[0.0, ninf, 1.0, ninf], [ninf, ninf, ninf, 5.0], [100.0, 101.0, 102.0, 103.0]])
    f = _File(x=x, xm=xm)
    f.case("softmax_0", "x", torch.softmax(x, 0))
    f.case("softmax_1", "x", torch.softmax(x, 1))
    f.case("softmax_neg1", "x", torch.softmax(x, -1))
    f.case("log_softmax_0", "x", torch.log_softmax(x, 0))
    f.case("log_softmax_1", "x", torch.log_softmax(x, 1))
    f.case("log_softmax_2", "x", torch.log_softmax(x, 2))
    f.case("softmax_masked_1", "xm", torch.softmax(xm, 1))
    f.case("log_softmax_masked_1", "xm", torch.log_softmax(xm, 1))
    return f.json()


def generate():
    common.dump("reduce_sum", _sums())
    common.dump("reduce_extreme", _extremes())
    common.dump("reduce_stats", _stats())
    common.dump("reduce_softmax", _softmax())
