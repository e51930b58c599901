#!/usr/bin/env python3
"""Fails when the shared library exports a snapcache symbol that is not the public API.

The public API is what include/snapcache/ declares, all of it in namespace snapcache itself; every
layer's own code lives in a namespace named after its layer (snapcache::store, snapcache::gpu, ...:
the layers src/CMakeLists.txt declares) or in an anonymous one. So an exported symbol whose name
begins snapcache::<layer>:: or lies in an anonymous namespace is an internal one that leaked (nvcc's
objects, say, which the C++ visibility preset does not cover).

    python3 tests/surface/check_exports.py build/default/src/libsnapcache.so
"""
import pathlib
import re
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]


def layers():
    cmake = re.sub(r"#[^\n]*", "", (ROOT / "src" / "CMakeLists.txt").read_text())
    return {m.group(1) for m in re.finditer(r"snapcache_layer\s*\(\s*snapcache_([a-z_]+)", cmake)}


def main():
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    out = subprocess.run(["nm", "-D", "--defined-only", "-C", sys.argv[1]], check=True, capture_output=True,
                         text=True).stdout
    internal = layers()
    if not internal:
        print("check_exports: no layers found in src/CMakeLists.txt", file=sys.stderr)
        return 1
    exported, leaked = 0, []
    for line in out.splitlines():
        name = line.split(" ", 2)[-1]
        if "snapcache::" not in name:
            continue
        exported += 1
        # The symbol's own name, before its parameter list: "snapcache::gpu::launch_transpose(...)".
        head = name.split("(", 1)[0]
        parts = re.findall(r"snapcache::([A-Za-z_]+)::", head)
        if "(anonymous namespace)" in head or any(part in internal for part in parts):
            leaked.append(name)
    for name in leaked:
        print(f"exported but internal: {name}", file=sys.stderr)
    if leaked:
        print(f"check_exports: {len(leaked)} internal symbol(s) of {exported} exported", file=sys.stderr)
        return 1
    print(f"check_exports: {exported} snapcache symbols exported, none internal")
    return 0


if __name__ == "__main__":
    sys.exit(main())
