"""The load format `snapcache` in a real vLLM (the CPU build, tools/check-vllm.sh): each load is a
new process (vllm_worker.py) on a model made here (vllm_models.py). Default loader, snapcache cold
and snapcache warm give the same greedy tokens and the same bytes in every parameter and buffer
after process_weights_after_loading; the warm load opens no checkpoint file; changes that must
miss miss and say why; a damaged entry is refused and rebuilt; two TP ranks agree; `vllm serve` with
the load format publishes, then hits, and answers with the default loader's tokens.

Skipped where vLLM is not installed (the project's own venv): tools/check-vllm.sh runs them."""

import json
import os
import pathlib
import shutil
import signal
import socket
import subprocess
import sys
import time
from typing import Any

import pytest

# A module of vLLM's own: this test folder, also named vllm, is a namespace package where vLLM is not
# installed, and importorskip("vllm") would find it.
pytest.importorskip("vllm.model_executor.model_loader",
                    reason="vLLM is not installed here; tools/check-vllm.sh runs these tests in its venv")

import snapcache  # noqa: E402
from group_worker import flip_a_byte  # noqa: E402
from vllm_models import W8A8_QUANTIZATION  # noqa: E402

HERE = pathlib.Path(__file__).resolve().parent
MODELS = ("llama", "tied", "moe", "w8a8")


