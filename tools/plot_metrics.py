#!/usr/bin/python3
"""Training curves from a kiln CsvLogger file, drawn into a PNG.

    /usr/bin/python3 tools/plot_metrics.py run/metrics.csv -o run/curves.png

The CSV has one row per optimizer step (train::CsvLogger; docs/callbacks.md):
`epoch,step,global_step,loss,accuracy,lr,...` plus opt-in columns such as
`val/loss`, `val/accuracy`. Only `loss` is required; every other column is
used when present:

- left panel, loss: each step's loss (thin), the mean of each epoch's step
  losses (a line through the epochs' last steps) and every `val/...` column
  that is not an accuracy;
- right panel, accuracy (when the log has any): the same for `accuracy` and
  the `val/...accuracy` columns.

A `val/` cell holds the latest value in trainer.logs() when the row was
written; CsvLogger writes an epoch's last row after that epoch's validation,
so each new value is drawn at the step of the row it first shows on.

Exit status: 0 done; 2 bad input (no file, no `loss` column, no rows, a
value that is not a number); 3 matplotlib missing (Debian: python3-matplotlib).
Uses the Agg backend: no display needed.
"""

import argparse
import csv
import math
import os
import sys


class InputError(Exception):
    """A problem with the CSV file: reported as `plot_metrics.py: error: ...`, exit status 2."""


def _number(text, path, line, column):
    """A cell as a float; None when empty."""
    if text is None or text == "":
        return None
    try:
        return float(text)
    except ValueError:
        raise InputError(f"{path}:{line}: column '{column}' holds '{text}', not a number") from None


def read_metrics(path):
    """Reads the CSV into plain lists.

    Returns a dict with
      x:        the x of each row: global_step when it only increases, else the row number (1, 2, ...);
      x_label:  "global step" or "row";
      columns:  {name: [float or None per row]} for loss, accuracy and every val/ column;
      epochs:   [(epoch, last x, mean loss, mean accuracy or None)] in file order (when there is an epoch column);
      val:      {name: [(x, value)]}: each new value of a val/ column, at the x of the row it first shows on.
    """
    if not os.path.exists(path):
        raise InputError(f"{path}: no such file")
    if os.path.isdir(path):
        raise InputError(f"{path}: is a folder, not a CSV file")
    with open(path, newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        header = reader.fieldnames or []
        if "loss" not in header:
            shown = ",".join(header) if header else "(empty file)"
            raise InputError(f"{path}: no 'loss' column (the header is: {shown})")
        wanted = ["loss"] + [c for c in header if c == "accuracy" or c.startswith("val/")]
        columns = {c: [] for c in wanted}
        steps, epochs = [], []
        for line, row in enumerate(reader, start=2):
            for c in wanted:
                columns[c].append(_number(row.get(c), path, line, c))
            if "global_step" in row:
                steps.append(_number(row["global_step"], path, line, "global_step"))
            if "epoch" in row:
                epochs.append(_number(row["epoch"], path, line, "epoch"))
    n = len(columns["loss"])
    if n == 0:
        raise InputError(f"{path}: no rows after the header")

    increasing = len(steps) == n and all(s is not None for s in steps) and all(
        b > a for a, b in zip(steps, steps[1:]))
    x = [int(s) for s in steps] if increasing else list(range(1, n + 1))

    # Per-epoch means of the steps' values, drawn at each epoch's last row.
    per_epoch = []
    if len(epochs) == n:
        start = 0
        for i in range(1, n + 1):
            if i == n or epochs[i] != epochs[start]:
                losses = [v for v in columns["loss"][start:i] if v is not None and not math.isnan(v)]
                accs = [v for v in columns.get("accuracy", [])[start:i] if v is not None]
                per_epoch.append((epochs[start], x[i - 1], sum(losses) / len(losses) if losses else math.nan,
                                  sum(accs) / len(accs) if accs else None))
                start = i

    # Each new value of a val/ column belongs to the step of the row it first shows on.
    val = {}
    for c in columns:
        if not c.startswith("val/"):
            continue
        points, last = [], None
        for i, v in enumerate(columns[c]):
            if v is not None and v != last and not (last is not None and math.isnan(v) and math.isnan(last)):
                points.append((x[i], v))
            last = v if v is not None else last
        val[c] = points

    return {"x": x, "x_label": "global step" if increasing else "row", "columns": columns, "epochs": per_epoch,
            "val": val}


def is_accuracy(name):
    return "acc" in name.rsplit("/", 1)[-1]


def plot(metrics, out_path, title=None):
    """Draws the loss panel (and the accuracy panel when there is accuracy) into out_path (PNG)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    x, cols, epochs, val = metrics["x"], metrics["columns"], metrics["epochs"], metrics["val"]
    has_accuracy = any(v is not None for v in cols.get("accuracy", [])) or any(
        is_accuracy(c) and points for c, points in val.items())
    panels = 2 if has_accuracy else 1
    fig, axes = plt.subplots(1, panels, figsize=(6 * panels, 4), dpi=100, squeeze=False)
    axes = axes[0]

    def draw(ax, name, per_epoch_index, val_names):
        steps = [(xi, v) for xi, v in zip(x, cols.get(name, [])) if v is not None]
        if steps:
            ax.plot([p[0] for p in steps], [p[1] for p in steps], color="tab:blue", alpha=0.35, linewidth=0.8,
                    label=f"{name} (step)")
        means = [(e[1], e[per_epoch_index]) for e in epochs if e[per_epoch_index] is not None]
        if means:
            ax.plot([m[0] for m in means], [m[1] for m in means], color="tab:blue", marker="o", markersize=3,
                    linewidth=1.5, label=f"{name} (epoch mean)")
        colors = iter(["tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown"])
        for c in val_names:
            points = val[c]
            if points:
                ax.plot([p[0] for p in points], [p[1] for p in points], color=next(colors, "tab:gray"), marker="s",
                        markersize=4, linewidth=1.5, label=c)
        ax.set_xlabel(metrics["x_label"])
        ax.set_ylabel(name)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)

    draw(axes[0], "loss", 2, [c for c in val if not is_accuracy(c)])
    if has_accuracy:
        draw(axes[1], "accuracy", 3, [c for c in val if is_accuracy(c)])
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(out_path, format="png")
    plt.close(fig)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="plot_metrics.py",
                                     description="Draw loss and accuracy curves from a kiln CsvLogger file into a PNG.")
    parser.add_argument("csv", help="the CsvLogger file, e.g. run/metrics.csv")
    parser.add_argument("-o", "--output", help="the PNG to write (default: the CSV's path with .png)")
    parser.add_argument("--title", help="a title over the panels")
    args = parser.parse_args(argv)
    out_path = args.output or os.path.splitext(args.csv)[0] + ".png"

    try:
        metrics = read_metrics(args.csv)
    except InputError as e:
        print(f"plot_metrics.py: error: {e}", file=sys.stderr)
        return 2
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        print("plot_metrics.py: error: needs matplotlib (Debian: apt install python3-matplotlib)", file=sys.stderr)
        return 3
    folder = os.path.dirname(out_path)
    if folder and not os.path.isdir(folder):
        print(f"plot_metrics.py: error: {out_path}: the folder '{folder}' does not exist", file=sys.stderr)
        return 2
    plot(metrics, out_path, args.title)
    print(f"wrote {out_path} ({len(metrics['x'])} steps, {len(metrics['epochs'])} epochs)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
