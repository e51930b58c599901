"""One process of the MiniLM end-to-end test: loads all-MiniLM-L6-v2 (the packaged checkpoint)
into Hugging Face transformers' BertModel, either by from_pretrained or through snapcache into a
model built on the meta device, runs it on fixed inputs and saves the outputs.

    python minilm_worker.py pretrained MODEL_DIR OUT [--device D]
    python minilm_worker.py snapcache  MODEL_DIR OUT --cache DIR [--device D]
Prints one JSON line: the load's path, reason and publication outcome (snapcache), its time.
"""

import argparse
import json
import os
import time

import torch
from transformers import BertConfig, BertModel

import snapcache

INPUT_IDS = torch.tensor([[101, 2023, 2003, 1037, 3231, 6251, 2005, 1996, 7160, 102],
                          [101, 7592, 2088, 999, 102, 0, 0, 0, 0, 0]])
ATTENTION_MASK = (INPUT_IDS != 0).long()
ATTENTION = "sdpa"  # the same attention implementation on both paths


def minilm_loader(plan):
    """The ordinary loader: every tensor of the checkpoint, in storages of its own, plus the
    non-persistent buffer BertModel builds itself (token_type_ids: zeros)."""
    f = snapcache.SafetensorsFile.open(plan.checkpoint_files[0])
    tensors = {name: t.clone() for name, t in f.tensors().items()}
    positions = tensors["embeddings.position_ids"]
    tensors["embeddings.token_type_ids"] = torch.zeros_like(positions)
    return tensors


def run(model, device):
    model.eval()
    with torch.no_grad():
        out = model(input_ids=INPUT_IDS.to(device), attention_mask=ATTENTION_MASK.to(device))
    return {"last_hidden_state": out.last_hidden_state.cpu(), "pooler_output": out.pooler_output.cpu()}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=["pretrained", "snapcache"])
    parser.add_argument("model_dir")
    parser.add_argument("out")
    parser.add_argument("--cache")
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    torch.set_num_threads(1)  # the same arithmetic in every process
    device = torch.device(args.device)
    started = time.perf_counter()
    info = {}
    if args.mode == "pretrained":
        model = BertModel.from_pretrained(args.model_dir, attn_implementation=ATTENTION).to(device)
    else:
        config = BertConfig.from_pretrained(args.model_dir, attn_implementation=ATTENTION)
        with torch.device("meta"):
            model = BertModel(config)
        plan = snapcache.LoadPlan(
            checkpoint_files=[os.path.join(args.model_dir, "model.safetensors")],
            component="minilm", dtype="float32", device=device,
            source_identity=snapcache.digest_source_files([__file__]),
            ordinary_loader=minilm_loader)
        store = snapcache.Store.open(snapcache.Config(directory=args.cache))
        loaded = snapcache.load_module(model, plan, store=store)
        publication = loaded.report.publish or loaded.publication.wait()
        info = {"path": loaded.report.path.name, "reason": loaded.report.reason, "entry": loaded.report.entry_id,
                "publish": publication.result.name, "stages": [s.stage for s in loaded.report.stages],
                "bytes_checked": loaded.report.bytes_checked}
    info["seconds"] = time.perf_counter() - started
    torch.save(run(model, device), args.out)
    print(json.dumps(info))


if __name__ == "__main__":
    main()
