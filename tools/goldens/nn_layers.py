"""Parity goldens for the conv, pool, norm and embedding layers (tests/nn/layers_test.cpp).

Written to nn_layers_{conv,conv_transpose,pool,norm,embedding,model,byte_embedding,byte_head}.json
(one family per file, each under 60 KB).
BatchNorm training cases store the state *before* the forward and the running
statistics after it: PyTorch's (unbiased running variance) and spec 000's
(population variance), computed here by hand.
"""
import copy

import torch

from goldens import common
from goldens.nn_util import parity_case

nn = torch.nn


def x(*shape, seed):
    return common.randn(*shape, seed=seed).float()


def randomize(module, seed):
    """Non-trivial affine parameters and running statistics."""
    g = common.gen(seed)
    with torch.no_grad():
        for name, p in module.named_parameters():
            p.copy_(torch.randn(p.shape, generator=g, dtype=torch.float64).float() * 0.5 + (1.0 if name == "weight" else 0.0))
        for name, b in module.named_buffers():
            if name == "running_mean":
                b.copy_(torch.randn(b.shape, generator=g, dtype=torch.float64).float())
            elif name == "running_var":
                b.copy_(torch.rand(b.shape, generator=g, dtype=torch.float64).float() + 0.5)
    return module


def stateful_case(name, module, inputs):
    """parity_case with the state from *before* the forward (training updates buffers)."""
    before = {k: common.t(v) for k, v in copy.deepcopy(module.state_dict()).items()}
    case = parity_case(name, module, inputs)
    case["state"] = before
    return case


def batchnorm_case(name, module, inp, train):
    module.train(train)
    rm0, rv0 = module.running_mean.clone().double(), module.running_var.clone().double()
    case = stateful_case(name, module, [inp])
    case["train"] = train
    case["running_mean"] = common.t(module.running_mean)
    case["running_var_unbiased"] = common.t(module.running_var)
    dims = [d for d in range(inp.dim()) if d != 1]
    m = module.momentum
    var = inp.double().var(dim=dims, unbiased=False)
    rv = (1 - m) * rv0 + m * var if train else rv0
    case["running_var_population"] = common.t(rv.float())
    case["num_batches_tracked"] = int(module.num_batches_tracked)
    return case


class RMSNormRef(nn.Module):
    """PyTorch 1.13 has no nn.RMSNorm: x / sqrt(mean(x^2) + eps) * weight over the trailing dims."""

    def __init__(self, shape, eps=1e-6):
        super().__init__()
        self.shape, self.eps = tuple(shape), eps
        self.weight = nn.Parameter(torch.ones(self.shape))

    def forward(self, inp):
        dims = tuple(range(-len(self.shape), 0))
        return inp * torch.rsqrt(inp.pow(2).mean(dims, keepdim=True) + self.eps) * self.weight


