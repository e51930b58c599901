# Type stubs of snapcache._core, the bound C++ library (python/bindings/). The package (snapcache)
# re-exports all of it, and replaces load_model/reload_model with versions whose `store` defaults
# to the environment's. Docstrings are in the module itself (help(snapcache.LoadPlan)).
#
# An attribute the bindings convert on assignment is a property whose setter takes every form the
# binding accepts (plan.device = "cuda:0", plan.tiers = "donor,snapshot,ordinary") and whose getter
# says what reading it gives (a torch.device, a list of Tier). Checked by tools/typecheck.py (mypy
# and pyright over the package, its tests and the documentation's examples) and, against the
# module itself, by python/tests/test_typing.py.
import enum
import os
from typing import Callable, Final, Iterable, Mapping, Union, overload

import torch
from torch.distributed import ProcessGroup

__version__: str
TORCH_PINNED: str  # the torch the project pins and CI tests (cmake/torch-version)
TORCH_BUILT: str  # the torch this module was built against, and needs: "2.14.1"

_PathLike = Union[str, os.PathLike]
_Tensors = Union[Mapping[str, torch.Tensor], Iterable[tuple[str, torch.Tensor]]]
_DTypeLike = Union[torch.dtype, str]  # torch.bfloat16, "bfloat16" or "torch.bfloat16"
_DeviceLike = Union[torch.device, str, int]  # what torch.device() takes: "cuda:0", "cpu", 0
_Size = Union[int, str]  # bytes, or a size with a unit: "64GiB"

# --- errors: one class per C++ StatusCode -----------------------------------------------------
class Error(Exception):
    code: str  # the StatusCode's name, "no_space"
    sys_errno: int
    message: Final[str]

class NotFound(Error): ...
class Damaged(Error): ...
class Unfinished(Error): ...
class Foreign(Error): ...
class Mismatch(Error): ...
class NoSpace(Error): ...
class ReadOnly(Error): ...
class PermissionDenied(Error): ...
class IoError(Error): ...
class Busy(Error): ...
class Disabled(Error): ...
class InvalidArgument(Error, ValueError): ...
class Unsupported(Error): ...
class ExceptionRaised(Error): ...

def error_class(code: str) -> type[Error]: ...

# --- logging ----------------------------------------------------------------------------------
class LogLevel(enum.IntEnum):
    error = 0
    warn = 1
    info = 2
    debug = 3

def set_log_level(level: LogLevel) -> None: ...
def log_level() -> LogLevel: ...
def set_log_sink(sink: Callable[[LogLevel, str], object] | None) -> None: ...
def log(level: LogLevel, message: str) -> None: ...
def printable(text: str) -> str: ...

# --- config, store, key -----------------------------------------------------------------------
class Config:
    enabled: bool
    prepared_weight_cache: bool  # = enabled
    @property
    def directory(self) -> str: ...
    @directory.setter
    def directory(self, value: _PathLike) -> None: ...
    @property
    def secondary(self) -> str: ...  # a read-only store searched after a local miss; "" for none
    @secondary.setter
    def secondary(self, value: _PathLike) -> None: ...
    @property
    def capacity(self) -> int: ...  # bytes
    @capacity.setter
    def capacity(self, value: _Size) -> None: ...
    @property
    def prepared_weight_cache_gib(self) -> float: ...  # = capacity in GiB
    @prepared_weight_cache_gib.setter
    def prepared_weight_cache_gib(self, value: float | str) -> None: ...
    @property
    def reserve(self) -> int: ...
    @reserve.setter
    def reserve(self, value: _Size) -> None: ...
    def __init__(
        self,
        *,
        directory: _PathLike = ...,
        secondary: _PathLike = ...,
        enabled: bool = ...,
        prepared_weight_cache: bool = ...,
        capacity: _Size = ...,
        prepared_weight_cache_gib: float | str = ...,
        reserve: _Size = ...,
    ) -> None: ...
    sources: Final[dict[str, str]]
    config_file: Final[str]
    def origin(self, setting: str) -> str: ...
    @staticmethod
    def from_environment(**overrides: object) -> Config: ...
    @staticmethod
    def load(config_file: _PathLike | None = None, **overrides: object) -> Config: ...
    @staticmethod
    def default_directory() -> str: ...
    @staticmethod
    def default_config_file() -> str: ...

class LookupResult(enum.Enum):
    hit = 0
    miss = 1
    damaged = 2
    fallback = 3
    disabled = 4

class PublishResult(enum.Enum):
    published = 0
    already_present = 1
    skipped = 2
    failed = 3

