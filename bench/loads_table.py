#!/usr/bin/env python3
"""Round by round: every loader's time, and each one against snapcache's load, from the JSON lines
that tools/gpu/measure-loads.sh writes (ROUNDS=N runs every loader once a round, in turn).

    python3 bench/loads_table.py loads.jsonl [more.jsonl ...] [--against warm]

One Markdown table per size, TP size and page-cache state: a row per loader (snapcache's loads,
the disk's rows, the peers), a column per round (best run in seconds, with GB/s), then the best
and the median over the rounds. Then the ratio of each loader's time to `--against`'s in the same
round (above 1: snapcache's load was faster), and in how many rounds it was. A virtual disk's
rate moves between runs minutes apart by more than loaders differ; a ratio taken within each round
and seen in every round is what tells the loaders apart.
"""
import argparse
import statistics
import time
from collections import defaultdict

from loads_jsonl import Measurement, measurements


def groups(rows):
    out = defaultdict(list)
    for m in rows:
        out[(m.size_mib, m.tp_size, m.page_cache, m.primed)].append(m)
    return out


def label(m):
    return m.name if m.source == "snapcache" else f"{m.name} (peer)"


def heading(rounds, r):
    """A round's column: its number, and its call's start when the lines come from several calls."""
    started, number = r
    if len({s for s, _ in rounds}) == 1:
        return f"round {number}"
    when = time.strftime("%H:%M", time.gmtime(started)) if started else "?"
    return f"{when} round {number}"


def table(rows, against):
    rounds = sorted({(m.started, m.round) for m in rows})
    # label -> (started, round) -> the best of that round's lines
    by_loader: defaultdict[str, dict[tuple[int, int], Measurement]] = defaultdict(dict)
    for m in rows:
        cell = by_loader[label(m)]
        r = (m.started, m.round)
        if r not in cell or m.best < cell[r].best:
            cell[r] = m
    lines = ["| loader | " + " | ".join(heading(rounds, r) for r in rounds) + " | best | median of rounds |",
             "|---|" + "---|" * (len(rounds) + 2)]
    for name, cells in by_loader.items():
        bests = [cells[r].best for r in rounds if r in cells]
        shown = [f"{cells[r].best:.3f} ({cells[r].gb_per_s:.2f} GB/s)" if r in cells else "" for r in rounds]
        lines.append(f"| {name} | " + " | ".join(shown) + f" | {min(bests):.3f} | {statistics.median(bests):.3f} |")
    reference = by_loader.get(against)
    if reference:
        lines += ["", f"Each loader's time over `{against}`'s in the same round (above 1: `{against}` was faster):", "",
                  "| loader | " + " | ".join(heading(rounds, r) for r in rounds) + f" | rounds `{against}` led |",
                  "|---|" + "---|" * (len(rounds) + 1)]
        for name, cells in by_loader.items():
            if name == against:
                continue
            both = [r for r in rounds if r in cells and r in reference]
            ratios = {r: cells[r].best / reference[r].best for r in both}
            led = sum(1 for r in both if ratios[r] > 1)
            lines.append(f"| {name} | " + " | ".join(f"{ratios[r]:.2f}" if r in ratios else "" for r in rounds) +
                         f" | {led} of {len(both)} |")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("jsonl", nargs="+")
    ap.add_argument("--against", default="warm", help="the load the others are compared with (a snapcache row)")
    args = ap.parse_args()
    for (size_mib, tp, page_cache, primed), rows in sorted(groups(measurements(args.jsonl)).items()):
        state = "page cache " + page_cache + (", each load's files read once just before" if primed else "")
        print(f"### {size_mib} MiB, TP {tp}, {state}\n")
        print(table(rows, args.against))
        print()


if __name__ == "__main__":
    main()