def run(model, *, load_format="snapcache", cache=None, extra=None, tp=1, dtype="bfloat16", hf_overrides=None,
        expect_failure=False) -> Any:
    """One load in a new process: {"tokens", "digests": [per rank], "reports": [per rank], "opened", "log"}
    (vllm_worker.py)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SNAPCACHE_")}
    if cache is not None:
        env["SNAPCACHE_DIR"] = str(cache)
    args = [sys.executable, str(HERE / "vllm_worker.py"), str(model), "--load-format", load_format,
            "--extra", json.dumps(extra or {}), "--tp", str(tp), "--dtype", dtype]
    if hf_overrides is not None:
        args += ["--hf-overrides", json.dumps(hf_overrides)]
    done = subprocess.run(args, capture_output=True, text=True, env=env, timeout=900)
    log = done.stdout + done.stderr
    if expect_failure:
        assert done.returncode != 0, log[-4000:]
        return {"log": log}
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    assert done.returncode == 0 and lines, f"exit {done.returncode}\n{log[-6000:]}"
    result = json.loads(lines[-1][len("RESULT "):])
    result["log"] = log
    return result


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    directory = tmp_path_factory.mktemp("vllm-models")
    subprocess.run([sys.executable, str(HERE / "vllm_models.py"), str(directory)], check=True,
                   stdout=subprocess.DEVNULL)
    return directory


@pytest.fixture(scope="module")
def loads(models, tmp_path_factory):
    """name -> (the default loader's result, snapcache cold, snapcache warm, the cache), each once."""
    done = {}

    def get(name):
        if name not in done:
            cache = tmp_path_factory.mktemp(f"cache-{name}")
            default = run(models / name, load_format="auto")
            cold = run(models / name, cache=cache)
            warm = run(models / name, cache=cache)
            done[name] = default, cold, warm, cache
        return done[name]

    return get


@pytest.mark.parametrize("name", MODELS)
def test_cold_and_warm_are_the_default_loaders_model(loads, name):
    default, cold, warm, _ = loads(name)
    assert default["reports"] == [None]  # vLLM's own loader: no snapcache report
    assert cold["reports"][0]["path"] == "miss", cold["reports"]
    assert warm["reports"][0]["path"] == "hit", warm["reports"]
    assert cold["tokens"] == default["tokens"] and warm["tokens"] == default["tokens"]
    assert len(default["digests"][0]) > 10
    assert cold["digests"] == default["digests"]
    assert warm["digests"] == default["digests"]
    # While the loader ran, the cold load read the checkpoint (so the watch sees opens); the warm one
    # opened no weight file.
    weights = [n for n in cold["opened"] if n.endswith(".safetensors")]
    assert weights, f"the cold load opened no checkpoint file: the watch saw {cold['opened']}"
    assert [n for n in warm["opened"] if n.endswith(".safetensors")] == [], warm["opened"]
    assert "snapcache: loading weights took" in warm["log"]


def test_a_changed_dtype_misses_and_says_so(loads, models, tmp_path):
    *_, cache = loads("llama")
    mine = tmp_path / "cache"
    shutil.copytree(cache, mine)
    half = run(models / "llama", cache=mine, dtype="float16")
    report = half["reports"][0]
    assert report["path"] == "miss" and "dtype bfloat16 -> float16" in report["reason"], report


def test_a_changed_quantization_config_misses_naming_the_field(loads, models, tmp_path):
    default, *_, cache = loads("w8a8")
    mine = tmp_path / "cache"
    shutil.copytree(cache, mine)
    changed = json.loads(json.dumps(W8A8_QUANTIZATION))
    changed["config_groups"]["group_0"]["weights"]["observer"] = "mse"
    result = run(models / "w8a8", cache=mine, hf_overrides={"quantization_config": changed})
    report = result["reports"][0]
    assert report["path"] == "miss", report
    assert 'option hf_config.quantization_config.config_groups.group_0.weights.observer "minmax" -> "mse"' \
        in report["reason"], report
    assert result["tokens"] == default["tokens"]


def test_a_rewritten_shard_misses(models, tmp_path):
    model = tmp_path / "llama"
    shutil.copytree(models / "llama", model)
    cache = tmp_path / "cache"
    assert run(model, cache=cache)["reports"][0]["path"] == "miss"
    shard = model / "model-00001-of-00002.safetensors"
    data = bytearray(shard.read_bytes())
    shard.write_bytes(data)  # the same bytes, written again: hashed once, and the entry serves
    report = run(model, cache=cache)["reports"][0]
    assert report["path"] == "hit", report
    assert "1 checkpoint file changed identity since entry" in report["reason"], report
    data[-1] ^= 0xFF  # other bytes: a miss that names the file
    shard.write_bytes(data)
    report = run(model, cache=cache)["reports"][0]
    assert report["path"] == "miss", report
    assert "checkpoint model-00001-of-00002.safetensors modified" in report["reason"], report


def damage(cache, entry_id):
    flip_a_byte(snapcache.Store.open(snapcache.Config(directory=cache)).entry_path(entry_id))


def test_a_damaged_entry_is_refused_and_rebuilt(loads, models, tmp_path):
    default, cold, _, cache = loads("llama")
    mine = tmp_path / "cache"
    shutil.copytree(cache, mine)
    damage(mine, cold["reports"][0]["entry_id"])
    refused = run(models / "llama", cache=mine)
    report = refused["reports"][0]
    assert report["path"] == "fallback" and "damaged" in report["reason"], report
    assert refused["tokens"] == default["tokens"] and refused["digests"] == default["digests"]
    rebuilt = run(models / "llama", cache=mine)
    assert rebuilt["reports"][0]["path"] == "hit", rebuilt["reports"]
    assert rebuilt["digests"] == default["digests"]


def test_an_unusable_cache_directory_falls_back_with_the_reason_in_vllms_log(loads, models, tmp_path):
    default, *_ = loads("llama")
    not_a_directory = tmp_path / "file"
    not_a_directory.write_text("")
    result = run(models / "llama", extra={"cache_dir": str(not_a_directory)})
    report = result["reports"][0]
    assert report["path"] in ("fallback", "ineligible") and str(not_a_directory) in report["reason"], report
    assert result["tokens"] == default["tokens"] and result["digests"] == default["digests"]
    assert str(not_a_directory) in result["log"]  # the library's line, in vLLM's log


def test_disabled_by_the_extra_config(loads, models, tmp_path):
    default, *_ = loads("llama")
    result = run(models / "llama", cache=tmp_path / "cache", extra={"disable": True})
    assert result["reports"][0]["path"] == "ineligible", result["reports"]
    assert result["tokens"] == default["tokens"]
    assert not (tmp_path / "cache").exists() or not any((tmp_path / "cache").rglob("data-*"))


def test_a_missing_checkpoint_is_vllms_own_error(models, tmp_path):
    model = tmp_path / "no-weights"
    model.mkdir()
    for name in ("config.json", "tokenizer.json", "tokenizer_config.json"):
        shutil.copy(models / "llama" / name, model / name)
    failed = run(model, cache=tmp_path / "cache", expect_failure=True)
    assert "Cannot find any model weights" in failed["log"], failed["log"][-3000:]


def test_two_tp_ranks_agree_and_fall_back_together(loads, models, tmp_path):
    *_, cache = loads("llama")
    mine = tmp_path / "cache"
    shutil.copytree(cache, mine)
    cold = run(models / "llama", cache=mine, tp=2)
    assert [r["path"] for r in cold["reports"]] == ["miss", "miss"], cold["reports"]
    assert "TP size 1 -> 2" in cold["reports"][0]["reason"]
    assert cold["reports"][0]["group"] == cold["reports"][1]["group"] and cold["reports"][0]["group"]
    warm = run(models / "llama", cache=mine, tp=2)
    assert [r["path"] for r in warm["reports"]] == ["hit", "hit"], warm["reports"]
    assert warm["tokens"] == cold["tokens"] and warm["digests"] == cold["digests"]
    assert warm["digests"][0] != warm["digests"][1]  # each rank its own shard
    damage(mine, warm["reports"][1]["entry_id"])
    after = run(models / "llama", cache=mine, tp=2)
    assert [r["path"] for r in after["reports"]] == ["fallback", "fallback"], after["reports"]
    assert after["reports"][0]["group"].startswith("rank 1: snapshot unusable (")
    assert after["tokens"] == cold["tokens"] and after["digests"] == cold["digests"]


def test_the_load_format_is_an_installed_plugin_and_refuses_unknown_keys():
    from importlib.metadata import entry_points

    plugins = {e.name: e.value for e in entry_points(group="vllm.general_plugins")}
    assert plugins.get("snapcache") == "snapcache.vllm:register"
    import snapcache.vllm
    from vllm.config.load import LoadConfig
    from vllm.model_executor.model_loader import get_model_loader

    snapcache.vllm.register()
    with pytest.raises(ValueError, match=r"Unexpected extra config keys for load format snapcache: \['cach_dir'\]"):
        get_model_loader(LoadConfig(load_format="snapcache", model_loader_extra_config={"cach_dir": "/x"}))
    with pytest.raises(ValueError, match=r"model_loader_extra_config\['disable'\] must be a bool"):
        get_model_loader(LoadConfig(load_format="snapcache", model_loader_extra_config={"disable": "yes"}))
    loader = get_model_loader(LoadConfig(load_format="snapcache", model_loader_extra_config={
        "cache_dir": "/x", "enable_multithread_load": True}))
    # The default loader's own keys go to it (the cold path), this loader's stay here.
    assert loader.default_loader.load_config.model_loader_extra_config == {"enable_multithread_load": True}
    assert loader.default_loader.load_config.load_format == "auto"


def serve_and_complete(model, cache, log_path):
    """`vllm serve MODEL --load-format snapcache` as a user starts it (its own processes: the API
    server, the engine), then each of the worker's prompts completed greedily over HTTP. Returns
    the tokens and the server's log."""
    import urllib.error
    import urllib.request

    from vllm_worker import PROMPTS

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if not k.startswith("SNAPCACHE_")}
    env.update(SNAPCACHE_DIR=str(cache), HF_HUB_OFFLINE="1", VLLM_CPU_KVCACHE_SPACE="1", MKL_CBWR="AUTO,STRICT")
    command = [str(pathlib.Path(sys.executable).parent / "vllm"), "serve", str(model), "--load-format", "snapcache",
               "--host", "127.0.0.1", "--port", str(port), "--dtype", "bfloat16", "--enforce-eager",
               "--max-model-len", "256", "--max-num-seqs", "4", "--seed", "0"]
    url = f"http://127.0.0.1:{port}"
    with open(log_path, "w") as log:
        server = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        deadline = time.monotonic() + 600
        while True:
            assert server.poll() is None, f"vllm serve exited {server.returncode}\n{log_path.read_text()[-6000:]}"
            assert time.monotonic() < deadline, f"vllm serve not ready in 600 s\n{log_path.read_text()[-6000:]}"
            try:
                with urllib.request.urlopen(url + "/health", timeout=5) as answer:
                    if answer.status == 200:
                        break
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                time.sleep(1)
        tokens = []
        for prompt in PROMPTS:
            body = json.dumps({"model": str(model), "prompt": prompt, "max_tokens": 8, "temperature": 0.0,
                               "ignore_eos": True, "return_token_ids": True}).encode()
            request = urllib.request.Request(url + "/v1/completions", data=body,
                                             headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(request, timeout=300) as answer:
                tokens.append(json.loads(answer.read())["choices"][0]["token_ids"])
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()
    return tokens, log_path.read_text()


def test_vllm_serve_with_the_load_format_publishes_then_hits(loads, models, tmp_path):
    default, *_ = loads("llama")
    cache = tmp_path / "cache"
    cold, cold_log = serve_and_complete(models / "llama", cache, tmp_path / "cold.log")
    assert "snapcache: loading weights took" in cold_log and "seconds (miss)" in cold_log, cold_log[-6000:]
    assert cold == default["tokens"]
    warm, warm_log = serve_and_complete(models / "llama", cache, tmp_path / "warm.log")
    assert "seconds (hit)" in warm_log, warm_log[-6000:]
    assert warm == default["tokens"]
