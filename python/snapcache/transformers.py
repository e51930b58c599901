"""snapcache for Hugging Face transformers: from_pretrained in one line.

    import snapcache.transformers
    model = snapcache.transformers.from_pretrained(AutoModelForCausalLM, "/models/llama",
                                                   dtype=torch.bfloat16, device="cuda")
    print(model.snapcache_report)        # hit/miss and why

A cold load is transformers' own from_pretrained (on the CPU), published as a snapshot; a warm one
builds the model on the meta device as from_pretrained builds it and binds the snapshot's tensors,
without reading the checkpoint. Both equal `model_class.from_pretrained(path, dtype=dtype, **kwargs)
.to(device)` bit for bit, every parameter and buffer (see docs/python.md).
"""

import copy
import json
import os
from typing import Any, Literal, cast, overload

import torch

try:
    import transformers as _transformers
    from transformers import AutoConfig, PreTrainedConfig
    from transformers import modeling_utils as _modeling_utils
    from transformers.core_model_loading import build_glob_alternation
    from transformers.models.auto.auto_factory import _BaseAutoModelClass, _get_model_class
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING
    from transformers.monkey_patching import patch_output_recorders
    from transformers.utils import SAFE_WEIGHTS_INDEX_NAME, ContextManagers
except ImportError as e:  # pragma: no cover - exercised by test_frameworks_optional
    raise ImportError(
        f"snapcache.transformers needs Hugging Face transformers ({e}): pip install snapcache[transformers]"
    ) from e

from . import _core
from . import _frameworks
from ._stores import DEFAULT, StoreChoice


# What from_pretrained reads files with: passed to the config, the checkpoint resolution and the
# generation config, as from_pretrained passes them.
_DOWNLOAD_KEYWORDS = ("cache_dir", "force_download", "proxies", "local_files_only", "token", "revision", "subfolder")
# Keywords that change what from_pretrained builds beyond one device's plain model.
_REFUSED = ("device_map", "max_memory", "offload_folder", "offload_buffers", "quantization_config", "gguf_file",
            "state_dict", "adapter_kwargs", "adapter_name", "distributed_config", "device_mesh", "tp_plan", "tp_size",
            "use_kernels", "kernel_config", "key_mapping", "fusion_config", "output_loading_info")
# Keywords from_pretrained takes and drops before it builds the model.
_DROPPED = ("low_cpu_mem_usage", "offload_state_dict", "mirror", "_fast_init", "from_tf", "from_flax",
            "weights_only", "disable_mmap", "ignore_mismatched_sizes", "tqdm_class", "_from_pipeline", "_from_auto",
            "_commit_hash", "use_safetensors", "variant", "generation_config", "allow_all_kernels")


# The model is whatever class from_pretrained builds (Any: an Auto class builds one it chooses), with
# `model.snapcache_report`; return_report=True also gives the report typed.
@overload
def from_pretrained(model_class: Any, path: "str | os.PathLike[str]", *, dtype: "torch.dtype | str | None" = ...,
                    device: "torch.device | str | int" = ..., store: StoreChoice = ..., component: "str | None" = ...,
                    return_report: Literal[False] = ..., **kwargs: Any) -> Any: ...
@overload
def from_pretrained(model_class: Any, path: "str | os.PathLike[str]", *, dtype: "torch.dtype | str | None" = ...,
                    device: "torch.device | str | int" = ..., store: StoreChoice = ..., component: "str | None" = ...,
                    return_report: Literal[True], **kwargs: Any) -> "tuple[Any, _core.LoadReport]": ...
@overload
def from_pretrained(model_class: Any, path: "str | os.PathLike[str]", *, dtype: "torch.dtype | str | None" = ...,
                    device: "torch.device | str | int" = ..., store: StoreChoice = ..., component: "str | None" = ...,
                    return_report: bool = ..., **kwargs: Any) -> Any: ...
