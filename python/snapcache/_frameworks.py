"""What snapcache.transformers and snapcache.diffusers share.

Each builds the model on the meta device the way its framework's from_pretrained builds it, then
loads it through snapcache with the framework's own from_pretrained as the ordinary loader. A cold
load therefore hands out from_pretrained's very tensors (every parameter and buffer, non-persistent
ones included, which the snapshot keeps); a warm one the snapshot's copy of them. On every cold
load the meta-built model is compared with from_pretrained's, so a framework version that builds
differently is refused with the difference instead of being bound wrongly.
"""

import hashlib
import json
import os

import torch

from . import _core
from ._modules import _slots, load_module

_MAX_LISTED = 8


_IDENTITIES: "dict[str, str]" = {}  # integration file -> its loader identity, computed once per process


def source_identity(integration_file):
    """The key's loader identity: a digest of the code that prepares the weights (this file and the
    framework's integration)."""
    if integration_file not in _IDENTITIES:
        _IDENTITIES[integration_file] = _core.digest_source_files(
            [os.path.abspath(__file__), os.path.abspath(integration_file)])
    return _IDENTITIES[integration_file]


def flat_options(prefix, value):
    """A value as key options, one per field ("config.hidden_size": "64"), so that `snapcache why`
    names each field that changed with both values instead of a digest. Nested mappings are walked
    (their keys sorted; private ones, "_name", left out); every other value is its canonical JSON."""
    out = {}
    _flatten(prefix, value, out)
    return out


def _flatten(prefix, value, out):
    if isinstance(value, dict) and value:
        for name in sorted(value, key=str):
            if not str(name).startswith("_"):  # transformers' private fields: the path it was read from, ...
                _flatten(f"{prefix}.{name}", value[name], out)
    else:
        out[prefix] = json.dumps(value, sort_keys=True, default=_stable_text)


def _stable_text(value):
    """A value JSON has no form for, as the same text in every process: its repr, unless that holds
    an address (an object's default repr), which would make every process's key another."""
    text = repr(value)
    return type(value).__qualname__ if " at 0x" in text else text


def digest(value):
    """A short, stable digest of a JSON-able value (a config, keyword arguments) for the key."""
    text = json.dumps(value, sort_keys=True, default=repr)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def qualified_name(cls):
    return f"{cls.__module__}.{cls.__qualname__}"


def existing(paths):
    return [p for p in paths if os.path.isfile(p)]


def dtype_name(dtype):
    return str(dtype).removeprefix("torch.") if dtype is not None else "default"


def refuse_keywords(kwargs, refused, integration):
    """InvalidArgument naming the keywords that change what from_pretrained builds in ways snapcache
    does not rebuild (quantizers, device maps, adapters, ...); None values are accepted, since
    callers such as diffusers pass them explicitly."""
    given = sorted(k for k in refused if kwargs.get(k) is not None)
    if given:
        raise _core.InvalidArgument(
            f"{integration}.from_pretrained: {', '.join(given)} not supported (snapcache rebuilds the model on one "
            f"device without them); call the framework's from_pretrained for such loads"
        )


def refuse_random_tensors(integration, model, path, loading_info):
    """Mismatch when from_pretrained initialized tensors at random (missing from the checkpoint, or
    of another shape there): a snapshot would keep one draw, which no later from_pretrained gives."""
    names = set(loading_info.get("missing_keys") or [])
    names |= {k if isinstance(k, str) else k[0] for k in loading_info.get("mismatched_keys") or []}
    if names:
        first = sorted(names)[0]
        raise _core.Mismatch(
            f"{integration}: {len(names)} tensors of {type(model).__name__} are not in {path} (first '{first}'): "
            f"from_pretrained initializes them at random, and a snapshot would keep one draw; load this model with "
            f"from_pretrained"
        )


def _structure(module):
    """Each tensor object once: its names (tied ones together), parameter or buffer, dtype, shape."""
    return {
        tuple(s.names): (s.is_parameter, s.tensor.dtype, tuple(s.tensor.shape))
        for s in _slots(module)
    }


