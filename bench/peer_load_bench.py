#!/usr/bin/env python3
"""The loaders a user could pick instead of snapcache, on one safetensors checkpoint, onto one GPU.

Each load runs in a new process, as a restarted server would: imports and CUDA start-up happen
before the clock, which runs from the load call to torch.cuda.synchronize() after the last tensor
is on the device. One more run of each peer, not timed, checks every tensor it returned against
the checkpoint's bytes (safetensors' own CPU reader, compared on the GPU byte for byte). Peers that are
not installed are reported as such, not skipped silently.

    python3 bench/peer_load_bench.py CHECKPOINT [--runs 3] [--peers a,b] [--json FILE] [--drop-cache [--prime]]
                                     [--no-check]

--no-check leaves out the checking run: for a peer already checked on this checkpoint in the same
call (tools/gpu/measure-loads.sh's later rounds), where it would only add a whole load to each.

With --drop-cache the checkpoint is dropped from the page cache (posix_fadvise DONTNEED after a
sync) before each timed run, as bench/gpu_load_bench.cpp's --drop-cache 1 does for snapcache.
With --prime as well, the checkpoint is first read once whole, untimed, as its --prime 1 does
(a virtual disk's host keeps what was read; primed, every load meets it having just read its file).

Peers (issue 21's list): safetensors load_file(device="cuda"); instanttensor safe_open with its
default backend and with BackendPolicy.BUFFERED; fastsafetensors SafeTensorsFileLoader (nogds);
runai_model_streamer SafetensorsStreamer. bench/gpu_load_bench.cpp measures snapcache and the
pinned-copy ceiling on the same checkpoint (its --work-dir); run both on one machine, one after the
other (tools/gpu/measure-loads.sh does).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

PEERS = ["safetensors", "instanttensor", "instanttensor_buffered", "fastsafetensors", "runai"]

CHILD = r'''
import sys, time, json
path, peer, check = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
import torch
torch.cuda.init(); torch.empty(1, device="cuda"); torch.cuda.synchronize()
tensors = {}
keep = []
if peer == "safetensors":
    from safetensors.torch import load_file
    t0 = time.perf_counter()
    tensors = load_file(path, device="cuda")
elif peer.startswith("instanttensor"):
    import instanttensor
    kwargs = {}
    if peer.endswith("buffered"):
        kwargs["backend"] = instanttensor.BackendPolicy.BUFFERED
    t0 = time.perf_counter()
    f = instanttensor.safe_open(path, framework="pt", device=0, **kwargs)
    keep.append(f)
    ctx = f.__enter__() if hasattr(f, "__enter__") else f
    for name, t in ctx.tensors():
        tensors[name] = t
elif peer == "fastsafetensors":
    from fastsafetensors import SafeTensorsFileLoader
    t0 = time.perf_counter()
    loader = SafeTensorsFileLoader(None, "cuda:0", nogds=True)
    loader.add_filenames({0: [path]})
    fb = loader.copy_files_to_device()
    keep += [loader, fb]
    for name in fb.key_to_rank_lidx.keys():
        tensors[name] = fb.get_tensor(name)
elif peer == "runai":
    from runai_model_streamer import SafetensorsStreamer
    t0 = time.perf_counter()
    streamer = SafetensorsStreamer()
    keep.append(streamer)
    streamer.__enter__()
    streamer.stream_file(path, device="cuda")
    for name, t in streamer.get_tensors():
        # The streamer may hand out views of a buffer it reuses: a checking run copies each one
        # as it arrives (that run is not timed).
        tensors[name] = t.clone() if check else t
else:
    raise SystemExit("unknown peer " + peer)
torch.cuda.synchronize()
seconds = time.perf_counter() - t0
nbytes = sum(t.numel() * t.element_size() for t in tensors.values())
mismatched = []
if check:
    from safetensors import safe_open
    with safe_open(path, framework="pt", device="cpu") as ref:
        names = list(ref.keys())
        if sorted(names) != sorted(tensors):
            mismatched.append("names differ")
        for n in names:
            if n not in tensors:
                continue
            r = ref.get_tensor(n).to("cuda")
            t = tensors[n]
            if t.dtype != r.dtype or tuple(t.shape) != tuple(r.shape) or not torch.equal(
                    t.contiguous().view(-1).view(torch.uint8), r.contiguous().view(-1).view(torch.uint8)):
                mismatched.append(n)
print(json.dumps({"seconds": seconds, "bytes": nbytes, "tensors": len(tensors), "checked": check,
                  "mismatched": mismatched[:8]}))
'''


def drop_from_page_cache(path):
    os.sync()
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def read_whole(path, piece=16 << 20):
    """One thread reading `path` in 16 MiB pieces, as `dd bs=16M` and gpu_load_bench's --prime do."""
    fd = os.open(path, os.O_RDONLY)
    try:
        while os.read(fd, piece):
            pass
    finally:
        os.close(fd)


def run_one(path, peer, check, drop=False, prime=False):
    if drop:
        if prime:
            read_whole(path)
        drop_from_page_cache(path)
    proc = subprocess.run([sys.executable, "-c", CHILD, path, peer, "1" if check else "0"],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
        return {"error": last[:300]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("checkpoint")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--peers", default=",".join(PEERS))
    ap.add_argument("--json")
    ap.add_argument("--drop-cache", action="store_true")
    ap.add_argument("--prime", action="store_true", help="with --drop-cache: read the checkpoint once first")
    ap.add_argument("--no-check", action="store_true", help="no checking run (the peer was checked on this checkpoint)")
    args = ap.parse_args()
    if args.prime and not args.drop_cache:
        ap.error("--prime needs --drop-cache")
    size = os.path.getsize(args.checkpoint)
    results = {}
    print(f"{args.checkpoint}: {size / 2**30:.2f} GiB; {args.runs} runs per peer, each in a new process, "
          f"page cache {'dropped before each run' if args.drop_cache else 'warm'}"
          f"{', the checkpoint read once just before' if args.prime else ''}")
    print(f"{'peer':<24} {'min s':>8} {'median s':>9} {'GB/s (min)':>11}  bytes checked")
    for peer in args.peers.split(","):
        runs = []
        checked = {"skipped": True} if args.no_check else run_one(args.checkpoint, peer, check=True)
        if "error" not in checked:
            for _ in range(args.runs):
                r = run_one(args.checkpoint, peer, check=False, drop=args.drop_cache, prime=args.prime)
                runs.append(r)
                if "error" in r:
                    break
        results[peer] = {"check": checked, "runs": runs}
        failed = checked if "error" in checked else next((r for r in runs if "error" in r), None)
        if failed:
            print(f"{peer:<24} failed: {failed['error']}", flush=True)
        else:
            secs = [r["seconds"] for r in runs]
            nbytes = runs[0]["bytes"]
            ok = ("not checked (--no-check)" if args.no_check else
                  "ok" if not checked["mismatched"] else "MISMATCH " + ", ".join(checked["mismatched"]))
            print(f"{peer:<24} {min(secs):8.3f} {statistics.median(secs):9.3f} {nbytes / min(secs) / 1e9:11.1f}  {ok}",
                  flush=True)
        # After each peer, so that a run cut short by a time limit keeps the peers it finished.
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"checkpoint": args.checkpoint, "bytes": size, "runs": results,
                           "page_cache": "dropped" if args.drop_cache else "warm", "primed": args.prime}, f, indent=1)


if __name__ == "__main__":
    main()