def from_pretrained(model_class: Any, path: "str | os.PathLike[str]", *, dtype: "torch.dtype | str | None" = "auto",
                    device: "torch.device | str | int" = "cpu", store: StoreChoice = DEFAULT,
                    component: "str | None" = None, return_report: bool = False, **kwargs: Any) -> Any:
    """`model_class.from_pretrained(path, dtype=dtype, **kwargs)` on `device`, through snapcache.

    `model_class`: an Auto class (AutoModel, AutoModelForCausalLM, ...) or a model class.
    `path`: a local directory saved by save_pretrained (safetensors, sharded or not; resolve a Hub
    id with huggingface_hub.snapshot_download first). `dtype`: a torch.dtype, its name, or "auto"
    (the config's dtype, as transformers resolves it). `device`: one device ("cpu", "cuda:0").
    `store`: the cache (default: the environment's; None: no cache). `component`: the key's
    component (default: the model class's name). Other keywords go to from_pretrained (config
    overrides, attn_implementation, revision, ...); what they change in the tensors is in the key
    (the config field by field, the files they choose), the rest is not (_frameworks.key_options).

    Returns the model, with `model.snapcache_report` (hit, miss or fallback, and why);
    `return_report=True` returns (model, report). Raises snapcache.InvalidArgument for keywords
    snapcache does not rebuild (device_map, quantization_config, ...), snapcache.Unsupported where
    trust_remote_code=True would run the checkpoint's own code, and snapcache.Mismatch (on a cold
    load) when this transformers version builds the model differently from snapcache.
    """
    kwargs = dict(kwargs)
    torch_dtype = kwargs.pop("torch_dtype", None)  # transformers' older name, as from_pretrained takes it
    if torch_dtype is not None and dtype in ("auto", None):
        dtype = torch_dtype
    _frameworks.refuse_keywords(kwargs, _REFUSED, "snapcache.transformers")
    _frameworks.refuse_missing_directory(path, kwargs.get("subfolder"), "snapcache.transformers.from_pretrained")
    # Only the checkpoint's own code makes trust_remote_code matter, and that code is not in the key:
    # refused where it would run, a no-op (as in transformers) where there is none.
    trust_remote_code = kwargs.pop("trust_remote_code", None)
    download: Any = {k: kwargs[k] for k in _DOWNLOAD_KEYWORDS if k in kwargs}
    if trust_remote_code:
        _refuse_remote_code(model_class, path, kwargs.get("config"), download)
    device = torch.device(device)
    built, files, dtype, constructor_keywords = _build_on_meta(model_class, path, dtype, dict(kwargs))
    if trust_remote_code:
        _refuse_custom_generate(built, os.path.join(path, download.get("subfolder") or ""))
    config_json = _config_json(built.config)
    report = _frameworks.load_pretrained(
        "transformers", _transformers.__version__, __file__, built,
        files=files, path=path, component=component, dtype=dtype, device=device, config_json=config_json,
        constructor_keywords=constructor_keywords,
        pretrained=lambda: _pretrained(model_class, path, dtype, kwargs),
        facts=lambda reference: {
            "the config": (_config_json(reference.config), config_json),
            "the generation config": (_generation_json(reference), _generation_json(built)),
        },
        store=store,
    )
    return (built, report) if return_report else built


def _pretrained(model_class, path, dtype, kwargs):
    model, info = model_class.from_pretrained(path, dtype=dtype, output_loading_info=True, **kwargs)
    _frameworks.refuse_random_tensors("snapcache.transformers", model, path, info)
    return model


