#!/usr/bin/env python3
"""Fails when the sources cross the architecture that src/CMakeLists.txt declares.

The build is the one statement of the layer graph: each `snapcache_layer(snapcache_<layer> ...)`
there is a folder src/<layer>/, declared after the layers it links (lowest first), and its
`target_link_libraries` names the layers it uses. The compiler already refuses an include of a
layer that is not linked (each layer sees only the include roots of what it links); this check
says so in words, and checks what the compiler cannot:

1. Layers. A file in src/<layer>/ includes private headers ("<other>/...") only of its own layer
   or of a layer it links, directly or through another; each layer links directly only layers
   whose headers it includes, and is declared after them; every source in src/<layer>/ is one of
   its layer's sources. A layer that does not reach libtorch (snapcache_dep::torch) through its
   links includes no torch header (ATen, c10, torch).
2. The seam. Disk access goes through FileSystem: a raw POSIX file call (::open, ::pread,
   ::rename, opendir, ...) appears only in the files listed in RAW_FILE_CALLS below, each with the
   reason it is outside the seam.

Run from anywhere: python3 tools/check_layers.py. CI runs it (tools/check.sh).
"""
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
CMAKE = ROOT / "src" / "CMakeLists.txt"

# Files that may call the file system directly, and why. Everything else goes through FileSystem.
RAW_FILE_CALLS = {
    "src/util/posix_file_system.cpp": "the seam itself",
    "src/util/page_map.cpp": "/proc/self/pagemap: this process's own page tables, not a file",
    "src/ipc/unix_socket.cpp": "sockets and their lock files in a private socket directory, not the cache",
    "src/ipc/private_dir.cpp": "the private socket directory, not the cache",
    "src/donor/list_donors.cpp": "lists the socket directory, not the cache",
    "src/distributed/store_connection.cpp": "a TCP socket",
    "src/archive/transfer.cpp": "the caller's archive stream (a pipe, a terminal or a file the caller opened)",
    "src/archive/signing.cpp": "the user's key files, not the cache (created 0600 with O_EXCL, which FileSystem's modes do not say)",
    "src/methods/deferred_layout.cpp": "an anonymous mapping (address space, no file)",
    "src/util/host_memory.cpp": "anonymous huge-page mappings (address space, no file) and the kernel's /proc/meminfo",
    "tools/snapcache/commands/import.cpp": "the user's archive file",
    "tools/snapcache/commands/export.cpp": "the user's archive file",
    "tools/demo/demo_main.cpp": "the demo's own work directory",
}

RAW_CALL = re.compile(
    r"(?<![\w.>])(?:::)(open|openat|creat|pread|pwrite|read|write|readv|writev|rename|renameat|unlink|unlinkat|"
    r"mkdir|mkdirat|rmdir|stat|lstat|fstat|fstatat|ftruncate|truncate|fsync|fdatasync|mmap|link|linkat|symlink|"
    r"close|flock|utimensat|futimens)\s*\(|(?<![\w.>:])(opendir|fdopendir|fopen)\s*\("
)
INCLUDE = re.compile(r'^\s*#\s*include\s*[<"]([^">]+)[">]', re.M)
TORCH = ("ATen/", "c10/", "torch/")
TORCH_TARGET = "snapcache_dep::torch"


def strip_comments(text):
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    return re.sub(r"//[^\n]*", "", text)


def strip_strings(code):
    return re.sub(r'"(?:\\.|[^"\\\n])*"', '""', code)


def cmake_calls(text, command):
    """The argument lists of each call of `command`, in order (comments dropped)."""
    text = re.sub(r"#[^\n]*", "", text)
    return [m.group(1).split() for m in re.finditer(command + r"\s*\(([^)]*)\)", text)]


