"""snapcache: restart PyTorch inference servers fast.

The C++ library, bound (``snapcache._core``): your ordinary loader's TP-local tensors are published
as a verified on-disk snapshot, and the next process maps it instead of reading the checkpoint.
Tensors cross between Python and C++ as the same torch tensors, never copied.

    import snapcache
    plan = snapcache.LoadPlan(checkpoint_files=[path], component="dit", dtype="bfloat16",
                              source_identity=snapcache.digest_source_files([__file__]),
                              ordinary_loader=my_loader)           # fn(plan) -> {name: tensor}
    with torch.device("meta"):
        model = MyModel(config)
    loaded = snapcache.load_module(model, plan)                    # binds the tensors, no copy
    print(loaded.report)                                           # hit/miss/fallback and why

Hugging Face models in one line, where from_pretrained was (each imports its framework only when used):

    model = snapcache.transformers.from_pretrained(AutoModelForCausalLM, path, dtype=torch.bfloat16)
    pipe = snapcache.diffusers.from_pretrained(WanPipeline, path, dtype=torch.bfloat16, device="cuda")

Errors are snapcache.Error subclasses (NotFound, Damaged, Mismatch, NoSpace, ...). The library's
log lines go to logging.getLogger("snapcache"). See docs/python.md.
"""

import atexit as _atexit
import logging as _logging
import os as _os
from typing import TYPE_CHECKING

import torch  # noqa: F401  (loads libtorch and its Python types before the extension module)


def _check_torch() -> None:
    # The extension module links the libtorch it was built against, whose C++ ABI changes with every
    # release: with another torch it would fail to load (an undefined symbol) or misbehave. Say so
    # plainly instead, before loading it. The build writes the version (python/CMakeLists.txt); the
    # wheel requires that torch too (pyproject.toml), and the module checks again as it loads.
    built_file = _os.path.join(_os.path.dirname(__file__), "_torch_version.txt")
    try:
        with open(built_file) as f:
            built = f.read().strip()
    except OSError:
        return  # not a built package; the module's own check applies
    running = str(torch.__version__).split("+")[0]
    if running != built:
        raise ImportError(
            f"snapcache was built against torch {built} and needs exactly that torch, but this environment "
            f"has torch {torch.__version__} ({_os.path.dirname(torch.__file__)}). Install torch=={built}, or "
            f"rebuild snapcache against this torch: pip install --force-reinstall --no-deps <snapcache source> "
            f"(the torch releases it builds against: docs/python.md)")


_check_torch()

from . import _core  # noqa: E402
from ._core import __version__

# The extension module's names (python/snapcache/_core.pyi), by name rather than `import *`, so that
# type checkers see load_model and reload_model as the functions below (whose `store` defaults to
# the environment's), not as the extension's load_model(store, plan). python/tests/test_typing.py
# checks that every public name of _core is here.
from ._core import (  # noqa: E402
    TORCH_BUILT, TORCH_PINNED,
    Error, NotFound, Damaged, Unfinished, Foreign, Mismatch, NoSpace, ReadOnly, PermissionDenied, IoError,
    Busy, Disabled, InvalidArgument, Unsupported, ExceptionRaised, error_class,
    LogLevel, set_log_level, log_level, set_log_sink, log, printable,
    Config, LookupResult, PublishResult, VerifyPolicy, PublishOutcome, Snapshot, LookupOutcome, Store,
    CheckpointFile, Topology, TorchIdentity, Key, KeyDifference, key_id, encode_key, decode_key, diff_keys,
    describe_differences, write_key_file, read_key_file, describe_checkpoint, digest_source_files, parse_size,
    format_size, ExpectedTensor,
    SafetensorsFile, write_safetensors, ShardAxis, shard, fuse_qkv, current_torch_identity, expected_layout_of,
    check_completeness, publish_tensors, LoadedTensors, load_tensors, upload_tensors,
    WeightLayout, PostLoadWrites, PostLoadMethod, int8_row_scale, fp8_block_scale, layout, post_load_method,
    PrecisionRule, PrecisionPolicy, validate_precision, RefreshHook, refresh_buffer,
    Tier, snapshot_tier, ordinary_tier, default_tiers, donor_tier, Uploader, per_storage_uploader,
    staged_uploader, LoadPlan, key_for_plan,
    LoadPath, NotCached, TierOutcome, TierAttempt, StageTime, GroupTransport, RankGroup, rank_group,
    rank_group_from_environment, GroupReport, PublicationReport, LoadReport, Publication, wait_for_publications,
    LoadedModel,
)
from ._modules import load_module, module_layout, reload_module
from ._stores import DEFAULT as _DEFAULT
from ._stores import StoreChoice as _StoreChoice
from ._stores import default_store
from ._stores import store_for as _store_for

