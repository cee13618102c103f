"""Goldens for tests/core: dtype promotion, bf16 rounding, creation ops."""
import torch

from . import common

DTYPES = [torch.bool, torch.uint8, torch.int32, torch.int64, torch.bfloat16, torch.float32, torch.float64]


def generate():
    names = common.DTYPES
    promote = {f"{names[a]},{names[b]}": names[torch.promote_types(a, b)] for a in DTYPES for b in DTYPES}

    # f32 values and the bf16 bits torch rounds them to (nearest even).
    floats = torch.tensor([1.0, 1.00390625, 1.01171875, 1.0078125, 1.0039062, -2.5, 3.14159265, 65504.0,
                           3.3895314e38, 1e-40, -0.0, float("inf"), -float("inf")], dtype=torch.float32)
    bf16_bits = floats.to(torch.bfloat16).view(torch.int16).to(torch.int64) & 0xFFFF

    creation = {
        "zeros_2x3": common.t(torch.zeros(2, 3)),
        "ones_f64": common.t(torch.ones(3, dtype=torch.float64)),
        "full_f32": common.t(torch.full((2, 2), 3.5)),
        "full_i32": common.t(torch.full((3,), 7, dtype=torch.int32)),
        "arange_5": common.t(torch.arange(5)),
        "arange_1_2.5_0.5": common.t(torch.arange(1, 2.5, 0.5)),
        "arange_0_1_0.1": common.t(torch.arange(0, 1, 0.1)),
        "arange_10_0_-3": common.t(torch.arange(10, 0, -3)),
        "arange_f64": common.t(torch.arange(-1, 1, 0.25, dtype=torch.float64)),
        "linspace_0_1_5": common.t(torch.linspace(0, 1, 5)),
        "linspace_-2.5_7.3_11": common.t(torch.linspace(-2.5, 7.3, 11)),
        "linspace_f64": common.t(torch.linspace(-1, 1, 7, dtype=torch.float64)),
        "linspace_1": common.t(torch.linspace(3, 10, 1)),
        "eye_3": common.t(torch.eye(3)),
        "eye_2x4": common.t(torch.eye(2, 4)),
        "eye_3x2_f64": common.t(torch.eye(3, 2, dtype=torch.float64)),
    }
    common.dump("core", {"promote": promote, "bf16_in": [common._num(v) for v in floats.tolist()], "bf16_bits": bf16_bits.tolist(),
                         "creation": creation})