def layer_graph(cmake):
    """[(layer, sources)] in declaration order, and each layer's direct links (layers, or the torch
    target), from src/CMakeLists.txt."""
    layers = []
    for args in cmake_calls(cmake, "snapcache_layer"):
        layers.append((args[0].removeprefix("snapcache_"), args[1:]))
    names = {name for name, _ in layers}
    links = {name: set() for name in names}
    for args in cmake_calls(cmake, "target_link_libraries"):
        target = args[0].removeprefix("snapcache_")
        if target not in names:
            continue
        for dep in args[1:]:
            if dep == TORCH_TARGET:
                links[target].add(TORCH_TARGET)
            elif dep.startswith("snapcache_") and dep.removeprefix("snapcache_") in names:
                links[target].add(dep.removeprefix("snapcache_"))
    return layers, links


def reach(links, layer, seen=None):
    seen = set() if seen is None else seen
    for dep in links.get(layer, ()):
        if dep not in seen:
            seen.add(dep)
            reach(links, dep, seen)
    return seen


def main():
    problems = []
    cmake = CMAKE.read_text()
    layers, links = layer_graph(cmake)
    if not layers:
        problems.append("src/CMakeLists.txt: no snapcache_layer() found")
    order = {name: i for i, (name, _) in enumerate(layers)}
    sources = {name: {f"src/{s}" for s in srcs if s.endswith((".cpp", ".cu"))} for name, srcs in layers}
    for args in cmake_calls(cmake, "target_sources"):  # a layer's sources chosen by configuration
        if args[0].removeprefix("snapcache_") in sources:
            sources[args[0].removeprefix("snapcache_")] |= {f"src/{s}" for s in args[1:] if s.endswith((".cpp", ".cu"))}
    for name, _ in layers:
        for dep in links[name] - {TORCH_TARGET}:
            if order[dep] > order[name]:
                problems.append(f"src/CMakeLists.txt: {name} links {dep}, which is declared after it")
    included = {name: set() for name in order}

    for folder in ["src", "tools", "python/bindings"]:
        for path in sorted((ROOT / folder).rglob("*")):
            if path.suffix not in (".cpp", ".h", ".cu"):
                continue
            rel = path.relative_to(ROOT).as_posix()
            raw = path.read_text(errors="replace")
            code = strip_comments(raw)  # includes are read here
            layer = rel.split("/")[1] if rel.startswith("src/") and path.parent != ROOT / "src" else None
            if layer is not None and layer not in order:
                problems.append(f"{rel}: src/{layer}/ is not a layer in src/CMakeLists.txt")
            if layer in order:
                reachable = reach(links, layer)
                if path.suffix != ".h" and rel not in sources[layer]:
                    problems.append(f"{rel}: not among the {layer} layer's sources in src/CMakeLists.txt")
                for inc in INCLUDE.findall(code):
                    top = inc.split("/")[0]
                    if top in order and top != layer:
                        included[layer].add(top)
                        if top not in reachable:
                            problems.append(f"{rel}: includes {inc}, but the {layer} layer does not link {top}")
                    if inc.startswith(TORCH) and TORCH_TARGET not in reachable:
                        problems.append(f"{rel}: includes {inc}, but the {layer} layer is without libtorch")
            if rel not in RAW_FILE_CALLS:
                calls = strip_strings(code)
                for m in RAW_CALL.finditer(calls):
                    line = calls.count("\n", 0, m.start()) + 1
                    problems.append(f"{rel}:{line}: calls {m.group(1) or m.group(2)} directly; use FileSystem "
                                    "(or list the file in tools/check_layers.py with the reason)")
    for name in order:
        for dep in sorted(links[name] - {TORCH_TARGET} - included[name]):
            problems.append(f"src/CMakeLists.txt: {name} links {dep}, whose headers it does not include")
    for rel in RAW_FILE_CALLS:
        if not (ROOT / rel).exists():
            problems.append(f"tools/check_layers.py: {rel} is listed but does not exist")

    for p in problems:
        print(p, file=sys.stderr)
    if problems:
        print(f"check_layers: {len(problems)} problem(s)", file=sys.stderr)
        return 1
    torch_free = [name for name in order if TORCH_TARGET not in reach(links, name)]
    print(f"check_layers: {len(layers)} layers ({', '.join(torch_free)} without libtorch), the seam holds")
    return 0


if __name__ == "__main__":
    sys.exit(main())
