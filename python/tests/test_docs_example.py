"""docs/python.md's TP-sharded loader with a post-load method, run as written: both ranks of TP 2,
cold then warm; and the one-line transformers and diffusers forms of docs/python.md and README, on
the framework tests' models, cold then warm."""

import re
from typing import Any

import pytest
import torch

import snapcache
from conftest import REPO


def example_code(document, heading, containing=""):
    """The first Python block after `heading` in `document` that contains `containing`."""
    text = (REPO / document).read_text()
    section = text[text.index(heading):]
    return next(code for code in re.findall(r"```python\n(.*?)```", section, re.S) if containing in code)


def example_namespace() -> "dict[str, Any]":
    namespace: "dict[str, Any]" = {"__name__": "docs_example"}
    exec(compile(example_code("docs/python.md", "## Wiring a loader"), "docs/python.md", "exec"), namespace)
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


@pytest.mark.parametrize("document, heading", [("docs/python.md", "## transformers and diffusers in one line"),
                                               ("README.md", "## Using it from Python")])
@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(
    not torch.cuda.is_available(), reason="no CUDA device"))])
def test_the_documented_one_line_forms_cold_and_warm(document, heading, device, framework_checkpoints, monkeypatch,
                                                     tmp_path):
    code = example_code(document, heading, containing="snapcache.transformers.from_pretrained(")
    assert "snapcache.diffusers.from_pretrained(" in code
    monkeypatch.setenv("SNAPCACHE_DIR", str(tmp_path / "cache"))   # the environment's store, as in the docs
    paths = []
    namespace: "dict[str, Any]" = {}
    for _ in range(2):
        namespace = {"__name__": "docs_example", "device": device,
                     "llama": str(framework_checkpoints("transformers") / "llama"),
                     "wan": str(framework_checkpoints("diffusers") / "wan")}
        exec(compile(code, document, "exec"), namespace)
        reports = [namespace["model"].snapcache_report, *namespace["pipe"].snapcache_reports.values()]
        paths.append({r.path for r in reports})
        snapcache.wait_for_publications()
    assert paths == [{snapcache.LoadPath.miss}, {snapcache.LoadPath.hit}]
    assert namespace["model"].lm_head.weight.device.type == device
