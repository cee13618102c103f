"""Goldens for kiln/ops/resize.h: F.interpolate forward values and the input
gradient of loss = sum(out * c) (resize_nearest.json, resize_linear.json), mostly in f32 (a few f64 cases check the f64
source tables). Each case: {"name", "args": {"mode", "size" | "scale_factor",
"align_corners"}, "x", "c", "out", "grad"}; tests/ops/resize_test.cpp calls
kiln::interpolate with the same arguments."""
import numpy as np
import torch
import torch.nn.functional as F

from . import common


def _t(x):
    """common.t with f32 values in their shortest round-trip form."""
    j = common.t(x)
    if j["dtype"] == "f32":
        j["data"] = [float(str(np.float32(v))) if isinstance(v, float) else v for v in j["data"]]
    return j


def _cases():
    cases = []

    def case(name, shape, seed, mode, size=None, scale_factor=None, align_corners=None, dtype=torch.float32):
        x = common.randn(*shape, seed=seed).to(dtype).requires_grad_()
        y = F.interpolate(x, size=size, scale_factor=scale_factor, mode=mode, align_corners=align_corners)
        c = common.randn(*y.shape, seed=seed + 1000).to(dtype)
        (y * c).sum().backward()
        args = {"mode": mode, "align_corners": bool(align_corners)}
        if size is not None:
            args["size"] = list(size) if isinstance(size, tuple) else [size]
        if scale_factor is not None:
            args["scale_factor"] = list(scale_factor) if isinstance(scale_factor, tuple) else [scale_factor]
        cases.append({"name": name, "args": args, "x": _t(x), "c": _t(c), "out": _t(y), "grad": _t(x.grad)})

    # nearest, 1-D and 2-D: x2 and x3 (integer steps), 1.5 (PyTorch samples
    # with 1 / 1.5 in f32), sizes up and down, per-dim scales.
    case("n1_x2", (1, 2, 5), 1, "nearest", scale_factor=2.0)
    case("n1_x3", (1, 1, 4), 2, "nearest", scale_factor=3.0)
    case("n1_x1.5", (1, 1, 7), 3, "nearest", scale_factor=1.5)
    case("n1_down_size", (1, 1, 9), 4, "nearest", size=4)
    case("n2_x2", (1, 2, 2, 3), 5, "nearest", scale_factor=2.0)
    case("n2_x3", (1, 1, 3, 2), 6, "nearest", scale_factor=3.0)
    case("n2_x1.5", (1, 1, 5, 3), 7, "nearest", scale_factor=1.5)
    case("n2_down_size", (1, 1, 7, 5), 8, "nearest", size=(3, 2))
    case("n2_up_size", (1, 1, 3, 4), 9, "nearest", size=(7, 6))
    case("n2_scales", (1, 1, 4, 3), 10, "nearest", scale_factor=(2.0, 1.5))
    case("n2_x0.7", (1, 1, 6, 5), 11, "nearest", scale_factor=0.7)
    # linear: both align_corners settings.
    for ac in (False, True):
        s = "_ac" if ac else ""
        case("l1_x2" + s, (1, 2, 5), 20, "linear", scale_factor=2.0, align_corners=ac)
        case("l1_x3" + s, (1, 1, 4), 21, "linear", scale_factor=3.0, align_corners=ac)
        case("l1_x1.5" + s, (1, 1, 7), 22, "linear", scale_factor=1.5, align_corners=ac)
        case("l1_down_size" + s, (1, 1, 9), 23, "linear", size=4, align_corners=ac)
        case("l1_to1" + s, (1, 1, 5), 24, "linear", size=1, align_corners=ac)
        case("b2_x2" + s, (1, 2, 2, 3), 25, "bilinear", scale_factor=2.0, align_corners=ac)
        case("b2_x3" + s, (1, 1, 3, 2), 26, "bilinear", scale_factor=3.0, align_corners=ac)
        case("b2_x1.5" + s, (1, 1, 5, 3), 27, "bilinear", scale_factor=1.5, align_corners=ac)
        case("b2_down_size" + s, (1, 1, 7, 5), 28, "bilinear", size=(3, 2), align_corners=ac)
        case("b2_up_size" + s, (1, 1, 3, 4), 29, "bilinear", size=(7, 6), align_corners=ac)
        case("b2_scales" + s, (1, 1, 4, 6), 30, "bilinear", scale_factor=(1.7, 0.6), align_corners=ac)
    # f64: its own source tables.
    case("l1_x1.5_f64", (1, 1, 7), 40, "linear", scale_factor=1.5, dtype=torch.float64)
    case("b2_x1.5_f64", (1, 1, 5, 3), 41, "bilinear", scale_factor=1.5, dtype=torch.float64)
    case("b2_up_size_ac_f64", (1, 1, 3, 4), 42, "bilinear", size=(7, 6), align_corners=True, dtype=torch.float64)
    case("n2_x1.5_f64", (1, 1, 5, 3), 43, "nearest", scale_factor=1.5, dtype=torch.float64)
    return cases


def generate():
    cases = _cases()
    common.dump("resize_nearest", {"cases": [c for c in cases if c["args"]["mode"] == "nearest"]})
    common.dump("resize_linear", {"cases": [c for c in cases if c["args"]["mode"] != "nearest"]})
