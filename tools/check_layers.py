#!/usr/bin/env python3
"""Fails when the sources cross the architecture that docs/design.md describes.

Three rules, each read from the page it checks, so the page and the code cannot drift apart:

1. Layers. design.md's layer table lists the layers lowest first ("each uses only the ones above
   it"). A file in src/<layer>/ may include private headers ("<other>/...") only of its own layer
   or of a layer above it in the table. A layer whose libtorch column says "no" includes no torch
   header (ATen, c10, torch).
2. The seam. Disk access goes through FileSystem (design.md, "Every disk access goes through
   FileSystem"): a raw POSIX file call (::open, ::pread, ::rename, opendir, ...) appears only in
   the files listed in RAW_FILE_CALLS below, each with the reason it is outside the seam.
3. The public headers. The list in design.md ("The public API is `include/snapcache/` ...")
   names exactly the headers in include/snapcache/ and its subdirectories (extend/tier.h, ...).

Run from anywhere: python3 tools/check_layers.py. CI runs it (tools/check.sh).
"""
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
DESIGN = ROOT / "docs" / "design.md"

# Files that may call the file system directly, and why. Everything else goes through FileSystem.
RAW_FILE_CALLS = {
    "src/util/posix_file_system.cpp": "the seam itself",
    "src/util/page_map.cpp": "/proc/self/pagemap: this process's own page tables, not a file",
    "src/ipc/unix_socket.cpp": "sockets and their lock files in a private socket directory, not the cache",
    "src/ipc/private_dir.cpp": "the private socket directory, not the cache",
    "src/donor/list_donors.cpp": "lists the socket directory, not the cache",
    "src/distributed/store_connection.cpp": "a TCP socket",
    "src/archive/transfer.cpp": "the caller's archive stream (a pipe, a terminal or a file the caller opened)",
    "src/pipeline/deferred_layout.cpp": "an anonymous mapping (address space, no file)",
    "src/gpu/pinned_pool.cpp": "anonymous mappings for pinned staging buffers (address space, no file)",
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


def strip_comments(text):
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    text = re.sub(r"//[^\n]*", "", text)
    return re.sub(r'"(?:\\.|[^"\\\n])*"', '""', text)


def layer_table(design):
    layers = []  # (folder name, uses torch)
    for line in design.splitlines():
        m = re.match(r"\|\s*[^|]+\|\s*`src/([a-z_]+)/`\s*\|[^|]*\|\s*([^|]+)\|", line)
        if m:
            layers.append((m.group(1), not m.group(2).strip().startswith("no")))
    return layers


def public_header_list(design):
    m = re.search(r"The public API is `include/snapcache/`(.*?)\. The shared library", design, re.S)
    return set(re.findall(r"`([a-z_/]+\.h)`", m.group(1))) if m else set()


def main():
    design = DESIGN.read_text()
    problems = []
    layers = layer_table(design)
    if not layers:
        problems.append("docs/design.md: no layer table found")
    rank = {name: i for i, (name, _) in enumerate(layers)}
    torch_free = {name for name, torch in layers if not torch}

    for folder in ["src", "tools", "python/bindings"]:
        for path in sorted((ROOT / folder).rglob("*")):
            if path.suffix not in (".cpp", ".h", ".cu"):
                continue
            rel = path.relative_to(ROOT).as_posix()
            raw = path.read_text(errors="replace")
            code = strip_comments(raw)
            layer = rel.split("/")[1] if rel.startswith("src/") else None
            if layer is not None and layer not in rank and path.parent != ROOT / "src":
                problems.append(f"{rel}: src/{layer}/ is not a layer in docs/design.md's table")
            for inc in INCLUDE.findall(raw):
                top = inc.split("/")[0]
                if layer in rank and top in rank and rank[top] > rank[layer]:
                    problems.append(f"{rel}: includes {inc}, but {top} is below {layer} in docs/design.md's layer table")
                if layer in torch_free and inc.startswith(TORCH):
                    problems.append(f"{rel}: includes {inc}, but the {layer} layer is without libtorch")
            if rel not in RAW_FILE_CALLS:
                for m in RAW_CALL.finditer(code):
                    line = code.count("\n", 0, m.start()) + 1
                    problems.append(f"{rel}:{line}: calls {m.group(1) or m.group(2)} directly; use FileSystem "
                                    "(or list the file in tools/check_layers.py with the reason)")
    for rel in RAW_FILE_CALLS:
        if not (ROOT / rel).exists():
            problems.append(f"tools/check_layers.py: {rel} is listed but does not exist")

    listed = public_header_list(design)
    public = ROOT / "include" / "snapcache"
    present = {p.relative_to(public).as_posix() for p in public.rglob("*.h")}
    for name in sorted(present - listed):
        problems.append(f"docs/design.md: the public header list lacks {name}")
    for name in sorted(listed - present):
        problems.append(f"docs/design.md: the public header list names {name}, which include/snapcache/ lacks")

    for p in problems:
        print(p, file=sys.stderr)
    if problems:
        print(f"check_layers: {len(problems)} problem(s)", file=sys.stderr)
        return 1
    print(f"check_layers: {len(layers)} layers, {len(present)} public headers, the seam holds")
    return 0


if __name__ == "__main__":
    sys.exit(main())