class VerifyPolicy(enum.Enum):
    trust_identity = 0
    always_rehash = 1

class PublishOutcome:
    result: Final[PublishResult]
    ok: Final[bool]
    code: Final[str]
    reason: Final[str]
    entry_id: Final[str]
    bytes: Final[int]
    seconds: Final[float]
    evicted: Final[list[str]]

class Snapshot:
    id: Final[str]
    path: Final[str]
    tensor_names: Final[list[str]]
    data_bytes: Final[int]
    def data_file_path(self, file: int = 0) -> str: ...

class LookupOutcome:
    result: Final[LookupResult]
    reason: Final[str]
    entry_id: Final[str]
    snapshot: Final[Snapshot | None]
    rehashed: Final[bool]
    bytes_hashed: Final[int]
    seconds: Final[float]

class Store:
    @staticmethod
    def open(config: Config | None = None) -> Store: ...
    @staticmethod
    def open_for_loading(config: Config | None = None, **overrides: object) -> Store: ...
    unavailable_reason: Final[str]
    available: Final[bool]
    config: Final[Config]
    directory: Final[str]
    def entry_path(self, entry_id: str) -> str: ...
    def lookup(
        self, key: Key, policy: VerifyPolicy = ..., expected: Iterable[ExpectedTensor] | None = None
    ) -> LookupOutcome: ...

class CheckpointFile:
    path: str
    size: int
    mtime_ns: int
    ctime_ns: int
    device: int
    inode: int
    content_digest: str
    def __init__(
        self,
        *,
        path: str = "",
        size: int = 0,
        mtime_ns: int = 0,
        ctime_ns: int = 0,
        device: int = 0,
        inode: int = 0,
        content_digest: str = "",
    ) -> None: ...

class Topology:
    tp_rank: int
    tp_size: int
    pp_rank: int
    pp_size: int
    @property
    def extra(self) -> dict[str, str]: ...
    @extra.setter
    def extra(self, value: Mapping[str, str]) -> None: ...
    def __init__(
        self,
        *,
        tp_rank: int = 0,
        tp_size: int = 1,
        pp_rank: int = 0,
        pp_size: int = 1,
        extra: Mapping[str, str] = ...,
    ) -> None: ...

class TorchIdentity:
    version: str
    cuda_version: str
    cxx_abi: str
    def __init__(self, *, version: str = "", cuda_version: str = "", cxx_abi: str = "") -> None: ...

class Key:
    # A record of labels: dtype is the string as given (LoadPlan.dtype checks it against torch's).
    def __init__(
        self,
        *,
        checkpoint: Iterable[CheckpointFile] = ...,
        source_identity: str = "",
        torch: TorchIdentity = ...,
        dtype: str = "",
        precision_policy: str = "",
        topology: Topology = ...,
        component: str = "",
        options: Mapping[str, str] = ...,
    ) -> None: ...
    @property
    def checkpoint(self) -> list[CheckpointFile]: ...
    @checkpoint.setter
    def checkpoint(self, value: Iterable[CheckpointFile]) -> None: ...
    source_identity: str
    dtype: str
    precision_policy: str
    topology: Topology
    component: str
    @property
    def options(self) -> dict[str, str]: ...
    @options.setter
    def options(self, value: Mapping[str, str]) -> None: ...
    id: Final[str]
    # Last: inside the class body, `torch` is this attribute, not the module.
    torch: TorchIdentity

class KeyDifference:
    field: Final[str]
    wanted: Final[str]
    found: Final[str]
    words: Final[str]

def key_id(key: Key) -> str: ...
def encode_key(key: Key) -> bytes: ...
def decode_key(data: bytes) -> Key: ...
def diff_keys(wanted: Key, found: Key) -> list[KeyDifference]: ...
def describe_differences(differences: Iterable[KeyDifference], max: int = 4) -> str: ...
def write_key_file(path: _PathLike, key: Key) -> None: ...
def read_key_file(path: _PathLike) -> Key: ...
def describe_checkpoint(paths: _PathLike | Iterable[_PathLike]) -> list[CheckpointFile]: ...
def digest_source_files(paths: _PathLike | Iterable[_PathLike]) -> str: ...
def parse_size(text: str) -> int: ...
def format_size(bytes: int) -> str: ...

