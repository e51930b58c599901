"""snapcache for Hugging Face diffusers: a pipeline's from_pretrained in one line.

    import snapcache.diffusers
    pipe = snapcache.diffusers.from_pretrained(WanPipeline, "/models/wan", dtype=torch.bfloat16, device="cuda")
    print(pipe.snapcache_reports)        # {"transformer": hit ..., "text_encoder": hit ..., "vae": hit ...}

Every torch component (transformer(s), text encoder(s), VAE, unet) is loaded through snapcache, one
entry per component with its own name in the key: diffusers models as model_from_pretrained does,
transformers models as snapcache.transformers does. The rest (tokenizers, schedulers, feature
extractors, configs) is loaded by diffusers, which then assembles the pipeline. The result equals
`pipeline_class.from_pretrained(path, dtype=dtype, **kwargs).to(device)` bit for bit.
"""

import copy
import importlib
import json
import os
from typing import Any, Literal, Mapping, overload

import torch

try:
    import diffusers as _diffusers
    from diffusers import ModelMixin
    from diffusers.models.modeling_utils import no_init_weights
    from diffusers.utils import SAFE_WEIGHTS_INDEX_NAME, SAFETENSORS_WEIGHTS_NAME, _add_variant
except ImportError as e:  # pragma: no cover - exercised by test_frameworks_optional
    raise ImportError(f"snapcache.diffusers needs Hugging Face diffusers ({e}): pip install snapcache[diffusers]") from e

from . import _core
from . import _frameworks
from ._stores import DEFAULT, StoreChoice


_DOWNLOAD_KEYWORDS = ("cache_dir", "force_download", "proxies", "local_files_only", "token", "revision", "subfolder")
# Keywords that change what from_pretrained builds beyond one device's plain model.
_REFUSED = ("device_map", "max_memory", "offload_folder", "offload_state_dict", "quantization_config",
            "parallel_config", "use_flashpack", "flashpack_kwargs", "output_loading_info",
            "custom_pipeline", "custom_revision", "provider", "sess_options", "provider_options")
# Keywords ModelMixin.from_pretrained takes and drops before it builds the model.
_DROPPED = ("low_cpu_mem_usage", "disable_mmap", "ignore_mismatched_sizes", "use_safetensors", "variant")


# The pipeline (or model) is whatever class from_pretrained builds, with `snapcache_reports`
# (`snapcache_report`); return_report=True also gives the reports typed.
@overload
def from_pretrained(pipeline_class: Any, path: "str | os.PathLike[str]", *,
                    dtype: "torch.dtype | Mapping[str, torch.dtype] | None" = ..., device: "torch.device | str | int" = ...,
                    store: StoreChoice = ..., return_report: Literal[False] = ..., **kwargs: Any) -> Any: ...
@overload
def from_pretrained(pipeline_class: Any, path: "str | os.PathLike[str]", *,
                    dtype: "torch.dtype | Mapping[str, torch.dtype] | None" = ..., device: "torch.device | str | int" = ...,
                    store: StoreChoice = ..., return_report: Literal[True],
                    **kwargs: Any) -> "tuple[Any, dict[str, _core.LoadReport]]": ...
@overload
def from_pretrained(pipeline_class: Any, path: "str | os.PathLike[str]", *,
                    dtype: "torch.dtype | Mapping[str, torch.dtype] | None" = ..., device: "torch.device | str | int" = ...,
                    store: StoreChoice = ..., return_report: bool = ..., **kwargs: Any) -> Any: ...
