"""The package as installed: one torch pin, stubs that match the module, the command on the same
library."""

import importlib.metadata
import pathlib
import re

import pytest

import snapcache
from conftest import REPO, run_python

PACKAGE = pathlib.Path(snapcache.__file__).resolve().parent


def test_the_torch_pin_is_cmakes():
    tomllib = pytest.importorskip("tomllib")
    pinned = (REPO / "cmake" / "torch-version").read_text().split()[0]
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert f"torch=={pinned}" in project["dependencies"]
    assert snapcache._core.TORCH_PINNED == pinned
    import torch

    assert torch.__version__.split("+")[0] == pinned


def test_the_stubs_name_what_the_module_has():
    stub = (PACKAGE / "_core.pyi").read_text()
    stubbed = set(re.findall(r"^(?:class|def) (\w+)", stub, re.M)) | set(re.findall(r"^(\w+)\s*[:=]", stub, re.M))
    stubbed = {n for n in stubbed if not n.startswith("_")}
    public = {n for n in dir(snapcache._core) if not n.startswith("_")}
    assert public - stubbed == set(), "missing from _core.pyi"
    assert stubbed - public == set(), "in _core.pyi but not in the module"
    assert (PACKAGE / "py.typed").exists()


def test_everything_has_a_docstring():
    undocumented = [n for n in dir(snapcache._core) if not n.startswith("_")
                    and callable(getattr(snapcache._core, n)) and not (getattr(snapcache._core, n).__doc__ or "").strip()]
    assert undocumented == []


def test_the_module_and_the_command_use_one_library():
    if not (PACKAGE / "bin").exists():
        pytest.skip("not an installed wheel (the build tree's package)")
    libraries = sorted(p.name for p in PACKAGE.glob("libsnapcache.so*"))
    assert libraries == ["libsnapcache.so"]
    assert (PACKAGE / "bin" / "snapcache").exists()


def test_the_command_runs(tmp_path):
    if not (PACKAGE / "bin").exists():
        pytest.skip("not an installed wheel (the build tree's package)")
    out = run_python(["-m", "snapcache._cli", "config"], env={"SNAPCACHE_DIR": str(tmp_path / "c")})
    assert str(tmp_path / "c") in out
    # The console script is declared; where pip put it depends on the install (a venv's bin, or
    # --target's own bin directory).
    scripts = [ep for ep in importlib.metadata.entry_points(group="console_scripts") if ep.name == "snapcache"]
    assert [ep.value for ep in scripts] == ["snapcache._cli:main"]


def test_the_framework_extras_pin_what_setup_installs_for_the_tests():
    tomllib = pytest.importorskip("tomllib")
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    setup = (REPO / "tools" / "setup.sh").read_text()
    pinned = set(re.findall(r'"([\w-]+==[\w.]+)"', setup.split("python_packages=(", 1)[1].split(")", 1)[0]))
    for extra in ("transformers", "diffusers"):
        assert extras[extra] and set(extras[extra]) <= pinned, extra
        assert set(extras[extra]) <= set(extras["test"]), extra
