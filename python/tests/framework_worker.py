"""One process of the framework tests: loads the models saved by framework_models.py, either with
the framework's own from_pretrained or through snapcache's one-line integration, runs each on its
fixed inputs and saves every parameter and buffer and the outputs.

    python framework_worker.py pretrained transformers|diffusers ROOT OUT [--device D] [--names N ...]
    python framework_worker.py snapcache  transformers|diffusers ROOT OUT --cache DIR [--device D]
Prints one JSON line: per model, each load's path and entry (snapcache), the tied tensors, each
parameter's requires_grad, and the checkpoint files the process has mapped after loading.
"""

import argparse
import json
import os
import time

# MKL's float32 GEMM on the CPU gives results that depend on its operands' addresses (alignment)
# unless its conditional numerical reproducibility mode is on. from_pretrained's tensors sit at the
# checkpoint's offsets (8 bytes past a 64-byte boundary, for some), a snapshot's at 4096-byte
# boundaries: the same weights then gave outputs one ulp apart (the Flux pipeline's latents with
# torch 2.14.1 here, Linear(256, 32) in its time embedding). Set before torch loads MKL, in every
# phase, so the outputs compared are the arithmetic's, not the allocator's.
os.environ.setdefault("MKL_CBWR", "AUTO,STRICT")

import torch  # noqa: E402

import framework_models as fm  # noqa: E402
import snapcache  # noqa: E402


def tensors_of(module):
    """Every parameter and buffer (non-persistent ones too) under every name, on the CPU."""
    named = list(module.named_parameters(remove_duplicate=False)) + list(module.named_buffers(remove_duplicate=False))
    return {name: t.detach().cpu().clone() for name, t in named}


def trainable(module):
    """requires_grad of every parameter, under every name: a flag the load must give as the framework does."""
    return {name: p.requires_grad for name, p in module.named_parameters(remove_duplicate=False)}


def tied_names(module):
    by_id: dict[int, list[str]] = {}
    for name, t in list(module.named_parameters(remove_duplicate=False)):
        by_id.setdefault(id(t), []).append(name)
    return sorted(names for names in by_id.values() if len(names) > 1)


def mapped_checkpoints(root):
    """The checkpoint files under `root` this process has mapped."""
    with open("/proc/self/maps") as maps:
        paths = {line.split(None, 5)[5].strip() for line in maps if len(line.split(None, 5)) == 6}
    return sorted(p for p in paths if p.startswith(root) and p.endswith(".safetensors"))


def report_info(report):
    return {"path": report.path.name, "reason": report.reason, "entry": report.entry_id}


def load_transformers(mode, root, name, device, store):
    cls = fm.transformers_class(name)
    keywords = fm.TRANSFORMERS_MODELS[name][5]
    path = os.path.join(root, name)
    if mode == "pretrained":
        return cls.from_pretrained(path, **keywords).to(device), {}
    model = snapcache.transformers.from_pretrained(cls, path, device=device, store=store, **keywords)
    return model, {"report": report_info(model.snapcache_report)}


def load_diffusers(mode, root, name, device, store):
    cls = fm.pipeline_class(name)
    dtype = fm.DIFFUSERS_PIPELINES[name][1]
    path = os.path.join(root, name)
    if mode == "pretrained":
        return cls.from_pretrained(path, dtype=dtype).to(device), {}
    pipe = snapcache.diffusers.from_pretrained(cls, path, dtype=dtype, device=device, store=store)
    return pipe, {"reports": {c: report_info(r) for c, r in pipe.snapcache_reports.items()}}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=["pretrained", "snapcache"])
    parser.add_argument("kind", choices=["transformers", "diffusers"])
    parser.add_argument("root")
    parser.add_argument("out")
    parser.add_argument("--cache")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--names", nargs="*")
    args = parser.parse_args()
    torch.set_num_threads(1)  # the same arithmetic in every process
    root = os.path.realpath(args.root)
    store = snapcache.Store.open(snapcache.Config(directory=args.cache)) if args.mode == "snapcache" else None
    catalogue = fm.TRANSFORMERS_MODELS if args.kind == "transformers" else fm.DIFFUSERS_PIPELINES
    results, info = {}, {}
    for name in args.names or list(catalogue):
        started = time.perf_counter()
        if args.kind == "transformers":
            model, info[name] = load_transformers(args.mode, root, name, args.device, store)
            outputs = fm.transformers_outputs(model, name, args.device)
            results[name] = {"tensors": tensors_of(model), "outputs": outputs}
            info[name]["tied"] = tied_names(model)
            info[name]["training"] = model.training
            info[name]["requires_grad"] = trainable(model)
        else:
            pipe, info[name] = load_diffusers(args.mode, root, name, args.device, store)
            components = {c: m for c, m in pipe.components.items() if isinstance(m, torch.nn.Module)}
            results[name] = {"tensors": {f"{c}.{n}": t for c, m in components.items() for n, t in tensors_of(m).items()},
                             "outputs": fm.pipeline_outputs(pipe, name, args.device)}
            info[name]["components"] = sorted(components)
            info[name]["requires_grad"] = {f"{c}.{n}": flag for c, m in components.items()
                                           for n, flag in trainable(m).items()}
        info[name]["seconds"] = time.perf_counter() - started
    snapcache.wait_for_publications()
    mapped = mapped_checkpoints(root)
    torch.save(results, args.out)
    print(json.dumps({"models": info, "mapped_checkpoints": mapped}))


if __name__ == "__main__":
    main()
