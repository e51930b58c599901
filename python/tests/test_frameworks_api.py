"""The integrations' contract, in this process: what the key holds (every checkpoint file, the config
field by field, the model class, the framework's version) and what it leaves out (keywords that change
no tensor), the keywords and models they refuse, the check of the meta-built model against
from_pretrained's, and that `import snapcache` needs neither framework."""

import copy
import json
import os
import shutil
import subprocess
import sys
from typing import Any

import pytest
import torch

import snapcache
import snapcache._cli
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


def entries(cache_dir):
    return sorted(os.listdir(cache_dir / "entries"))


def command(cache_dir, *args):
    """`snapcache ARGS` in a new process, on the cache at `cache_dir`."""
    if not os.path.exists(snapcache._cli.executable()):
        pytest.skip("not an installed wheel (the build tree's package): no snapcache command")
    return run_python(["-m", "snapcache._cli", *args], env={"SNAPCACHE_DIR": str(cache_dir)})


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

    # A config override is another config: another entry, and the miss names the field.
    _, other_config = load(qwen2, store, rms_norm_eps=1e-5)
    assert other_config.path is snapcache.LoadPath.miss, other_config.reason
    assert "option config.rms_norm_eps 1e-06 -> 1e-05" in other_config.reason, other_config.reason
    # Another model class on the same checkpoint.
    _, other_class = load(qwen2, store, cls=transformers.AutoModel)
    # Another class is another component: its first load, not compared with the other model's entry.
    assert other_class.path is snapcache.LoadPath.miss, other_class.reason
    assert "no entry of component 'Qwen2Model' for this checkpoint yet: this model's first load" in other_class.reason
    snapcache.wait_for_publications()
    # Every shard, the index and config.json are checkpoint files of the key: touched (new times,
    # the same bytes), each is hashed again and the entry serves the load, saying so.
    for name in ("model-00002-of-00003.safetensors", "model.safetensors.index.json", "config.json"):
        os.utime(qwen2 / name, ns=(1, 1))
        _, touched = load(qwen2, store)
        assert touched.path is snapcache.LoadPath.hit, (name, touched.reason)
        assert "changed identity since entry" in touched.reason, (name, touched.reason)
        snapcache.wait_for_publications()


def test_a_miss_for_a_config_override_names_each_field_with_both_values(qwen2, store, cache_dir):
    _, cold = load(qwen2, store)
    snapcache.wait_for_publications()
    # A keyword that overrides a config field, and a config passed whole with two fields changed.
    _, keyword = load(qwen2, store, rms_norm_eps=1e-5)
    config = transformers.AutoConfig.from_pretrained(qwen2)
    config.use_cache = False
    config.rope_parameters = {**config.rope_parameters, "rope_theta": 5000.0}
    _, passed = load(qwen2, store, config=config)
    snapcache.wait_for_publications()
    assert keyword.path is passed.path is snapcache.LoadPath.miss
    assert keyword.reason.endswith(f"nearest entry {cold.entry_id[:12]} (same component and checkpoint): option "
                                   f"config.rms_norm_eps 1e-06 -> 1e-05"), keyword.reason
    assert "config.use_cache true -> false" in passed.reason, passed.reason
    assert "config.rope_parameters.rope_theta 10000.0 -> 5000.0" in passed.reason, passed.reason
    assert "from_pretrained" not in keyword.reason + passed.reason

    # `snapcache why`, in words and with --json: the field, both values, never a digest. (Evicted
    # first: of a key whose entry exists, `why` says a load with it hits now.)
    command(cache_dir, "evict", passed.entry_id, keyword.entry_id)
    said = command(cache_dir, "why", passed.entry_id)
    assert "differs in 2 fields:\n  option config.rope_parameters.rope_theta 10000.0 -> 5000.0\n" \
           "  option config.use_cache true -> false\n" in said, said
    answer = json.loads(command(cache_dir, "why", keyword.entry_id, "--json"))
    assert answer["nearest"]["id"] == cold.entry_id
    assert answer["nearest"]["differences"] == [
        {"field": "options.config.rms_norm_eps", "wanted": "1e-05", "found": "1e-06",
         "words": "option config.rms_norm_eps 1e-06 -> 1e-05"}]