__all__ = [
    "TORCH_BUILT", "TORCH_PINNED",
    # errors
    "Error", "NotFound", "Damaged", "Unfinished", "Foreign", "Mismatch", "NoSpace", "ReadOnly", "PermissionDenied",
    "IoError", "Busy", "Disabled", "InvalidArgument", "Unsupported", "ExceptionRaised", "error_class",
    # logging
    "LogLevel", "set_log_level", "log_level", "set_log_sink", "log", "printable", "logger", "route_logs_to_logging",
    # config, store, key
    "Config", "LookupResult", "PublishResult", "VerifyPolicy", "PublishOutcome", "Snapshot", "LookupOutcome", "Store",
    "default_store", "CheckpointFile", "Topology", "TorchIdentity", "Key", "KeyDifference", "key_id", "encode_key",
    "decode_key", "diff_keys", "describe_differences", "write_key_file", "read_key_file", "describe_checkpoint",
    "digest_source_files", "parse_size", "format_size", "ExpectedTensor",
    # tensors
    "SafetensorsFile", "write_safetensors", "ShardAxis", "shard", "fuse_qkv", "current_torch_identity",
    "expected_layout_of", "check_completeness", "publish_tensors", "LoadedTensors", "load_tensors", "upload_tensors",
    # the plan
    "WeightLayout", "PostLoadWrites", "PostLoadMethod", "int8_row_scale", "fp8_block_scale", "layout",
    "post_load_method", "PrecisionRule", "PrecisionPolicy", "validate_precision", "RefreshHook", "refresh_buffer",
    "Tier", "snapshot_tier", "ordinary_tier", "default_tiers", "donor_tier", "Uploader", "per_storage_uploader",
    "staged_uploader", "LoadPlan", "key_for_plan",
    # loading
    "LoadPath", "NotCached", "TierOutcome", "TierAttempt", "StageTime", "GroupTransport", "RankGroup", "rank_group",
    "rank_group_from_environment", "GroupReport", "PublicationReport", "LoadReport", "Publication",
    "wait_for_publications",
    "LoadedModel", "load_model", "reload_model", "load_module", "reload_module", "module_layout",
]
# Not in __all__: snapcache.transformers, snapcache.diffusers and snapcache.vllm (each imports its
# framework when first used, so `from snapcache import *` imports none of them).

_INTEGRATIONS = ("transformers", "diffusers", "vllm")

if TYPE_CHECKING:
    # What the __getattr__ below gives, as type checkers should see it (and without a module
    # __getattr__, a misspelt snapcache.name stays an error for them).
    from . import diffusers, transformers, vllm
else:

    def __getattr__(name):
        # snapcache.transformers and snapcache.diffusers import their framework, so only when asked
        # for: `import snapcache` needs neither (without it, the import error says which extra to
        # install). snapcache.vllm imports vLLM only when vLLM calls its entry point.
        if name in _INTEGRATIONS:
            import importlib

            return importlib.import_module(f".{name}", __name__)
        raise AttributeError(f"module 'snapcache' has no attribute {name!r}")


def load_model(plan: LoadPlan, store: _StoreChoice = _DEFAULT) -> LoadedModel:
    """Loads `plan` through the tiers: a warm snapshot, else your ordinary loader (and publishes
    the result). Returns a LoadedModel (weights, derived, report, publication). `store`: default
    the environment's (default_store()); None: no cache (the load is ineligible). Raises a
    snapcache.Error subclass when the load itself fails (your loader, a mismatch, a post-load
    method), never because of the cache: storage problems are fallbacks, named in the report.
    The plan comes first, then the store (C++'s load_model(store, plan) is a TypeError that says so)."""
    _check_plan_first("load_model(plan, store={})", plan, store)
    return _core.load_model(_store_for(store), plan)


def reload_model(plan: LoadPlan, model: LoadedModel, store: _StoreChoice = _DEFAULT) -> LoadReport:
    """Loads again and copies into `model`'s existing tensors in place (addresses kept), then runs
    the refresh hooks. Returns the LoadReport. The plan comes first, as for load_model."""
    _check_plan_first("reload_model(plan, model, store={})", plan, store)
    return _core.reload_model(_store_for(store), plan, model)


def _check_plan_first(call: str, plan: object, store: object) -> None:
    # The package's order is the plan's first, with the store a keyword that may be left out; the
    # extension (and C++) take the store first. A store, or None, in the plan's place is that order
    # mixed up: said, with the call as it is meant, instead of pybind11's list of signatures.
    if isinstance(plan, LoadPlan):
        return
    if plan is None or isinstance(plan, Store):
        given = "None" if plan is None else "store"
        raise TypeError(f"snapcache.{call.split('(')[0]} takes the plan first: snapcache.{call.format(given)} "
                        f"(the store first is the C++ order, snapcache._core's)")
    raise TypeError(f"snapcache.{call.split('(')[0]}: plan must be a snapcache.LoadPlan, not {type(plan).__name__}")


# A LoadReport is a read-only record: a copy is the same object, so a model that carries its report
# (snapcache.transformers' `model.snapcache_report`) can still be copied with copy.deepcopy.
setattr(LoadReport, "__copy__", lambda self: self)
setattr(LoadReport, "__deepcopy__", lambda self, memo: self)


# --- logging: the library's lines go to the `snapcache` logger -------------------------------

logger = _logging.getLogger("snapcache")
_LEVELS = {
    _core.LogLevel.error: _logging.ERROR,
    _core.LogLevel.warn: _logging.WARNING,
    _core.LogLevel.info: _logging.INFO,
    _core.LogLevel.debug: _logging.DEBUG,
}


def _log_sink(level: LogLevel, message: str) -> None:
    # Names in the library's lines come from caches, archives and peers: escaped as on stderr.
    logger.log(_LEVELS.get(level, _logging.INFO), _core.printable(message))


def route_logs_to_logging(enabled: bool = True) -> None:
    """Routes the library's log lines to logging.getLogger('snapcache') (the default on import), or
    back to stderr. Unless SNAPCACHE_LOG is set, the library then produces every level and the
    logger's configuration decides what is shown (a load logs one line at INFO: hit, miss or
    fallback, and why; its stage table at DEBUG)."""
    if enabled:
        if "SNAPCACHE_LOG" not in _os.environ:
            _core.set_log_level(_core.LogLevel.debug)
        _core.set_log_sink(_log_sink)
    else:
        _core.set_log_sink(None)


route_logs_to_logging()


@_atexit.register
def _at_exit() -> None:
    # Background publications finish while Python can still run the log sink; then the library's
    # last lines (it waits for publications again at its own exit) go to stderr.
    _core.wait_for_publications()
    _core.set_log_sink(None)
