"""The vLLM model loader behind the load format `snapcache` (registered by snapcache.vllm.register).

vLLM's BaseModelLoader.load_model builds the model on its device, calls load_weights, then runs
the quantization methods' process_weights_after_loading. This loader replaces load_weights only:
it loads through snapcache.load_module with vLLM's DefaultModelLoader.load_weights as the ordinary
loader. A miss runs that loader (the checkpoint is read as vLLM reads it: sharding, fused
projections, checks) and publishes every parameter and buffer the model then holds, this rank's
TP-local tensors before post-processing; a hit binds the entry's tensors into the model without
opening the checkpoint. Post-processing then runs as on every vLLM load, so every quantization
method's kernel layout is its own, on both paths.
"""

from __future__ import annotations

import logging
import os
import time
from typing import Any

import torch
import vllm
from vllm.config.utils import replace
from vllm.distributed.parallel_state import (get_dp_group, get_pp_group, get_tensor_model_parallel_rank,
                                             get_tensor_model_parallel_world_size, get_world_group)
from vllm.model_executor.model_loader import register_model_loader
from vllm.model_executor.model_loader.base_loader import BaseModelLoader, _has_online_quant
from vllm.model_executor.model_loader.default_loader import DefaultModelLoader

from . import _core
from . import _frameworks
from ._modules import _slots, load_module
from ._stores import default_store

# Where vLLM logs: lines under its `vllm` logger appear in its log, with its format.
logger = logging.getLogger("vllm.snapcache")

# --model-loader-extra-config keys of this load format, with their types. The keys of vLLM's
# default loader (which the cold path runs) are passed to it as they are.
_OWN_KEYS: dict[str, type] = {
    "cache_dir": str,  # the cache directory (default: snapcache's settings: SNAPCACHE_DIR, the settings file)
    "disable": bool,  # load with vLLM's default loader only, as SNAPCACHE_DISABLE=1 does
    "hash_checkpoint_contents": bool,  # key the checkpoint by its bytes, not its path and stat (docs/loading.md)
    "load_format": str,  # the format the cold path reads the checkpoint with (default "auto")
}
_DEFAULT_LOADER_KEYS = ("enable_multithread_load", "num_threads", "enable_weights_track")


def register_loader(load_format: str) -> None:
    register_model_loader(load_format)(SnapcacheModelLoader)


def _show_library_lines_in_vllms_log() -> None:
    """The library's own lines (logger `snapcache`: a load's hit, miss or fallback and why, a
    background publication's outcome) go where vLLM's lines go, unless the application has given
    that logger handlers of its own."""
    library, vllms = logging.getLogger("snapcache"), logging.getLogger("vllm")
    if library.handlers or not vllms.handlers:
        return
    for handler in vllms.handlers:
        library.addHandler(handler)
    library.setLevel(vllms.getEffectiveLevel())
    library.propagate = False