def test_keywords_that_change_no_tensor_are_not_in_the_key(qwen2, store, cache_dir, tmp_path):
    model, cold = load(qwen2, store)
    snapcache.wait_for_publications()
    assert model.config._attn_implementation == "sdpa"
    published = entries(cache_dir)
    assert len(published) == 1
    # How to run it (attention, experts), where to read it from and how (the Hub's keywords, on a
    # local directory; safetensors, the mapping), checks that pass for a checkpoint that loads at all,
    # and remote code that is not there to run: the same tensors, the same entry.
    no_ops: "list[dict[str, Any]]" = [
        {"attn_implementation": "eager"}, {"experts_implementation": "eager"}, {"low_cpu_mem_usage": True},
        {"local_files_only": True}, {"use_safetensors": True}, {"revision": "main"}, {"force_download": True},
        {"cache_dir": str(tmp_path / "hub")}, {"proxies": None}, {"token": None}, {"trust_remote_code": True},
        {"weights_only": True}, {"disable_mmap": True}, {"ignore_mismatched_sizes": True},
        {"offload_state_dict": False}, {"generation_config": transformers.GenerationConfig(max_new_tokens=7)},
        {"rms_norm_eps": 1e-6},  # the config's own value: the same config
    ]
    again: Any = None  # the model of the last load, with every keyword at once
    for keywords in no_ops + [{k: v for kw in no_ops for k, v in kw.items()}]:
        again, warm = load(qwen2, store, **keywords)
        assert warm.path is snapcache.LoadPath.hit and warm.entry_id == cold.entry_id, (keywords, warm.reason)
    # What the keywords do, they still do on a hit: the model is built with them.
    assert again.config._attn_implementation == "eager"
    assert again.generation_config.max_new_tokens == 7
    snapcache.wait_for_publications()
    assert entries(cache_dir) == published  # the cache grew by nothing

    # What changes the tensors stays in the key: the dtype (and, above, the config; the files).
    _, bf16 = load(qwen2, store, dtype=torch.bfloat16)
    assert bf16.path is snapcache.LoadPath.miss and "dtype float32 -> bfloat16" in bf16.reason, bf16.reason


def test_diffusers_keywords_that_change_no_tensor_are_not_in_the_key(framework_checkpoints, store, cache_dir):
    pytest.importorskip("diffusers")
    import diffusers

    import snapcache.diffusers as snapcache_diffusers

    vae = framework_checkpoints("diffusers") / "flux" / "vae"
    _, cold = snapcache_diffusers.model_from_pretrained(diffusers.AutoencoderKL, vae, store=store, return_report=True)
    snapcache.wait_for_publications()
    no_ops: "list[dict[str, Any]]" = [{"low_cpu_mem_usage": True}, {"use_safetensors": True}, {"local_files_only": True},
              {"revision": "main"}, {"disable_mmap": True}, {"ignore_mismatched_sizes": True},
              {"force_download": True}, {"token": None}, {"proxies": None}]
    for keywords in no_ops + [{k: v for kw in no_ops for k, v in kw.items()}]:
        _, warm = snapcache_diffusers.model_from_pretrained(diffusers.AutoencoderKL, vae, store=store,
                                                            return_report=True, **keywords)
        assert warm.path is snapcache.LoadPath.hit and warm.entry_id == cold.entry_id, (keywords, warm.reason)
    # A config override is in the key, named.
    _, other = snapcache_diffusers.model_from_pretrained(diffusers.AutoencoderKL, vae, store=store,
                                                         return_report=True, scaling_factor=0.5)
    assert other.path is snapcache.LoadPath.miss
    assert "option config.scaling_factor 1.0 -> 0.5" in other.reason, other.reason
    snapcache.wait_for_publications()
    assert len(entries(cache_dir)) == 2


