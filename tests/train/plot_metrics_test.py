#!/usr/bin/python3
"""Tests of tools/plot_metrics.py: what it reads from a CsvLogger file (epoch
means, validation points at the right steps), the PNG it writes, and its
errors (exit status 2 with a message). Exits 77 (CTest: skipped) without
matplotlib."""

import contextlib
import importlib.util
import io
import os
import struct
import subprocess
import sys
import tempfile
import unittest

try:
    import matplotlib  # noqa: F401
except ImportError:
    print("skipped: no matplotlib (Debian: python3-matplotlib)")
    sys.exit(77)

TOOL = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools", "plot_metrics.py")
spec = importlib.util.spec_from_file_location("plot_metrics", TOOL)
plot_metrics = importlib.util.module_from_spec(spec)
spec.loader.exec_module(plot_metrics)

HEADER = "epoch,step,global_step,loss,accuracy,lr,elapsed_s,step_ms,samples_per_s"
# Two steps an epoch; epoch e's validation shows from its own last row on (CsvLogger's log_keys).
ROWS = [
    "1,1,1,2.0,0.25,0.1,0.01,0.5,4000",
    "1,2,2,1.0,0.5,0.1,0.02,0.5,4000",
    "2,1,3,0.8,0.75,0.1,0.03,0.5,4000",
    "2,2,4,0.6,1,0.1,0.04,0.5,4000",
    "3,1,5,0.5,1,0.1,0.05,0.5,4000",
]
VAL = [",,", ",0.9,0.6", ",0.9,0.6", ",0.7,0.8", ",0.7,0.8"]


def png_size(path):
    with open(path, "rb") as f:
        head = f.read(24)
    assert head[:8] == b"\x89PNG\r\n\x1a\n", head[:8]
    return struct.unpack(">II", head[16:24])


class PlotMetricsTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()

    def tearDown(self):
        self.dir.cleanup()

    def write(self, name, text):
        path = os.path.join(self.dir.name, name)
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
        return path

    def run_tool(self, *args):
        return subprocess.run([sys.executable, TOOL, *args], capture_output=True, text=True, timeout=120)

    def with_val(self):
        return self.write("metrics.csv", HEADER + ",val/loss,val/accuracy\n" +
                          "".join(r + v + "\n" for r, v in zip(ROWS, VAL)))

    def test_reads_epoch_means_and_validation_points(self):
        m = plot_metrics.read_metrics(self.with_val())
        self.assertEqual(m["x"], [1, 2, 3, 4, 5])
        self.assertEqual(m["x_label"], "global step")
        self.assertEqual(m["columns"]["loss"], [2.0, 1.0, 0.8, 0.6, 0.5])
        self.assertEqual(m["epochs"], [(1.0, 2, 1.5, 0.375), (2.0, 4, 0.7, 0.875), (3.0, 5, 0.5, 1.0)])
        # Epoch 1's validation first shows on row 2, the step it was computed at.
        self.assertEqual(m["val"], {"val/loss": [(2, 0.9), (4, 0.7)], "val/accuracy": [(2, 0.6), (4, 0.8)]})

    def test_draws_two_panels_into_a_png(self):
        out = os.path.join(self.dir.name, "curves.png")
        r = self.run_tool(self.with_val(), "-o", out, "--title", "tiny")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout, f"wrote {out} (5 steps, 3 epochs)\n")
        self.assertEqual(png_size(out), (1200, 400))

    def test_loss_only_draws_one_panel_next_to_the_csv(self):
        path = self.write("loss.csv", "global_step,loss\n1,3\n2,2.5\n3,nan\n4,2\n")
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):  # in this process: one matplotlib start-up fewer
            self.assertEqual(plot_metrics.main([path]), 0)
        out = os.path.join(self.dir.name, "loss.png")
        self.assertEqual(printed.getvalue(), f"wrote {out} (4 steps, 0 epochs)\n")
        self.assertEqual(png_size(out), (600, 400))

    def test_a_log_appended_by_a_new_run_is_drawn_by_row(self):
        path = self.write("two_runs.csv", "epoch,global_step,loss\n1,1,3\n1,2,2\n1,1,3.5\n1,2,2.5\n")
        m = plot_metrics.read_metrics(path)
        self.assertEqual(m["x"], [1, 2, 3, 4])
        self.assertEqual(m["x_label"], "row")

    def test_errors_exit_2_with_a_message(self):
        missing = os.path.join(self.dir.name, "nope.csv")
        cases = [
            ([missing], f"plot_metrics.py: error: {missing}: no such file\n"),
            ([self.write("a.csv", "epoch,step,acc\n1,1,0.5\n")],
             f"plot_metrics.py: error: {self.dir.name}/a.csv: no 'loss' column (the header is: epoch,step,acc)\n"),
            ([self.write("b.csv", "")],
             f"plot_metrics.py: error: {self.dir.name}/b.csv: no 'loss' column (the header is: (empty file))\n"),
            ([self.write("c.csv", HEADER + "\n")], f"plot_metrics.py: error: {self.dir.name}/c.csv: no rows after the header\n"),
            ([self.write("d.csv", "global_step,loss\n1,0.5\n2,abc\n")],
             f"plot_metrics.py: error: {self.dir.name}/d.csv:3: column 'loss' holds 'abc', not a number\n"),
            ([self.with_val(), "-o", os.path.join(self.dir.name, "no", "x.png")],
             f"plot_metrics.py: error: {self.dir.name}/no/x.png: the folder '{self.dir.name}/no' does not exist\n"),
        ]
        for args, message in cases:
            with self.subTest(args=args):
                r = self.run_tool(*args)
                self.assertEqual(r.returncode, 2)
                self.assertEqual(r.stderr, message)
                self.assertEqual(r.stdout, "")


if __name__ == "__main__":
    unittest.main()
