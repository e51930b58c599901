"""The wheel's torch requirement, from the torch it is built against: a scikit-build-core dynamic
metadata provider (pyproject.toml, [tool.scikit-build.metadata.dependencies]).

`pip install .` builds snapcache against the torch of the environment it installs into (CMake asks
that interpreter for torch, cmake/SnapcacheDependencies.cmake), so this asks the same interpreter
the same way: sys.executable, without PYTHONPATH and PYTHONNOUSERSITE, which pip's isolated build
environment sets to hide the target environment's packages. The requirement is that exact release,
`torch==X.Y.Z`: the extension module and libsnapcache.so link libtorch's C++ API, which keeps no
ABI from one release to the next, a patch release included (what torchvision and torchaudio declare
for the same reason); `torch==X.Y.Z` matches local builds such as 2.14.1+cu130 too. The package
also refuses another torch when imported (snapcache/__init__.py), and the built module records
which one it was built for (snapcache.TORCH_BUILT).

The releases a Python build accepts are cmake/torch-supported's (first and last minor series,
inclusive); CMake enforces them too, and SNAPCACHE_ALLOW_ANY_TORCH=ON (a CMake define, or this
environment variable) lets another through.
"""

from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parent.parent.parent


def _environment_torch() -> str:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONNOUSERSITE")}
    probe = subprocess.run([sys.executable, "-c", "import torch; print(torch.__version__)"], env=env,
                           capture_output=True, text=True, check=False)
    if probe.returncode != 0 or not probe.stdout.strip():
        first, last = _supported()
        raise RuntimeError(
            f"snapcache: no torch in the environment of {sys.executable}: snapcache builds against the "
            f"environment's torch ({first} to {last}) and requires that one; install torch first, "
            f"e.g. pip install torch=={last}.*, then pip install snapcache.\n{probe.stderr.strip()[-2000:]}")
    return probe.stdout.strip().splitlines()[-1]


def _supported() -> tuple[str, str]:
    for line in (ROOT / "cmake" / "torch-supported").read_text().splitlines():
        if re.match(r"[0-9]", line):
            first, last = line.split()[:2]
            return first, last
    raise RuntimeError("snapcache: cmake/torch-supported names no torch releases")


def _minor(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in version.split(".")[:2])


def torch_requirement() -> str:
    version = _environment_torch()
    release = version.split("+")[0]  # 2.14.1+cu130 -> 2.14.1
    if not re.fullmatch(r"[0-9]+\.[0-9]+\.[0-9]+", release):
        raise RuntimeError(f"snapcache: cannot build against torch {version}: not a release (X.Y.Z)")
    first, last = _supported()
    allow_any = os.environ.get("SNAPCACHE_ALLOW_ANY_TORCH", "").upper() in ("1", "ON", "TRUE", "YES")
    if not allow_any and not _minor(first) <= _minor(release) <= _minor(last):
        raise RuntimeError(f"snapcache: the environment's torch is {version}; the Python package builds against "
                           f"torch {first} to {last} (cmake/torch-supported); install one of those first")
    return f"torch=={release}"


def dynamic_metadata(field: str, settings: Any = None, project: Any = None) -> list[str]:
    """scikit-build-core's provider hook: the `dependencies`, which are torch alone."""
    if field != "dependencies":
        raise RuntimeError(f"snapcache_torch_requirement provides `dependencies`, not {field!r}")
    return [torch_requirement()]


def get_requires_for_dynamic_metadata(_settings: Any = None) -> list[str]:
    return []