def test_trust_remote_code_is_refused_only_where_remote_code_would_run(qwen2, store):
    _, cold = load(qwen2, store)
    snapcache.wait_for_publications()
    # No auto_map: transformers runs no remote code, whatever the flag; neither does snapcache refuse.
    for cls in (transformers.Qwen2ForCausalLM, transformers.AutoModelForCausalLM):
        _, trusted = load(qwen2, store, cls=cls, trust_remote_code=True)
        assert trusted.path is snapcache.LoadPath.hit and trusted.entry_id == cold.entry_id, trusted.reason

    config = json.loads((qwen2 / "config.json").read_text())

    def with_auto_map(auto_map):
        (qwen2 / "config.json").write_text(json.dumps({**config, "auto_map": auto_map}))

    # Remote code for the class being loaded, or for the config an Auto class reads: refused, saying so.
    with_auto_map({"AutoModelForCausalLM": "modeling_custom.CustomForCausalLM"})
    with pytest.raises(snapcache.Unsupported, match=r"would run the checkpoint's own code .*auto_map.*"
                                                    r"AutoModelForCausalLM.*modeling_custom\.CustomForCausalLM"):
        load(qwen2, store, cls=transformers.AutoModelForCausalLM, trust_remote_code=True)
    # Not for another Auto class, nor for a model class given as such: transformers builds its own.
    load(qwen2, store, cls=transformers.AutoModel, trust_remote_code=True)
    load(qwen2, store, cls=transformers.Qwen2ForCausalLM, trust_remote_code=True)
    with_auto_map({"AutoConfig": "configuration_custom.CustomConfig"})
    with pytest.raises(snapcache.Unsupported, match=r"AutoConfig.*configuration_custom\.CustomConfig"):
        load(qwen2, store, cls=transformers.AutoModel, trust_remote_code=True)
    load(qwen2, store, cls=transformers.Qwen2ForCausalLM, trust_remote_code=True)
    # Without the flag transformers runs none of it (it builds its own Qwen2): accepted.
    load(qwen2, store, cls=transformers.AutoModel)
    # A custom generate function (custom_generate/generate.py) replaces generate() when trusted.
    (qwen2 / "config.json").write_text(json.dumps(config))
    (qwen2 / "custom_generate").mkdir()
    (qwen2 / "custom_generate" / "generate.py").write_text("def generate(model, **kwargs):\n    return None\n")
    with pytest.raises(snapcache.Unsupported, match=r"custom_generate/generate\.py"):
        load(qwen2, store, trust_remote_code=True)
    load(qwen2, store)
    snapcache.wait_for_publications()


def test_a_first_load_says_so_instead_of_comparing_with_another_model(framework_checkpoints, qwen2, store):
    pytest.importorskip("diffusers")
    import diffusers

    import snapcache.diffusers as snapcache_diffusers

    snapcache_diffusers.model_from_pretrained(diffusers.AutoencoderKL, framework_checkpoints("diffusers") / "flux" /
                                              "vae", store=store, component="vae")
    snapcache.wait_for_publications()
    _, first = load(qwen2, store)
    assert first.path is snapcache.LoadPath.miss
    assert first.reason == "no entry of component 'Qwen2ForCausalLM' for this checkpoint yet: this model's first load", \
        first.reason


def test_a_path_that_is_not_a_directory_is_named_as_written(qwen2, store):
    pytest.importorskip("diffusers")
    import diffusers

    import snapcache.diffusers as snapcache_diffusers

    for call in (lambda path, **kw: load(path, store, **kw),
                 lambda path, **kw: snapcache_diffusers.model_from_pretrained(diffusers.AutoencoderKL, path,
                                                                              store=store, **kw)):
        with pytest.raises(snapcache.InvalidArgument) as raised:
            call("Qwen/Qwen3-0.6B")
        message = str(raised.value)
        assert "'Qwen/Qwen3-0.6B' is not a directory" in message, message
        assert "snapshot_download" in message, message
        with pytest.raises(snapcache.InvalidArgument) as raised:
            call(str(qwen2), subfolder="nothing")
        assert f"'{qwen2}' has no subfolder 'nothing'" in str(raised.value), str(raised.value)


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


def test_a_meta_build_whose_requires_grad_differs_is_refused_on_the_cold_load(framework_checkpoints, store,
                                                                              monkeypatch):
    # Whisper's constructor freezes its encoder's positions; transformers' loading makes every loaded
    # parameter trainable again. Without that step the meta-built model would keep the constructor's
    # flag: the cold load compares the flags too, and names the parameter.
    monkeypatch.setattr(snapcache_transformers, "_requires_grad_as_loaded", lambda model: None)
    with pytest.raises(snapcache.Mismatch, match=r"'model\.encoder\.embed_positions\.weight' has requires_grad=True "
                                                 r"in from_pretrained's model, False built"):
        load(framework_checkpoints("transformers") / "whisper", store, cls=transformers.WhisperForConditionalGeneration)


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
