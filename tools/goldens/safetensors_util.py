"""safetensors files from Python without the safetensors package (not in Debian).

Written from the format description (docs/io.md): u64 little-endian header
length N, N bytes of JSON padded with spaces to a multiple of 8, then the
tensors' bytes, dense and in the dict's order. Golden scripts use it to export
PyTorch state_dicts that kiln loads:

    from . import safetensors_util
    safetensors_util.save_safetensors(path, model.state_dict(), {"format": "pt"})

It has no generate(): tools/gen_goldens.py skips it.
"""
import json
import struct

import torch

# torch dtype -> (safetensors name, integer dtype of the same width used to get
# the raw bytes through numpy, which has no bfloat16).
_DTYPES = {
    torch.bool: ("BOOL", torch.uint8),
    torch.uint8: ("U8", torch.uint8),
    torch.int32: ("I32", torch.int32),
    torch.int64: ("I64", torch.int64),
    torch.bfloat16: ("BF16", torch.int16),
    torch.float16: ("F16", torch.int16),
    torch.float32: ("F32", torch.int32),
    torch.float64: ("F64", torch.int64),
}
_BY_NAME = {name: (dtype, raw) for dtype, (name, raw) in _DTYPES.items()}


def _raw_bytes(x, raw_dtype):
    """The tensor's elements, row-major, little-endian."""
    x = x.detach().cpu().contiguous()
    if x.numel() == 0:
        return b""
    if x.dtype == torch.bool:
        x = x.to(torch.uint8)  # 0 or 1 per element, as safetensors' BOOL
    arr = x.view(raw_dtype).numpy()
    return arr.astype(arr.dtype.newbyteorder("<"), copy=False).tobytes()


def save_safetensors(path, tensors, metadata=None):
    """Writes a dict name -> torch.Tensor (e.g. a state_dict) and optional
    metadata (str -> str) to `path`."""
    header = {}
    if metadata:
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()):
            raise TypeError("safetensors metadata must map str to str")
        header["__metadata__"] = dict(metadata)
    chunks = []
    offset = 0
    for name, x in tensors.items():
        if name == "__metadata__":
            raise ValueError("'__metadata__' is reserved")
        if x.dtype not in _DTYPES:
            raise TypeError(f"tensor '{name}': dtype {x.dtype} has no safetensors name here")
        st_name, raw = _DTYPES[x.dtype]
        data = _raw_bytes(x, raw)
        header[name] = {"dtype": st_name, "shape": list(x.shape), "data_offsets": [offset, offset + len(data)]}
        chunks.append(data)
        offset += len(data)
    text = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for data in chunks:
            f.write(data)


def load_safetensors(path):
    """Reads a file back: (dict name -> torch.Tensor in byte order, metadata dict).
    Minimal checks; kiln's loader is the validating one."""
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n].decode("utf-8"))
    metadata = header.pop("__metadata__", {})
    buf = blob[8 + n:]
    out = {}
    for name, e in sorted(header.items(), key=lambda kv: tuple(kv[1]["data_offsets"])):
        dtype, raw = _BY_NAME[e["dtype"]]
        begin, end = e["data_offsets"]
        flat = torch.frombuffer(bytearray(buf[begin:end]), dtype=raw) if end > begin else torch.empty(0, dtype=raw)
        out[name] = flat.view(dtype).reshape(e["shape"]) if dtype != torch.bool else flat.to(torch.bool).reshape(e["shape"])
    return out, metadata
