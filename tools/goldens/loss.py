"""Goldens for kiln/ops/loss.h: cross_entropy (class axis last and 1, every
reduction, ignore_index, label smoothing, a bool mask composed by hand since
PyTorch has no masked cross-entropy) and the pointwise losses (bce with
logits with weight and pos_weight, bce on probabilities incl. the log clamp,
mse, l1, smooth_l1), forward and gradients. A file holds {"inputs": {name: tensor}, "cases"}; each
case is {"name", "inputs": {argument: stored name}, "out", "grads"};
gradients are of sum(out * gy) for reduction none, else of out; integer
targets are stored as i64/i32 inputs."""
import torch
import torch.nn.functional as F

from . import common


def _r(*shape, seed, dtype=torch.float64, scale=1.0):
    return (torch.round(common.randn(*shape, seed=seed) * scale * 8) / 8).to(dtype)


class _File:
    """Input tensors stored once at the file level (many cases share them);
    a case's "inputs" maps each argument to a stored name."""

    def __init__(self):
        self.store, self.cases = {}, []

    def _name(self, v):
        for k, t in self.store.items():  # the same tensor object, or equal values, share a name
            if t.dtype == v.dtype and t.shape == v.shape and torch.equal(t, v):
                return k
        k = f"t{len(self.store)}"
        self.store[k] = v
        return k

    def case(self, name, fn, inputs, diff):
        ins = {k: (v.clone().requires_grad_(k in diff) if v.is_floating_point() else v) for k, v in inputs.items()}
        out = fn(**ins)
        if out.dim() > 0:
            ins["gy"] = _r(*out.shape, seed=99, dtype=out.dtype)
            inputs = dict(inputs, gy=ins["gy"])
            (out * ins["gy"]).sum().backward()
        else:
            out.backward()
        self.cases.append({"name": name, "inputs": {k: self._name(v) for k, v in inputs.items()},
                           "out": common.t(out), "grads": {k: common.t(ins[k].grad) for k in diff}})

    def json(self):
        return {"inputs": {k: common.t(v) for k, v in self.store.items()}, "cases": self.cases}


def _ce():
    f = _File()
    x = _r(6, 5, seed=1, scale=2.0)
    t = torch.tensor([0, 4, 2, 2, 1, 3])
    for red in ("none", "sum", "mean"):
        f.case(f"ce_last_{red}", lambda x, t, red=red: F.cross_entropy(x, t, reduction=red),
                           dict(x=x, t=t), ["x"])
    x4 = _r(3, 4, 2, 2, seed=2, scale=2.0)
    t4 = torch.randint(0, 4, (3, 2, 2), generator=common.gen(3))
    f.case("ce_class1_mean", lambda x, t: F.cross_entropy(x, t), dict(x=x4, t=t4), ["x"])
    f.case("ce_class1_none", lambda x, t: F.cross_entropy(x, t, reduction="none"), dict(x=x4, t=t4),
                       ["x"])
    ti = torch.tensor([0, -100, 2, -100, 1, 3])
    f.case("ce_ignore_default_mean", lambda x, t: F.cross_entropy(x, t), dict(x=x, t=ti), ["x"])
    f.case("ce_ignore2_sum", lambda x, t: F.cross_entropy(x, t, ignore_index=2, reduction="sum"),
                       dict(x=x, t=t), ["x"])
    f.case("ce_smooth_mean", lambda x, t: F.cross_entropy(x, t, label_smoothing=0.1), dict(x=x, t=t),
                       ["x"])
    f.case("ce_smooth_ignore_none",
                       lambda x, t: F.cross_entropy(x, t, label_smoothing=0.2, reduction="none"), dict(x=x, t=ti),
                       ["x"])
    x32 = _r(8, 10, seed=4, dtype=torch.float32, scale=3.0)
    t32 = torch.randint(0, 10, (8,), generator=common.gen(5), dtype=torch.int64)
    f.case("ce_f32_i32_mean", lambda x, t: F.cross_entropy(x, t.long()), dict(x=x32, t=t32.int()),
                       ["x"])
    cw = _r(5, seed=6).abs() + 0.25
    f.case("ce_class_weight_mean", lambda x, t, w: F.cross_entropy(x, t, weight=w), dict(x=x, t=ti, w=cw),
                       ["x"])
    f.case("ce_class_weight_class1_none",
                       lambda x, t, w: F.cross_entropy(x, t, weight=w[:4], reduction="none"),
                       dict(x=x4, t=t4, w=cw), ["x"])
    m = torch.tensor([True, False, True, True, False, True])
    f.case("ce_masked_mean",
                       lambda x, t, m: (F.cross_entropy(x, t, reduction="none") * m).sum() / m.sum(),
                       dict(x=x, t=t, m=m), ["x"])
    return f.json()


def _pointwise():
    f = _File()
    x, y = _r(4, 3, seed=10, scale=2.0), torch.rand(4, 3, generator=common.gen(11), dtype=torch.float64)
    w, pw = _r(3, seed=12).abs() + 0.5, _r(3, seed=13).abs() + 0.5
    for red in ("none", "sum", "mean"):
        f.case(f"bcel_{red}", lambda x, y, red=red: F.binary_cross_entropy_with_logits(x, y, reduction=red),
                           dict(x=x, y=y), ["x", "y"])
    f.case("bcel_weights_mean",
                       lambda x, y, w, pw: F.binary_cross_entropy_with_logits(x, y, weight=w, pos_weight=pw),
                       dict(x=x, y=y, w=w, pw=pw), ["x", "y"])
    p = torch.rand(4, 3, generator=common.gen(14), dtype=torch.float64) * 0.9 + 0.05
    p[0, 0] = 0.0  # log clamp at -100: with target 0 the loss is 0
    yb = y.clone()
    yb[0, 0] = 0.0
    for red in ("none", "mean"):
        f.case(f"bce_{red}", lambda x, y, red=red: F.binary_cross_entropy(x, y, reduction=red),
                           dict(x=p, y=yb), ["x", "y"])
    f.case("bce_weight_sum", lambda x, y, w: F.binary_cross_entropy(x, y, weight=w, reduction="sum"),
                       dict(x=p, y=yb, w=w.expand(4, 3).clone()), ["x", "y"])
    a, b = _r(3, 5, seed=15, scale=2.0), _r(3, 5, seed=16, scale=2.0)
    for red in ("none", "sum", "mean"):
        f.case(f"mse_{red}", lambda x, y, red=red: F.mse_loss(x, y, reduction=red), dict(x=a, y=b),
                           ["x", "y"])
        f.case(f"l1_{red}", lambda x, y, red=red: F.l1_loss(x, y, reduction=red), dict(x=a, y=b),
                           ["x", "y"])
        f.case(f"smooth_l1_{red}", lambda x, y, red=red: F.smooth_l1_loss(x, y, reduction=red),
                           dict(x=a, y=b), ["x", "y"])
    f.case("smooth_l1_beta05_mean", lambda x, y: F.smooth_l1_loss(x, y, beta=0.5), dict(x=a, y=b),
                       ["x", "y"])
    return f.json()


def generate():
    common.dump("loss_ce", _ce())
    common.dump("loss_pointwise", _pointwise())
