"""Type-checks the Python package as its users see it: mypy and pyright (pinned in
tools/setup.sh; configured in pyproject.toml) over python/snapcache (its stub _core.pyi for the
extension module), python/tests and every ```python block of README.md and docs/*.md. Both must
report no error.

    python3 tools/typecheck.py          # the torch venv's python (tools/python.sh runs it)

torch is checked as it is (snapcache's types are built on its own); transformers, diffusers and vLLM
are `Any` to both checkers (build/typecheck/stubs: a module __getattr__ for each module the code imports
from them). What is checked is snapcache's API and its use, not the frameworks' own annotations
(which are narrower than what they take in places), and reading them would take the checkers a
minute or two where this takes seconds.

A documentation block is written to build/typecheck/docs/<file>_<line>.py, padded with blank lines
so that a message's line number is the line in the document (docs/python.md line 230 is line 230
of python_md_214.py, the block that starts at line 214). The first line star-imports
_doc_placeholders.pyi: the names the examples leave to the reader (your loader, your model class, a
checkpoint path), each with the type a reader's would have. An example that needs another such name
adds it to PLACEHOLDERS.
"""

import os
import pathlib
import re
import shutil
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
OUT = ROOT / "build" / "typecheck"  # pyproject.toml names OUT / "stubs"
# The modules of transformers, diffusers and vLLM that snapcache, its tests and its docs import from.
FRAMEWORK_MODULES = [
    "transformers", "transformers.core_model_loading", "transformers.modeling_utils", "transformers.models",
    "transformers.models.auto", "transformers.models.auto.auto_factory", "transformers.monkey_patching",
    "transformers.utils",
    "diffusers", "diffusers.models", "diffusers.models.modeling_utils", "diffusers.utils",
    # snapcache.vllm's loader and the vLLM tests
    "vllm", "vllm.config", "vllm.config.load", "vllm.config.utils", "vllm.distributed", "vllm.distributed.parallel_state",
    "vllm.model_executor", "vllm.model_executor.model_loader", "vllm.model_executor.model_loader.base_loader",
    "vllm.model_executor.model_loader.default_loader", "vllm.model_executor.model_loader.weight_checksum",
]
DOCUMENTS = ["README.md", *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("*.md"))]

# What the documentation's examples leave to the reader: a stub module star-imported by every block.
PLACEHOLDERS = '''\
import torch
import snapcache

__all__ = ["DiTConfig", "MyDiT", "config", "my_loader", "path", "plan", "llama", "wan", "device"]

class DiTConfig: ...

class MyDiT(torch.nn.Module):
    def __init__(self, config: DiTConfig) -> None: ...

config: DiTConfig
def my_loader(plan: snapcache.LoadPlan) -> dict[str, torch.Tensor]: ...
path: str               # a checkpoint file
plan: snapcache.LoadPlan
llama: str              # a transformers checkpoint's directory
wan: str                # a diffusers pipeline's directory
device: str
'''


def write_framework_stubs():
    stubs = OUT / "stubs"
    shutil.rmtree(stubs, ignore_errors=True)
    for module in FRAMEWORK_MODULES:
        folder = stubs.joinpath(*module.split("."))
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "__init__.pyi").write_text("from typing import Any\n\ndef __getattr__(name: str) -> Any: ...\n")


def extract_examples():
    """Writes each ```python block of the documents; returns the files written."""
    docs = OUT / "docs"
    shutil.rmtree(docs, ignore_errors=True)
    docs.mkdir(parents=True)
    (docs / "_doc_placeholders.pyi").write_text(PLACEHOLDERS)
    written = []
    for document in DOCUMENTS:
        text = (ROOT / document).read_text()
        for match in re.finditer(r"^```python\n(.*?)^```", text, re.S | re.M):
            first = text.count("\n", 0, match.start(1)) + 1  # the block's first line in the document
            name = re.sub(r"\W", "_", pathlib.Path(document).name) + f"_{first}.py"
            header = f"from _doc_placeholders import *  # noqa: F403  ({document}, line {first})\n"
            padding = "\n" * (first - 2)  # the header is line 1; the block starts at `first`
            assert first >= 2
            (docs / name).write_text(header + padding + match.group(1))
            written.append(docs / name)
    return written


