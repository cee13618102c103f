#!/usr/bin/python3
"""PyTorch <-> safetensors without the safetensors package (Debian has none).

Moves PyTorch state_dicts to and from kiln with nothing but PyTorch, numpy and
the standard library (Debian python3-torch 1.13 and python3-numpy). The format
is kiln's (docs/io.md): u64 little-endian header length N, N bytes of JSON
padded with spaces so the data starts 64-byte aligned (kiln's writer; the
reference pads to 8), then every tensor's
bytes, row-major and little-endian, in the header's order with no gaps.

As a module (tools/ on sys.path):

    import torch_safetensors
    torch_safetensors.save("model.safetensors", model.state_dict(), {"format": "pt"})
    state, metadata = torch_safetensors.load("model.safetensors")
    model.load_state_dict(state)

As a command:

    tools/torch_safetensors.py show FILE                    tensors and metadata
    tools/torch_safetensors.py export MODEL.pt OUT.safetensors [--metadata K=V ...]
    tools/torch_safetensors.py compare A B                  exit 1 on any difference
    tools/torch_safetensors.py compare-json FILE EXPECTED   against tensors written as JSON

Exit status: 0 success / identical, 1 a difference, 2 an invalid file or argument.
"""
import argparse
import collections
import itertools
import json
import os
import pickle
import struct
import sys

import numpy as np
import torch

# safetensors name -> (torch dtype, bytes per element, numpy dtype of the raw
# little-endian bytes). numpy has no bfloat16, so BF16 goes through int16 bits.
DTYPES = collections.OrderedDict([
    ("BOOL", (torch.bool, 1, "<u1")),
    ("U8", (torch.uint8, 1, "<u1")),
    ("I32", (torch.int32, 4, "<i4")),
    ("I64", (torch.int64, 8, "<i8")),
    ("BF16", (torch.bfloat16, 2, "<i2")),
    ("F16", (torch.float16, 2, "<f2")),
    ("F32", (torch.float32, 4, "<f4")),
    ("F64", (torch.float64, 8, "<f8")),
])
_NAME_OF = {torch_dtype: name for name, (torch_dtype, _, _) in DTYPES.items()}
# kiln's dtype names (include/kiln/core/dtype.h, the golden JSON's "dtype"); F16 has none.
KILN_NAMES = {"BOOL": "bool", "U8": "u8", "I32": "i32", "I64": "i64", "BF16": "bf16", "F32": "f32", "F64": "f64"}

METADATA_KEY = "__metadata__"
# The reference implementation's limit, which kiln also applies.
MAX_HEADER_BYTES = 100 << 20


# ---------------------------------------------------------------- writing

def _check(name, x):
    """The safetensors dtype of tensor `name`; TypeError unless kiln can read it."""
    if not isinstance(name, str):
        raise TypeError(f"tensor name {name!r} is not a str")
    if name == METADATA_KEY:
        raise ValueError(f"tensor '{name}': the name is reserved for metadata")
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"tensor '{name}': is {type(x).__name__}, not a torch.Tensor")
    if x.dtype not in _NAME_OF:
        raise TypeError(f"tensor '{name}': dtype {x.dtype} has no safetensors name that kiln reads "
                        f"({', '.join(DTYPES)}); convert it first, e.g. x.float()")
    return _NAME_OF[x.dtype]


def _data(x):
    """A tensor's elements as a numpy array of its raw little-endian bytes, row-major."""
    x = x.detach().cpu().contiguous()
    raw = DTYPES[_NAME_OF[x.dtype]][2]
    if x.dtype == torch.bool:
        x = x.to(torch.uint8)  # one byte per element, 0 or 1
    elif x.dtype == torch.bfloat16:
        x = x.view(torch.int16)
    # numpy arrays are native-endian; astype makes them little-endian on any host.
    return x.numpy().astype(raw, copy=False)


