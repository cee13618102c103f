#!/usr/bin/python3
"""Tests of tools/torch_safetensors.py: round trips, the exact byte layout,
every validation error of the reader, the command line, and the kiln-written
golden. Run by ctest (Interop.torch_safetensors_py) with Debian's python3;
exits 77 (ctest: skipped) when torch or numpy is missing, as on CI.

    /usr/bin/python3 tests/io/torch_safetensors_test.py
"""
import contextlib
import importlib
import io
import json
import os
import pathlib
import shutil
import struct
import sys
import tempfile
import unittest

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))

try:
    importlib.import_module("numpy")  # needed by torch_safetensors
    import torch
except ImportError as e:
    print(f"skipped: tools/torch_safetensors.py needs PyTorch and numpy ({e})")
    sys.exit(77)

import torch_safetensors as st  # noqa: E402
from goldens import io_interop  # noqa: E402

GOLDENS = ROOT / "tests" / "goldens"


def file_bytes(header, data=b""):
    """A file by hand: header (a dict, dumped compactly, or text/bytes as given) and data."""
    if isinstance(header, dict):
        header = json.dumps(header, separators=(",", ":"))
    if isinstance(header, str):
        header = header.encode("utf-8")
    return struct.pack("<Q", len(header)) + header + data


def run_cli(*argv):
    """(exit status, stdout, stderr) of the command line, in this process."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = st.main([str(a) for a in argv])
    return status, out.getvalue(), err.getvalue()


class Case(unittest.TestCase):
    def setUp(self):
        self.dir = pathlib.Path(tempfile.mkdtemp(prefix="torch_safetensors_test_"))

    def tearDown(self):
        shutil.rmtree(self.dir)

    def path(self, name):
        return str(self.dir / name)


class RoundTrip(Case):
    def tensors(self):
        g = torch.Generator().manual_seed(3)
        return {
            "f32": torch.randn(3, 4, generator=g),
            "f64": torch.randn(2, generator=g, dtype=torch.float64),
            "bf16": torch.randn(2, 3, generator=g).to(torch.bfloat16),
            "f16": torch.tensor([1.5, -65504.0, 2.0 ** -24, float("inf"), float("nan")], dtype=torch.float16),
            "i32": torch.tensor([-2 ** 31, 2 ** 31 - 1], dtype=torch.int32),
            "i64": torch.tensor([-2 ** 63, 2 ** 63 - 1], dtype=torch.int64),
            "u8": torch.tensor([0, 255], dtype=torch.uint8),
            "bool": torch.tensor([[True, False], [False, True]]),
            "scalar": torch.tensor(-0.0),
            "empty": torch.zeros(0, 5, dtype=torch.int64),
            "transposed": torch.arange(12.0).reshape(3, 4).t(),
            "param": torch.nn.Parameter(torch.ones(2)),  # requires grad: saved detached
        }

    def test_every_dtype_layout_and_metadata_round_trip(self):
        tensors = self.tensors()
        st.save(self.path("a.safetensors"), tensors, {"format": "pt", "note": "ünïcode"})
        back, meta = st.load(self.path("a.safetensors"))
        self.assertEqual(list(back), list(tensors))
        self.assertEqual(meta, {"format": "pt", "note": "ünïcode"})
        for name, x in tensors.items():
            self.assertTrue(st.same_values(back[name], x.detach()), name)
            self.assertTrue(back[name].is_contiguous() and not back[name].requires_grad, name)
        self.assertEqual(os.listdir(self.dir), ["a.safetensors"])  # no temporary left behind

    def test_exact_bytes(self):
        st.save(self.path("a.safetensors"), {"w": torch.tensor([[1.0, 2.0]]), "n": torch.tensor(7)}, {"k": "v"})
        header = b'{"__metadata__":{"k":"v"},"w":{"dtype":"F32","shape":[1,2],"data_offsets":[0,8]},' \
                 b'"n":{"dtype":"I64","shape":[],"data_offsets":[8,16]}}'
        header += b" " * (-(8 + len(header)) % 64)
        want = struct.pack("<Q", len(header)) + header + struct.pack("<2f", 1.0, 2.0) + struct.pack("<q", 7)
        self.assertEqual(pathlib.Path(self.path("a.safetensors")).read_bytes(), want)
        self.assertEqual((8 + len(header)) % 64, 0)

    def test_bad_arguments_touch_no_file(self):
        p = self.path("a.safetensors")
        st.save(p, {"x": torch.ones(2)})
        before = pathlib.Path(p).read_bytes()
        with self.assertRaisesRegex(TypeError, r"tensor 'c': dtype torch.complex64 has no safetensors name"):
            st.save(p, {"x": torch.zeros(1), "c": torch.zeros(2, dtype=torch.complex64)})
        with self.assertRaisesRegex(TypeError, r"tensor 'y': is list, not a torch.Tensor"):
            st.save(p, {"y": [1, 2]})
        with self.assertRaisesRegex(ValueError, r"tensor '__metadata__': the name is reserved"):
            st.save(p, {"__metadata__": torch.zeros(1)})
        with self.assertRaisesRegex(TypeError, r"metadata 'epoch': 3: safetensors metadata maps str to str"):
            st.save(p, {"x": torch.zeros(1)}, {"epoch": 3})
        self.assertEqual(pathlib.Path(p).read_bytes(), before)
        self.assertEqual(os.listdir(self.dir), ["a.safetensors"])


class Validation(Case):
    """Each kind of broken file raises ValueError("<path>: [tensor 'x': ]<problem>")."""

    def expect_error(self, blob, message):
        p = self.path("bad.safetensors")
        pathlib.Path(p).write_bytes(blob)
        with self.assertRaises(ValueError) as ctx:
            st.load(p)
        self.assertIn(f"{p}: {message}", str(ctx.exception))

    def entry(self, dtype="F32", shape=(2,), offsets=(0, 8)):
        return {"dtype": dtype, "shape": list(shape), "data_offsets": list(offsets)}

    def test_truncated_files(self):
        good = st.to_bytes({"a": torch.ones(2), "b": torch.ones(3)})
        self.expect_error(good[:5], "file is 5 bytes, shorter than the 8-byte header length")
        n = struct.unpack("<Q", good[:8])[0]
        self.expect_error(good[:20], f"header length {n} exceeds the 12 bytes after the length field")
        self.expect_error(good[:-4], "tensor 'b': data_offsets [8, 20]: end is beyond the data buffer of 16 bytes")
        self.expect_error(struct.pack("<Q", (100 << 20) + 1) + b"{}",
                          f"header length {(100 << 20) + 1} exceeds the limit of {100 << 20} bytes")

    def test_bad_json(self):
        self.expect_error(file_bytes('{"a": {"dtype": "F32",'), "header is not valid JSON: ")
        self.expect_error(file_bytes(b'{"\xff": 1}'), "header is not UTF-8")
        self.expect_error(file_bytes("[1, 2]"), "header is a JSON list, not an object")
        self.expect_error(file_bytes('{"a": %s, "a": %s}' % (json.dumps(self.entry()), json.dumps(self.entry())),
                                     b"\0" * 8), "duplicate key 'a' in the header")

    def test_bad_entries_name_the_tensor(self):
        data = b"\0" * 8
        self.expect_error(file_bytes({"a": [1]}, data), "tensor 'a': entry is list, not an object")
        self.expect_error(file_bytes({"a": {"shape": [2], "data_offsets": [0, 8]}}, data),
                          "tensor 'a': missing \"dtype\" string")
        self.expect_error(file_bytes({"a": self.entry(dtype="C64")}, data), "tensor 'a': unsupported dtype 'C64'")
        self.expect_error(file_bytes({"a": self.entry(shape=(-2,))}, data),
                          "tensor 'a': shape[0] is -2, not a non-negative integer")
        self.expect_error(file_bytes({"a": self.entry(shape=(True,))}, data),
                          "tensor 'a': shape[0] is true, not a non-negative integer")
        self.expect_error(file_bytes({"a": {"dtype": "F32", "shape": 2, "data_offsets": [0, 8]}}, data),
                          "tensor 'a': missing \"shape\" array")
        self.expect_error(file_bytes({"a": self.entry(offsets=(0,))}, data),
                          "tensor 'a': \"data_offsets\" must be two non-negative integers [begin, end], got [0]")
        self.expect_error(file_bytes({"a": self.entry(shape=(0,), offsets=(8, 0))}, data),
                          "tensor 'a': data_offsets [8, 0]: begin is after end")
        self.expect_error(file_bytes({"a": self.entry(shape=(2, 3))}, data),
                          "tensor 'a': data_offsets [0, 8] hold 8 bytes, but shape [2, 3] of F32 needs 24 "
                          "(6 elements x 4 bytes)")

    def test_ranges_must_tile_the_buffer(self):
        two = {"a": self.entry(offsets=(0, 8)), "b": self.entry(offsets=(4, 12))}
        self.expect_error(file_bytes(two, b"\0" * 12), "tensor 'b': bytes [4, 12) overlap tensor 'a' [0, 8)")
        gap = {"a": self.entry(offsets=(4, 12))}
        self.expect_error(file_bytes(gap, b"\0" * 12),
                          "tensor 'a': bytes [0, 4) of the data buffer before it belong to no tensor")
        self.expect_error(file_bytes({"a": self.entry()}, b"\0" * 10),
                          "bytes [8, 10) at the end of the data buffer belong to no tensor")

    def test_bad_metadata_and_bool_bytes(self):
        self.expect_error(file_bytes({"__metadata__": ["x"]}), "__metadata__ is list, not an object of strings")
        self.expect_error(file_bytes({"__metadata__": {"epoch": 3}}), "__metadata__ 'epoch' is 3, not a string")
        self.expect_error(file_bytes({"m": self.entry(dtype="BOOL", shape=(3,), offsets=(0, 3))}, b"\1\2\0"),
                          "tensor 'm': BOOL element 1 is 2, not 0 or 1")

    def test_empty_tensors_share_an_offset(self):
        blob = file_bytes({"e1": self.entry(shape=(0,), offsets=(0, 0)), "x": self.entry(),
                           "e2": self.entry(shape=(0, 3), offsets=(8, 8))}, struct.pack("<2f", 1, 2))
        pathlib.Path(self.path("ok.safetensors")).write_bytes(blob)
        back, meta = st.load(self.path("ok.safetensors"))
        self.assertEqual(list(back), ["e1", "x", "e2"])
        self.assertEqual(back["x"].tolist(), [1.0, 2.0])
        self.assertEqual(list(back["e2"].shape), [0, 3])
        self.assertEqual(meta, {})


class CommandLine(Case):
    def test_show(self):
        st.save(self.path("a.safetensors"), {"fc.weight": torch.zeros(3, 2), "steps": torch.tensor(4)},
                {"format": "pt"})
        status, out, _ = run_cli("show", self.path("a.safetensors"))
        self.assertEqual(status, 0)
        self.assertIn("2 tensors, 32 bytes of data", out)
        self.assertIn("  fc.weight  F32   [3, 2]\n", out)
        self.assertIn("  steps      I64   []\n", out)
        self.assertIn("metadata:\n  format: pt\n", out)

    def test_compare(self):
        a, b = self.path("a.safetensors"), self.path("b.safetensors")
        tensors = {"w": torch.arange(6.0).reshape(2, 3), "n": torch.tensor([1, 2])}
        st.save(a, tensors, {"epoch": "1"})
        st.save(b, dict(reversed(list(tensors.items()))), {"epoch": "2"})  # order and metadata aside
        self.assertEqual(run_cli("compare", a, b)[:2], (0, "identical: 2 tensors\n"))
        status, out, _ = run_cli("compare", a, b, "--with-metadata")
        self.assertEqual(status, 1)
        self.assertIn('metadata {"epoch": "1"} vs {"epoch": "2"}', out)

        changed = dict(tensors, w=tensors["w"].clone())
        changed["w"][1, 1] = 4.5
        st.save(b, changed)
        self.assertEqual(run_cli("compare", a, b)[:2], (1, "'w': bytes differ, first at element 4\n"))
        st.save(b, dict(tensors, w=tensors["w"].double()))
        self.assertEqual(run_cli("compare", a, b)[:2], (1, "'w': dtype F32 vs F64\n"))
        st.save(b, dict(tensors, w=tensors["w"].reshape(3, 2)))
        self.assertEqual(run_cli("compare", a, b)[:2], (1, "'w': shape [2, 3] vs [3, 2]\n"))
        st.save(b, {"w": tensors["w"], "m": tensors["n"]})
        status, out, _ = run_cli("compare", a, b)
        self.assertEqual(status, 1)
        self.assertEqual(out, f"'n': only in {a}\n'm': only in {b}\n")

        pathlib.Path(b).write_bytes(pathlib.Path(a).read_bytes()[:-1])
        status, _, err = run_cli("compare", a, b)
        self.assertEqual(status, 2)
        self.assertIn(f"torch_safetensors.py compare: error: {b}: tensor 'n': data_offsets [24, 40]: end is beyond",
                      err)

    def test_compare_json(self):
        p, j = self.path("a.safetensors"), self.path("a.json")
        st.save(p, {"x": torch.tensor([0.5, float("nan"), -0.0]), "b": torch.tensor([True])}, {"k": "v"})
        expected = {"tensors": [{"name": "x", "value": {"shape": [3], "dtype": "f32", "data": [0.5, "nan", -0.0]}},
                                {"name": "b", "value": {"shape": [1], "dtype": "bool", "data": [True]}}],
                    "metadata": {"k": "v"}}
        pathlib.Path(j).write_text(json.dumps(expected))
        self.assertEqual(run_cli("compare-json", p, j)[:2], (0, "identical: 2 tensors\n"))
        # Bit for bit: 0.0 is not -0.0.
        expected["tensors"][0]["value"]["data"][2] = 0.0
        pathlib.Path(j).write_text(json.dumps(expected))
        status, out, _ = run_cli("compare-json", p, j)
        self.assertEqual(status, 1)
        self.assertTrue(out.startswith("'x': values [0.5, nan, -0.0] vs expected [0.5, nan, 0.0]"), out)
        expected["tensors"][0]["value"]["data"][2] = -0.0
        expected["tensors"][1]["value"]["dtype"] = "u8"
        expected["metadata"] = {}
        pathlib.Path(j).write_text(json.dumps(expected))
        status, out, _ = run_cli("compare-json", p, j)
        self.assertEqual(status, 1)
        self.assertIn("'b': torch.bool [1] vs expected torch.uint8 [1]", out)
        self.assertIn("metadata {'k': 'v'} vs expected {}", out)

    def test_export(self):
        torch.manual_seed(0)
        net = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.BatchNorm1d(2))
        for what, obj in (("state_dict", net.state_dict()), ("module", net)):
            pt, out = self.path(f"{what}.pt"), self.path(f"{what}.safetensors")
            torch.save(obj, pt)
            status, stdout, err = run_cli("export", pt, out, "--metadata", "source=test", "--metadata", "a=b=c")
            self.assertEqual((status, err), (0, ""), what)
            self.assertEqual(stdout, f"wrote {out}: 7 tensors\n")
            back, meta = st.load(out)
            self.assertEqual(meta, {"format": "pt", "source": "test", "a": "b=c"})
            self.assertEqual(list(back), list(net.state_dict()))
            self.assertTrue(all(torch.equal(back[k], v) for k, v in net.state_dict().items()), what)

        torch.save({"model": net.state_dict(), "epoch": 3}, self.path("ckpt.pt"))
        status, _, err = run_cli("export", self.path("ckpt.pt"), self.path("x.safetensors"))
        self.assertEqual(status, 2)
        self.assertIn("'model' is a OrderedDict, not a tensor; pass a state_dict", err)
        self.assertEqual(run_cli("export", self.path("missing.pt"), self.path("x.safetensors"))[0], 2)
        status, _, err = run_cli("export", self.path("state_dict.pt"), self.path("x.safetensors"), "--metadata", "k")
        self.assertEqual(status, 2)
        self.assertIn("--metadata 'k': expected KEY=VALUE", err)
        self.assertFalse(os.path.exists(self.path("x.safetensors")))


class KilnWritten(Case):
    """tests/goldens/io_kiln_written.safetensors, written by kiln, holds what
    tools/goldens/io_interop.py expects, and the check notices one changed byte."""

    def test_golden_reads_back_exactly(self):
        golden = GOLDENS / "io_kiln_written.safetensors"
        io_interop.check_kiln_written(golden)
        blob = bytearray(golden.read_bytes())
        blob[-1] ^= 1  # the last element of 'expanded'
        pathlib.Path(self.path("changed.safetensors")).write_bytes(bytes(blob))
        with self.assertRaisesRegex(AssertionError, "'expanded'"):
            io_interop.check_kiln_written(self.path("changed.safetensors"))


if __name__ == "__main__":
    unittest.main()
