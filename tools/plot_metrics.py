#!/usr/bin/python3
"""Draw the paper's figures for a `skew train` run folder, as PNG files in that folder.

Reads RUNDIR/metrics_<optimizer>.json (docs/training.md) and writes:
  val_ppl.png       validation perplexity per evaluation step, log scale     (paper Figure 2a)
  memory.png        peak memory and analytic optimizer state per optimizer   (paper Figure 2b)
  balance_loss.png  balance loss per evaluation step, floor alpha dashed     (paper Figure 3)
  train_loss.png    training LM loss at the evaluation steps                 (paper Figure 4a)

Usage: /usr/bin/python3 tools/plot_metrics.py RUNDIR [--budget GIB]
Needs Debian's python3-matplotlib (and numpy); nothing else.
"""
import argparse
import glob
import json
import math
import os
import sys

plt = None  # matplotlib.pyplot, imported by main() after the arguments are checked

GIB = 2 ** 30


def load_runs(run_dir):
    paths = sorted(glob.glob(os.path.join(run_dir, "metrics_*.json")))
    if not paths:
        sys.exit(f"plot_metrics.py: {run_dir}: no metrics_*.json files (skew train writes them)")
    runs = []
    for p in paths:
        try:
            with open(p) as f:
                runs.append(json.load(f))
        except (OSError, ValueError) as e:
            sys.exit(f"plot_metrics.py: {p}: {e}")
    order = runs[0].get("config", {}).get("train", {}).get("optimizers", [])
    runs.sort(key=lambda r: order.index(r["optimizer"]) if r["optimizer"] in order else len(order))
    return runs


def save(fig, ax, out):
    """Legend, layout, write the PNG, free the figure."""
    ax.legend()
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    plt.close(fig)


def series(run, key):
    # null: not measured; "inf": overflowed (a diverged run); neither can be plotted.
    pts = [(h["step"], h.get(key)) for h in run["history"] if isinstance(h.get(key), (int, float))]
    return [p[0] for p in pts], [p[1] for p in pts]


def balance_floor(run):
    model = run.get("config", {}).get("model", {})
    alpha = model.get("balance_loss_coef")
    return None if alpha is None else alpha * len(model.get("moe_blocks", [1]))


def plot_val_ppl(runs, out):
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for r in runs:
        x, y = series(r, "val_ppl")
        ax.plot(x, y, marker="o", markersize=3, label=r["optimizer"])
    ax.set_yscale("log")
    ax.set_xlabel("step")
    ax.set_ylabel("validation perplexity (log scale)")
    ax.set_title("Validation perplexity")
    ax.grid(True, which="both", alpha=0.3)
    save(fig, ax, out)


def plot_memory(runs, out, budget):
    names = [r["optimizer"] for r in runs]
    peak = [r.get("peak_memory_bytes", 0) / GIB for r in runs]
    state = [r.get("paper_state_bytes", r.get("state_bytes", 0)) / GIB for r in runs]
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    xs = range(len(names))
    w = 0.38
    b1 = ax.bar([x - w / 2 for x in xs], peak, w, label="peak memory (measured)")
    b2 = ax.bar([x + w / 2 for x in xs], state, w, label="optimizer state (analytic)")
    for bars in (b1, b2):
        ax.bar_label(bars, fmt="%.2f", fontsize=7)
    if budget:
        ax.axhline(budget, color="gray", linestyle="--", linewidth=1, label=f"{budget:g} GiB")
    ax.set_xticks(list(xs))
    ax.set_xticklabels(names)
    ax.set_ylabel("GiB")
    ax.set_title("Peak memory and optimizer state")
    save(fig, ax, out)


def plot_balance(runs, out):
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for r in runs:
        x, y = series(r, "val_balance_loss")
        if not x:
            x, y = series(r, "balance_loss")
        ax.plot(x, y, marker="o", markersize=3, label=r["optimizer"])
    floor = balance_floor(runs[0])
    if floor is not None:
        ax.axhline(floor, color="black", linestyle="--", linewidth=1, label=f"uniform routing ({floor:g})")
    ax.set_xlabel("step")
    ax.set_ylabel("balance loss")
    ax.set_title("Load-balancing loss per evaluation step")
    ax.grid(True, alpha=0.3)
    save(fig, ax, out)


def plot_train_loss(runs, out):
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for r in runs:
        x, y = series(r, "train_lm_loss")
        ax.plot(x, y, marker="o", markersize=3, label=r["optimizer"])
    ax.set_xlabel("step")
    ax.set_ylabel("training LM loss (nats/token)")
    ax.set_title("Training loss at evaluation steps")
    ax.grid(True, alpha=0.3)
    save(fig, ax, out)


def gib_budget(text):
    """--budget: a finite number of GiB above 0 (argparse names the option when this refuses)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not a number of GiB (e.g. --budget 40)")
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"{text} GiB is not a memory budget; give a finite number above 0 (e.g. --budget 40)")
    return value


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run_dir", help="run folder with metrics_<optimizer>.json")
    ap.add_argument("--budget", type=gib_budget, default=None, help="draw a dashed memory-budget line at this many GiB (> 0)")
    args = ap.parse_args()
    runs = load_runs(args.run_dir)
    global plt
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as pyplot
    except ImportError as e:
        sys.exit(f"plot_metrics.py: cannot import matplotlib ({e}); install Debian's python3-matplotlib "
                 "(sudo apt-get install python3-matplotlib) and run it with /usr/bin/python3")
    plt = pyplot
    outs = {
        "val_ppl.png": lambda p: plot_val_ppl(runs, p),
        "memory.png": lambda p: plot_memory(runs, p, args.budget),
        "balance_loss.png": lambda p: plot_balance(runs, p),
        "train_loss.png": lambda p: plot_train_loss(runs, p),
    }
    for name, draw in outs.items():
        path = os.path.join(args.run_dir, name)
        tmp = os.path.join(args.run_dir, f".{name}.tmp-{os.getpid()}.png")
        draw(tmp)
        os.replace(tmp, path)
        print(path)


if __name__ == "__main__":
    main()
