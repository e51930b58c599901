"""Binding loaded tensors into a torch.nn.Module built on the `meta` device.

The load itself is the library's (load_model); this file only matches its tensors to the
module's parameters and buffers and binds them, all or nothing.
"""

import copy
from typing import Iterable, cast

import torch

from . import _core
from ._stores import DEFAULT, StoreChoice, store_for

_MAX_LISTED = 8  # problems named in one error message


class _Slot:
    """One tensor object of the module, under every name it has (tied parameters have several)."""

    __slots__ = ("names", "tensor", "is_parameter")

    def __init__(self, name: str, tensor: torch.Tensor, is_parameter: bool) -> None:
        self.names = [name]
        self.tensor = tensor
        self.is_parameter = is_parameter


def _slots(module: torch.nn.Module) -> "list[_Slot]":
    by_id: "dict[int, _Slot]" = {}
    slots: "list[_Slot]" = []
    for is_parameter, items in (
        (True, module.named_parameters(remove_duplicate=False)),
        (False, module.named_buffers(remove_duplicate=False)),
    ):
        for name, tensor in items:
            slot = by_id.get(id(tensor))
            if slot is None:
                slot = by_id[id(tensor)] = _Slot(name, tensor, is_parameter)
                slots.append(slot)
            else:
                slot.names.append(name)
    return slots


def module_layout(module: torch.nn.Module, exclude: Iterable[str] = ()) -> "list[_core.ExpectedTensor]":
    """The tensors `module` holds, as a plan's `expected`: one ExpectedTensor per parameter or
    buffer (persistent or not), named as named_parameters()/named_buffers() name it first (a tied
    parameter appears once, under its first name), with the module's dtypes and shapes. Names in
    `exclude` (buffers that refresh hooks build) are left out."""
    excluded = set(exclude)
    return [
        _core.ExpectedTensor(s.names[0], s.tensor.dtype, list(s.tensor.shape))
        for s in _slots(module)
        if not excluded.intersection(s.names)
    ]


def _plan_for(module: torch.nn.Module, plan: _core.LoadPlan) -> _core.LoadPlan:
    """The plan, with `expected` filled from the module when the plan declares none."""
    if plan.expected:
        return plan
    plan = copy.copy(plan)
    plan.expected = module_layout(module, exclude=[h.name for h in plan.refresh_hooks])
    return plan


def _same_view(a: torch.Tensor, b: torch.Tensor) -> bool:
    return (a is b) or (
        a.device == b.device
        and a.dtype == b.dtype
        and a.data_ptr() == b.data_ptr()
        and tuple(a.shape) == tuple(b.shape)
        and tuple(a.stride()) == tuple(b.stride())
    )


def _match(
    module: torch.nn.Module, slots: "list[_Slot]", loaded: _core.LoadedModel
) -> "list[tuple[_Slot, torch.Tensor]]":
    """[(slot, tensor)] for every slot of the module, or Mismatch naming every tensor that does not
    fit (nothing is bound then)."""
    weights = loaded.weights
    derived = loaded.derived
    module_names = {name for s in slots for name in s.names}
    problems = []
    bindings = []
    for slot in slots:
        present = [n for n in slot.names if n in weights or n in derived]
        if not present:
            problems.append(f"'{slot.names[0]}' was not loaded")
            continue
        first = present[0]
        tensor = weights[first] if first in weights else derived[first]
        for other in present[1:]:
            t = weights[other] if other in weights else derived[other]
            if not _same_view(t, tensor):
                problems.append(f"'{other}' is tied to '{first}' in the module but was loaded as another tensor")
        want = slot.tensor
        if tensor.dtype != want.dtype:
            problems.append(f"'{first}': dtype {tensor.dtype} loaded, {want.dtype} in the module")
        elif tuple(tensor.shape) != tuple(want.shape):
            problems.append(f"'{first}': shape {list(tensor.shape)} loaded, {list(want.shape)} in the module")
        else:
            bindings.append((slot, tensor))
    for name in weights:
        if name not in module_names:
            problems.append(f"'{name}' was loaded but {type(module).__name__} has no parameter or buffer of that name")
    if problems:
        listed = "; ".join(problems[:_MAX_LISTED])
        more = f"; and {len(problems) - _MAX_LISTED} more" if len(problems) > _MAX_LISTED else ""
        raise _core.Mismatch(
            f"cannot bind the loaded tensors into {type(module).__name__}: {listed}{more}; nothing was bound"
        )
    return bindings


def _owner(module: torch.nn.Module, name: str) -> "tuple[torch.nn.Module, str]":
    owner_path, _, attr = name.rpartition(".")
    return (module.get_submodule(owner_path) if owner_path else module), attr


def _bind(module: torch.nn.Module, bindings: "list[tuple[_Slot, torch.Tensor]]") -> None:
    with torch.no_grad():
        for slot, tensor in bindings:
            old = slot.tensor
            if slot.is_parameter:
                # A Parameter of the old one's class over the loaded tensor's storage (no copy), with
                # its attributes (a loader's weight_loader, ...); one object for all tied names.
                new = cast(torch.nn.Parameter, torch.Tensor._make_subclass(type(old), tensor, old.requires_grad))
                vars(new).update(getattr(old, "__dict__", {}))
                for name in slot.names:
                    owner, attr = _owner(module, name)
                    owner._parameters[attr] = new
            else:
                for name in slot.names:
                    owner, attr = _owner(module, name)
                    owner._buffers[attr] = tensor


def load_module(module: torch.nn.Module, plan: _core.LoadPlan, *, store: StoreChoice = DEFAULT) -> _core.LoadedModel:
    """Loads `plan` and binds the tensors into `module` (typically built on the `meta` device):
    parameters and buffers, persistent or not; tied parameters stay tied; no tensor is copied (a
    warm CPU load binds the snapshot's private mapping itself; a CUDA load the uploaded tensors).

    When the plan declares no `expected` tensors, the module's layout is used (module_layout: one
    tensor per parameter or buffer, under its first name). The complete layout is checked before
    anything is bound: on a mismatch the module is untouched and snapcache.Mismatch names the
    tensors. Returns the LoadedModel (its report says hit, miss or fallback, and why).

    `store`: the cache (default: the environment's, default_store()); None: no cache (the load is
    ineligible and takes the ordinary path)."""
    slots = _slots(module)
    loaded = _core.load_model(store_for(store), _plan_for(module, plan))
    _bind(module, _match(module, slots, loaded))
    return loaded


def reload_module(module: torch.nn.Module, plan: _core.LoadPlan, *, store: StoreChoice = DEFAULT) -> _core.LoadReport:
    """Loads `plan` again (warm or cold) and copies the result into the tensors `module` already
    holds, in place: no parameter or buffer changes its address (captured CUDA graphs keep
    working). The layout is checked first; on a mismatch nothing is copied. Returns the LoadReport."""
    slots = _slots(module)
    on_meta = [s.names[0] for s in slots if s.tensor.is_meta]
    if on_meta:
        raise _core.InvalidArgument(
            f"reload_module: {len(on_meta)} tensors of {type(module).__name__} are on the meta device "
            f"(first '{on_meta[0]}'); load_module binds them first"
        )
    fresh = _core.load_model(store_for(store), _plan_for(module, plan))
    bindings = _match(module, slots, fresh)
    with torch.no_grad():
        for slot, tensor in bindings:
            slot.tensor.copy_(tensor)
    return fresh.report