def _settings(load_config: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """(this loader's settings, the default loader's) from --model-loader-extra-config; ValueError,
    as vLLM's own loaders raise, for a key neither takes or a value of the wrong type."""
    extra = load_config.model_loader_extra_config
    if not isinstance(extra, dict):
        raise ValueError(f"model_loader_extra_config must be a dict for load format {load_config.load_format}, "
                         f"got {type(extra).__name__}")
    unknown = sorted(set(extra) - set(_OWN_KEYS) - set(_DEFAULT_LOADER_KEYS))
    if unknown:
        raise ValueError(f"Unexpected extra config keys for load format {load_config.load_format}: {unknown}; "
                         f"it takes {sorted(_OWN_KEYS)} and the default loader's {sorted(_DEFAULT_LOADER_KEYS)}")
    own = {k: v for k, v in extra.items() if k in _OWN_KEYS}
    for key, value in own.items():
        if not isinstance(value, _OWN_KEYS[key]):
            raise ValueError(f"model_loader_extra_config[{key!r}] must be a {_OWN_KEYS[key].__name__} for load format "
                             f"{load_config.load_format}, got {value!r}")
    return own, {k: v for k, v in extra.items() if k in _DEFAULT_LOADER_KEYS}


class SnapcacheModelLoader(BaseModelLoader):
    """vLLM's default loader with a snapcache entry in front (module docstring)."""

    def __init__(self, load_config: Any) -> None:
        super().__init__(load_config)
        _show_library_lines_in_vllms_log()
        self.settings, default_keys = _settings(load_config)
        # The cold path: vLLM's own loader, in the format asked for (its default: "auto").
        self.default_loader = DefaultModelLoader(replace(
            load_config, load_format=self.settings.get("load_format", "auto"),
            model_loader_extra_config=default_keys))
        self.vllm_config: Any = None  # load_model's

    def download_model(self, model_config: Any) -> None:
        self.default_loader.download_model(model_config)

    def load_weights(self, model: Any, model_config: Any) -> None:  # model: the torch.nn.Module vLLM built
        started = time.perf_counter()
        if _has_online_quant(model):
            # Online quantization quantizes while it loads; there is no checkpoint-format tensor
            # to keep. vLLM's default loader, as without snapcache.
            logger.info("snapcache: not cached: online quantization (%s) quantizes the weights as they load",
                        model_config.quantization)
            self.default_loader.load_weights(model, model_config)
            return
        # vLLM's own error (a missing checkpoint, a download that fails) is raised here, as its
        # default loader raises it.
        files = self._checkpoint_files(model, model_config)
        try:
            plan = self._plan(model, model_config, files)
        except Exception as e:  # noqa: BLE001 - this vLLM's config is not what the key is made of: no cache
            self._fall_back(model, model_config, f"the key cannot be made: {type(e).__name__}: {e}")
            return
        try:
            loaded = load_module(model, plan, store=self._store())
        except _core.Error as e:
            cause = e.__cause__
            if isinstance(e, _core.ExceptionRaised) and cause is not None and not isinstance(cause, _core.Error):
                raise cause from None  # vLLM's loader failed: its error, as without snapcache
            self._fall_back(model, model_config, str(e))
            return
        report = loaded.report
        model.snapcache_report = report  # as snapcache.transformers' models carry theirs
        logger.info("snapcache: loading weights took %.2f seconds (%s)", time.perf_counter() - started,
                    report.path.name)

    def load_model(self, vllm_config: Any, model_config: Any, prefix: str = "") -> Any:
        self.vllm_config = vllm_config  # what the key is made of (load_weights gets the model's config only)
        return super().load_model(vllm_config, model_config, prefix)

    def _fall_back(self, model: Any, model_config: Any, reason: str) -> None:
        """vLLM's default loader, into the model untouched by snapcache (load_module binds all or
        nothing), with the reason in vLLM's log."""
        logger.warning("snapcache: loading with vLLM's default loader instead: %s", _core.printable(reason))
        model.snapcache_report = None
        self.default_loader.load_weights(model, model_config)

    def _store(self) -> _core.Store:
        overrides: dict[str, object] = {}
        if "cache_dir" in self.settings:
            overrides["directory"] = self.settings["cache_dir"]
        if self.settings.get("disable"):
            overrides["enabled"] = False
        return default_store(**overrides)

    def _checkpoint_files(self, model: torch.nn.Module, model_config: Any) -> list[str]:
        """The files vLLM's default loader reads for this model (DefaultModelLoader.get_all_weights'
        sources, as it prepares them: downloaded if need be, duplicates filtered) and their index.
        The config is in the key field by field (_plan), not as a file."""
        sources = [DefaultModelLoader.Source(
            model_config.model, model_config.revision, prefix="",
            fall_back_to_pt=getattr(model, "fall_back_to_pt_during_load", True),
            allow_patterns_overrides=getattr(model, "allow_patterns_overrides", None))]
        sources += list(getattr(model, "secondary_weights", ()))
        files: list[str] = []
        for source in sources:
            folder, weights, _, index_file = self.default_loader._prepare_weights(
                source.model_or_path, source.subfolder, source.revision, source.fall_back_to_pt,
                source.allow_patterns_overrides)
            beside = _frameworks.existing([os.path.join(folder, index_file)])
            files += [f for f in sorted(weights) + beside if f not in files]
        return files

    def _plan(self, model: torch.nn.Module, model_config: Any, files: list[str]) -> _core.LoadPlan:
        vllm_config = self.vllm_config
        parallel = vllm_config.parallel_config
        world = get_world_group()
        topology = _core.Topology(
            tp_rank=get_tensor_model_parallel_rank(), tp_size=get_tensor_model_parallel_world_size(),
            pp_rank=get_pp_group().rank_in_group, pp_size=get_pp_group().world_size,
            extra=self._expert_parallel(model_config, parallel))
        options = {
            "framework": f"vllm {vllm.__version__}",
            "model_class": _frameworks.qualified_name(type(model)),
            "quantization": str(model_config.quantization),
            "kv_cache_dtype": str(vllm_config.cache_config.cache_dtype),
            "revision": str(model_config.revision),
        }
        options.update(_frameworks.flat_options("hf_config", model_config.hf_config.to_dict()))
        plan = _core.LoadPlan(
            checkpoint_files=files,
            component=type(model).__name__,
            source_identity=_frameworks.source_identity(__file__),
            dtype=model_config.dtype,
            topology=topology,
            options=options,
            hash_checkpoint_contents=self.settings.get("hash_checkpoint_contents", False),
            device=self._device(vllm_config),
            ordinary_loader=self._ordinary_loader(model, model_config),
        )
        if world.world_size > 1:
            plan.group = world.cpu_group  # every rank takes the same path (docs/scale-out.md)
        return plan

    def _device(self, vllm_config: Any) -> torch.device:
        """Where vLLM puts the weights (BaseModelLoader.load_model's rule: the load config's device,
        else the engine's): on CUDA the library's upload engine fills it from the entry."""
        device = self.load_config.device if self.load_config.device is not None else vllm_config.device_config.device
        return torch.device(device)

    @staticmethod
    def _expert_parallel(model_config: Any, parallel: Any) -> dict[str, str]:
        """Expert-parallel ranks shard experts across data-parallel ranks too: their size and rank
        (as vLLM's FusedMoEParallelConfig computes them) are in the key then."""
        if not (model_config.is_moe and parallel.enable_expert_parallel):
            return {}
        tp = get_tensor_model_parallel_world_size()
        dp_rank = get_dp_group().rank_in_group if parallel.data_parallel_size > 1 else 0
        return {"ep_size": str(parallel.data_parallel_size * tp),
                "ep_rank": str(dp_rank * tp + get_tensor_model_parallel_rank())}

    def _ordinary_loader(self, model: torch.nn.Module, model_config: Any):
        """vLLM's default load_weights into `model` itself; its parameters and buffers, as loaded,
        are the load's tensors (load_module binds them back into the same places)."""

        def load(plan: _core.LoadPlan) -> dict[str, torch.Tensor]:
            self.default_loader.load_weights(model, model_config)
            # One tensor per parameter or buffer, under its first name (ties once): the layout
            # load_module declared. On the CPU, the loaded tensor itself (no copy); an ordinary
            # loader hands the library host tensors, so a device's are copied to the host (the
            # library uploads them to plan.device again, as it uploads an entry's).
            return {slot.names[0]: slot.tensor.detach().cpu() for slot in _slots(model)}

        return load
