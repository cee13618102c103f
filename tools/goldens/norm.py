"""Goldens for kiln/ops/norm.h: layer_norm, rms_norm (composed by hand: PyTorch
1.13 has no rms_norm) and batch_norm (training with running-buffer updates,
both variance conventions, and eval), forward and gradients. Each case:
{"name", "inputs": {name: tensor}, "out", "grads": {input name: tensor},
"extra": {...}}; gradients are of sum(out * gy) with gy stored as an input.
tests/ops/norm_test.cpp maps the names back to kiln calls."""
import torch
import torch.nn.functional as F

from . import common


def _r(*shape, seed, dtype=torch.float64, scale=1.0, shift=0.0):
    # On a 1/8 grid: short to store, exact in any dtype.
    return (torch.round((common.randn(*shape, seed=seed) * scale + shift) * 8) / 8).to(dtype)


def _case(name, fn, inputs, diff, extra_fn=None):
    """Runs fn(**inputs) with grads on `diff`, backward with inputs['gy']."""
    ins = {k: v.clone().requires_grad_(k in diff) for k, v in inputs.items()}
    out = fn(**ins)
    out.backward(ins["gy"])
    case = {"name": name, "inputs": {k: common.t(v) for k, v in inputs.items()}, "out": common.t(out),
            "grads": {k: common.t(ins[k].grad) for k in diff}}
    if extra_fn:
        case["extra"] = {k: common.t(v) for k, v in extra_fn(ins).items()}
    return case


def _rms(x, dims, w=None, eps=1e-6):
    y = x * torch.rsqrt(x.pow(2).mean(dims, keepdim=True) + eps)
    return y * w if w is not None else y


def _layer():
    cases = []
    x = _r(2, 2, 8, seed=1, scale=2.0, shift=0.5)
    w, b, gy = _r(8, seed=2), _r(8, seed=3), _r(2, 2, 8, seed=4)
    cases.append(_case("ln_3d_wb", lambda x, w, b, gy: F.layer_norm(x, (8,), w, b), dict(x=x, w=w, b=b, gy=gy),
                       ["x", "w", "b"]))
    x, w, b, gy = _r(2, 3, 4, seed=5), _r(3, 4, seed=6), _r(3, 4, seed=7), _r(2, 3, 4, seed=8)
    cases.append(_case("ln_two_dims", lambda x, w, b, gy: F.layer_norm(x, (3, 4), w, b, eps=1e-3),
                       dict(x=x, w=w, b=b, gy=gy), ["x", "w", "b"]))
    x, gy = _r(4, 6, seed=9, scale=3.0), _r(4, 6, seed=10)
    cases.append(_case("ln_plain", lambda x, gy: F.layer_norm(x, (6,)), dict(x=x, gy=gy), ["x"]))
    x, w, b, gy = (_r(3, 16, seed=11, dtype=torch.float32), _r(16, seed=12, dtype=torch.float32),
                   _r(16, seed=13, dtype=torch.float32), _r(3, 16, seed=14, dtype=torch.float32))
    cases.append(_case("ln_f32", lambda x, w, b, gy: F.layer_norm(x, (16,), w, b), dict(x=x, w=w, b=b, gy=gy),
                       ["x", "w", "b"]))
    x, w, gy = _r(3, 8, seed=15, shift=1.0), _r(8, seed=16), _r(3, 8, seed=17)
    cases.append(_case("rms_w", lambda x, w, gy: _rms(x, (-1,), w), dict(x=x, w=w, gy=gy), ["x", "w"]))
    x, gy = _r(2, 3, 4, seed=18), _r(2, 3, 4, seed=19)
    cases.append(_case("rms_two_dims_eps", lambda x, gy: _rms(x, (-2, -1), eps=1e-2), dict(x=x, gy=gy), ["x"]))
    return cases


def _batch():
    cases = []

    def train(name, shape, seed, affine=True, running=True):
        c = shape[1]
        x = _r(*shape, seed=seed, scale=2.0, shift=0.3)
        gy = _r(*shape, seed=seed + 1)
        inputs = dict(x=x, gy=gy)
        if affine:
            inputs.update(w=_r(c, seed=seed + 2), b=_r(c, seed=seed + 3))
        if running:
            inputs.update(rm=_r(c, seed=seed + 4), rv=_r(c, seed=seed + 5).abs() + 0.5)
        rm_t = inputs["rm"].clone() if running else None
        rv_t = inputs["rv"].clone() if running else None

        def fn(x, gy, w=None, b=None, rm=None, rv=None):
            return F.batch_norm(x, rm_t, rv_t, w, b, training=True, momentum=0.2, eps=1e-5)

        def extra(ins):
            if not running:
                return {}
            dims = [0] + list(range(2, len(shape)))
            var_biased = x.var(dims, unbiased=False)
            # PyTorch's update (unbiased variance) and spec 000's (population variance), by hand.
            return {"rm_new": rm_t, "rv_new_unbiased": rv_t,
                    "rv_new_biased": 0.8 * inputs["rv"] + 0.2 * var_biased}

        diff = ["x"] + (["w", "b"] if affine else [])
        cases.append(_case(name, fn, inputs, diff, extra))

    train("bn_train_ncl", (4, 3, 5), 20)
    train("bn_train_nchw", (2, 2, 3, 3), 30)
    train("bn_train_nc", (6, 4), 40)
    train("bn_train_plain", (5, 3, 2), 50, affine=False, running=False)
    x, gy = _r(2, 3, 3, 3, seed=60), _r(2, 3, 3, 3, seed=61)
    w, b, rm, rv = _r(3, seed=62), _r(3, seed=63), _r(3, seed=64), _r(3, seed=65).abs() + 0.5
    cases.append(_case("bn_eval_nchw",
                       lambda x, gy, w, b, rm, rv: F.batch_norm(x, rm, rv, w, b, training=False, eps=1e-3),
                       dict(x=x, gy=gy, w=w, b=b, rm=rm, rv=rv), ["x", "w", "b"]))
    return cases


def generate():
    common.dump("norm_layer", {"cases": _layer()})
    common.dump("norm_batch", {"cases": _batch()})
