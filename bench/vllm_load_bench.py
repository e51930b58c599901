"""vLLM's load formats side by side on one model: the model load (vLLM's get_model: the model built,
its weights loaded and post-processed; the same span for every format), the weight-loading time a
loader logs, and the time from process start to the first generated token, for the default
loader, the other load formats this vLLM accepts, and snapcache cold (an empty cache: vLLM's
default loader, then a publication) and warm (the entry). Every load is a new process (one engine,
vLLM's `uni` executor); the rounds interleave the formats; each cell is the median of --repeats;
ratios are against the default loader. The page cache holds the checkpoint (and snapcache's
entry) throughout: a server restarting on the same machine.

    python bench/vllm_load_bench.py [--repeats 3] [--work DIR] [--formats auto,snapcache-warm,...]

Run it with the vLLM venv's python (bash tools/check-vllm.sh --setup-only makes it; then
`pip install .` into it, and `pip install fastsafetensors runai-model-streamer instanttensor` for
those formats). The model is a Llama with random weights (python/tests/vllm/vllm_models.py),
written once under --work: 1.1 billion parameters, 2.2 GB in bfloat16, in two shards.
"""

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
MODEL_WRITER = os.path.join(HERE, "..", "python", "tests", "vllm", "vllm_models.py")
# TinyLlama-1.1B's shape.
SHAPE = ["--hidden", "2048", "--intermediate", "5632", "--layers", "22", "--heads", "32", "--kv-heads", "4",
         "--vocab", "32000", "--max-positions", "2048"]
FORMATS = ["auto", "fastsafetensors", "runai_streamer", "instanttensor", "snapcache-cold", "snapcache-warm"]

CHILD = r"""
import json, logging, os, re, sys, time
started = float(sys.argv[1]); model, load_format, cache = sys.argv[2:5]
os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
if cache:
    os.environ["SNAPCACHE_DIR"] = cache
from vllm import LLM, SamplingParams
# The whole model load, the same span for every format: build, weights, post-processing.
import vllm.v1.worker.cpu_model_runner as runner
get_model, load = runner.get_model, []
def timed_get_model(*args, **kwargs):
    t = time.perf_counter()
    try:
        return get_model(*args, **kwargs)
    finally:
        load.append(time.perf_counter() - t)
runner.get_model = timed_get_model
llm = LLM(model=model, load_format=load_format, distributed_executor_backend="uni", enforce_eager=True,
          max_model_len=512, max_num_seqs=1, seed=0)
ready = time.time()
llm.generate([{"prompt_token_ids": [1, 15, 27, 311, 400]}], SamplingParams(temperature=0.0, max_tokens=1),
             use_tqdm=False)
first_token = time.time()
print("RESULT " + json.dumps({"load": load[-1] if load else None, "ready": ready - started,
                              "first_token": first_token - started}), flush=True)
"""


# vLLM's default loader logs "Loading weights took 1.23 seconds"; snapcache's logs the same span as
# "snapcache: loading weights took 0.12 seconds (hit)". Read from the child's log: vLLM applies its
# logging config as the engine starts, which drops any handler added before.
WEIGHTS = re.compile(r"[Ll]oading weights took ([0-9.]+) seconds(?: \((\w+)\))?")


def measure(model, load_format, cache=""):
    started = time.time()
    done = subprocess.run([sys.executable, "-c", CHILD, repr(started), model, load_format, cache],
                          capture_output=True, text=True)
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    if done.returncode != 0 or not lines:
        errors = [line.strip() for line in done.stderr.splitlines() if re.search(r"\w+Error\b", line)]
        return {"refused": (errors[-1] if errors else (done.stderr.strip().splitlines() or ["?"])[-1])[-300:]}
    result = json.loads(lines[-1][len("RESULT "):])
    weights = WEIGHTS.findall(done.stdout + done.stderr)
    result["weights"] = float(weights[-1][0]) if weights else None
    result["path"] = (weights[-1][1] if weights else "") or load_format
    return result


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--work", default=os.path.join(tempfile.gettempdir(), "snapcache-vllm-bench"))
    parser.add_argument("--formats", default=",".join(FORMATS))
    parser.add_argument("--json", help="write every measurement here")
    a = parser.parse_args()
    formats = a.formats.split(",")
    model = os.path.join(a.work, "llama")
    if not os.path.isdir(model):
        subprocess.run([sys.executable, MODEL_WRITER, a.work, "llama", *SHAPE], check=True, stdout=subprocess.DEVNULL)
    size = sum(os.path.getsize(os.path.join(model, n)) for n in os.listdir(model) if n.endswith(".safetensors"))
    print(f"model: {model} ({size / 1e9:.2f} GB of safetensors); {a.repeats} rounds of {', '.join(formats)}")
    warm_cache = os.path.join(a.work, "cache-warm")
    if "snapcache-warm" in formats:
        shutil.rmtree(warm_cache, ignore_errors=True)
        first = measure(model, "snapcache", warm_cache)  # the cold load that makes the entry; not counted
        print(f"  the entry for snapcache-warm: {first}")

    runs = {f: [] for f in formats}
    refused = {}
    for round_ in range(a.repeats):
        for f in formats:
            if f in refused:
                continue
            if f == "snapcache-cold":
                cache = tempfile.mkdtemp(prefix="cold-cache-", dir=a.work)
                result = measure(model, "snapcache", cache)
                shutil.rmtree(cache, ignore_errors=True)
            elif f == "snapcache-warm":
                result = measure(model, "snapcache", warm_cache)
            else:
                result = measure(model, f)
            print(f"  round {round_ + 1}: {f}: {result}", flush=True)
            if "refused" in result:
                refused[f] = result["refused"]
            else:
                runs[f].append(result)

    def median(f, field):
        values = [r[field] for r in runs[f] if r.get(field) is not None]
        return statistics.median(values) if values else None

    def cell(f, field):
        value, base = median(f, field), median("auto", field)
        if value is None:
            return "-", "-"
        return f"{value:.2f}", (f"{base / value:.2f}x" if base else "-")

    print()
    print("| load format | model load (s) | default / this | weights, as logged (s) | first token (s) | "
          "default / this | path |")
    print("|---|---|---|---|---|---|---|")
    for f in formats:
        if f in refused:
            print(f"| {f} | refused: {refused[f]} | | | | | |")
            continue
        (load, ratio_load), (weights, _), (first, ratio_first) = (cell(f, "load"), cell(f, "weights"),
                                                                  cell(f, "first_token"))
        paths = ",".join(sorted({str(r["path"]) for r in runs[f]}))
        print(f"| {f} | {load} | {ratio_load} | {weights} | {first} | {ratio_first} | {paths} |")
    if a.json:
        with open(a.json, "w") as out:
            json.dump({"runs": runs, "refused": refused}, out, indent=1)


if __name__ == "__main__":
    main()
