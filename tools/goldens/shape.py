"""Goldens for tests/ops/shape_test.cpp: the view and layout ops (values of
transpose/permute/slices/expand/... of a known input, and sum_to)."""
import torch

from . import common

T = common.t


def generate():
    x = torch.arange(2 * 3 * 4 * 3, dtype=torch.float32).reshape(2, 3, 4, 3)
    c = torch.tensor([[1.5], [-2.0], [0.25]], dtype=torch.float32)
    cases = {
        "x": T(x),
        "transpose_1_3": T(x.transpose(1, 3)),
        "transpose_m1_0": T(x.transpose(-1, 0)),
        "permute_2_0_3_1": T(x.permute(2, 0, 3, 1)),
        "permute_m1_m2_0_1": T(x.permute(-1, -2, 0, 1)),
        "narrow_2_1_2": T(x.narrow(2, 1, 2)),
        "narrow_m1_m3_2": T(x.narrow(-1, -3, 2)),
        # Python slicing x[start:end:step] along a dim, with clamping.
        "slice_3_m10_100_2": T(x[:, :, :, -10:100:2]),
        "slice_1_m2_3_1": T(x[:, -2:3]),
        "slice_0_5_9_1": T(x[5:9]),
        "slice_3_1_m1_3": T(x[..., 1:-1:3]),
        "slice_2_m1_m3_1": T(x[:, :, -1:-3]),
        "slice_2_0_4_3": T(x[:, :, 0:4:3]),
        "select_2_m1": T(x.select(2, -1)),
        "select_0_1": T(x.select(0, 1)),
        "c": T(c),
        "expand_2_3_4": T(c.expand(2, 3, 4)),
        "expand_m1_6": T(c.expand(-1, 6)),
        "flatten_1_2": T(x.flatten(1, 2)),
        "flatten_all": T(x.flatten()),
        "unflatten_3_m1_1": T(x.unflatten(3, (-1, 1))),
        "view_m1_8": T(x.view(-1, 8)),
        "sum_to_3_1_3": T(x.sum(dim=(0, 2), keepdim=True).reshape(3, 1, 3)),
        "sum_to_1_3": T(x.sum(dim=(0, 1, 2)).reshape(1, 3)),
        "sum_to_4_1": T(x.sum(dim=(0, 1, 3)).reshape(4, 1)),
    }
    common.dump("shape_views", cases)
