"""Interop goldens (issue 6 item 6): small PyTorch models whose state_dicts
tools/torch_safetensors.py exports to tests/goldens/io_interop_<model>.safetensors,
and in io_interop.json each model's state_dict keys, inputs and outputs, in
f32 and, from the same f32 weights, in f64 (model.double()), which
tests/io/interop_test.cpp reproduces with the matching kiln model.

The models cover the layers whose names or layouts matter: Conv2d, BatchNorm2d
(running statistics and num_batches_tracked, eval mode) and Linear (cnn);
a two-layer LSTM with a Linear head (lstm); Embedding, a TransformerEncoderLayer
(nn.MultiheadAttention inside) with a causal mask, LayerNorm and Linear (tiny_lm);
Conv2d and ConvTranspose2d, one with groups (autoencoder: PyTorch's transposed
weights are [in, out/groups, kH, kW], kiln's [out, in/groups, kH, kW]).

The other direction: tests/goldens/io_kiln_written.safetensors, written by
kiln (tests/io/interop_test.cpp, KILN_REGENERATE_GOLDENS=1), must read back
here as exactly kiln_written_expected(); generate() fails if it does not.
"""
import collections
import math
import os
import tempfile

import torch
import torch_safetensors  # tools/, on sys.path through tools/gen_goldens.py
from torch import nn

from . import common


def _randomize(module, seed):
    """Every floating parameter drawn afresh, so that loading a norm's weight into
    its bias (both ones/zeros by default) cannot go unnoticed."""
    g = common.gen(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.5)
    return module


class LstmHead(nn.Module):
    """A sequence tagger: [B, T, 4] -> logits [B, T, 3], with the final (h, c)."""

    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(4, 6, num_layers=2, batch_first=True)
        self.head = nn.Linear(6, 3)

    def forward(self, x):
        out, (h, c) = self.lstm(x)
        return self.head(out), h, c


class TinyLM(nn.Module):
    """Token ids [B, T] -> logits [B, T, V]: embedding, one causal pre-norm
    transformer block, final LayerNorm and a Linear head."""

    def __init__(self, vocab=11, dim=8, heads=2):
        super().__init__()
        self.tok = nn.Embedding(vocab, dim)
        self.block = nn.TransformerEncoderLayer(dim, heads, dim_feedforward=16, dropout=0.0, activation="gelu",
                                                batch_first=True, norm_first=True)
        self.ln_f = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab)

    def forward(self, ids):
        t = ids.shape[1]
        causal = torch.triu(torch.full((t, t), float("-inf"), dtype=self.head.weight.dtype), diagonal=1)
        return self.head(self.ln_f(self.block(self.tok(ids), src_mask=causal)))


def _models():
    torch.manual_seed(0)
    cnn = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                        nn.Linear(36, 5))
    _randomize(cnn[1], 1)
    # Running statistics from three training batches (num_batches_tracked = 3).
    with torch.no_grad():
        for seed in (2, 3, 4):
            cnn(common.randn(8, 3, 6, 6, seed=seed).float() * 2 + 1)
    cnn.eval()

    lstm = LstmHead()

    lm = TinyLM()
    for norm in (lm.block.norm1, lm.block.norm2, lm.ln_f):
        _randomize(norm, 5)

    autoencoder = nn.Sequential(nn.Conv2d(2, 4, 3, stride=2, padding=1), nn.ReLU(),
                                nn.ConvTranspose2d(4, 4, 3, stride=2, padding=1, output_padding=1), nn.Tanh(),
                                nn.ConvTranspose2d(4, 2, 2, groups=2))
    return [
        ("cnn", cnn, [common.randn(2, 3, 6, 6, seed=10).float()]),
        ("lstm", lstm, [common.randn(2, 5, 4, seed=11).float()]),
        ("tiny_lm", lm, [torch.tensor([[1, 5, 9, 2, 10, 0], [3, 3, 7, 4, 8, 6]])]),
        ("autoencoder", autoencoder, [common.randn(2, 2, 6, 6, seed=12).float()]),
    ]


def _outputs(out):
    return [out] if isinstance(out, torch.Tensor) else list(out)