def _layout(tensors, metadata):
    """Checks every tensor and the metadata, and lays out the file: (length field
    + header bytes, the tensors in the order of their bytes)."""
    header = {}
    if metadata:
        for k, v in metadata.items():
            if not isinstance(k, str) or not isinstance(v, str):
                raise TypeError(f"metadata {k!r}: {v!r}: safetensors metadata maps str to str")
        header[METADATA_KEY] = dict(metadata)
    offset = 0
    for name, x in tensors.items():
        dtype = _check(name, x)
        nbytes = x.numel() * DTYPES[dtype][1]
        header[name] = {"dtype": dtype, "shape": list(x.shape), "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    text = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    text += b" " * (-(8 + len(text)) % 64)  # 8 + N is a multiple of 64: the data is 64-byte aligned, as kiln writes
    return struct.pack("<Q", len(text)) + text, list(tensors.values())


def to_bytes(tensors, metadata=None):
    """The whole file as bytes: a dict name -> tensor (e.g. a state_dict, in its
    order) and optional metadata (str -> str)."""
    head, values = _layout(tensors, metadata)
    return b"".join([head] + [_data(x).tobytes() for x in values])


def save(path, state_dict, metadata=None):
    """Writes a dict name -> torch.Tensor (a state_dict: tensors are detached,
    moved to the CPU and made contiguous) and optional metadata (str -> str) to
    `path`, one tensor copied at a time. Atomic like kiln's save: a temporary
    file in the same folder is written, fsynced and renamed over `path`, so a
    failed save never leaves a broken file there."""
    head, values = _layout(state_dict, metadata)  # every check runs before any file is touched
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    base = os.path.join(folder, f".{os.path.basename(path)}.tmp-{os.getpid()}-")
    for attempt in itertools.count():
        tmp = base + str(attempt)
        try:
            # O_EXCL: never shares a temporary with another save; mode 0666 less the umask, as kiln's files.
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
            break
        except FileExistsError:  # a stale temporary of an earlier crash
            if attempt >= 100:
                raise
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(head)
            for x in values:
                if x.numel():
                    f.write(_data(x))  # no extra copy: the array's buffer is written
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    dfd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(dfd)  # the rename is durable once the folder's entry is
    finally:
        os.close(dfd)


# ---------------------------------------------------------------- reading

class Entry:
    """One tensor of a validated header; begin/end are relative to the data buffer."""

    def __init__(self, name, dtype, shape, begin, end):
        self.name, self.dtype, self.shape, self.begin, self.end = name, dtype, shape, begin, end

    @property
    def nbytes(self):
        return self.end - self.begin


def _fail(path, message, name=None):
    where = f"{path}: tensor '{name}': " if name is not None else f"{path}: "
    raise ValueError(where + message)


def _is_count(v):
    # bool is an int in Python but not in JSON; kiln refuses true/false here too.
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def _no_duplicates(path):
    """json object hook that refuses repeated keys (legal JSON that a plain parse
    collapses, last wins): a duplicate tensor name would hide a tensor."""
    def hook(pairs):
        out = {}
        for k, v in pairs:
            if k in out:
                _fail(path, f"duplicate key '{k}' in the header")
            out[k] = v
        return out
    return hook


def _read_header(path, f):
    """Reads and validates the header of the open file `f` as kiln does: returns
    (entries in data-buffer order, metadata, data start). After it returns every
    tensor's range lies in the file, matches its shape and dtype, and the ranges
    tile the data buffer exactly. No tensor data is read."""
    size = os.fstat(f.fileno()).st_size
    if size < 8:
        _fail(path, f"file is {size} bytes, shorter than the 8-byte header length")
    f.seek(0)
    (n,) = struct.unpack("<Q", f.read(8))
    if n > MAX_HEADER_BYTES:
        _fail(path, f"header length {n} exceeds the limit of {MAX_HEADER_BYTES} bytes (100 MB)")
    if n > size - 8:
        _fail(path, f"header length {n} exceeds the {size - 8} bytes after the length field (truncated file?)")
    raw = f.read(n)
    if len(raw) != n:
        _fail(path, "unexpected end of file in the header (was it truncated while loading?)")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        _fail(path, f"header is not UTF-8: {e}")
    try:
        header = json.loads(text, object_pairs_hook=_no_duplicates(path))
    except json.JSONDecodeError as e:
        _fail(path, f"header is not valid JSON: {e}")
    if not isinstance(header, dict):
        _fail(path, f"header is a JSON {type(header).__name__}, not an object")

    data_start = 8 + n
    buffer_size = size - data_start
    metadata = {}
    entries = []
    for name, e in header.items():
        if name == METADATA_KEY:
            if not isinstance(e, dict):
                _fail(path, f"__metadata__ is {type(e).__name__}, not an object of strings")
            for k, v in e.items():
                if not isinstance(v, str):
                    _fail(path, f"__metadata__ '{k}' is {json.dumps(v)}, not a string")
            metadata = dict(e)
            continue
        entries.append(_parse_entry(path, name, e, buffer_size))

    # The ranges must tile [0, buffer_size): sorted by (begin, end), each starts
    # where the previous ended. A stable sort keeps header order among empty tensors.
    entries.sort(key=lambda e: (e.begin, e.end))
    cursor, prev = 0, None
    for e in entries:
        if e.begin < cursor:
            _fail(path, f"bytes [{e.begin}, {e.end}) overlap tensor '{prev.name}' [{prev.begin}, {prev.end})", e.name)
        if e.begin > cursor:
            _fail(path, f"bytes [{cursor}, {e.begin}) of the data buffer before it belong to no tensor "
                        "(the buffer must be fully covered)", e.name)
        if e.end > cursor or prev is None:
            prev = e
        cursor = e.end
    if cursor != buffer_size:
        _fail(path, f"bytes [{cursor}, {buffer_size}) at the end of the data buffer belong to no tensor "
                    "(the buffer must be fully covered)")
    return entries, metadata, data_start


def _parse_entry(path, name, e, buffer_size):
    if not isinstance(e, dict):
        _fail(path, f"entry is {type(e).__name__}, not an object with dtype, shape and data_offsets", name)
    dtype = e.get("dtype")
    if not isinstance(dtype, str):
        _fail(path, 'missing "dtype" string', name)
    if dtype not in DTYPES:
        _fail(path, f"unsupported dtype '{dtype}' (kiln reads {', '.join(DTYPES)})", name)
    shape = e.get("shape")
    if not isinstance(shape, list):
        _fail(path, 'missing "shape" array', name)
    numel = 1
    for i, d in enumerate(shape):
        if not _is_count(d):
            _fail(path, f"shape[{i}] is {json.dumps(d)}, not a non-negative integer", name)
        numel *= d
    offsets = e.get("data_offsets")
    if not (isinstance(offsets, list) and len(offsets) == 2 and all(_is_count(v) for v in offsets)):
        _fail(path, f'"data_offsets" must be two non-negative integers [begin, end], got {json.dumps(offsets)}', name)
    begin, end = offsets
    if begin > end:
        _fail(path, f"data_offsets [{begin}, {end}]: begin is after end", name)
    if end > buffer_size:
        _fail(path, f"data_offsets [{begin}, {end}]: end is beyond the data buffer of {buffer_size} bytes "
                    "(truncated file?)", name)
    itemsize = DTYPES[dtype][1]
    if end - begin != numel * itemsize:
        _fail(path, f"data_offsets [{begin}, {end}] hold {end - begin} bytes, but shape {shape} of {dtype} needs "
                    f"{numel * itemsize} ({numel} elements x {itemsize} bytes)", name)
    return Entry(name, dtype, tuple(shape), begin, end)


def _read_data(path, f, data_start, e):
    """The bytes of tensor `e`, read straight into memory the tensor will own."""
    buf = bytearray(e.nbytes)
    f.seek(data_start + e.begin)
    if f.readinto(buf) != e.nbytes:
        _fail(path, f"unexpected end of file at byte {data_start + e.begin} (was it truncated while loading?)", e.name)
    return buf


def _tensor(path, e, buf):
    torch_dtype, _, raw = DTYPES[e.dtype]
    flat = np.frombuffer(buf, dtype=raw) if buf else np.empty(0, dtype=raw)
    if e.dtype == "BOOL":
        bad = np.flatnonzero(flat > 1)
        if bad.size:
            _fail(path, f"BOOL element {bad[0]} is {flat[bad[0]]}, not 0 or 1", e.name)
    # numpy reads little-endian; torch needs the host's order (a copy only on big-endian hosts).
    x = torch.from_numpy(flat.astype(flat.dtype.newbyteorder("="), copy=False))
    if e.dtype == "BOOL":
        x = x.to(torch.bool)
    elif e.dtype == "BF16":
        x = x.view(torch.bfloat16)
    return x.reshape(e.shape)


def load(path):
    """Reads a safetensors file: (OrderedDict name -> torch.Tensor in the order
    of the tensors' bytes, metadata dict). The whole header is validated before
    any tensor is read; any problem raises ValueError("<path>: tensor 'x': <what
    is wrong>"). Each tensor owns its memory (the file is read once, no copy of it kept)."""
    path = os.fspath(path)
    out = collections.OrderedDict()
    with open(path, "rb") as f:
        entries, metadata, data_start = _read_header(path, f)
        for e in entries:
            out[e.name] = _tensor(path, e, _read_data(path, f, data_start, e))
    return out, metadata


def read_header(path):
    """(entries, metadata) of a file, validated like load() but reading no tensor
    data; each entry has name, dtype ("F32", ...), shape, begin, end, nbytes."""
    path = os.fspath(path)
    with open(path, "rb") as f:
        entries, metadata, _ = _read_header(path, f)
    return entries, metadata


# ---------------------------------------------------------------- comparing

def from_json(value):
    """A tensor from kiln's golden JSON: {"shape": [...], "dtype": "f32", "data": [...]},
    data row-major with NaN and infinities as "nan", "inf", "-inf"."""
    dtypes = {v: DTYPES[k][0] for k, v in KILN_NAMES.items()}
    if value.get("dtype") not in dtypes:
        raise ValueError(f"dtype {value.get('dtype')!r} is not one of {', '.join(dtypes)}")
    dtype = dtypes[value["dtype"]]
    data = [float(v) if isinstance(v, str) else v for v in value["data"]]
    if dtype.is_floating_point:
        # Every f32 / bf16 value written by kiln is an exact f64: no rounding here.
        x = torch.tensor(data, dtype=torch.float64).to(dtype)
    else:
        x = torch.tensor(data, dtype=dtype)
    return x.reshape(value["shape"])


def same_values(a, b):
    """Equal dtype, shape and every element; floats compare bit for bit (so -0.0
    differs from 0.0), except that any NaN equals any NaN."""
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    if not a.is_floating_point():
        return torch.equal(a, b)
    bits = {torch.float16: torch.int16, torch.bfloat16: torch.int16, torch.float32: torch.int32,
            torch.float64: torch.int64}[a.dtype]
    same = a.contiguous().view(bits) == b.contiguous().view(bits)
    return bool((same | (torch.isnan(a) & torch.isnan(b))).all())


def compare_files(path_a, path_b, with_metadata=False, out=None):
    """Prints every difference between two files' tensors (names, dtypes, shapes,
    bytes) and, with_metadata, their metadata; returns the number of differences.
    Holds one pair of tensors in memory at a time."""
    out = out or sys.stdout
    path_a, path_b = os.fspath(path_a), os.fspath(path_b)
    diffs = []
    with open(path_a, "rb") as fa, open(path_b, "rb") as fb:
        ea, ma, start_a = _read_header(path_a, fa)
        eb, mb, start_b = _read_header(path_b, fb)
        a = {e.name: e for e in ea}
        b = {e.name: e for e in eb}
        diffs += [f"'{n}': only in {path_a}" for n in a if n not in b]
        diffs += [f"'{n}': only in {path_b}" for n in b if n not in a]
        for n in (n for n in a if n in b):
            if a[n].dtype != b[n].dtype:
                diffs.append(f"'{n}': dtype {a[n].dtype} vs {b[n].dtype}")
            elif a[n].shape != b[n].shape:
                diffs.append(f"'{n}': shape {list(a[n].shape)} vs {list(b[n].shape)}")
            else:
                da, db = _read_data(path_a, fa, start_a, a[n]), _read_data(path_b, fb, start_b, b[n])
                if da != db:
                    first = next(i for i, (x, y) in enumerate(zip(da, db)) if x != y)
                    diffs.append(f"'{n}': bytes differ, first at element {first // DTYPES[a[n].dtype][1]}")
    if with_metadata and ma != mb:
        diffs.append(f"metadata {json.dumps(ma, sort_keys=True)} vs {json.dumps(mb, sort_keys=True)}")
    for d in diffs:
        print(d, file=out)
    if not diffs:
        print(f"identical: {len(a)} tensors", file=out)
    return len(diffs)


def compare_json(path, expected, out=None):
    """Compares a file with tensors written as JSON, {"tensors": [{"name": ...,
    "value": {"shape", "dtype", "data"}}, ...], "metadata": {...}} (metadata
    optional): the same names in the same order, dtypes, shapes, values and
    metadata. Prints every difference; returns their number."""
    out = out or sys.stdout
    tensors, metadata = load(path)
    want = [(t["name"], from_json(t["value"])) for t in expected["tensors"]]
    diffs = []
    if list(tensors) != [n for n, _ in want]:
        diffs.append(f"names {list(tensors)} vs expected {[n for n, _ in want]}")
    for name, w in want:
        if name not in tensors:
            continue
        got = tensors[name]
        if got.dtype != w.dtype or got.shape != w.shape:
            diffs.append(f"'{name}': {got.dtype} {list(got.shape)} vs expected {w.dtype} {list(w.shape)}")
        elif not same_values(got, w):
            diffs.append(f"'{name}': values {got.flatten().tolist()} vs expected {w.flatten().tolist()}")
    if "metadata" in expected and metadata != expected["metadata"]:
        diffs.append(f"metadata {metadata} vs expected {expected['metadata']}")
    for d in diffs:
        print(d, file=out)
    if not diffs:
        print(f"identical: {len(want)} tensors", file=out)
    return len(diffs)


# ---------------------------------------------------------------- command line

def state_dict_of(obj, source):
    """The tensors of what torch.load returned: a state_dict (any mapping of
    names to tensors) or an nn.Module."""
    if isinstance(obj, torch.nn.Module):
        return obj.state_dict()
    if isinstance(obj, dict):
        bad = [k for k, v in obj.items() if not isinstance(v, torch.Tensor)]
        if not bad:
            return obj
        raise ValueError(f"{source}: '{bad[0]}' is a {type(obj[bad[0]]).__name__}, not a tensor; pass a "
                         "state_dict (torch.save(model.state_dict(), ...)) or a module")
    raise ValueError(f"{source} holds a {type(obj).__name__}, not a state_dict or an nn.Module")


def _show(args):
    entries, metadata = read_header(args.file)
    total = sum(e.nbytes for e in entries)
    print(f"{args.file}: {len(entries)} tensors, {total} bytes of data")
    width = max((len(e.name) for e in entries), default=0)
    for e in entries:
        print(f"  {e.name:<{width}}  {e.dtype:<4}  {list(e.shape)}")
    if metadata:
        print("metadata:")
        for k, v in metadata.items():
            print(f"  {k}: {v}")
    return 0


def _export(args):
    obj = torch.load(args.model, map_location="cpu")
    state = state_dict_of(obj, args.model)
    metadata = {"format": "pt"}
    for kv in args.metadata:
        key, sep, value = kv.partition("=")
        if not sep:
            raise ValueError(f"--metadata {kv!r}: expected KEY=VALUE")
        metadata[key] = value
    save(args.out, state, metadata)
    print(f"wrote {args.out}: {len(state)} tensors")
    return 0


def _compare(args):
    return 1 if compare_files(args.a, args.b, args.with_metadata) else 0


def _compare_json(args):
    with open(args.expected) as f:
        expected = json.load(f)
    return 1 if compare_json(args.file, expected) else 0


def main(argv=None):
    p = argparse.ArgumentParser(prog="torch_safetensors.py", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    s = sub.add_parser("show", help="list a file's tensors and metadata")
    s.add_argument("file")
    s.set_defaults(run=_show)
    s = sub.add_parser("export", help="a torch.save'd state_dict or module to safetensors")
    s.add_argument("model")
    s.add_argument("out")
    s.add_argument("--metadata", action="append", default=[], metavar="KEY=VALUE",
                   help="extra __metadata__ entry (repeatable); \"format\": \"pt\" is always written")
    s.set_defaults(run=_export)
    s = sub.add_parser("compare", help="identical tensor names, dtypes, shapes and bytes? (exit 1 if not)")
    s.add_argument("a")
    s.add_argument("b")
    s.add_argument("--with-metadata", action="store_true", help="metadata must be equal too")
    s.set_defaults(run=_compare)
    s = sub.add_parser("compare-json", help="a file against tensors written as JSON (exit 1 on a difference)")
    s.add_argument("file")
    s.add_argument("expected")
    s.set_defaults(run=_compare_json)
    args = p.parse_args(argv)
    try:
        return args.run(args)
    except (ValueError, TypeError, KeyError, OSError, RuntimeError, pickle.UnpicklingError) as e:
        print(f"torch_safetensors.py {args.command}: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
