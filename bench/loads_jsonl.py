"""The JSON lines of the load benchmark, read once for every program that reports them.

tools/gpu/measure-loads.sh appends one line per bench/gpu_load_bench.cpp run (snapcache's loads,
the bus and, with the page cache dropped, the disk's rows) and one per bench/peer_load_bench.py
run (a peer); tools/gpu/engine-sweep.sh wraps the first kind as {"config": ..., "result": ...}.
`measurements` turns them all into one kind of record, so bench/plot_loads.py and
bench/loads_table.py agree on what a line says.
"""
import json
import statistics
from dataclasses import dataclass


@dataclass(frozen=True)
class Measurement:
    source: str          # "snapcache" (gpu_load_bench's rows) or "peers"
    name: str            # the row's method, or the peer
    size_mib: int        # the size the command asked for (groups a size's rows across calls)
    bytes: int           # what the load put on the device (or read, for a disk row)
    tp_size: int
    page_cache: str      # "warm" or "dropped"
    primed: bool         # with the page cache dropped: each load's files read once just before
    started: int         # when the measure-loads.sh call that wrote it began (Unix time; 0: not said)
    round: int           # measure-loads.sh's ROUNDS: which round of that call (1 when it ran one)
    best: float          # seconds
    median: float        # seconds, of the runs (the best when there was one)

    @property
    def gb_per_s(self) -> float:
        return self.bytes / self.best / 1e9 if self.best > 0 else 0.0


def _snapcache(record, started, round_):
    for row in record["rows"]:
        if row["seconds"] <= 0:
            continue
        yield Measurement("snapcache", row["method"], record["size_mib"], row["bytes"], record.get("tp_size", 1),
                          record.get("page_cache", "warm"), record.get("primed", False), started, round_, row["seconds"],
                          row.get("median_seconds") or row["seconds"])


def _peers(record, started, round_):
    peers = record["peers"]
    for peer, result in peers["runs"].items():
        runs = [r["seconds"] for r in result.get("runs", []) if "seconds" in r]
        check = result.get("check", {})
        # A peer whose output did not match the checkpoint's bytes has no time worth comparing. A
        # run without its checking run (--no-check) follows one that checked in the same call.
        if not runs or "error" in check or check.get("mismatched"):
            continue
        size_mib = record.get("size_mib") or round(peers["bytes"] / 2**20)
        loaded = check.get("bytes") or next(r["bytes"] for r in result["runs"] if "bytes" in r)
        yield Measurement("peers", peer, size_mib, loaded, 1, peers.get("page_cache", "warm"),
                          peers.get("primed", False), started, round_, min(runs), statistics.median(runs))


def measurements(paths):
    """Every timed row of the JSON lines in `paths`, in file order."""
    out = []
    for path in paths:
        with open(path) as f:
            for line in f:
                if not line.strip():
                    continue
                record = json.loads(line)
                if "result" in record:  # tools/gpu/engine-sweep.sh's lines: its defaults only
                    if record.get("config") != "defaults":
                        continue
                    record = record["result"]
                started, round_ = record.get("started", 0), record.get("round", 1)
                if "rows" in record:
                    out.extend(_snapcache(record, started, round_))
                elif "peers" in record:
                    out.extend(_peers(record, started, round_))
    return out
