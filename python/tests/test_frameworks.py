"""snapcache.transformers and snapcache.diffusers on real models of the frameworks (framework_models.py:
seven transformers architectures, the Wan and Flux pipelines): the framework's own from_pretrained, a cold
snapcache load and a warm one, each in a new process, give bit-identical tensors (every parameter and
buffer, with each parameter's requires_grad) and outputs; the cold process publishes, the warm one hits
without mapping the checkpoint."""

import json

import pytest
import torch

import framework_models as fm
from conftest import HERE, run_python

WORKER = str(HERE / "framework_worker.py")
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device"))]


def worker(*args):
    lines = run_python([WORKER, *map(str, args)]).strip().splitlines()
    return json.loads(lines[-1])


def three_loads(kind, root, tmp_path, device):
    """from_pretrained, then snapcache cold and warm, each in a new process."""
    cache = tmp_path / "cache"
    runs = {}
    for phase, mode in (("pretrained", "pretrained"), ("cold", "snapcache"), ("warm", "snapcache")):
        out = tmp_path / f"{phase}.pt"
        info = worker(mode, kind, root, out, "--cache", cache, "--device", device)
        runs[phase] = (info, torch.load(out))
    return runs


def assert_same_flags(runs, name):
    """Every parameter's requires_grad, cold and warm, is from_pretrained's (code that counts trainable
    parameters, or fine-tunes, sees the framework's model)."""
    reference = runs["pretrained"][0]["models"][name]["requires_grad"]
    assert reference
    for phase in ("cold", "warm"):
        flags = runs[phase][0]["models"][name]["requires_grad"]
        assert flags.keys() == reference.keys(), phase
        differing = {n: (reference[n], flags[n]) for n in reference if reference[n] != flags[n]}
        assert differing == {}, (phase, "from_pretrained's, then this load's", differing)


def assert_bit_identical(runs, name):
    assert_same_flags(runs, name)
    reference = runs["pretrained"][1][name]
    assert reference["tensors"] and reference["outputs"]
    for phase in ("cold", "warm"):
        loaded = runs[phase][1][name]
        for part in ("tensors", "outputs"):
            assert loaded[part].keys() == reference[part].keys(), (phase, part)
            for key, want in reference[part].items():
                got = loaded[part][key]
                assert got.dtype == want.dtype and torch.equal(got, want), (phase, part, key)
    assert any(t.abs().sum() > 0 for t in reference["outputs"].values())


@pytest.fixture(scope="module", params=DEVICES)
def transformers_runs(request, framework_checkpoints, tmp_path_factory):
    root = framework_checkpoints("transformers")
    return three_loads("transformers", root, tmp_path_factory.mktemp(f"transformers-{request.param}"), request.param)


@pytest.fixture(scope="module", params=DEVICES)
def diffusers_runs(request, framework_checkpoints, tmp_path_factory):
    root = framework_checkpoints("diffusers")
    return three_loads("diffusers", root, tmp_path_factory.mktemp(f"diffusers-{request.param}"), request.param)


@pytest.mark.parametrize("name", list(fm.TRANSFORMERS_MODELS))
def test_transformers_model_pretrained_cold_and_warm_are_bit_identical(transformers_runs, name):
    assert_bit_identical(transformers_runs, name)
    cold, warm = (transformers_runs[p][0]["models"][name] for p in ("cold", "warm"))
    assert cold["report"]["path"] == "miss", cold
    assert warm["report"]["path"] == "hit" and warm["report"]["entry"] == cold["report"]["entry"], warm
    reference = transformers_runs["pretrained"][0]["models"][name]
    assert cold["tied"] == warm["tied"] == reference["tied"]
    assert not warm["training"] and not reference["training"]
    assert transformers_runs["warm"][0]["mapped_checkpoints"] == []


def test_tied_embeddings_stay_tied(transformers_runs):
    tied = transformers_runs["warm"][0]["models"]["qwen2"]["tied"]
    assert tied == [["model.embed_tokens.weight", "lm_head.weight"]]


def test_a_parameter_its_constructor_freezes_is_trainable_as_from_pretrained_gives_it(transformers_runs):
    # Whisper's encoder freezes its sinusoidal positions; transformers' loading re-creates every
    # parameter it loads as nn.Parameter(t, requires_grad=t.is_floating_point()).
    for phase in ("pretrained", "cold", "warm"):
        flags = transformers_runs[phase][0]["models"]["whisper"]["requires_grad"]
        assert flags["model.encoder.embed_positions.weight"] is True, phase


def test_non_persistent_buffers_and_kept_fp32_come_back(transformers_runs):
    warm = transformers_runs["warm"][1]
    assert warm["llama"]["tensors"]["model.rotary_emb.inv_freq"].dtype == torch.float32
    assert "embeddings.position_ids" in warm["bert"]["tensors"]
    assert "embeddings.token_type_ids" in warm["bert"]["tensors"]
    t5 = warm["t5-encoder"]["tensors"]
    assert t5["encoder.block.0.layer.1.DenseReluDense.wo.weight"].dtype == torch.float32   # _keep_in_fp32_modules
    assert t5["encoder.block.0.layer.1.DenseReluDense.wi_0.weight"].dtype == torch.float16


@pytest.mark.parametrize("name", list(fm.DIFFUSERS_PIPELINES))
def test_diffusers_pipeline_pretrained_cold_and_warm_are_bit_identical(diffusers_runs, name):
    assert_bit_identical(diffusers_runs, name)
    cold, warm = (diffusers_runs[p][0]["models"][name] for p in ("cold", "warm"))
    components = diffusers_runs["pretrained"][0]["models"][name]["components"]
    assert sorted(cold["reports"]) == sorted(warm["reports"]) == components   # every torch component, one entry each
    for component in components:
        assert cold["reports"][component]["path"] == "miss", (component, cold)
        assert warm["reports"][component]["path"] == "hit", (component, warm)
        assert warm["reports"][component]["entry"] == cold["reports"][component]["entry"]
    assert len({r["entry"] for r in warm["reports"].values()}) == len(components)
    assert diffusers_runs["warm"][0]["mapped_checkpoints"] == []


def test_wan_transformer_keeps_its_fp32_modules(diffusers_runs):
    # Loaded in bf16, the Wan transformer keeps its _keep_in_fp32_modules (time embedder, norms,
    # modulation tables) in float32, warm as from_pretrained does.
    tensors = diffusers_runs["warm"][1]["wan"]["tensors"]
    fp32 = {n for n, t in tensors.items() if n.startswith("transformer.") and t.dtype == torch.float32}
    bf16 = {n for n, t in tensors.items() if n.startswith("transformer.") and t.dtype == torch.bfloat16}
    assert len(fp32) >= 10 and len(bf16) >= 50, (len(fp32), len(bf16))
    assert {"transformer.scale_shift_table", "transformer.blocks.0.scale_shift_table",
            "transformer.condition_embedder.time_embedder.linear_1.weight"} <= fp32
    assert "transformer.blocks.0.attn1.to_q.weight" in bf16
