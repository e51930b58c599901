"""docs/python.md's TP-sharded loader with a post-load method, run as written: both ranks of TP 2,
cold then warm."""

import re

import torch

import snapcache
from conftest import REPO


def example_namespace():
    text = (REPO / "docs" / "python.md").read_text()
    section = text[text.index("## Wiring a loader"):]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    namespace = {"__name__": "docs_example"}
    exec(compile(code, "docs/python.md", "exec"), namespace)
    return namespace


def test_the_documented_tp_loader_cold_and_warm(tmp_path, store):
    ns = example_namespace()
    hidden = 8
    torch.manual_seed(0)
    full = {
        "norm.weight": torch.rand(hidden) + 0.5, "norm.bias": torch.randn(hidden),
        "attn.q.weight": torch.randn(hidden, hidden), "attn.k.weight": torch.randn(hidden, hidden),
        "attn.v.weight": torch.randn(hidden, hidden), "attn.q.bias": torch.randn(hidden),
        "attn.k.bias": torch.randn(hidden), "attn.v.bias": torch.randn(hidden),
        "attn.proj.weight": torch.randn(hidden, hidden), "attn.proj.bias": torch.randn(hidden),
    }
    checkpoint = tmp_path / "attention.safetensors"
    snapcache.write_safetensors(checkpoint, full)
    local = hidden // 2
    for rank in (0, 1):
        rows = slice(rank * local, (rank + 1) * local)
        qkv = torch.cat([full[f"attn.{x}.weight"][rows] for x in "qkv"]) * full["norm.weight"]
        results = []
        for expected in (snapcache.LoadPath.miss, snapcache.LoadPath.hit):
            block, report = ns["load_rank"](checkpoint, hidden, rank, 2, store=store)
            assert report.path is expected, report
            assert torch.equal(block.qkv.weight, qkv)
            assert torch.equal(block.norm.weight, torch.ones(hidden))
            assert torch.equal(block.proj.weight, full["attn.proj.weight"][:, rows])
            assert block.inv_freq.shape == (local // 2,)
            results.append({n: t.clone() for n, t in block.state_dict().items()})
        assert all(torch.equal(results[0][n], results[1][n]) for n in results[0])
