"""Parity goldens for Linear, the activations, Flatten and Sequential."""
import torch
import torch_safetensors  # tools/, on sys.path through tools/gen_goldens.py

from goldens import common
from goldens.nn_util import parity_case


def generate():
    torch.manual_seed(0)
    # A CNN-shaped model's state_dict exported to safetensors, and what it computes:
    # kiln loads the file by name and must give the same outputs (issue 4 item 4).
    net = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))
    x = common.randn(4, 6, seed=5).float()
    torch_safetensors.save(str(common.OUT / "nn_basic_mlp.safetensors"), net.state_dict(),
                           metadata={"source": "torch " + torch.__version__})
    exported = {"input": common.t(x), "output": common.t(net(x))}
    cases = [
        parity_case("linear", torch.nn.Linear(5, 3), [common.randn(4, 5, seed=1).float()]),
        parity_case("linear_3d_no_bias", torch.nn.Linear(5, 3, bias=False), [common.randn(2, 4, 5, seed=2).float()]),
        parity_case("mlp", torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.ReLU(), torch.nn.Linear(8, 8),
                                               torch.nn.GELU(), torch.nn.Linear(8, 8), torch.nn.Tanh(),
                                               torch.nn.Linear(8, 8), torch.nn.Sigmoid(), torch.nn.Linear(8, 8),
                                               torch.nn.SiLU(), torch.nn.Linear(8, 2)),
                    [common.randn(3, 6, seed=3).float()]),
        parity_case("upsample_nearest", torch.nn.Upsample(scale_factor=2, mode="nearest"),
                    [common.randn(1, 2, 3, 3, seed=6).float()]),
        parity_case("upsample_bilinear", torch.nn.Upsample(size=(5, 4), mode="bilinear", align_corners=True),
                    [common.randn(1, 2, 3, 3, seed=7).float()]),
        parity_case("flatten", torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(12, 2)),
                    [common.randn(2, 3, 2, 2, seed=4).float()]),
    ]
    common.dump("nn_basic", {"cases": cases, "exported": exported})