def differences(reference, built, facts):
    """What differs between from_pretrained's model and the meta-built one: the tensors (names, ties,
    dtypes, shapes) and the `facts` given as {what: (reference's, built's)}."""
    problems = []
    if type(reference) is not type(built):
        problems.append(f"class {type(reference).__name__} != {type(built).__name__}")
    ref, new = _structure(reference), _structure(built)
    for names in ref.keys() - new.keys():
        problems.append(f"{' = '.join(names)} is one tensor in from_pretrained's model, not in the built one")
    for names in new.keys() - ref.keys():
        problems.append(f"{' = '.join(names)} is one tensor in the built model, not in from_pretrained's")
    for names in ref.keys() & new.keys():
        (ref_param, ref_dtype, ref_shape), (new_param, new_dtype, new_shape) = ref[names], new[names]
        if ref_dtype != new_dtype:
            problems.append(f"'{names[0]}' is {dtype_name(ref_dtype)} in from_pretrained's model, {dtype_name(new_dtype)} built")
        if ref_shape != new_shape:
            problems.append(f"'{names[0]}' has shape {list(ref_shape)} in from_pretrained's model, {list(new_shape)} built")
        if ref_param != new_param:
            problems.append(f"'{names[0]}' is a {'parameter' if ref_param else 'buffer'} in from_pretrained's model")
    if reference.training != built.training:
        problems.append(f"training={reference.training} in from_pretrained's model, {built.training} built")
    for what, (ref_value, new_value) in facts.items():
        if ref_value != new_value:
            problems.append(f"{what} differs")
    return problems


def _own_storage(tensor):
    """The tensor in a storage of its own, so the snapshot holds its bytes only (from_pretrained may
    hand out views of a larger buffer)."""
    t = tensor.detach()
    if t.storage_offset() == 0 and t.is_contiguous() and t.untyped_storage().nbytes() == t.nbytes:
        return t
    return t.clone(memory_format=torch.contiguous_format)


def pretrained_loader(what, built, pretrained, facts):
    """The ordinary loader: `pretrained()` is the framework's own from_pretrained on the CPU; the
    result is checked against `built` (and `facts(reference)`: {what: (reference's, built's)}) and
    handed over as {name: tensor} under the names `built` declares."""

    def load(plan):
        reference = pretrained()
        problems = differences(reference, built, facts(reference))
        if problems:
            listed = "; ".join(problems[:_MAX_LISTED])
            more = f"; and {len(problems) - _MAX_LISTED} more" if len(problems) > _MAX_LISTED else ""
            raise _core.Mismatch(
                f"{what}: the model built on the meta device is not the one from_pretrained builds: {listed}{more} "
                f"(snapcache does not support this model or framework version; load it with from_pretrained)"
            )
        tensors = {}
        for slot in _slots(reference):
            tensors[slot.names[0]] = _own_storage(slot.tensor)
        return tensors

    return load


def load_pretrained(framework, version, integration_file, built, *, files, path, component, dtype, device, config_json,
                    kwargs, pretrained, facts, store):
    """What both integrations do once `built` is on meta: a key of every checkpoint file, the
    config, the model class, the framework's version and the from_pretrained keywords, and a load
    whose ordinary loader is the framework's own from_pretrained (`pretrained()`, checked against
    `built` and `facts(reference)`). Returns the LoadReport."""
    name = type(built).__name__
    return load_into(
        built,
        files=files,
        component=component or name,
        identity=source_identity(integration_file),
        dtype=dtype,
        device=device,
        options={
            "framework": f"{framework} {version}",
            "model_class": qualified_name(type(built)),
            "config": digest(config_json),
            "from_pretrained": digest(sorted(kwargs.items())),
        },
        loader=pretrained_loader(f"snapcache.{framework} ({name} from {path})", built, pretrained, facts),
        store=store,
    )


def load_into(built, *, files, component, identity, dtype, device, options, loader, store):
    """Loads the plan into `built` (on meta) and returns the LoadReport, also kept as
    `built.snapcache_report`."""
    # dtype: what the framework loads in (a torch.dtype; None: its default), a label in the key.
    plan = _core.LoadPlan(
        checkpoint_files=files, component=component, source_identity=identity, dtype=dtype,
        device=device, options=options, ordinary_loader=loader,
    )
    loaded = load_module(built, plan, store=store)
    report = loaded.report
    built.snapcache_report = report
    return report