class ExpectedTensor:
    name: str
    alias_group: str
    @property
    def dtype(self) -> torch.dtype: ...
    @dtype.setter
    def dtype(self, value: _DTypeLike) -> None: ...
    @property
    def shape(self) -> list[int]: ...
    @shape.setter
    def shape(self, value: Iterable[int]) -> None: ...
    @property
    def strides(self) -> list[int] | None: ...  # unchecked when None
    @strides.setter
    def strides(self, value: Iterable[int] | None) -> None: ...
    @overload
    def __init__(
        self,
        name: str,
        dtype: _DTypeLike,
        shape: Iterable[int],
        strides: Iterable[int] | None = None,
        alias_group: str = "",
    ) -> None: ...
    @overload
    def __init__(
        self,
        *,
        name: str = "",
        dtype: _DTypeLike = ...,
        shape: Iterable[int] = ...,
        strides: Iterable[int] | None = None,
        alias_group: str = "",
    ) -> None: ...

# --- tensors ----------------------------------------------------------------------------------
class SafetensorsFile:
    @staticmethod
    def open(path: _PathLike) -> SafetensorsFile: ...
    path: Final[str]
    metadata: Final[dict[str, str]]
    def keys(self) -> list[str]: ...
    def layout(self) -> list[ExpectedTensor]: ...
    def __len__(self) -> int: ...
    def __contains__(self, name: str) -> bool: ...
    def tensor(self, name: str) -> torch.Tensor: ...
    def tensors(self) -> dict[str, torch.Tensor]: ...

def write_safetensors(path: _PathLike, tensors: _Tensors, metadata: Mapping[str, str] = ...) -> None: ...

class ShardAxis(enum.Enum):
    rows = 0
    columns = 1

def shard(full: torch.Tensor, axis: ShardAxis, rank: int, size: int, name: str = "") -> torch.Tensor: ...
def fuse_qkv(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, rank: int, size: int, name: str = ""
) -> torch.Tensor: ...
def current_torch_identity() -> TorchIdentity: ...
def expected_layout_of(tensors: _Tensors) -> list[ExpectedTensor]: ...
def check_completeness(tensors: _Tensors, expected: Iterable[ExpectedTensor]) -> None: ...
def publish_tensors(
    store: Store, key: Key, tensors: _Tensors, chunk_size: int = ..., threads: int = 0
) -> PublishOutcome: ...

class LoadedTensors:
    lookup: Final[LookupOutcome]
    tensors: Final[dict[str, torch.Tensor]]

def load_tensors(
    store: Store, key: Key, expected: Iterable[ExpectedTensor] | None = None, policy: VerifyPolicy = ...
) -> LoadedTensors: ...
def upload_tensors(tensors: _Tensors, device: _DeviceLike) -> dict[str, torch.Tensor]: ...

# --- the plan ---------------------------------------------------------------------------------
class WeightLayout(enum.Enum):
    row_major = 0
    column_major = 1

class PostLoadWrites(enum.Enum):
    new_storages_only = 0
    may_write_in_place = 1

# What a plain callable post-load method is: it gets {name: tensor}, changes it in place or returns
# replacements.
_PostLoadFn = Callable[[dict[str, torch.Tensor]], Mapping[str, torch.Tensor] | None]

class PostLoadMethod:
    """Subclass: name(), targets(tensors), apply(tensors) -> dict | None, writes(), version().
    The library calls a subclass's methods with a dict of the tensors."""

    def __init__(self) -> None: ...
    def name(self) -> str: ...
    def targets(self, tensors: dict[str, torch.Tensor]) -> list[str]: ...
    def apply(self, tensors: dict[str, torch.Tensor]) -> Mapping[str, torch.Tensor] | None: ...
    def writes(self) -> PostLoadWrites: ...
    def version(self) -> str: ...

def int8_row_scale(weight_layout: WeightLayout = ...) -> PostLoadMethod: ...
def fp8_block_scale(block_rows: int = 128, block_cols: int = 128) -> PostLoadMethod: ...
def layout(suffixes: Iterable[str], layout: WeightLayout) -> PostLoadMethod: ...
def post_load_method(
    fn: _PostLoadFn,
    *,
    name: str | None = None,
    targets: Iterable[str] | Callable[[dict[str, torch.Tensor]], Iterable[str]] | None = None,
    writes: PostLoadWrites | str = ...,
    version: str = "",
) -> PostLoadMethod: ...

class PrecisionRule:
    suffix: str
    @property
    def allowed(self) -> list[torch.dtype]: ...
    @allowed.setter
    def allowed(self, value: Iterable[_DTypeLike]) -> None: ...
    @overload
    def __init__(self, suffix: str, allowed: Iterable[_DTypeLike]) -> None: ...
    @overload
    def __init__(self, *, suffix: str = "", allowed: Iterable[_DTypeLike] = ...) -> None: ...

