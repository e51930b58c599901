#!/usr/bin/env python3
"""GB/s against size, one line per loader and the bus as a line, from the JSON lines that
tools/gpu/measure-loads.sh writes (loads.jsonl, or engine-sweep.sh's sweep.jsonl: snapcache's rows from bench/gpu_load_bench.cpp,
the peers' from bench/peer_load_bench.py). Needs matplotlib (not a dependency of the package).

    python3 bench/plot_loads.py loads.jsonl [more.jsonl ...] -o docs/loads.svg [--title TEXT]

Each point is the best run of its loader at that size; snapcache's and the peers' rows for one
size come from one command on one machine, so the ratios between lines are measured side by side.
"""
import argparse
from collections import defaultdict

from loads_jsonl import measurements

# The lines drawn, in legend order: (label, where it comes from, which row or peer).
LINES = [
    ("bus: pinned host-to-device copy", "snapcache", "pinned copy (ceiling)"),
    ("snapcache warm, the demo's post-load methods", "snapcache", "warm"),
    ("snapcache warm, view-only post-load", "snapcache", "warm-view-only"),
    ("snapcache cold", "snapcache", "cold"),
    ("the demo's ordinary load, no cache", "snapcache", "ordinary"),
    ("instanttensor BUFFERED", "peers", "instanttensor_buffered"),
    ("instanttensor (default backend)", "peers", "instanttensor"),
    ("safetensors load_file(device='cuda')", "peers", "safetensors"),
    ("fastsafetensors (no GDS)", "peers", "fastsafetensors"),
    ("runai-model-streamer", "peers", "runai"),
]


def points(paths, page_cache):
    """{(source, name): {size_gib: GB/s}} for TP 1 loads with that page-cache state."""
    out: defaultdict[tuple[str, str], dict[float, float]] = defaultdict(dict)
    for m in measurements(paths):
        if m.tp_size != 1 or m.page_cache != page_cache:
            continue
        size = m.bytes / 2**30
        out[(m.source, m.name)][size] = max(out[(m.source, m.name)].get(size, 0), m.gb_per_s)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("jsonl", nargs="+")
    ap.add_argument("-o", "--output", required=True)
    ap.add_argument("--page-cache", default="warm", choices=["warm", "dropped"])
    ap.add_argument("--title", default="Loads onto one GPU, page cache warm, each load a new process")
    args = ap.parse_args()
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    data = points(args.jsonl, args.page_cache)
    fig, ax = plt.subplots(figsize=(8, 5))
    for label, source, name in LINES:
        series = sorted(data.get((source, name), {}).items())
        if not series:
            continue
        style = dict(linestyle="--", color="black") if name.startswith("pinned") else dict(marker="o")
        ax.plot([s for s, _ in series], [r for _, r in series], label=label, **style)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("bytes loaded onto the GPU (GiB)")
    ax.set_ylabel("GB/s (best run)")
    ax.set_title(args.title, fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(args.output)


if __name__ == "__main__":
    main()
