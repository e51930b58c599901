#!/usr/bin/env python3
"""Fails when the docs point at what is not there, or docs/design.md says what a program can refute.

1. Links. Every relative link in README.md and docs/*.md ([text](path) or [text](path#anchor))
   names a file or folder of the tree, and its anchor, if any, is a heading of that Markdown file
   (GitHub's rule: lowercased, punctuation but `-` and `_` dropped, spaces to `-`).
2. docs/design.md, what can be checked without a build:
   - it is at most MAX_LINES lines, has no ordinal heading ("The fourth ...") and never says
     "session" (the design, not the history of the work: git keeps that);
   - every path it names (`src/...`, `include/...`, `tools/...`, `tests/...`, `bench/...`,
     `docs/...`, `python/...`, `cmake/...`, and in backticks a header by its include path, such as
     `store/entry_check.h` or `snapcache/extend/tier.h`) exists;
   - every name it puts in backticks that looks like code (`posix_file_system()`, `LoadPath`,
     `kMaxRankMessageBytes`, ...) is a word of src/, include/, tools/, tests/, python/, bench/ or
     cmake/ (or a system name listed in SYSTEM); a qualified one (`Store::open`) is written so
     somewhere, or its last part appears in a file that declares the scope (class, struct, enum
     or namespace);
   - the layers it lists in an HTML comment `<!-- layers-without-torch: a b ... -->` are exactly
     those of src/CMakeLists.txt that reach no snapcache_dep::torch (`<!-- layers-all: ... -->`:
     all of them, in their order), and a layer it names as "`x` layer", "layer `x`" or `src/x/`
     is one; both as tools/check_layers.py reads the graph.

Run from anywhere: python3 tools/check_docs.py. CI runs it (tools/check.sh).
"""
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
DESIGN = ROOT / "docs" / "design.md"
MAX_LINES = 200
CODE_DIRS = ["src", "include", "tools", "tests", "python", "bench", "cmake"]
PATH_ROOTS = ("src/", "include/", "tools/", "tests/", "bench/", "docs/", "python/", "cmake/", ".ci/")
# Names from the C library, POSIX, Linux or the CUDA runtime that design.md may name in backticks
# without their being spelled in this tree.
SYSTEM = {"O_DIRECT", "SIGBUS", "MAP_PRIVATE", "MAP_SHARED", "PROT_NONE", "LOCK_SH", "LOCK_EX", "LOCK_NB",
          "mincore", "flock", "fsync", "pread", "rename", "mmap", "posix_fallocate", "futimens", "fstat",
          "cudaHostRegister", "cudaHostAlloc", "dd"}
# Headers of other projects design.md may name.
EXTERNAL = ("ATen/", "c10/", "torch/csrc/", "cuda", "pybind11/")
ORDINAL = re.compile(r"^#+.*\b(first|second|third|fourth|fifth|sixth|seventh|eighth|ninth|tenth|eleventh|"
                     r"twelfth|[a-z]+teenth|twentieth|\d+(st|nd|rd|th))\b", re.I | re.M)
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)|!\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.S | re.M)
# A backticked word that looks like code: a call, a qualified name, a snake_case or CamelCase name.
IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(::[A-Za-z_~][A-Za-z0-9_]*)*(\(\))?$")


def slug(heading):
    text = re.sub(r"`", "", heading.strip().lower())
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path):
    seen, out = {}, set()
    text = FENCE.sub("", path.read_text())
    for m in re.finditer(r"^#{1,6}\s+(.*?)\s*#*\s*$", text, re.M):
        s = slug(m.group(1))
        n = seen.get(s, 0)
        out.add(s if n == 0 else f"{s}-{n}")
        seen[s] = n + 1
    return out


def check_links(problems):
    docs = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    for doc in docs:
        text = FENCE.sub(lambda m: "\n" * m.group(0).count("\n"), doc.read_text())
        for m in LINK.finditer(text):
            target = m.group(1) or m.group(2)
            if re.match(r"^[a-z]+:", target):  # http:, https:, mailto:
                continue
            line = text.count("\n", 0, m.start()) + 1
            where = f"{doc.relative_to(ROOT)}:{line}"
            file_part, _, anchor = target.partition("#")
            dest = doc if not file_part else (doc.parent / file_part).resolve()
            if not dest.exists():
                problems.append(f"{where}: link to {target}: no such file")
            elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                problems.append(f"{where}: link to {target}: no heading #{anchor} in {dest.relative_to(ROOT)}")


def code_words():
    """Each word of the sources, with the files (by number) it appears in."""
    words = {}
    files = [p for folder in CODE_DIRS for p in sorted((ROOT / folder).rglob("*"))
             if p.is_file() and p.suffix in (".h", ".cpp", ".cu", ".py", ".pyi", ".cmake", ".txt", ".sh", ".in")]
    for i, path in enumerate(files):
        for word in set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", path.read_text(errors="replace"))):
            words.setdefault(word, set()).add(i)
    return words, files


