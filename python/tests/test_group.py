"""Ranks that agree, through a real torch.distributed Gloo process group of eight processes:
every rank takes the same tier, a damaged entry on one rank sends the whole group to the
ordinary loader (whose collectives would deadlock otherwise), and a rank that dies mid-load makes
the others fail with an error instead of hanging."""

import json
import socket
import subprocess
import sys

import pytest
import torch

import snapcache
from conftest import HERE

RANKS = 8


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_group(tmp_path, backend="gloo", ranks=RANKS, **options):
    checkpoint = tmp_path / "model.safetensors"
    if not checkpoint.exists():
        torch.manual_seed(0)
        snapcache.write_safetensors(checkpoint, {
            "attn.qkv.weight": torch.randn(64, 32).to(torch.bfloat16),
            "mlp.up.weight": torch.randn(128, 32).to(torch.bfloat16),
            "norm.weight": torch.randn(16).to(torch.bfloat16),
        })
    port = free_port()
    procs = []
    for r in range(ranks):
        args = [sys.executable, str(HERE / "group_worker.py"), "--rank", str(r), "--world", str(ranks),
                "--port", str(port), "--checkpoint", str(checkpoint), "--cache", str(tmp_path / "cache"),
                "--backend", backend]
        for k, v in options.items():
            args += ["--" + k.replace("_", "-"), str(v)]
        procs.append(subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    results = []
    for r, p in enumerate(procs):
        out, err = p.communicate(timeout=300)
        loads: dict[int, dict] = {}
        for line in out.splitlines():
            if line.startswith("{"):
                d = json.loads(line)
                loads.setdefault(d["load"], {}).update(d)
        results.append({"loads": loads, "code": p.returncode, "stderr": err})
    return results


def test_eight_gloo_ranks_agree_through_damage_and_a_death(tmp_path):
    results = run_group(tmp_path, damage_rank=3, die_rank=6, timeout=10)
    for r, res in enumerate(results):
        assert 1 in res["loads"], f"rank {r}: {res['stderr'][-2000:]}"
    # 1: every rank missed and ran the loader (with its collective) together, and published.
    first = [res["loads"][1] for res in results]
    assert all(l["path"] == "miss" and l["tier"] == "ordinary" for l in first), first
    assert len({l["decision"] for l in first}) == 1 and "snapshot missed on all 8 ranks" in first[0]["decision"]
    assert "published on ranks 0-7" in first[0]["publication"]
    # 2: rank 3's entry is damaged; every rank took the ordinary path, and said why.
    second = [res["loads"][2] for res in results]
    assert all(l["path"] == "fallback" and l["tier"] == "ordinary" for l in second), second
    assert second[0]["decision"].startswith("rank 3: snapshot unusable (")
    assert "the group took the ordinary tier" in second[0]["decision"]
    assert all(l["decision"] == second[0]["decision"] for l in second)
    assert "published on rank 3" in second[0]["publication"]
    # 3: warm everywhere, the same shards as the cold load.
    third = [res["loads"][3] for res in results]
    assert all(l["path"] == "hit" and l["tier"] == "snapshot" for l in third), third
    assert [l["digest"] for l in third] == [l["digest"] for l in first]
    assert len({l["digest"] for l in first}) == RANKS
    # 4: rank 6 died inside the loader; the others got an error, not a hang.
    assert results[6]["loads"][4] == {"load": 4, "dying": 6} and results[6]["code"] == 9
    for r, res in enumerate(results):
        if r == 6:
            continue
        assert "error" in res["loads"][4], (r, res["loads"][4])
        assert res["code"] == 0


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_one_nccl_rank_agrees_through_its_gpu(tmp_path):
    results = run_group(tmp_path, backend="nccl", ranks=1, timeout=30)
    loads = results[0]["loads"]
    assert {1, 2, 3} <= set(loads), results[0]["stderr"][-2000:]
    assert loads[1]["path"] == "miss" and loads[3]["path"] == "hit" and loads[3]["digest"] == loads[1]["digest"]


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA devices")
def test_two_nccl_ranks_agree(tmp_path):
    results = run_group(tmp_path, backend="nccl", ranks=2, damage_rank=1, timeout=30)
    for r, res in enumerate(results):
        assert {1, 2, 3} <= set(res["loads"]), f"rank {r}: {res['stderr'][-2000:]}"
        assert res["loads"][1]["path"] == "miss"
        assert res["loads"][2]["path"] == "fallback"
        assert res["loads"][2]["decision"].startswith("rank 1: snapshot unusable (")
        assert res["loads"][3]["path"] == "hit" and res["loads"][3]["digest"] == res["loads"][1]["digest"]


def test_a_rank_group_is_a_plan_field_and_takes_only_process_groups():
    plan = snapcache.LoadPlan()
    assert plan.group is None
    with pytest.raises(TypeError, match="expected a torch.distributed ProcessGroup"):
        plan.group = "not a group"  # type: ignore[assignment]  # the mistake under test
    with pytest.raises(snapcache.InvalidArgument, match="MASTER_ADDR is not set"):
        snapcache.rank_group_from_environment()
