"""On a CUDA device: load_module binds uploaded tensors; the upload engine serves large loads."""

import pytest
import torch

import snapcache

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")


def test_load_module_on_cuda_cold_and_warm(tmp_path, store):
    weights = {"a.weight": torch.randn(1024, 1024), "b.weight": torch.randn(8, 8)}
    path = tmp_path / "w.safetensors"
    snapcache.write_safetensors(path, weights)

    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a = torch.nn.Linear(1024, 1024, bias=False)
            self.b = torch.nn.Linear(8, 8, bias=False)

    plan = snapcache.LoadPlan(checkpoint_files=[path], component="gpu", source_identity="v1", dtype="float32",
                              device="cuda", uploader=snapcache.staged_uploader(),
                              ordinary_loader=lambda p: {n: t.clone() for n, t in weights.items()})
    for expected in (snapcache.LoadPath.miss, snapcache.LoadPath.hit):
        with torch.device("meta"):
            m = M()
        loaded = snapcache.load_module(m, plan, store=store)
        loaded.publication.wait()
        assert loaded.report.path is expected
        assert m.a.weight.is_cuda and torch.equal(m.a.weight.cpu(), weights["a.weight"])
    assert loaded.report.bytes_checked > 0