# Mistakes each checker must report, one per line marked `# wrong`: a check that finds none of them
# would pass anything (a stub that made snapcache Any, a config that checks nothing).
PROBE = """\
import torch
import snapcache

plan = snapcache.LoadPlan()
plan.device = 3.5  # wrong: not a device
plan.dtype = 16  # wrong: not a dtype
plan.tiers = [1, 2]  # wrong: neither Tier objects nor names
plan.post_load = ["halve"]  # wrong: not a method or a callable
snapcache.load_model(snapcache.default_store(), plan)  # wrong: the extension's (store, plan) order
name: str = plan.device  # wrong: a torch.device
count: int = snapcache.load_model(plan, store=None)  # wrong: a LoadedModel
snapcache.lod_model(plan)  # wrong: no such name
snapcache.LoadPlan(dtpye="bfloat16")  # wrong: no such field
"""


def write_probe():
    probe = OUT / "probe"
    shutil.rmtree(probe, ignore_errors=True)
    probe.mkdir(parents=True)
    (probe / "mistakes.py").write_text(PROBE)
    wrong = {n for n, line in enumerate(PROBE.splitlines(), 1) if "# wrong" in line}
    return probe / "mistakes.py", wrong


def run(name, command, probe, wrong, error_line):
    """Runs a checker; ok when its only errors are on the probe's marked lines, one or more on each."""
    # PYRIGHT_PYTHON_IGNORE_WARNINGS: the pyright wrapper would ask PyPI whether a newer one exists.
    env = dict(os.environ, PYRIGHT_PYTHON_IGNORE_WARNINGS="1")
    started = time.monotonic()
    result = subprocess.run(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    seconds = time.monotonic() - started
    errors, found = [], set()  # errors: the unexpected ones, each with its lines of detail
    for line in result.stdout.splitlines():
        m = error_line.match(line)
        if m:
            # mypy's paths are relative to ROOT, where the checkers run; pyright's absolute.
            if (ROOT / m["path"]).resolve() == probe.resolve() and int(m["line"]) in wrong:
                found.add(int(m["line"]))
                errors.append(None)  # its detail lines are not shown
            else:
                errors.append([line.strip()])
        elif errors and errors[-1] is not None and len(line) - len(line.lstrip()) > 2:  # pyright's detail
            errors[-1].append(line.rstrip())
    errors = [e for e in errors if e is not None]
    missed = sorted(wrong - found)
    crashed = result.returncode != 0 and not errors and not found  # it failed without checking
    ok = not errors and not missed and not crashed
    print(f"typecheck: {name}: {'ok' if ok else 'FAILED'} in {seconds:.1f} s "
          f"({len(errors)} errors; {len(found)} of the probe's {len(wrong)} mistakes found)")
    if crashed or os.environ.get("SNAPCACHE_TYPECHECK_VERBOSE"):
        print(result.stdout.rstrip())
    for e in errors:
        print("\n".join(e))
    for n in missed:
        print(f"typecheck: {name} did not report the mistake on line {n} of {probe}: {PROBE.splitlines()[n - 1]}")
    return ok


def main():
    write_framework_stubs()
    probe, wrong = write_probe()
    examples = [str(p.relative_to(ROOT)) for p in extract_examples()]
    targets = ["python/snapcache", "python/tests", *examples, str(probe.relative_to(ROOT))]
    python = sys.executable
    ok = run("mypy", [python, "-m", "mypy", "--python-executable", python, *targets], probe, wrong,
             re.compile(r"^(?P<path>[^:\s][^:]*):(?P<line>\d+): error:"))
    ok = run("pyright", [python, "-m", "pyright", "--pythonpath", python, *targets], probe, wrong,
             re.compile(r"^\s+(?P<path>/[^:]+):(?P<line>\d+):\d+ - error:")) and ok
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
