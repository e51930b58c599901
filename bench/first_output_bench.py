"""Time from process start to the first forward output, as a user feels it: a transformers model and a
diffusers pipeline, loaded by the framework's from_pretrained and by snapcache's one line (cold: an
empty cache, so the load is from_pretrained plus a publication; warm: the snapshot), with the page
cache warm and with the model's and the cache's files dropped from it (posix_fadvise DONTNEED on
each file: no root needed, nothing else on the machine is evicted). Each cell is the median of
--repeats new processes, measured side by side in one run; the ratios are against from_pretrained.

    python bench/first_output_bench.py [--device cpu|cuda] [--repeats 3] [--work DIR] [--json FILE]

The models are built from the frameworks' config classes (random weights) and saved once under
--work: a Llama decoder (bf16, sharded) and a Wan pipeline (UMT5 encoder, Wan transformer, VAE).
Needs the snapcache package, transformers and diffusers (pip install snapcache[diffusers]).
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))

# Large enough that reading the weights shows: ~0.5 GB of bf16 weights each.
LLAMA = dict(vocab_size=32000, hidden_size=1024, intermediate_size=2816, num_hidden_layers=16,
             num_attention_heads=16, num_key_value_heads=8, max_position_embeddings=2048, tie_word_embeddings=False)
WAN_TRANSFORMER = dict(patch_size=(1, 2, 2), num_attention_heads=8, attention_head_dim=64, in_channels=16,
                       out_channels=16, text_dim=512, freq_dim=256, ffn_dim=2048, num_layers=12, rope_max_seq_len=256)
UMT5 = dict(vocab_size=32000, d_model=512, d_kv=64, d_ff=1024, num_layers=6, num_heads=8,
            feed_forward_proj="gated-gelu")


def save_models(work):
    """Saves the two models under `work` (once)."""
    llama, wan = os.path.join(work, "llama"), os.path.join(work, "wan")
    if os.path.isdir(llama) and os.path.isdir(wan):
        return llama, wan
    import torch
    import diffusers
    import transformers

    sys.path.insert(0, os.path.join(HERE, "..", "python", "tests"))
    from framework_models import _word_level_tokenizer

    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**LLAMA)).to(torch.bfloat16)
    model.save_pretrained(llama + ".tmp", max_shard_size="200MB")
    os.rename(llama + ".tmp", llama)
    pipe = diffusers.WanPipeline(
        tokenizer=_word_level_tokenizer(32000, pad_token="<pad>", eos_token="</s>", model_max_length=512),
        text_encoder=transformers.UMT5EncoderModel(transformers.UMT5Config(**UMT5)).to(torch.bfloat16),
        transformer=diffusers.WanTransformer3DModel(**WAN_TRANSFORMER),
        vae=diffusers.AutoencoderKLWan(base_dim=32, z_dim=16, dim_mult=[1, 2, 2, 2], num_res_blocks=1,
                                       temperal_downsample=[False, True, True]),
        scheduler=diffusers.UniPCMultistepScheduler(flow_shift=3.0, prediction_type="flow_prediction",
                                                    use_flow_sigmas=True),
    )
    pipe.save_pretrained(wan + ".tmp", max_shard_size="200MB")
    os.rename(wan + ".tmp", wan)
    return llama, wan


# --- one measured process -------------------------------------------------------------------------

CHILD = r"""
import sys, time, json
started = float(sys.argv[1]); what, loader, path, device, cache = sys.argv[2:7]
import torch
torch.manual_seed(0)
if what == "llama":
    # Both loaders import the framework's loading code and the model's module before the clock
    # reads "imported": from_pretrained imports them lazily and snapcache.transformers at its own
    # import, so without this the load column would compare unequal work.
    import transformers, transformers.modeling_utils, transformers.models.llama.modeling_llama
    if loader == "snapcache":
        import snapcache, snapcache.transformers
    imported = time.time()
    if loader == "snapcache":
        model = snapcache.transformers.from_pretrained(
            transformers.AutoModelForCausalLM, path, device=device,
            store=snapcache.Store.open(snapcache.Config(directory=cache)))
        path_taken = model.snapcache_report.path.name
    else:
        model = transformers.AutoModelForCausalLM.from_pretrained(path).to(device)
        path_taken = "from_pretrained"
    loaded = time.time()
    with torch.no_grad():
        out = model(input_ids=torch.tensor([[1, 15, 27, 311, 400, 9, 2, 5]], device=device)).logits
    out.sum().item()
