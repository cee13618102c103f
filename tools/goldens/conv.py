"""Goldens for kiln/ops/conv.h and pool.h: forward values and the gradients of
loss = sum(out * c) for every input, in f32. Each case carries its op name and
arguments, so tests/ops/conv_test.cpp and pool_test.cpp call kiln the same
way: {"name", "op", "args": {...}, "inputs": {x, w, b}, "c", "out",
"grads": {...}, ["indices"]}."""
import warnings

import numpy as np
import torch
import torch.nn.functional as F

from . import common


def _t(x):
    """common.t with f32 values written in their shortest round-trip form
    (half the digits of f64 repr; the f32 read back is the same)."""
    j = common.t(x)
    if j["dtype"] == "f32":
        j["data"] = [float(str(np.float32(v))) if isinstance(v, float) else v for v in j["data"]]
    return j


def _r(*shape, seed):
    return common.randn(*shape, seed=seed).to(torch.float32)


def _case(name, op, fn, inputs, args, seed):
    """Runs fn(**inputs, **args) and records out and the input gradients."""
    leaves = {k: v.clone().requires_grad_() for k, v in inputs.items() if v is not None}
    res = fn(**leaves, **args)
    indices = None
    if isinstance(res, tuple):
        res, indices = res
    c = _r(*res.shape, seed=seed)
    (res * c).sum().backward()
    case = {"name": name, "op": op, "args": {k: (list(v) if isinstance(v, tuple) else v) for k, v in args.items()},
            "inputs": {k: _t(v) for k, v in leaves.items()}, "c": _t(c), "out": _t(res),
            "grads": {k: _t(v.grad) for k, v in leaves.items()}}
    if indices is not None:
        case["indices"] = _t(indices)
    return case


def _conv_cases():
    cases = []
    warnings.filterwarnings("ignore", message="Using padding='same'")

    def conv(name, op, x, w, b=None, seed=0, **args):
        fn = {"conv1d": F.conv1d, "conv2d": F.conv2d, "conv_transpose1d": F.conv_transpose1d,
              "conv_transpose2d": F.conv_transpose2d}[op]
        inputs = {"x": x, "w": w}
        if b is not None:
            inputs["b"] = b
        cases.append(_case(name, op, lambda x, w, b=None, **a: fn(x, w, b, **a), inputs, args, seed))

    conv("c2_basic", "conv2d", _r(2, 2, 3, 4, seed=1), _r(3, 2, 3, 3, seed=2), _r(3, seed=3), seed=4, padding=1)
    conv("c2_stride_dil", "conv2d", _r(1, 2, 6, 5, seed=5), _r(3, 2, 3, 2, seed=6), _r(3, seed=7), seed=8,
         stride=(2, 1), padding=(1, 0), dilation=(1, 2))
    conv("c2_groups", "conv2d", _r(1, 4, 5, 4, seed=9), _r(4, 2, 3, 3, seed=10), seed=11, stride=2, padding=1,
         groups=2)
    conv("c2_same", "conv2d", _r(1, 2, 5, 4, seed=12), _r(2, 2, 4, 3, seed=13), _r(2, seed=14), seed=15,
         padding="same", dilation=(1, 2))
    conv("c2_valid", "conv2d", _r(1, 1, 4, 4, seed=16), _r(2, 1, 2, 2, seed=17), seed=18, padding="valid")
    conv("c2_depthwise", "conv2d", _r(1, 3, 4, 4, seed=19), _r(3, 1, 3, 3, seed=20), _r(3, seed=21), seed=22,
         padding=1, groups=3)
    conv("c2_stride3_rest", "conv2d", _r(1, 2, 7, 5, seed=23), _r(2, 2, 2, 3, seed=24), seed=25, stride=3)
    conv("c1_basic", "conv1d", _r(2, 3, 8, seed=30), _r(4, 3, 3, seed=31), _r(4, seed=32), seed=33, stride=2,
         padding=1, dilation=2)
    conv("c1_same", "conv1d", _r(2, 2, 7, seed=34), _r(3, 2, 4, seed=35), seed=36, padding="same")
    conv("c1_groups", "conv1d", _r(1, 4, 6, seed=37), _r(4, 2, 2, seed=38), seed=39, groups=2)
    conv("t2_basic", "conv_transpose2d", _r(1, 3, 3, 3, seed=40), _r(3, 2, 3, 3, seed=41), _r(2, seed=42), seed=43,
         stride=2, padding=1, output_padding=1)
    conv("t2_groups_dil", "conv_transpose2d", _r(1, 4, 3, 2, seed=44), _r(4, 2, 2, 3, seed=45), _r(4, seed=46),
         seed=47, stride=(1, 2), padding=(0, 1), output_padding=(0, 1), groups=2, dilation=(2, 1))
    conv("t2_outpad_dil", "conv_transpose2d", _r(1, 2, 3, 3, seed=48), _r(2, 2, 2, 2, seed=49), seed=50,
         stride=1, output_padding=1, dilation=2)
    conv("t1_basic", "conv_transpose1d", _r(2, 3, 5, seed=51), _r(3, 2, 3, seed=52), _r(2, seed=53), seed=54,
         stride=3, padding=1, output_padding=2)
    conv("t1_groups", "conv_transpose1d", _r(1, 4, 4, seed=55), _r(4, 1, 3, seed=56), seed=57, groups=2,
         dilation=2)
    return cases