def from_pretrained(pipeline_class: Any, path: "str | os.PathLike[str]", *,
                    dtype: "torch.dtype | Mapping[str, torch.dtype] | None" = None,
                    device: "torch.device | str | int" = "cpu", store: StoreChoice = DEFAULT, return_report: bool = False,
                    **kwargs: Any) -> Any:
    """`pipeline_class.from_pretrained(path, dtype=dtype, **kwargs).to(device)`, with every torch
    component loaded through snapcache.

    `pipeline_class`: a pipeline class (WanPipeline, FluxPipeline, ...) or DiffusionPipeline. `path`:
    a local directory saved by save_pretrained. `dtype`: a torch.dtype, or a dict {component: dtype,
    "default": dtype} as diffusers takes it. `device`: one device. `store`: the cache (default: the
    environment's; None: no cache). Components passed as keywords are used as given. Other keywords
    go to the pipeline's from_pretrained (and `variant`, `use_safetensors` to each component's).

    Returns the pipeline, with `pipe.snapcache_reports` ({component: LoadReport});
    `return_report=True` returns (pipe, reports)."""
    dtype = kwargs.pop("torch_dtype", None) if dtype is None else dtype  # diffusers' older name
    _frameworks.refuse_keywords(kwargs, _REFUSED, "snapcache.diffusers")
    _frameworks.refuse_missing_directory(path, None, "snapcache.diffusers.from_pretrained")
    device = torch.device(device)
    index = pipeline_class.load_config(path)
    component_keywords = {k: kwargs[k] for k in ("variant", "use_safetensors") if k in kwargs}
    components, reports = {}, {}
    for name, entry in index.items():
        if name.startswith("_") or name in kwargs or not isinstance(entry, (list, tuple)) or len(entry) != 2:
            continue
        cls = _component_class(*entry)
        if cls is None or not issubclass(cls, torch.nn.Module):
            continue  # a tokenizer, scheduler, feature extractor, ...: diffusers loads it
        folder = os.path.join(path, name)
        component_dtype = dtype.get(name, dtype.get("default", torch.float32)) if isinstance(dtype, Mapping) else dtype
        if issubclass(cls, ModelMixin):
            model, report = model_from_pretrained(cls, folder, dtype=component_dtype, device=device, store=store,
                                                  component=name, return_report=True, **component_keywords)
        elif _is_transformers_model(cls):
            from . import transformers as _snapcache_transformers

            model, report = _snapcache_transformers.from_pretrained(
                cls, folder, dtype=component_dtype if component_dtype is not None else "auto", device=device,
                store=store, component=name, return_report=True, **component_keywords)
        else:
            continue
        components[name] = model
        reports[name] = report
    pipe = pipeline_class.from_pretrained(path, dtype=dtype, **components, **kwargs)
    if device.type != "cpu":
        pipe.to(device)  # what else is a torch module (none of the pipelines here has one)
    pipe.snapcache_reports = reports
    return (pipe, reports) if return_report else pipe


@overload
def model_from_pretrained(model_class: Any, path: "str | os.PathLike[str]", *, dtype: "torch.dtype | None" = ...,
                          device: "torch.device | str | int" = ..., store: StoreChoice = ..., component: "str | None" = ...,
                          return_report: Literal[False] = ..., **kwargs: Any) -> Any: ...
@overload
def model_from_pretrained(model_class: Any, path: "str | os.PathLike[str]", *, dtype: "torch.dtype | None" = ...,
                          device: "torch.device | str | int" = ..., store: StoreChoice = ..., component: "str | None" = ...,
                          return_report: Literal[True], **kwargs: Any) -> "tuple[Any, _core.LoadReport]": ...
@overload
def model_from_pretrained(model_class: Any, path: "str | os.PathLike[str]", *, dtype: "torch.dtype | None" = ...,
                          device: "torch.device | str | int" = ..., store: StoreChoice = ..., component: "str | None" = ...,
                          return_report: bool = ..., **kwargs: Any) -> Any: ...
def model_from_pretrained(model_class: Any, path: "str | os.PathLike[str]", *, dtype: "torch.dtype | None" = None,
                          device: "torch.device | str | int" = "cpu", store: StoreChoice = DEFAULT,
                          component: "str | None" = None, return_report: bool = False, **kwargs: Any) -> Any:
    """`model_class.from_pretrained(path, dtype=dtype, **kwargs).to(device)` for one diffusers
    model (a ModelMixin: WanTransformer3DModel, AutoencoderKL, UNet2DConditionModel, ...), through
    snapcache. Returns the model, with `model.snapcache_report`; `return_report=True` returns
    (model, report)."""
    kwargs = dict(kwargs)
    dtype = kwargs.pop("torch_dtype", None) if dtype is None else dtype  # diffusers' older name
    _frameworks.refuse_keywords(kwargs, _REFUSED, "snapcache.diffusers")
    if kwargs.get("low_cpu_mem_usage") is False:
        raise _core.InvalidArgument("snapcache.diffusers: low_cpu_mem_usage=False is not supported")
    if dtype is not None and not isinstance(dtype, torch.dtype):
        raise _core.InvalidArgument(f"snapcache.diffusers: dtype must be a torch.dtype or None, not {dtype!r}")
    _frameworks.refuse_missing_directory(path, kwargs.get("subfolder"), "snapcache.diffusers.model_from_pretrained")
    device = torch.device(device)
    built, files = _build_on_meta(model_class, path, dtype, dict(kwargs))
    config = _config_json(built)
    report = _frameworks.load_pretrained(
        "diffusers", _diffusers.__version__, __file__, built,
        files=files, path=path, component=component, dtype=dtype, device=device, config_json=config,
        # A diffusers model's constructor keywords are its config (register_to_config): the config
        # holds every keyword that reaches it; the others change no tensor (_frameworks.key_options).
        constructor_keywords={},
        pretrained=lambda: _pretrained(model_class, path, dtype, kwargs),
        facts=lambda reference: {"the config": (_config_json(reference), config)},
        store=store,
    )
    return (built, report) if return_report else built