def _export_through_cli(state, path, metadata):
    """The cnn goes through the command line, as a user would run it: torch.save,
    then `tools/torch_safetensors.py export`."""
    with tempfile.TemporaryDirectory() as tmp:
        pt = os.path.join(tmp, "model.pt")
        torch.save(state, pt)
        args = ["export", pt, str(path)] + [f"--metadata={k}={v}" for k, v in metadata.items()]
        if torch_safetensors.main(args) != 0:
            raise RuntimeError(f"torch_safetensors.py {' '.join(args)} failed")


def kiln_written_expected():
    """What tests/io/interop_test.cpp writes (KilnWrittenGolden): every kiln dtype,
    special values, 0-d, empty and non-contiguous sources (stored row-major)."""
    f32, i64 = torch.float32, torch.int64
    tensors = collections.OrderedDict([
        ("f32", torch.tensor([[0.5, -1.25, math.inf], [-math.inf, math.nan, -0.0]], dtype=f32)),
        ("f32_extremes", torch.tensor([2.0 ** -149, 3.4028234663852886e38, 0.1], dtype=f32)),
        ("f64", torch.tensor([0.1, -2.5, 1e300, 5e-324], dtype=torch.float64)),
        ("bf16", torch.tensor([[1.0, -2.5], [0.15625, 2.0 ** 100]], dtype=torch.bfloat16)),
        ("i32", torch.tensor([-2 ** 31, -1, 0, 2 ** 31 - 1], dtype=torch.int32)),
        ("i64", torch.tensor([[-2 ** 63, -1], [2 ** 40, 2 ** 63 - 1]], dtype=i64)),
        ("u8", torch.tensor([0, 1, 127, 128, 255], dtype=torch.uint8)),
        ("bool", torch.tensor([True, False, True])),
        ("scalar", torch.tensor(3.25)),
        ("empty", torch.zeros(0, 3)),
        ("empty_i64", torch.zeros(2, 0, dtype=i64)),
        ("transposed", torch.arange(6, dtype=f32).reshape(2, 3).t()),
        ("every_other", torch.arange(10, dtype=torch.int32)[1::2]),
        ("expanded", torch.tensor([[1.5, -2.0, 4.0]], dtype=torch.float64).expand(2, 3)),
    ])
    return tensors, {"format": "pt", "writer": "kiln tests/io/interop_test.cpp"}


def check_kiln_written(path):
    """Reads a kiln-written file and raises AssertionError unless it holds exactly
    kiln_written_expected() (floats bit for bit, any NaN equal to any NaN)."""
    tensors, metadata = torch_safetensors.load(path)
    want, want_metadata = kiln_written_expected()
    assert list(tensors) == list(want), f"{path}: names {list(tensors)} != {list(want)}"
    for name, x in want.items():
        assert torch_safetensors.same_values(tensors[name], x), f"{path}: '{name}': {tensors[name]} != {x}"
    assert metadata == want_metadata, f"{path}: metadata {metadata} != {want_metadata}"


def generate():
    cases = []
    for name, model, inputs in _models():
        path = common.OUT / f"io_interop_{name}.safetensors"
        metadata = {"source": "torch " + torch.__version__, "model": name}
        state = model.state_dict()
        if name == "cnn":
            _export_through_cli(state, path, metadata)
        else:
            torch_safetensors.save(path, state, {"format": "pt", **metadata})
        # The file reads back as the state_dict, byte for byte.
        back, _ = torch_safetensors.load(path)
        assert list(back) == list(state) and all(torch.equal(back[k], v) for k, v in state.items())

        with torch.no_grad():
            out32 = _outputs(model(*inputs))
            model.double()
            out64 = _outputs(model(*[x.double() if x.is_floating_point() else x for x in inputs]))
            model.float()
        cases.append({
            "name": name,
            "keys": list(state),
            "inputs": [common.t(x) for x in inputs],
            "outputs": [common.t(o) for o in out32],
            "outputs_f64": [common.t(o) for o in out64],
        })
    common.dump("io_interop", {"cases": cases})

    kiln_file = common.OUT / "io_kiln_written.safetensors"
    if kiln_file.exists():
        check_kiln_written(kiln_file)
        print(f"goldens: io_interop: {kiln_file.name} (written by kiln) reads back exactly")
    else:
        print(f"goldens: io_interop: no {kiln_file.name} yet; run the kiln test Interop.KilnWrittenGolden "
              "with KILN_REGENERATE_GOLDENS=1")