def _refuse_remote_code(model_class: Any, path: Any, config: Any, download: Any) -> None:
    """Unsupported when from_pretrained(model_class, path, trust_remote_code=True) would run a class of
    the checkpoint's own, as transformers decides it (AutoConfig.from_pretrained and
    _BaseAutoModelClass.from_pretrained): an Auto class runs the class config.json's auto_map names
    for it (for AutoConfig, when it reads the config), unless a class registered outside transformers
    takes its place. A model class given as such runs none: transformers builds that class."""
    if not issubclass(model_class, _BaseAutoModelClass):
        return
    config_class: Any  # the config's class, or None for a model_type transformers does not know
    if isinstance(config, PreTrainedConfig):
        auto_map, config_class = getattr(config, "auto_map", None) or {}, type(config)
    else:
        config_dict, _ = PreTrainedConfig.get_config_dict(path, **download)
        auto_map = config_dict.get("auto_map") or {}
        model_type = config_dict.get("model_type")
        config_class = CONFIG_MAPPING[model_type] if model_type in CONFIG_MAPPING else None
        if "AutoConfig" in auto_map and not _registered_outside_transformers(config_class):
            _refuse_code(f"config.json's auto_map names AutoConfig: '{auto_map['AutoConfig']}'")
    name = model_class.__name__
    if name in auto_map:
        local = model_class._model_mapping[config_class] if config_class in model_class._model_mapping else None
        if not _registered_outside_transformers(local):
            _refuse_code(f"config.json's auto_map names {name}: '{auto_map[name]}'")


def _registered_outside_transformers(registered: Any) -> bool:
    """Whether a class registered for a config (or one of several) is not transformers' own: a local
    class a user registered, which transformers then uses instead of the checkpoint's."""
    classes = registered if isinstance(registered, (list, tuple)) else [registered]
    return any(c is not None and not c.__module__.startswith("transformers.") for c in classes)


def _refuse_custom_generate(model: Any, folder: str) -> None:
    """Unsupported when trust_remote_code=True would make from_pretrained replace generate() with the
    checkpoint's custom_generate/generate.py (GenerationMixin.adjust_generation_fn)."""
    if model.can_generate() and hasattr(model, "load_custom_generate") and \
            os.path.isfile(os.path.join(folder, "custom_generate", "generate.py")):
        _refuse_code("custom_generate/generate.py would replace generate()")


def _refuse_code(what: str) -> None:
    raise _core.Unsupported(
        f"snapcache.transformers.from_pretrained: trust_remote_code=True would run the checkpoint's own code "
        f"({_core.printable(what)}), which is not part of the key; call transformers' from_pretrained for this model"
    )


def _config_json(config):
    return json.loads(config.to_json_string(use_diff=False))


def _generation_json(model):
    generation = getattr(model, "generation_config", None)
    return generation.to_dict() if generation is not None else None


