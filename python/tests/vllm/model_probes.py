"""What vllm_worker.py asks every rank's model through `LLM.apply_model`. A module of their own, not
the worker script: with TP 2 the engine core hands them on to the rank processes by reference, and a
function of `__main__` is another object there."""

import hashlib


def digests(model):
    """vLLM's own per-parameter digests (weight_checksum), and the buffers'."""
    import torch
    from vllm.model_executor.model_loader.weight_checksum import compute_tensor_digests

    out = {f"param:{k}": v for k, v in compute_tensor_digests(model).items()}
    for name, buffer in model.named_buffers():
        data = buffer.detach().cpu().contiguous().view(-1).view(torch.uint8).numpy()
        out[f"buffer:{name}"] = hashlib.sha256(data).hexdigest()
    return out


def report(model):
    r = getattr(model, "snapcache_report", None)
    if r is None:
        return None
    group = r.group.decision if r.group is not None else None
    return {"path": r.path.name, "reason": r.reason, "entry_id": r.entry_id, "group": group,
            "summary": r.summary()}
