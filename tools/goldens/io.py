"""Goldens for kiln/io/safetensors.h: tests/goldens/torch_tensors.safetensors,
written from PyTorch tensors by tools/torch_safetensors.py (one of each dtype
kiln reads, plus 0-d, empty and non-contiguous ones, and metadata), and torch_tensors.json
with their values, which tests/io/safetensors_test.cpp compares after loading.
F16 has no kiln dtype: its expected value is the f32 it loads as."""
import torch
import torch_safetensors  # tools/, on sys.path through tools/gen_goldens.py

from . import common


def generate():
    g = common.gen(11)
    tensors = {
        "linear.weight": torch.randn(3, 4, generator=g),
        "linear.bias": torch.randn(4, generator=g, dtype=torch.float64),
        "emb.weight": torch.randn(2, 3, generator=g).to(torch.bfloat16),
        "half": torch.tensor([1.5, -65504.0, 2.0 ** -24, float("inf"), -0.0, 0.1], dtype=torch.float16),
        "ids": torch.tensor([[2 ** 40, -(2 ** 40)], [0, 7]], dtype=torch.int64),
        "counts": torch.tensor([-(2 ** 31), 5, 2 ** 31 - 1], dtype=torch.int32),
        "pixels": torch.tensor([[0, 1, 2], [127, 128, 255]], dtype=torch.uint8),
        "mask": torch.tensor([True, False, False, True]),
        "transposed": torch.arange(6, dtype=torch.float32).reshape(2, 3).t(),
        "scalar": torch.tensor(3.25),
        "empty": torch.zeros(0, 2),
    }
    metadata = {"format": "pt", "source": "tools/goldens/io.py"}
    torch_safetensors.save(common.OUT / "torch_tensors.safetensors", tensors, metadata)
    # The writer round-trips through its own reader (same bytes, same values).
    back, meta = torch_safetensors.load(common.OUT / "torch_tensors.safetensors")
    assert meta == metadata and list(back) == list(tensors)
    assert all(torch.equal(back[k], v) for k, v in tensors.items())

    def expected(x):
        return common.t(x.float() if x.dtype == torch.float16 else x)

    common.dump("torch_tensors", {
        "tensors": [{"name": k, "value": expected(v)} for k, v in tensors.items()],
        "metadata": metadata,
    })