def _build_on_meta(model_class: Any, path: "str | os.PathLike[str]", dtype: Any,
                   kwargs: "dict[str, Any]") -> "tuple[Any, list[str], torch.dtype, dict[str, Any]]":
    """The model on the meta device as from_pretrained builds it before it reads weights (the same
    steps, in the same order: config and its overrides, checkpoint files, dtype, the init context),
    with what loading then changes (keep-in-fp32 dtypes, tied weights, requires_grad, eval, the
    generation config). Returns (model, the files the key holds, the torch dtype, the keywords the
    model's constructor got besides its config)."""
    # transformers' own steps, called with the keywords from_pretrained passes them (its internals'
    # annotations are narrower than what from_pretrained hands them: Any here).
    download: Any = {k: kwargs.pop(k) for k in _DOWNLOAD_KEYWORDS if k in kwargs}
    use_safetensors = kwargs.get("use_safetensors")
    variant = kwargs.get("variant")
    generation_config = kwargs.get("generation_config")
    from_auto = issubclass(model_class, _BaseAutoModelClass)
    for name in _DROPPED:
        kwargs.pop(name, None)

    config: Any = kwargs.pop("config", None)
    cls: Any
    if from_auto:
        if not isinstance(config, PreTrainedConfig):
            config, kwargs = cast(Any, AutoConfig.from_pretrained(path, return_unused_kwargs=True, **download, **kwargs))
        try:
            cls = _get_model_class(config, model_class._model_mapping)
        except KeyError:
            raise _core.InvalidArgument(
                f"snapcache.transformers: {model_class.__name__} has no model class for {type(config).__name__}"
            ) from None
        if getattr(cls, "config_class", None) == config.sub_configs.get("text_config", None):
            config = config.get_text_config()
    else:
        cls = model_class
    if not isinstance(config, PreTrainedConfig):
        config, model_kwargs = cls.config_class.from_pretrained(path, return_unused_kwargs=True, **download, **kwargs)
    else:
        config = copy.deepcopy(config)
        model_kwargs = kwargs
    if "attn_implementation" in kwargs:
        config._attn_implementation = kwargs.pop("attn_implementation")
    if "experts_implementation" in kwargs:
        config._experts_implementation = kwargs.pop("experts_implementation")

    files, sharded_metadata = _modeling_utils._get_resolved_checkpoint_files(
        pretrained_model_name_or_path=path,
        variant=variant,
        gguf_file=None,
        use_safetensors=use_safetensors,
        download_kwargs=download,
        user_agent={"file_type": "model", "framework": "pytorch", "from_auto_class": from_auto},
        is_remote_code=cls.is_remote_code(),
        transformers_explicit_filename=getattr(config, "transformers_weights", None),
    )
    files = list(files or [])
    not_safetensors = [f for f in files if not f.endswith(".safetensors")]
    if not files or not_safetensors:
        raise _core.Unsupported(
            f"snapcache.transformers loads safetensors checkpoints; {path} has {not_safetensors or 'none'}"
        )
    for extra in type(config).extra_files:
        candidate = os.path.join(path, download.get("subfolder") or "", extra)
        if os.path.isfile(candidate) and candidate not in files:
            files.append(candidate)
    config, dtype = _modeling_utils._get_dtype(dtype, files, config, sharded_metadata, None, True, None)
    config.name_or_path = path

    config = copy.deepcopy(config)
    with ContextManagers(cls.get_init_context(dtype, False, False, False)):
        model = cls(config, **model_kwargs)
        patch_output_recorders(model)
    _keep_in_fp32(model, model._get_dtype_plan(dtype))
    model.tie_weights(recompute_mapping=False)
    _requires_grad_as_loaded(model)
    model.eval()
    model.set_use_kernels(False)
    if model.can_generate() and hasattr(model, "adjust_generation_fn"):
        model.adjust_generation_fn(
            generation_config, from_auto, None, path,
            **{**dict.fromkeys(_DOWNLOAD_KEYWORDS), "force_download": False, "local_files_only": False,
               "subfolder": "", **download},
            trust_remote_code=None, **kwargs,
        )

    folder = os.path.join(path, download.get("subfolder") or "")
    index = os.path.join(folder, _modeling_utils._add_variant(SAFE_WEIGHTS_INDEX_NAME, variant))
    key_files = files + _frameworks.existing([index, os.path.join(folder, "config.json")])
    return model, key_files, dtype, dict(model_kwargs)


def _requires_grad_as_loaded(model):
    """requires_grad as transformers' loading leaves it: it re-creates each parameter it loads as
    nn.Parameter(t, requires_grad=t.is_floating_point()) (set_param_for_module), whatever the
    constructor set (Whisper's encoder freezes its positions; from_pretrained's are trainable). Tied
    parameters are one object, set once."""
    for parameter in model.parameters():
        parameter.requires_grad_(parameter.is_floating_point())


def _keep_in_fp32(model, dtype_plan):
    """The dtypes from_pretrained gives the tensors its dtype plan names (_keep_in_fp32_modules...):
    the plan's globs searched in each state_dict name, as transformers' loader searches them."""
    if not dtype_plan:
        return
    alternation, group_to_glob, _ = build_glob_alternation(list(dtype_plan.keys()))
    with torch.no_grad():
        for name, tensor in model.state_dict(keep_vars=True).items():
            match = alternation.search(name)
            if match is not None and match.lastgroup is not None:
                tensor.data = tensor.data.to(dtype_plan[group_to_glob[match.lastgroup]])

