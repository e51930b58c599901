"""The package as installed: built for one torch and requiring it, stubs that match the module, the
command on the same library."""

import importlib.metadata
import pathlib
import re
import subprocess
import sys

import pytest

import snapcache
from conftest import REPO, run_python

PACKAGE = pathlib.Path(snapcache.__file__).resolve().parent


def test_the_torch_pin_is_cmakes():
    tomllib = pytest.importorskip("tomllib")
    pinned = (REPO / "cmake" / "torch-version").read_text().split()[0]
    assert snapcache._core.TORCH_PINNED == snapcache.TORCH_PINNED == pinned
    # The wheel's torch requirement is not written in pyproject.toml but comes from the torch it is
    # built against (python/build_support).
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert "dependencies" in project["dynamic"] and "dependencies" not in project
    # The pin is one of the releases a Python build accepts.
    first, last = (REPO / "cmake" / "torch-supported").read_text().split()[:2]
    minor = tuple(int(p) for p in pinned.split(".")[:2])
    assert tuple(int(p) for p in first.split(".")) <= minor <= tuple(int(p) for p in last.split("."))


def test_the_module_is_built_for_the_running_torch():
    import torch

    assert snapcache.TORCH_BUILT == snapcache._core.TORCH_BUILT
    assert re.fullmatch(r"[0-9]+\.[0-9]+\.[0-9]+", snapcache.TORCH_BUILT)
    assert torch.__version__.split("+")[0] == snapcache.TORCH_BUILT
    assert snapcache.current_torch_identity().version.split("+")[0] == snapcache.TORCH_BUILT
    if (PACKAGE / "_torch_version.txt").exists():
        assert (PACKAGE / "_torch_version.txt").read_text().strip() == snapcache.TORCH_BUILT


def test_the_installed_metadata_requires_the_torch_it_was_built_with():
    if not (PACKAGE / "bin").exists():
        pytest.skip("not an installed wheel (the build tree's package)")
    requires = importlib.metadata.requires("snapcache") or []
    torch_requirements = [r for r in requires if re.match(r"torch\b", r)]
    # Exactly that release (no C++ ABI across torch releases); the extras' requirements aside.
    assert torch_requirements == [f"torch=={snapcache.TORCH_BUILT}"], requires
    assert importlib.metadata.version("torch").split("+")[0] == snapcache.TORCH_BUILT


def test_the_metadata_provider_asks_the_environment_for_torch():
    """What pip install . writes into the wheel (pyproject.toml's provider): this environment's torch."""
    import torch

    out = run_python(["-c", "import sys; sys.path.insert(0, sys.argv[1]); import snapcache_torch_requirement as p; "
                            "print(p.dynamic_metadata('dependencies', {}))", str(REPO / "python" / "build_support")],
                     env={"PYTHONPATH": "/nonexistent"})  # ignored, as pip's isolated build's is
    assert out.strip() == str([f"torch=={torch.__version__.split('+')[0]}"])


def test_another_torch_is_refused_at_import(tmp_path):
    """A package whose module was built for another torch says so when imported, instead of failing
    on an undefined symbol (or worse, running)."""
    if not (PACKAGE / "_torch_version.txt").exists():
        pytest.skip("not a built package")
    fake = tmp_path / "snapcache"
    fake.mkdir()
    (fake / "__init__.py").write_text((PACKAGE / "__init__.py").read_text())
    (fake / "_torch_version.txt").write_text("1.99.0\n")
    probe = subprocess.run([sys.executable, "-c", "import snapcache"], cwd=tmp_path, capture_output=True, text=True,
                           env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(tmp_path)})
    assert probe.returncode != 0
    assert "ImportError: snapcache was built against torch 1.99.0 and needs exactly that torch" in probe.stderr
    import torch

    assert f"this environment has torch {torch.__version__}" in probe.stderr


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


def test_a_plain_pip_build_says_on_the_terminal_what_it_builds_and_how_long_it_took(tmp_path):
    # pip hides a build backend's output unless -v; the build writes to the terminal instead
    # (python/build_support/tell-terminal.sh). A real terminal: pip runs in a pseudo-terminal that
    # is its controlling terminal, as in a shell. Seconds: build/python exists after tools/python.sh.
    if not (REPO / "build" / "python" / "CMakeCache.txt").exists():
        pytest.skip("no build/python to rebuild (tools/python.sh makes it)")
    pty = pytest.importorskip("pty")
    import os

    env = dict(os.environ, CXX=os.environ.get("CXX", "c++"))
    argv = [sys.executable, "-m", "pip", "wheel", "-q", "--no-build-isolation", "--no-deps", "-w", str(tmp_path),
            str(REPO)]
    pid, master = pty.fork()
    if pid == 0:  # the child: its controlling terminal is the pseudo-terminal
        os.chdir(tmp_path)
        os.execve(argv[0], argv, env)
    seen = b""
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not data:
            break
        seen += data
    _, status = os.waitpid(pid, 0)
    text = seen.decode(errors="replace")
    assert os.waitstatus_to_exitcode(status) == 0, text
    assert list(tmp_path.glob("snapcache-*.whl")), text
    assert re.search(r"snapcache: building libsnapcache, its Python module and the snapcache command against "
                     r"torch \S+ in \S+ \(a first build: .*pip install -v shows each step\)", text), text
    assert re.search(r"snapcache: built the module and the command in \d+ s", text), text