else:
    import diffusers, diffusers.pipelines.wan.pipeline_wan, transformers.models.umt5.modeling_umt5
    if loader == "snapcache":
        import snapcache, snapcache.diffusers
    imported = time.time()
    if loader == "snapcache":
        pipe = snapcache.diffusers.from_pretrained(
            diffusers.WanPipeline, path, dtype=torch.bfloat16, device=device,
            store=snapcache.Store.open(snapcache.Config(directory=cache)))
        path_taken = ",".join(sorted({r.path.name for r in pipe.snapcache_reports.values()}))
    else:
        pipe = diffusers.WanPipeline.from_pretrained(path, dtype=torch.bfloat16).to(device)
        path_taken = "from_pretrained"
    loaded = time.time()
    out = pipe("a red fox in the snow", height=64, width=64, num_frames=5, num_inference_steps=1,
               guidance_scale=1.0, max_sequence_length=32, output_type="pt").frames
    float(out.float().sum())
first_output = time.time()
print(json.dumps({"path": path_taken, "imported": imported - started, "load": loaded - imported,
                  "first_output": first_output - started}))
"""


def drop_from_page_cache(*roots):
    """Drops each regular file under `roots` from the page cache (the data on disk stays)."""
    for root in roots:
        for directory, _, names in os.walk(root):
            for name in names:
                path = os.path.join(directory, name)
                if os.path.islink(path) or not os.path.isfile(path):
                    continue
                fd = os.open(path, os.O_RDONLY)
                try:
                    os.fsync(fd)  # dirty pages are not dropped: write them back first
                    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                finally:
                    os.close(fd)


def measure(what, loader, path, device, cache):
    started = time.time()
    done = subprocess.run([sys.executable, "-c", CHILD, repr(started), what, loader, path, device, cache],
                          capture_output=True, text=True)
    exited = time.time() - started
    if done.returncode != 0:
        raise SystemExit(f"{what} {loader} failed:\n{done.stderr[-4000:]}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    result["exit"] = exited
    return result


def row(what, path, device, work, page_cache, repeats):
    """The three loads side by side, interleaved (from_pretrained, cold, warm; again), so that a
    busy machine slows each alike. Each value is the median over the repeats."""
    cache = os.path.join(work, f"cache-{what}")
    runs = {"from_pretrained": [], "snapcache_cold": [], "snapcache_warm": []}
    for _ in range(repeats):
        for name, loader in (("from_pretrained", "from_pretrained"), ("snapcache_cold", "snapcache"),
                             ("snapcache_warm", "snapcache")):
            if name == "snapcache_cold":
                shutil.rmtree(cache, ignore_errors=True)   # the warm load that follows finds its publication
            if page_cache == "dropped":
                drop_from_page_cache(path, *([cache] if os.path.isdir(cache) else []))
            runs[name].append(measure(what, loader, path, device, cache))
    return {name: {"path": r[-1]["path"], **{k: statistics.median(x[k] for x in r)
                                            for k in ("imported", "load", "first_output", "exit")}}
            for name, r in runs.items()}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--work", default=os.path.join(tempfile.gettempdir(), "snapcache-first-output-bench"))
    parser.add_argument("--models", nargs="*", default=["llama", "wan"], choices=["llama", "wan"])
    parser.add_argument("--json")
    args = parser.parse_args()
    os.makedirs(args.work, exist_ok=True)
    llama, wan = save_models(args.work)
    import_only = measure_import(args.repeats)
    rows = []
    for what, path in (("llama", llama), ("wan", wan)):
        if what not in args.models:
            continue
        for page_cache in ("warm", "dropped"):
            rows.append({"model": what, "page_cache": page_cache,
                         **row(what, path, args.device, args.work, page_cache, args.repeats)})
            print(json.dumps(rows[-1]), flush=True)
    print(f"time from process start to the first forward output, {args.device}, median of {args.repeats} "
          f"(import torch + the framework alone: {import_only['transformers']:.2f} s / {import_only['diffusers']:.2f} s)")
    print("first output (the load alone: after the imports, until the model is built)")
    print("| model | page cache | from_pretrained | snapcache cold | snapcache warm | warm / from_pretrained, first output "
          "(load) |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        p, c, w = (r[k] for k in ("from_pretrained", "snapcache_cold", "snapcache_warm"))
        print(f"| {r['model']} | {r['page_cache']} | {p['first_output']:.2f} s ({p['load']:.2f} s) "
              f"| {c['first_output']:.2f} s ({c['load']:.2f} s; exit {c['exit']:.2f} s) "
              f"| {w['first_output']:.2f} s ({w['load']:.2f} s, {w['path']}) "
              f"| {w['first_output'] / p['first_output']:.2f} ({w['load'] / p['load']:.2f}) |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": args.device, "repeats": args.repeats, "import_s": import_only, "rows": rows}, f,
                      indent=1)


def measure_import(repeats):
    """The floor: a process that imports torch and the framework and does nothing else."""
    floor = {}
    for framework in ("transformers", "diffusers"):
        times = []
        for _ in range(repeats):
            started = time.time()
            subprocess.run([sys.executable, "-c", f"import torch, {framework}, snapcache"], check=True)
            times.append(time.time() - started)
        floor[framework] = statistics.median(times)
    return floor


if __name__ == "__main__":
    main()