def qualified_name_exists(parts, files, words):
    """A::b: written so somewhere, or b appears in a file that declares class, struct, enum or
    namespace A (A's header)."""
    scope, member = parts[-2], parts[-1]
    literal = "::".join(parts)
    declares = re.compile(r"\b(?:class|struct|enum class|enum|namespace)\s+(?:SNAPCACHE_API\s+|\[\[\w+\]\]\s+)*"
                          r"(?:\w+::)*" + re.escape(scope) + r"\b")
    for i in set.intersection(words[scope], words[member]):
        text = files[i].read_text(errors="replace")
        if literal in text or (declares.search(text) and re.search(r"\b" + re.escape(member) + r"\b", text)):
            return True
    return False


def layers():
    sys.path.insert(0, str(ROOT / "tools"))
    import check_layers  # the one reading of src/CMakeLists.txt

    graph, links = check_layers.layer_graph(check_layers.CMAKE.read_text())
    names = [name for name, _ in graph]
    torch_free = {n for n in names if check_layers.TORCH_TARGET not in check_layers.reach(links, n)}
    return names, torch_free


def path_exists(name):
    name = name.rstrip("/").split(":")[0]
    candidates = [ROOT / name]
    if not name.startswith(PATH_ROOTS):
        candidates += [ROOT / "src" / name, ROOT / "include" / name, ROOT / "include" / "snapcache" / name]
    return any(c.exists() for c in candidates)


def check_design(problems):
    text = DESIGN.read_text()
    rel = DESIGN.relative_to(ROOT)
    lines = text.count("\n")
    if lines > MAX_LINES:
        problems.append(f"{rel}: {lines} lines, more than {MAX_LINES}")
    for m in ORDINAL.finditer(text):
        problems.append(f"{rel}:{text.count(chr(10), 0, m.start()) + 1}: an ordinal heading: {m.group(0)!r}")
    for m in re.finditer(r"\bsessions?\b", text, re.I):
        problems.append(f"{rel}:{text.count(chr(10), 0, m.start()) + 1}: says 'session'")

    words, files = code_words()
    layer_names, torch_free = layers()
    # Paths anywhere (in backticks, links or prose), and identifiers in backticks.
    for m in re.finditer(r"(?<![\w/.<>-])((?:\.ci|src|include|tools|tests|bench|docs|python|cmake)/[\w./+-]*[\w/])", text):
        if "<" in m.group(1) or not path_exists(m.group(1)):
            problems.append(f"{rel}:{text.count(chr(10), 0, m.start()) + 1}: names {m.group(1)}, which does not exist")
    for m in re.finditer(r"`([^`\n]+)`", text):
        token, line = m.group(1), text.count("\n", 0, m.start()) + 1
        if re.fullmatch(r"[\w.-]+/[\w./-]*\.(h|cpp|cu|py|txt|cmake|md|sh)", token):  # store/entry_check.h
            if not token.startswith(EXTERNAL) and not path_exists(token):
                problems.append(f"{rel}:{line}: names `{token}`, which does not exist")
            continue
        if not IDENT.match(token) or token in SYSTEM:
            continue
        base = token.removesuffix("()")
        if "_" not in base and "::" not in base and not re.search(r"[a-z][A-Z]|^[A-Z]", base):
            continue  # a plain word (`hit`, `ls`): prose, not a name to find
        parts = [part.lstrip("~") for part in base.split("::")]
        missing = [part for part in parts if part not in words]
        if missing:
            problems.append(f"{rel}:{line}: `{token}`: {missing[0]} is in no source of {', '.join(CODE_DIRS)}")
        elif len(parts) > 1 and not qualified_name_exists(parts, files, words):
            problems.append(f"{rel}:{line}: `{token}`: {parts[-1]} is declared in no {'::'.join(parts[:-1])}")
    # "layers: a, b, c" / "the layers without libtorch: a, b" lists, written as `layer` words.
    for m in re.finditer(r"<!-- layers(?P<kind>[ -][\w-]*)?: (?P<list>[^>]*) -->", text):
        listed = m.group("list").split()
        line = text.count("\n", 0, m.start()) + 1
        for name in listed:
            if name not in layer_names:
                problems.append(f"{rel}:{line}: {name} is not a layer of src/CMakeLists.txt")
        if (m.group("kind") or "").strip(" -") == "without-torch" and set(listed) != torch_free:
            problems.append(f"{rel}:{line}: the layers without libtorch are {', '.join(sorted(torch_free))}, "
                            f"not {', '.join(listed)}")
        if (m.group("kind") or "").strip(" -") == "all" and listed != layer_names:
            problems.append(f"{rel}:{line}: src/CMakeLists.txt declares {', '.join(layer_names)}, lowest first, "
                            f"not {', '.join(listed)}")
    for m in re.finditer(r"`(\w+)` layer|layer `(\w+)`|`src/(\w+)/`", text):
        name = next(g for g in m.groups() if g)
        if name not in layer_names:
            problems.append(f"{rel}:{text.count(chr(10), 0, m.start()) + 1}: `{name}` is not a layer of src/CMakeLists.txt")


def main():
    problems = []
    check_links(problems)
    check_design(problems)
    for p in problems:
        print(p, file=sys.stderr)
    if problems:
        print(f"check_docs: {len(problems)} problem(s)", file=sys.stderr)
        return 1
    print("check_docs: links resolve, docs/design.md's checkable claims hold")
    return 0


if __name__ == "__main__":
    sys.exit(main())