# A rule's dtypes: one dtype or several.
_Allowed = Union[_DTypeLike, Iterable[_DTypeLike]]
# PrecisionPolicy.rules: [PrecisionRule], [(suffix, dtypes)] or {suffix: dtypes}.
_Rules = Union[Iterable[Union[PrecisionRule, tuple[str, _Allowed]]], Mapping[str, _Allowed]]

class PrecisionPolicy:
    name: str
    @property
    def rules(self) -> list[PrecisionRule]: ...
    @rules.setter
    def rules(self, value: _Rules) -> None: ...
    @overload
    def __init__(self, name: str, rules: _Rules) -> None: ...
    @overload
    def __init__(self, *, name: str = "", rules: _Rules = ...) -> None: ...

def validate_precision(tensors: _Tensors, policy: PrecisionPolicy) -> None: ...

# fn(weights, buffers, device): fills `buffers` (refresh_buffer); what it returns is ignored.
_RefreshFn = Callable[[dict[str, torch.Tensor], dict[str, torch.Tensor], torch.device], object]

class RefreshHook:
    def __init__(self, name: str, fn: _RefreshFn) -> None: ...
    name: Final[str]
    fn: Final[_RefreshFn | None]

def refresh_buffer(buffers: dict[str, torch.Tensor], name: str, value: torch.Tensor, device: _DeviceLike) -> None: ...

class Tier:
    def name(self) -> str: ...

def snapshot_tier() -> Tier: ...
def ordinary_tier(*, read_ahead: bool = True) -> Tier: ...
def default_tiers() -> list[Tier]: ...
def donor_tier(
    *,
    socket_dir: _PathLike | None = None,
    copy_on_attach: Iterable[str] = ...,
    expected_prepared: Iterable[ExpectedTensor] | None = None,
    expected_derived: Iterable[str] = ...,
    required: bool = False,
    timeout: float = 10.0,
) -> Tier: ...

class Uploader:
    def name(self) -> str: ...

def per_storage_uploader() -> Uploader: ...
def staged_uploader(
    *,
    pinned_bytes: int = ...,
    chunk_bytes: int = ...,
    threads: int = 0,
    convert_layouts: bool = True,
    pin_ahead: bool = True,
) -> Uploader: ...

# The ordinary loader: fn(plan) -> {name: CPU tensor} (or (name, tensor) pairs).
_Loader = Callable[[LoadPlan], _Tensors]
_PostLoad = Union[PostLoadMethod, _PostLoadFn]
_Hook = Union[RefreshHook, tuple[str, _RefreshFn], _RefreshFn]
# A tier list: Tier objects or names, or the names in one string.
_Tiers = Union[str, Iterable[Union[Tier, str]], None]
# A load dtype: a torch.dtype or its name ("bfloat16", "torch.bfloat16"); None or "": none stated.
_LoadDType = Union[torch.dtype, str, None]

class LoadPlan:
    """Keywords are attributes, each taking what the attribute's assignment takes."""

    def __init__(
        self,
        *,
        checkpoint_files: _PathLike | Iterable[_PathLike] = ...,
        component: str = "",
        source_identity: str = "",
        dtype: _LoadDType = "",
        precision: PrecisionPolicy = ...,
        topology: Topology = ...,
        options: Mapping[str, str] = ...,
        hash_checkpoint_contents: bool = False,
        weights_identity: str = "",
        no_cache_reason: str = "",
        expected: Iterable[ExpectedTensor] = ...,
        ordinary_loader: _Loader | None = None,
        post_load: Iterable[_PostLoad] = ...,
        device: _DeviceLike = "cpu",
        refresh_hooks: Iterable[_Hook] = ...,
        tiers: _Tiers = None,
        group: RankGroup | ProcessGroup | None = None,
        uploader: Uploader | None = None,
        publish_in_background: bool = True,
    ) -> None: ...
    component: str
    source_identity: str
    precision: PrecisionPolicy
    topology: Topology
    hash_checkpoint_contents: bool
    weights_identity: str
    no_cache_reason: str
    uploader: Uploader | None
    publish_in_background: bool
    @property
    def checkpoint_files(self) -> list[str]: ...
    @checkpoint_files.setter
    def checkpoint_files(self, value: _PathLike | Iterable[_PathLike]) -> None: ...
    @property
    def dtype(self) -> str: ...  # the canonical name ("bfloat16"), or "" when none is stated
    @dtype.setter
    def dtype(self, value: _LoadDType) -> None: ...
    @property
    def options(self) -> dict[str, str]: ...
    @options.setter
    def options(self, value: Mapping[str, str]) -> None: ...
    @property
    def expected(self) -> list[ExpectedTensor]: ...
    @expected.setter
    def expected(self, value: Iterable[ExpectedTensor]) -> None: ...
    @property
    def ordinary_loader(self) -> _Loader | None: ...
    @ordinary_loader.setter
    def ordinary_loader(self, value: _Loader | None) -> None: ...
    @property
    def post_load(self) -> list[PostLoadMethod]: ...
    @post_load.setter
    def post_load(self, value: Iterable[_PostLoad]) -> None: ...
    @property
    def device(self) -> torch.device: ...
    @device.setter
    def device(self, value: _DeviceLike) -> None: ...
    @property
    def refresh_hooks(self) -> list[RefreshHook]: ...
    @refresh_hooks.setter
    def refresh_hooks(self, value: Iterable[_Hook]) -> None: ...
    @property
    def tiers(self) -> list[Tier]: ...
    @tiers.setter
    def tiers(self, value: _Tiers) -> None: ...
    @property
    def group(self) -> RankGroup | None: ...
    @group.setter
    def group(self, value: RankGroup | ProcessGroup | None) -> None: ...
    def __copy__(self) -> LoadPlan: ...
    def __deepcopy__(self, memo: object) -> LoadPlan: ...

