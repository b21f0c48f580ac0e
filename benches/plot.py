"""Figures for BENCH.md, drawn from the JSON the benchmark harnesses print with ``--json``.

    python benches/plot.py [--results benches/results] [--out docs/bench]

Reads, from the results directory (``cargo xtask bench --save`` writes them there):

- ``overhead.json``: ``compare.py overhead first_batch --json``   -> ``overhead.png``
- ``images.json``: ``images.py --json``                           -> ``images.png``
- ``memory.json``: ``memory.py --json``                           -> ``memory.png``
- ``http.json``: ``http_loaders.py --json``                       -> ``http.png``
- ``scaling*.json``: ``scaling.py --json``, one file per interpreter -> ``scaling.png``
- ``tar.json``: ``tar_shards.py --json``                          -> ``tar.png``

and writes one PNG per figure whose JSON is there. A figure whose JSON is missing is skipped, and
said so. Every value drawn comes from those files; the footer of each figure names its file, the
interpreter, the date and the load average the harness recorded. Needs matplotlib
(benches/requirements.txt).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
from matplotlib.figure import Figure

ROOT = Path(__file__).resolve().parent.parent
OURS = "#1f77b4"
TORCH = "#d62728"
OTHER = "#7f7f7f"
ALT = "#2ca02c"
TIMES = "\N{MULTIPLICATION SIGN}"

Data = dict[str, Any]


def load(path: Path) -> Data:
    with path.open() as f:
        data: Data = json.load(f)
    return data


def provenance(name: str, *facts: object) -> str:
    shown = [str(f) for f in facts if f not in (None, "")]
    return " · ".join([f"benches/results/{name}", *shown])


def finish(fig: Figure, footer: str) -> Figure:
    fig.text(0.01, 0.01, footer, fontsize=7, color=OTHER, ha="left", va="bottom")
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    return fig


def millions(value: float) -> str:
    return f"{value / 1e6:.2f} M" if value >= 1e6 else f"{value / 1e3:,.0f} k"


def label_bars(ax: Any, bars: Any, texts: list[str]) -> None:
    for bar, text in zip(bars, texts, strict=True):
        ax.annotate(
            text,
            (bar.get_x() + bar.get_width() / 2, bar.get_height()),
            xytext=(0, 2),
            textcoords="offset points",
            ha="center",
            va="bottom",
            fontsize=8,
        )


def color_of(loader: str) -> str:
    ours = ("dataloader-rs", "HttpDataset", "TarDataset")
    if loader.startswith(ours) or loader in ("PyAsyncDataset+aiohttp", "PyDataset+urllib"):
        return OURS
    if loader.startswith(("torch", "webdataset")):
        return TORCH
    return OTHER


# ----- the figures -----


def overhead(data: Data) -> Figure:
    """Items/s per loader and worker count (trivial items), and the first batch of a fresh loader."""
    rows = data["rows"]
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4), gridspec_kw={"width_ratios": [3, 2]})

    epoch = [r for r in rows if r["workload"] == "overhead"]
    names = [f"{r['loader']}\n{r['workers']} workers" if r["loader"] != "bare loop" else "bare loop" for r in epoch]
    bars = left.bar(names, [r["items_per_s"] / 1e6 for r in epoch], color=[color_of(r["loader"]) for r in epoch])
    label_bars(left, bars, [millions(r["items_per_s"]) for r in epoch])
    left.set_ylabel("million items per second (higher is better)")
    left.set_title("Loader overhead: an epoch of trivial items")
    left.tick_params(axis="x", labelsize=8)

    first = [r for r in rows if r["workload"] == "first_batch"]
    if first:
        ms = [r["seconds"] * 1000 for r in first]
        bars = right.bar([r["loader"] for r in first], ms, color=[color_of(r["loader"]) for r in first])
        label_bars(right, bars, [f"{v:.2f} ms" if v < 10 else f"{v:.0f} ms" for v in ms])
        right.set_yscale("log")
        right.set_ylabel("ms, log scale (lower is better)")
        right.set_title(f"First batch of a fresh loader, {first[0]['workers']} workers")
    else:
        right.set_axis_off()

    m = data["machine"]
    return finish(
        fig,
        provenance(
            "overhead.json",
            f"Python {m.get('python')}",
            f"torch {m.get('torch')}",
            m.get("date"),
            f"load {m['load_average']:.2f}" if "load_average" in m else None,
        ),
    )


def images(data: Data) -> Figure:
    """Tiles/s of the loaders against torch, and of one core against Pillow (+ NumPy)."""
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.5), gridspec_kw={"width_ratios": [3, 2]})
    rows = data["rows"]
    short = [r["loader"].split(":")[0] + ":\n" + r["loader"].split(":", 1)[-1].strip() for r in rows]
    short = [s.replace(" + ", "\n+ ", 1) for s in short]
    x = range(len(rows))
    best = left.bar(x, [r["best_items_per_s"] for r in rows], color=[color_of(r["loader"]) for r in rows])
    left.scatter(x, [r["median_items_per_s"] for r in rows], color="black", marker="_", s=400, label="median", zorder=3)
    label_bars(left, best, [f"{r['best_items_per_s']:,.0f}/s\n{r['vs_torch']:.1f}{TIMES} torch" for r in rows])
    left.set_xticks(list(x), short, fontsize=7)
    left.set_ylabel("tiles per second, best epoch (higher is better)")
    w = data["workload"]
    left.set_title(
        f"{w['tiles']} PNG tiles {w['side']}{TIMES}{w['side']}, batches of {w['batch_size']}, {w['workers']} workers"
    )
    left.legend(loc="upper right", fontsize=8)
    left.margins(y=0.2)

    steps = data["one_core"]
    width = 0.38
    pos = range(len(steps))
    ours = right.bar(
        [p - width / 2 for p in pos], [s["ours_items_per_s"] for s in steps], width, color=OURS, label="dataloader-rs"
    )
    theirs = right.bar(
        [p + width / 2 for p in pos],
        [s["baseline_items_per_s"] for s in steps],
        width,
        color=OTHER,
        label="Pillow (+ NumPy)",
    )
    label_bars(
        right,
        ours,
        [
            f"{s['ours_items_per_s']:,.0f}\n{s['ours_items_per_s'] / s['baseline_items_per_s']:.1f}{TIMES}"
            for s in steps
        ],
    )
    label_bars(right, theirs, [f"{s['baseline_items_per_s']:,.0f}" for s in steps])
    right.set_xticks(list(pos), [s["step"].replace(" to ", "\nto ", 1) for s in steps], fontsize=8)
    right.set_ylabel("tiles per second on one thread")
    right.set_title("One core: decoding")
    right.legend(fontsize=8)
    right.margins(y=0.15)

    m = data["machine"]
    return finish(
        fig,
        provenance(
            "images.json",
            f"Python {m.get('python')}",
            f"torch {m.get('torch')}",
            f"Pillow {m.get('pillow')}",
            m.get("date"),
            f"load {m['load_average_before']:.2f} → {m['load_average_after']:.2f}",
        ),
    )


def memory(data: Data) -> Figure:
    """RSS of the process tree before iterating and at its peak, per loader."""
    rows = data["rows"]
    fig, ax = plt.subplots(figsize=(7, 4))
    width = 0.38
    pos = range(len(rows))
    before = ax.bar([p - width / 2 for p in pos], [r["before_mb"] for r in rows], width, color=OTHER)
    peak = ax.bar(
        [p + width / 2 for p in pos],
        [r["peak_mb"] for r in rows],
        width,
        color=[color_of(r["loader"]) for r in rows],
    )
    label_bars(ax, before, [f"before\n{r['before_mb']:,.0f} MB" for r in rows])
    label_bars(ax, peak, [f"peak\n{r['peak_mb']:,.0f} MB\n{r['ratio']:.2f}{TIMES}" for r in rows])
    ax.set_xticks(list(pos), [r["loader"] for r in rows])
    ax.set_ylabel("RSS of the process tree, MB (lower is better)")
    ax.set_title(f"Memory: a dataset of {rows[0]['items']:,} Python strings")
    ax.margins(y=0.2)
    m = data["machine"]
    return finish(
        fig, provenance("memory.json", f"Python {m.get('python')}", m.get("date"), f"load {m['load_average']:.2f}")
    )


def http(data: Data) -> Figure:
    """Seconds per epoch of each contender against the bound that latency sets."""
    meta, results = data["meta"], data["results"]
    names = list(results)
    fig, ax = plt.subplots(figsize=(8, 0.6 * len(names) + 1.8))
    seconds = [results[n]["seconds"] for n in names]
    bars = ax.barh(names, seconds, color=[color_of(n) for n in names])
    for bar, n in zip(bars, names, strict=True):
        r = results[n]
        ax.annotate(
            f"{r['seconds']:.2f} s ({r['ratio_to_bound']:.1f}{TIMES} bound), "
            f"first batch {r['first_batch'] * 1000:.0f} ms",
            (bar.get_width(), bar.get_y() + bar.get_height() / 2),
            xytext=(3, 0),
            textcoords="offset points",
            va="center",
            fontsize=8,
        )
    bound = meta["bound_s"]
    ax.axvline(bound, color="black", linestyle="--", linewidth=1)
    ax.text(bound, 1.01, f"latency bound {bound:.2f} s", transform=ax.get_xaxis_transform(), ha="center", fontsize=8)
    ax.invert_yaxis()
    ax.set_xscale("log")
    # Room on the right for the labels.
    ax.set_xlim(min(*seconds, bound) / 1.5, max(*seconds, bound) * 15)
    ax.set_xlabel("seconds per epoch, log scale (lower is better)")
    ax.set_title(
        f"HTTP: {meta['items']:,} items of {meta['item_bytes'] // 1024} KiB, {meta['delay_s'] * 1000:.0f} ms latency, "
        f"batches of {meta['batch_size']}",
        pad=16,
    )
    start, end = meta.get("loadavg_start"), meta.get("loadavg")
    load = f"load {start[0]:.2f} → {end[0]:.2f}" if start and end else f"load {end[0]:.2f}" if end else None
    return finish(
        fig, provenance("http.json", f"Python {meta.get('python')}", f"{meta.get('epochs')} epochs (median)", load)
    )


def scaling(runs: list[tuple[str, Data]]) -> Figure:
    """Speed-up of 2 workers over 0, per workload, loader and interpreter."""
    series: dict[str, dict[str, float]] = {}
    footers = []
    for name, data in runs:
        m = data["machine"]
        interp = m["python"] + ("" if m.get("gil_enabled", True) else "t")
        footers.append(f"{name}: Python {interp}, {m.get('date')}, load {m.get('load_average', float('nan')):.2f}")
        for r in data["rows"]:
            tuned = ", tuned malloc" if r.get("allocator") == "tuned" else ""
            series.setdefault(f"{r['loader']}, {interp}{tuned}", {})[r["workload"]] = r["speedup_2_workers"]
    workloads = sorted({w for s in series.values() for w in s}, key=lambda w: (w != "python", w))
    fig, ax = plt.subplots(figsize=(8, 4))
    width = 0.8 / max(len(series), 1)
    palette = [OURS, ALT, "#ff7f0e", "#9467bd", "#8c564b", "#17becf"]
    for i, (label, values) in enumerate(sorted(series.items(), key=lambda kv: (kv[0].startswith("torch"), kv[0]))):
        xs = [j - 0.4 + width * (i + 0.5) for j, w in enumerate(workloads) if w in values]
        ys = [values[w] for w in workloads if w in values]
        color = TORCH if label.startswith("torch") else palette[i % len(palette)]
        hatch = "//" if label.endswith("tuned malloc") else None
        bars = ax.bar(xs, ys, width, label=label, color=color, hatch=hatch, edgecolor="white")
        label_bars(ax, bars, [f"{y:.2f}{TIMES}" for y in ys])
    ax.axhline(1.0, color="black", linewidth=1)
    ax.axhline(2.0, color=OTHER, linestyle=":", linewidth=1)
    ax.set_xticks(
        range(len(workloads)), [{"python": "pure Python", "arrays": ".npy + NumPy"}.get(w, w) for w in workloads]
    )
    ax.set_ylabel("epoch time, 0 workers / 2 workers")
    ax.set_title("Speed-up from 2 workers (2.0 = perfect, 1.0 = none)")
    ax.legend(fontsize=8)
    ax.margins(y=0.2)
    return finish(fig, "benches/results/" + "; ".join(footers))


#: What each contender of tar_shards.py is, as the figure names it.
TAR_LABELS = {
    "TarDataset-http": "TarDataset over HTTP, epoch 1",
    "webdataset-torch-2": "webdataset + torch, 2 workers",
    "HttpDataset-per-sample": "HttpDataset, one URL per sample",
    "TarDataset-cached": "TarDataset, epoch 2 from the cache",
    "TarDataset-files": "TarDataset over local files",
}


def tar(data: Data) -> Figure:
    """Seconds per epoch of each contender, with the two ratios the goals are about."""
    meta, results, ratios = data["meta"], data["results"], data["ratios"]
    names = list(results)
    fig, ax = plt.subplots(figsize=(9, 0.6 * len(names) + 1.8))
    seconds = [results[n]["seconds"] for n in names]
    bars = ax.barh([TAR_LABELS.get(n, n) for n in names], seconds, color=[color_of(n) for n in names])
    for bar, n in zip(bars, names, strict=True):
        r = results[n]
        ax.annotate(
            f"{r['seconds']:.2f} s, {r['samples_per_s']:,.0f} samples/s",
            (bar.get_width(), bar.get_y() + bar.get_height() / 2),
            xytext=(3, 0),
            textcoords="offset points",
            va="center",
            fontsize=8,
        )
    ax.invert_yaxis()
    ax.set_xlim(0, max(seconds) * 1.6)
    ax.set_xlabel("seconds per epoch (lower is better)")
    shown = []
    if "webdataset_over_tar_http" in ratios:
        shown.append(f"webdataset ÷ TarDataset {ratios['webdataset_over_tar_http']:.2f}{TIMES} (goal ≥ 2{TIMES})")
    if "cached_over_files" in ratios:
        shown.append(f"cache ÷ files {ratios['cached_over_files']:.2f}{TIMES} (goal ≤ 1.3{TIMES})")
    ax.set_title(
        f"{meta['samples']:,} samples of ~{meta['jpg_bytes'] // 1024} KiB in {meta['shards']} tar shards, "
        f"{meta['delay_s'] * 1000:.0f} ms latency, {meta['in_flight']} in flight\n" + "; ".join(shown),
        fontsize=9,
    )
    start, end = meta.get("loadavg_start"), meta.get("loadavg")
    load = f"load {start[0]:.2f} → {end[0]:.2f}" if start and end else None
    return finish(
        fig,
        provenance(
            "tar.json", f"Python {meta.get('python')}", meta.get("date"), f"{meta.get('rounds')} rounds (median)", load
        ),
    )


# ----- main -----

Single = Callable[[Data], Figure]
FIGURES: list[tuple[str, str, Single]] = [
    ("overhead.json", "overhead.png", overhead),
    ("images.json", "images.png", images),
    ("memory.json", "memory.png", memory),
    ("http.json", "http.png", http),
    ("tar.json", "tar.png", tar),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--results", type=Path, default=ROOT / "benches" / "results")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "bench")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    drawn = 0

    def save(fig: Figure, png: str) -> None:
        nonlocal drawn
        path = args.out / png
        # No version stamp in the file: the same JSON draws the same PNG.
        fig.savefig(path, dpi=110, metadata={"Software": None})
        plt.close(fig)
        drawn += 1
        print(f"plot: wrote {path}")

    for source, png, draw in FIGURES:
        path = args.results / source
        if not path.exists():
            print(f"plot: skipped {png}: no {path}", file=sys.stderr)
            continue
        save(draw(load(path)), png)
    runs = sorted(args.results.glob("scaling*.json"))
    if runs:
        save(scaling([(p.name, load(p)) for p in runs]), "scaling.png")
    else:
        print(f"plot: skipped scaling.png: no {args.results / 'scaling*.json'}", file=sys.stderr)
    if not drawn:
        sys.exit(f"plot: no results in {args.results}")


if __name__ == "__main__":
    main()
