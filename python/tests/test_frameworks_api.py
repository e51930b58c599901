"""The integrations' contract, in this process: what the key holds (every checkpoint file, the config,
the model class, the framework's version), the keywords and models they refuse, the check of the
meta-built model against from_pretrained's, and that `import snapcache` needs neither framework."""

import copy
import os
import shutil
import subprocess
import sys

import pytest
import torch

import snapcache
from conftest import run_python

transformers = pytest.importorskip("transformers")
import snapcache.transformers as snapcache_transformers  # noqa: E402


@pytest.fixture
def qwen2(framework_checkpoints, tmp_path):
    """A private copy of the saved Qwen2 model (sharded, tied embeddings): the tests touch its files."""
    path = tmp_path / "qwen2"
    shutil.copytree(framework_checkpoints("transformers") / "qwen2", path)
    return path


def load(path, store, cls=transformers.Qwen2ForCausalLM, **kwargs):
    return snapcache_transformers.from_pretrained(cls, path, store=store, return_report=True, **kwargs)


def test_the_key_holds_the_files_config_class_and_transformers_version(qwen2, store):
    model, cold = load(qwen2, store)
    snapcache.wait_for_publications()
    assert cold.path is snapcache.LoadPath.miss
    _, warm = load(qwen2, store)
    assert warm.path is snapcache.LoadPath.hit and warm.entry_id == cold.entry_id
    assert model.snapcache_report.entry_id == cold.entry_id
    # The model carries its report and can still be deep-copied (a LoadReport copies as itself).
    twin = copy.deepcopy(model)
    assert twin.snapcache_report is model.snapcache_report
    assert all(torch.equal(a, b) for a, b in zip(twin.state_dict().values(), model.state_dict().values()))

    # A config override is another config: another entry, and the miss names the option.
    _, other_config = load(qwen2, store, rms_norm_eps=1e-5)
    assert other_config.path is snapcache.LoadPath.miss and "option config" in other_config.reason, other_config.reason
    # Another model class on the same checkpoint.
    _, other_class = load(qwen2, store, cls=transformers.AutoModel)
    assert other_class.path is snapcache.LoadPath.miss and "model_class" in other_class.reason, other_class.reason
    snapcache.wait_for_publications()
    # Every shard, the index and config.json are checkpoint files of the key.
    for name in ("model-00002-of-00003.safetensors", "model.safetensors.index.json", "config.json"):
        os.utime(qwen2 / name, ns=(1, 1))
        _, touched = load(qwen2, store)
        assert touched.path is snapcache.LoadPath.miss and "checkpoint" in touched.reason, (name, touched.reason)
        snapcache.wait_for_publications()


def test_the_version_of_transformers_is_in_the_key(qwen2, store, monkeypatch):
    load(qwen2, store)
    snapcache.wait_for_publications()
    monkeypatch.setattr(transformers, "__version__", "5.99.0")
    _, report = load(qwen2, store)
    assert report.path is snapcache.LoadPath.miss and "transformers 5.99.0" in report.reason, report.reason


def test_keywords_it_does_not_rebuild_are_refused(qwen2, store):
    with pytest.raises(snapcache.InvalidArgument, match="device_map"):
        load(qwen2, store, device_map="auto")
    with pytest.raises(snapcache.InvalidArgument, match="quantization_config"):
        load(qwen2, store, quantization_config={"quant_method": "bitsandbytes"})
    with pytest.raises(snapcache.Unsupported, match="trust_remote_code"):
        load(qwen2, store, trust_remote_code=True)
    with pytest.raises(snapcache.InvalidArgument, match="not a directory"):
        load(qwen2 / "nothing-here", store)


def test_tensors_from_pretrained_would_draw_at_random_are_refused(framework_checkpoints, store):
    # T5Model on an encoder-only checkpoint: the decoder is missing, from_pretrained draws it.
    with pytest.raises(snapcache.Mismatch, match="initializes them at random"):
        load(framework_checkpoints("transformers") / "t5-encoder", store, cls=transformers.T5Model)


def test_a_meta_build_unlike_from_pretrained_is_refused_on_the_cold_load(framework_checkpoints, store, monkeypatch):
    # Without the keep-in-fp32 step the meta-built T5 encoder would hold `wo` in float16, where
    # from_pretrained holds it in float32: the cold load compares the two and names the tensor.
    monkeypatch.setattr(snapcache_transformers, "_keep_in_fp32", lambda model, plan: None)
    with pytest.raises(snapcache.Mismatch, match=r"DenseReluDense\.wo\.weight' is float32 in from_pretrained's model, "
                                                 r"float16 built"):
        load(framework_checkpoints("transformers") / "t5-encoder", store, cls=transformers.T5EncoderModel)


def test_import_snapcache_needs_neither_framework():
    out = run_python(["-c", "import sys, snapcache; print(sorted({'transformers', 'diffusers'} & set(sys.modules)))"])
    assert out.strip() == "[]"
    for framework in ("transformers", "diffusers"):
        # The framework made unimportable, as in an environment without it.
        code = (f"import sys; sys.modules[{framework!r}] = None\n"
                f"import snapcache\n"
                f"try:\n    import snapcache.{framework}\n"
                f"except ImportError as e:\n    print(e)\n")
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr
        assert f"pip install snapcache[{framework}]" in done.stdout, done.stdout
        # The attribute form is the same import.
        code = code.replace(f"import snapcache.{framework}", f"snapcache.{framework}")
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
        assert f"pip install snapcache[{framework}]" in done.stdout, (done.stdout, done.stderr)


def test_one_diffusers_model_loads_alone(framework_checkpoints, store):
    pytest.importorskip("diffusers")
    import diffusers

    import snapcache.diffusers as snapcache_diffusers

    vae = framework_checkpoints("diffusers") / "flux" / "vae"
    model, cold = snapcache_diffusers.model_from_pretrained(diffusers.AutoencoderKL, vae, store=store,
                                                            return_report=True)
    snapcache.wait_for_publications()
    again, warm = snapcache_diffusers.model_from_pretrained(diffusers.AutoencoderKL, vae, store=store,
                                                            return_report=True)
    assert (cold.path, warm.path) == (snapcache.LoadPath.miss, snapcache.LoadPath.hit)
    reference = diffusers.AutoencoderKL.from_pretrained(vae)
    for (name, want), (_, got) in zip(reference.state_dict().items(), again.state_dict().items()):
        assert torch.equal(want, got), name
    assert dict(again.config) == dict(reference.config)
    if torch.cuda.is_available():
        on_gpu = snapcache_diffusers.model_from_pretrained(diffusers.AutoencoderKL, vae, store=store, device="cuda")
        assert on_gpu.snapcache_report.path is snapcache.LoadPath.hit
        assert all(t.is_cuda for t in on_gpu.state_dict().values())