def generate():
    torch.manual_seed(0)
    long = torch.int64
    conv = [
        parity_case("conv1d", nn.Conv1d(3, 4, 3, stride=2, padding=1), [x(2, 3, 9, seed=1)]),
        parity_case("conv1d_groups_dilation", nn.Conv1d(4, 6, 3, dilation=2, groups=2, bias=False),
                    [x(2, 4, 10, seed=2)]),
        parity_case("conv1d_same", nn.Conv1d(2, 3, 4, padding="same"), [x(1, 2, 7, seed=3)]),
        parity_case("conv2d", nn.Conv2d(3, 4, 3, padding=1), [x(1, 3, 5, 5, seed=4)]),
        parity_case("conv2d_pair_groups", nn.Conv2d(2, 4, (3, 2), stride=(2, 1), padding=(1, 0), dilation=(1, 2),
                                                    groups=2), [x(1, 2, 6, 5, seed=5)]),
        parity_case("conv2d_same", nn.Conv2d(2, 3, (3, 4), padding="same"), [x(1, 2, 5, 5, seed=6)]),
        parity_case("conv2d_valid", nn.Conv2d(2, 3, 3, padding="valid", bias=False), [x(1, 2, 5, 4, seed=7)]),
        parity_case("conv_transpose1d", nn.ConvTranspose1d(3, 2, 3, stride=2, padding=1, output_padding=1),
                    [x(2, 3, 5, seed=8)]),
        parity_case("conv_transpose1d_groups_no_bias", nn.ConvTranspose1d(4, 6, 3, groups=2, bias=False),
                    [x(1, 4, 5, seed=9)]),
        parity_case("conv_transpose2d", nn.ConvTranspose2d(3, 2, 3, stride=2, padding=1, output_padding=1),
                    [x(1, 3, 3, 3, seed=10)]),
        parity_case("conv_transpose2d_groups_dilation",
                    nn.ConvTranspose2d(4, 6, (2, 3), stride=(2, 1), groups=2, dilation=(1, 2)),
                    [x(1, 4, 3, 3, seed=11)]),
    ]
    pool = [
        parity_case("max_pool2d", nn.MaxPool2d(2), [x(1, 3, 6, 6, seed=12)]),
        parity_case("max_pool2d_stride_pad", nn.MaxPool2d(3, stride=2, padding=1), [x(1, 2, 7, 7, seed=13)]),
        parity_case("avg_pool2d", nn.AvgPool2d(2), [x(1, 3, 6, 6, seed=14)]),
        parity_case("avg_pool2d_exclude_pad", nn.AvgPool2d(3, stride=2, padding=1, count_include_pad=False),
                    [x(1, 2, 7, 7, seed=15)]),
        parity_case("adaptive_avg_pool2d_global", nn.AdaptiveAvgPool2d((1, 1)), [x(2, 3, 5, 4, seed=16)]),
        parity_case("adaptive_avg_pool2d_3x2", nn.AdaptiveAvgPool2d((3, 2)), [x(2, 3, 7, 5, seed=17)]),
        parity_case("max_pool1d", nn.MaxPool1d(3, stride=2, padding=1), [x(2, 3, 8, seed=18)]),
        parity_case("avg_pool1d", nn.AvgPool1d(2), [x(2, 3, 8, seed=19)]),
        parity_case("adaptive_avg_pool1d", nn.AdaptiveAvgPool1d(3), [x(2, 3, 8, seed=20)]),
    ]
    norm = [
        batchnorm_case("batchnorm1d_nc_train", randomize(nn.BatchNorm1d(4), 21), x(6, 4, seed=22), True),
        batchnorm_case("batchnorm1d_ncl_train", randomize(nn.BatchNorm1d(4), 23), x(3, 4, 5, seed=24), True),
        batchnorm_case("batchnorm1d_ncl_eval", randomize(nn.BatchNorm1d(4), 25), x(3, 4, 5, seed=26), False),
        batchnorm_case("batchnorm2d_train", randomize(nn.BatchNorm2d(3), 27), x(2, 3, 4, 4, seed=28), True),
        batchnorm_case("batchnorm2d_eval", randomize(nn.BatchNorm2d(3), 29), x(2, 3, 4, 4, seed=30), False),
        parity_case("layer_norm", randomize(nn.LayerNorm(5), 31), [x(2, 3, 5, seed=32)]),
        parity_case("layer_norm_2d_no_affine", nn.LayerNorm([3, 4], elementwise_affine=False),
                    [x(2, 3, 4, seed=33)]),
        parity_case("rms_norm", randomize(RMSNormRef([8]), 34), [x(2, 3, 8, seed=35)]),
        parity_case("rms_norm_2d", randomize(RMSNormRef([2, 4]), 36), [x(3, 2, 4, seed=37)]),
    ]
    embedding = [
        parity_case("embedding", nn.Embedding(10, 4), [torch.tensor([[1, 3, 3, 9, 0], [2, 1, 1, 7, 4]], dtype=long)]),
        parity_case("embedding_padding", nn.Embedding(10, 4, padding_idx=0),
                    [torch.tensor([[0, 3, 0, 9], [2, 0, 3, 7]], dtype=long)]),
        parity_case("embedding_padding_negative", nn.Embedding(6, 3, padding_idx=-1),
                    [torch.tensor([5, 1, 5, 2], dtype=long)]),
    ]
    # A small CNN through Sequential, training mode (batch statistics).
    cnn = nn.Sequential(nn.Conv2d(1, 2, 3, padding=1), randomize(nn.BatchNorm2d(2), 41), nn.ReLU(), nn.MaxPool2d(2),
                        nn.Flatten(), nn.Linear(8, 3))
    model = [stateful_case("cnn", cnn, [x(2, 1, 4, 4, seed=42)])]
    conv_transpose = [c for c in conv if c["name"].startswith("conv_transpose")]
    conv = [c for c in conv if not c["name"].startswith("conv_transpose")]
    for group, cases in (("conv", conv), ("conv_transpose", conv_transpose), ("pool", pool), ("norm", norm), ("embedding", embedding),
                          ("model", model)):
        common.dump(f"nn_layers_{group}", {"cases": cases})

    # ByteEmbedding is Embedding(256, D) on u8 values; ByteOutputHead is Linear(D, 256).
    common.dump("nn_layers_byte_embedding", {"cases": [
        parity_case("byte_embedding", nn.Embedding(256, 2), [torch.tensor([[0, 255, 7], [7, 128, 1]], dtype=torch.uint8)],
                    forward=lambda m, b: m(b.long()))]})
    common.dump("nn_layers_byte_head", {"cases": [parity_case("byte_output_head", nn.Linear(2, 256), [x(1, 1, 2, seed=40)])]})
