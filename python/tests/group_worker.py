"""One rank of the Python group test: joins a torch.distributed process group (Gloo on CPU, or
NCCL on the rank's GPU), then loads its tensor-parallel shard of a small checkpoint through
snapcache with `plan.group` set to that process group. The ordinary loader itself calls a
collective (as TP loaders do), which only works when every rank runs it together.

    python group_worker.py --rank R --world W --port P --checkpoint FILE --cache DIR
                           [--backend gloo|nccl] [--damage-rank N] [--die-rank N]

Loads, each printing one JSON line {"load", "path", "tier", "decision", "publication", "digest"}
or {"load", "error"}:
  1. cold; then rank --damage-rank flips a byte of its entry (between barriers)
  2. after the damage; 3. warm
  4. a second component, cold, whose loader kills rank --die-rank (the others must get an error)
"""

import argparse
import datetime
import hashlib
import json
import os
import sys

import torch
import torch.distributed as dist

import snapcache

ARGS: argparse.Namespace  # set by main()
GROUP: dist.ProcessGroup


def shard_loader(plan):
    """Rows [rank*n/W, (rank+1)*n/W) of every tensor, after an all-reduce every rank must join."""
    rank, world = plan.topology.tp_rank, plan.topology.tp_size
    check = torch.ones(1, device=plan.device)  # NCCL moves device memory only
    dist.all_reduce(check, group=GROUP)  # a collective inside the loader: every rank runs it or none
    assert int(check.item()) == world
    if plan.component == "doomed" and rank == ARGS.die_rank:
        print(json.dumps({"load": 4, "dying": rank}), flush=True)
        os._exit(9)
    f = snapcache.SafetensorsFile.open(plan.checkpoint_files[0])
    out = {}
    for name, t in f.tensors().items():
        rows = t.shape[0] // world
        out[name] = t[rank * rows:(rank + 1) * rows].clone()
    return out


def make_plan(component, checkpoint, rank, world, device):
    f = snapcache.SafetensorsFile.open(checkpoint)
    expected = []
    for e in f.layout():
        sizes = list(e.shape)
        sizes[0] //= world
        expected.append(snapcache.ExpectedTensor(name=e.name, dtype=e.dtype, shape=sizes))
    return snapcache.LoadPlan(checkpoint_files=[checkpoint], component=component, source_identity="group-test-v1",
                              dtype="bfloat16", topology=snapcache.Topology(tp_rank=rank, tp_size=world),
                              expected=expected, ordinary_loader=shard_loader, device=device,
                              group=snapcache.rank_group(GROUP, timeout=ARGS.timeout))


def digest(weights):
    h = hashlib.sha256()
    for name, t in weights.items():
        h.update(name.encode())
        h.update(t.cpu().contiguous().view(torch.uint8).numpy().tobytes())
    return h.hexdigest()[:16]


def load(n, store, plan):
    try:
        loaded = snapcache.load_model(plan, store=store)
    except snapcache.Error as e:
        print(json.dumps({"load": n, "error": f"{type(e).__name__}: {e}"}), flush=True)
        return None
    g = loaded.report.group
    assert g is not None
    print(json.dumps({"load": n, "path": loaded.report.path.name, "tier": g.tier, "decision": g.decision,
                      "publication": g.publication, "agreement_ms": g.agreement_seconds * 1e3,
                      "digest": digest(loaded.weights)}), flush=True)
    return loaded


def flip_a_byte(entry):
    """Damages an entry as a disk or a stray write would: one byte of its first data file flipped."""
    path = os.path.join(entry, sorted(n for n in os.listdir(entry) if n.startswith("data-"))[0])
    os.chmod(path, 0o644)
    with open(path, "r+b") as f:
        f.seek(100)
        byte = f.read(1)
        f.seek(100)
        f.write(bytes([byte[0] ^ 0xFF]))
    os.chmod(path, 0o444)


def main():
    global ARGS, GROUP
    p = argparse.ArgumentParser()
    for a in ("--rank", "--world", "--port"):
        p.add_argument(a, type=int, required=True)
    p.add_argument("--checkpoint", required=True)
    p.add_argument("--cache", required=True)
    p.add_argument("--backend", default="gloo")
    p.add_argument("--damage-rank", type=int, default=-1)
    p.add_argument("--die-rank", type=int, default=-1)
    p.add_argument("--timeout", type=float, default=20.0)
    ARGS = p.parse_args()
    device = torch.device("cuda", ARGS.rank) if ARGS.backend == "nccl" else torch.device("cpu")
    if device.type == "cuda":
        torch.cuda.set_device(device)
    dist.init_process_group(ARGS.backend, init_method=f"tcp://127.0.0.1:{ARGS.port}", rank=ARGS.rank,
                            world_size=ARGS.world, timeout=datetime.timedelta(seconds=ARGS.timeout),
                            device_id=device if device.type == "cuda" else None)
    assert dist.group.WORLD is not None
    GROUP = dist.group.WORLD
    store = snapcache.Store.open(snapcache.Config(directory=ARGS.cache, reserve=0))
    plan = make_plan("model", ARGS.checkpoint, ARGS.rank, ARGS.world, device)

    cold = load(1, store, plan)
    if cold is None:
        os._exit(1)
    entry = store.entry_path(cold.report.entry_id)
    del cold
    dist.barrier()
    if ARGS.rank == ARGS.damage_rank:
        flip_a_byte(entry)
    dist.barrier()
    load(2, store, plan)
    load(3, store, plan)
    load(4, store, make_plan("doomed", ARGS.checkpoint, ARGS.rank, ARGS.world, device))
    # A rank whose group failed does not wait for the others at exit.
    os._exit(0)


if __name__ == "__main__":
    main()