def _pool_cases():
    cases = []

    def pool(name, op, x, seed, **args):
        fn = {"max_pool1d": lambda x, **a: F.max_pool1d(x, return_indices=True, **a),
              "max_pool2d": lambda x, **a: F.max_pool2d(x, return_indices=True, **a),
              "avg_pool1d": lambda x, **a: F.avg_pool1d(x, **a), "avg_pool2d": lambda x, **a: F.avg_pool2d(x, **a),
              "adaptive_avg_pool1d": lambda x, **a: F.adaptive_avg_pool1d(x, **a),
              "adaptive_avg_pool2d": lambda x, **a: F.adaptive_avg_pool2d(x, **a)}[op]
        cases.append(_case(name, op, fn, {"x": x}, args, seed))

    ties = torch.randint(0, 3, (1, 1, 5, 5), generator=common.gen(60)).to(torch.float32)
    pool("mp2_basic", "max_pool2d", _r(1, 3, 4, 6, seed=61), 62, kernel_size=2)
    pool("mp2_pad_dil_ceil", "max_pool2d", _r(1, 2, 7, 6, seed=63), 64, kernel_size=3, stride=2, padding=1,
         dilation=2, ceil_mode=True)
    pool("mp2_rect", "max_pool2d", _r(1, 2, 4, 5, seed=65), 66, kernel_size=(2, 3), stride=(1, 2), padding=(1, 1))
    pool("mp2_ties", "max_pool2d", ties, 67, kernel_size=2, stride=1)
    pool("mp1_ceil", "max_pool1d", _r(2, 3, 9, seed=68), 69, kernel_size=3, stride=2, padding=1, ceil_mode=True)
    pool("ap2_basic", "avg_pool2d", _r(1, 3, 4, 6, seed=70), 71, kernel_size=2)
    pool("ap2_pad_exclude_ceil", "avg_pool2d", _r(1, 2, 5, 6, seed=72), 73, kernel_size=3, stride=2, padding=1,
         ceil_mode=True, count_include_pad=False)
    pool("ap2_pad_include_ceil", "avg_pool2d", _r(1, 2, 5, 6, seed=72), 74, kernel_size=3, stride=2, padding=1,
         ceil_mode=True, count_include_pad=True)
    pool("ap1_pad", "avg_pool1d", _r(2, 2, 7, seed=75), 76, kernel_size=3, stride=2, padding=1)
    pool("aap2_3x4", "adaptive_avg_pool2d", _r(1, 2, 7, 5, seed=77), 78, output_size=(3, 4))
    pool("aap2_1x1", "adaptive_avg_pool2d", _r(1, 2, 4, 6, seed=79), 80, output_size=(1, 1))
    pool("aap2_up", "adaptive_avg_pool2d", _r(1, 2, 3, 2, seed=81), 82, output_size=(5, 3))
    pool("aap1_3", "adaptive_avg_pool1d", _r(2, 3, 7, seed=83), 84, output_size=3)
    return cases


def generate():
    cases = _conv_cases()
    common.dump("conv", {"cases": [c for c in cases if not c["op"].startswith("conv_transpose")]})
    common.dump("conv_transpose", {"cases": [c for c in cases if c["op"].startswith("conv_transpose")]})
    common.dump("pool", {"cases": _pool_cases()})