def _pretrained(model_class, path, dtype, kwargs):
    model, info = model_class.from_pretrained(path, dtype=dtype, output_loading_info=True, **kwargs)
    _frameworks.refuse_random_tensors("snapcache.diffusers", model, path, info)
    return model


def _config_json(model):
    return json.loads(json.dumps(dict(model.config), sort_keys=True, default=repr))


def _component_class(library, class_name):
    if library is None or class_name is None:
        return None
    try:
        return getattr(importlib.import_module(library), class_name, None)
    except ImportError:
        return None


def _is_transformers_model(cls):
    try:
        from transformers import PreTrainedModel
    except ImportError:
        return False
    return issubclass(cls, PreTrainedModel)


def _checkpoint_files(folder, variant):
    """The safetensors files ModelMixin.from_pretrained reads from a local folder, the index and the
    config: what the key holds."""
    index = os.path.join(folder, _add_variant(SAFE_WEIGHTS_INDEX_NAME, variant))
    config = os.path.join(folder, "config.json")
    if os.path.isfile(index):
        with open(index) as f:
            weight_map = json.load(f).get("weight_map", {})
        shards = [os.path.join(folder, name) for name in sorted(set(weight_map.values()))]
        return shards + _frameworks.existing([index, config])
    single = os.path.join(folder, _add_variant(SAFETENSORS_WEIGHTS_NAME, variant))
    if os.path.isfile(single):
        return [single] + _frameworks.existing([config])
    raise _core.Unsupported(
        f"snapcache.diffusers loads safetensors checkpoints; {folder} has neither {os.path.basename(single)} nor "
        f"{os.path.basename(index)} (pass a local directory saved by save_pretrained)"
    )


def _build_on_meta(model_class, path, dtype, kwargs):
    """The model on the meta device as ModelMixin.from_pretrained builds it (config, default dtype,
    no init), with the dtypes its loader gives each tensor (floating ones to `dtype`, those of
    _keep_in_fp32_modules to float32), its config's _name_or_path and eval mode. Returns (model,
    the files the key holds)."""
    download = {k: kwargs.pop(k) for k in _DOWNLOAD_KEYWORDS if k in kwargs}
    variant = kwargs.get("variant")
    for name in _DROPPED:
        kwargs.pop(name, None)
    folder = os.path.join(path, download.get("subfolder") or "")
    files = _checkpoint_files(folder, variant)
    config, unused = model_class.load_config(path, return_unused_kwargs=True, **download, **kwargs)
    config = copy.deepcopy(config)
    previous = model_class._set_default_torch_dtype(dtype) if dtype is not None else None
    try:
        with no_init_weights(), torch.device("meta"):
            model = model_class.from_config(config, **unused)
    finally:
        if previous is not None:
            torch.set_default_dtype(previous)
    keep = model_class._keep_in_fp32_modules or []
    keep = keep if isinstance(keep, list) else [keep]
    if dtype is not None:
        with torch.no_grad():
            for name, tensor in model.state_dict(keep_vars=True).items():
                if torch.is_floating_point(tensor):
                    wanted = torch.float32 if any(m in name.split(".") for m in keep) else dtype
                    tensor.data = tensor.data.to(wanted)
    model.register_to_config(_name_or_path=path)
    model.eval()
    return model, files