def key_for_plan(store: Store, plan: LoadPlan) -> Key: ...

# --- loading ----------------------------------------------------------------------------------
class LoadPath(enum.Enum):
    hit = 0
    miss = 1
    fallback = 2
    ineligible = 3

class NotCached(enum.Enum):
    no_store = 0
    disabled = 1
    opted_out = 2
    no_checkpoint_identity = 3
    no_loader_identity = 4
    unidentified_checkpoint = 5

class TierOutcome(enum.Enum):
    served = 0
    missed = 1
    unusable = 2
    skipped = 3

class TierAttempt:
    tier: Final[str]
    outcome: Final[TierOutcome]
    reason: Final[str]

class StageTime:
    stage: Final[str]
    seconds: Final[float]
    bytes: Final[int]
    error: Final[str]

class GroupTransport(enum.Enum):
    store = ...
    nccl = ...

class RankGroup:
    rank: Final[int]
    size: Final[int]
    def describe(self) -> str: ...
    def exchange(self, mine: bytes) -> list[bytes]: ...

def rank_group(process_group: ProcessGroup, timeout: float = 300.0) -> RankGroup: ...
def rank_group_from_environment(transport: GroupTransport = ..., timeout: float = 300.0) -> RankGroup: ...

class GroupReport:
    rank: Final[int]
    size: Final[int]
    tier: Final[str]
    decision: Final[str]
    publication: Final[str]
    ranks: Final[list[str]]
    agreement_seconds: Final[float]

class PublicationReport:
    result: Final[PublishResult]
    ok: Final[bool]
    code: Final[str]
    reason: Final[str]
    written: Final[bool]
    skipped: Final[bool]
    entry_id: Final[str]
    bytes: Final[int]
    seconds: Final[float]
    evicted: Final[list[str]]
    evictions: Final[str]

class LoadReport:
    path: Final[LoadPath]
    reason: Final[str]
    not_cached: Final[NotCached | None]
    notes: Final[list[str]]  # what the load assumed for the caller (a default source_identity)
    entry_id: Final[str]
    tiers: Final[list[TierAttempt]]
    stages: Final[list[StageTime]]
    publish: Final[PublicationReport | None]
    group: Final[GroupReport | None]
    bytes_checked: Final[int]
    bytes_trusted: Final[int]
    file_bytes: Final[int]
    bytes_from_disk: Final[int]
    seconds: Final[float]
    def integrity(self) -> str: ...
    def page_cache(self) -> str: ...
    def summary(self) -> str: ...
    def table(self) -> str: ...
    # Set by the package: a report is a read-only record, its own copy.
    def __copy__(self) -> LoadReport: ...
    def __deepcopy__(self, memo: object) -> LoadReport: ...

class Publication:
    started: Final[bool]
    pending: Final[bool]
    def wait(self) -> PublicationReport: ...

def wait_for_publications() -> None: ...

class LoadedModel:
    weights: Final[dict[str, torch.Tensor]]
    derived: Final[dict[str, torch.Tensor]]
    report: Final[LoadReport]
    publication: Final[Publication]

def load_model(store: Store | None, plan: LoadPlan) -> LoadedModel: ...
def reload_model(store: Store | None, plan: LoadPlan, model: LoadedModel) -> LoadReport: ...
