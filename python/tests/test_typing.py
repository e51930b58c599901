"""The type stubs (snapcache/_core.pyi) against the module itself, and the forms the documentation
shows, run. The static half is tools/typecheck.py (mypy and pyright over the package, these tests and
the docs' examples): the annotated assignments below are checked there against the stubs' types."""

import ast
import pathlib
import re

import pytest
import torch

import snapcache
from snapcache import _core

STUB = pathlib.Path(snapcache.__file__).with_name("_core.pyi")


def stub_tree():
    return ast.parse(STUB.read_text())


def public(names):
    return {n for n in names if not n.startswith("_")}


def stub_module_names():
    names = set()
    for node in stub_tree().body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef)):
            names.add(node.name)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
    return public(names)


class StubClass:
    """A class of the stub: its members, and which of them may be assigned."""

    def __init__(self, node, classes):
        self.node = node
        self.members = set()
        self.writable = set()
        for item in node.body:
            if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                self.members.add(item.target.id)
                if not is_final(item.annotation):  # `name: Final[T]`: read-only
                    self.writable.add(item.target.id)
            elif isinstance(item, ast.Assign):  # enum members
                self.members.update(t.id for t in item.targets if isinstance(t, ast.Name))
            elif isinstance(item, ast.FunctionDef):
                self.members.add(item.name)
                if any(isinstance(d, ast.Attribute) and d.attr == "setter" for d in item.decorator_list):
                    self.writable.add(item.name)
        self.bases = [b.id for b in node.bases if isinstance(b, ast.Name) and b.id in classes]

    def all_members(self, classes):
        out = set(self.members)
        for base in self.bases:
            out |= classes[base].all_members(classes)
        return out


def is_final(annotation):
    node = annotation.value if isinstance(annotation, ast.Subscript) else annotation
    return isinstance(node, ast.Name) and node.id == "Final"


def stub_classes():
    nodes = {n.name: n for n in stub_tree().body if isinstance(n, ast.ClassDef)}
    classes = {}
    for name, node in nodes.items():
        classes[name] = StubClass(node, nodes)
    return classes


def test_the_stub_declares_exactly_what_the_module_binds():
    runtime = public(dir(_core))
    declared = stub_module_names()
    assert sorted(runtime - declared) == [], "bound but not in _core.pyi"
    assert sorted(declared - runtime) == [], "in _core.pyi but not bound"


def test_each_class_of_the_stub_has_the_members_the_class_has():
    classes = stub_classes()
    problems = []
    for name, stub in classes.items():
        cls = getattr(_core, name)
        own = public(vars(cls))
        if issubclass(cls, BaseException):
            own -= public(vars(BaseException))
        declared = stub.all_members(classes)
        problems += [f"{name}.{m} is bound but not in the stub" for m in sorted(own - declared)]
        problems += [f"{name}.{m} is in the stub but not bound" for m in sorted(public(stub.members)) if not hasattr(cls, m)]
        for member in sorted(public(stub.members)):
            attr = vars(cls).get(member)
            if isinstance(attr, property):
                # A read-only attribute is declared as a property without a setter; one that may be
                # assigned as a plain attribute or a property with a setter.
                if (attr.fset is not None) != (member in stub.writable):
                    problems.append(f"{name}.{member}: assignable at run time: {attr.fset is not None}")
    assert problems == []


def bound_parameters(function):
    """The parameter names of each of a bound function's overloads, from the signature pybind11 writes
    at the head of its docstring: "name(a: int, *, b: str = ...) -> None" (overloads numbered)."""
    doc = function.__doc__ or ""
    heads = re.findall(r"^(?:\d+\. )?" + re.escape(function.__name__) + r"\((.*)\) -> ", doc, re.M)
    signatures = []
    for head in heads:
        names, depth, current = [], 0, ""
        for ch in head + ",":
            if ch in "([{":
                depth += 1
            elif ch in ")]}":
                depth -= 1
            if ch == "," and depth == 0:
                name = current.strip().split(":")[0].split("=")[0].strip()
                if name and name not in ("*", "/", "self"):
                    names.append(name)
                current = ""
            else:
                current += ch
        signatures.append(names)
    return signatures


def stub_parameters(node):
    args = node.args
    names = [a.arg for a in args.posonlyargs + args.args + args.kwonlyargs]
    return [n for n in names if n not in ("self", "cls")]


def stub_functions():
    """Every function of the stub, module-level and in classes, by its qualified name: the
    parameter names of each of its overloads."""
    out: "dict[str, list[list[str]]]" = {}

    def add(name, node):
        out.setdefault(name, []).append(stub_parameters(node))

    for node in stub_tree().body:
        if isinstance(node, ast.FunctionDef):
            add(node.name, node)
        elif isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and not any(
                        isinstance(d, (ast.Name, ast.Attribute)) and getattr(d, "id", getattr(d, "attr", "")) in
                        ("property", "setter") for d in item.decorator_list):
                    add(f"{node.name}.{item.name}", item)
    return out


def test_each_function_of_the_stub_has_the_parameters_the_binding_has():
    problems = []
    for qualified, declared in sorted(stub_functions().items()):
        owner, _, name = qualified.rpartition(".")
        if name.startswith("_") and name != "__init__":
            continue
        target = getattr(getattr(_core, owner), name) if owner else getattr(_core, name)
        bound = bound_parameters(target)
        if not bound:  # not a pybind11 function (an exception's own method, say)
            continue
        if any(name.startswith("*") for params in bound for name in params):
            continue  # takes **kwargs: test_keyword_constructors_take_what_the_attributes_take tries them
        for params in declared:
            if params not in bound:
                problems.append(f"{qualified}({', '.join(params)}): the binding takes "
                                + " or ".join(f"({', '.join(b)})" for b in bound))
    assert problems == []


def test_the_package_exports_every_name_of_the_module_and_its_own():
    assert sorted(public(dir(_core)) - set(snapcache.__all__)) == []
    assert [n for n in snapcache.__all__ if not hasattr(snapcache, n)] == []
    for name in ("load_module", "reload_module", "default_store", "module_layout", "load_model", "reload_model",
                 "route_logs_to_logging"):
        assert name in snapcache.__all__
    # The package's own load_model(plan, store=...), not the extension's load_model(store, plan).
    assert snapcache.load_model is not _core.load_model and snapcache.reload_model is not _core.reload_model
    namespace: dict = {}
    exec("from snapcache import *", namespace)
    assert "transformers" not in namespace and "diffusers" not in namespace  # imported when used only


def test_the_forms_the_docs_show_are_accepted_and_read_back_as_typed(tmp_path):
    path = tmp_path / "model.safetensors"
    snapcache.write_safetensors(path, {"w": torch.ones(2)})

    def halve(tensors: "dict[str, torch.Tensor]") -> None:
        tensors["w"] = tensors["w"] / 2

    def rope(weights: "dict[str, torch.Tensor]", buffers: "dict[str, torch.Tensor]", device: torch.device) -> None:
        snapcache.refresh_buffer(buffers, "rope", weights["w"] * 3, device)

    plan = snapcache.LoadPlan(component="typed", source_identity="typing-v1",
                              expected=[snapcache.ExpectedTensor("w", torch.bfloat16, [2])],
                              ordinary_loader=lambda p: {"w": torch.ones(2, dtype=torch.bfloat16)})
    plan.device = "cpu"
    plan.dtype = torch.bfloat16
    plan.checkpoint_files = str(path)  # one path
    plan.tiers = "donor,snapshot,ordinary"
    plan.post_load = [halve]
    plan.refresh_hooks = [("rope", rope)]
    device: torch.device = plan.device
    dtype: str = plan.dtype
    files: "list[str]" = plan.checkpoint_files
    tiers: "list[snapcache.Tier]" = plan.tiers
    methods: "list[snapcache.PostLoadMethod]" = plan.post_load
    hooks: "list[snapcache.RefreshHook]" = plan.refresh_hooks
    assert device == torch.device("cpu") and dtype == "bfloat16" and files == [str(path)]
    assert [t.name() for t in tiers] == ["donor", "snapshot", "ordinary"]
    assert [m.name() for m in methods] == ["halve"] and [h.name for h in hooks] == ["rope"]

    plan.tiers = None  # the default tiers
    loaded: snapcache.LoadedModel = snapcache.load_model(plan, store=None)
    report: snapcache.LoadReport = loaded.report
    assert report.path is snapcache.LoadPath.ineligible and report.not_cached is snapcache.NotCached.no_store
    assert loaded.weights["w"].tolist() == [0.5, 0.5] and loaded.derived["rope"].tolist() == [1.5, 1.5]
    store: snapcache.Store = snapcache.default_store(prepared_weight_cache=False)
    assert snapcache.load_model(plan, store=store).report.path is snapcache.LoadPath.ineligible


def test_keyword_constructors_take_what_the_attributes_take(tmp_path):
    plan = snapcache.LoadPlan(checkpoint_files=tmp_path / "a.safetensors", dtype=torch.float16, device="cpu",
                              tiers="snapshot", options={"k": "v"}, expected=(snapcache.ExpectedTensor("w", "float32", (2,)),))
    assert plan.checkpoint_files == [str(tmp_path / "a.safetensors")] and plan.dtype == "float16"
    assert plan.expected[0].dtype is torch.float32 and plan.expected[0].shape == [2]
    config = snapcache.Config(directory=tmp_path, capacity="2GiB", reserve=0)
    assert config.directory == str(tmp_path) and config.capacity == 2 << 30
    policy = snapcache.PrecisionPolicy(name="w8", rules={"": torch.bfloat16})
    assert policy.rules[0].allowed == [torch.bfloat16]
    with pytest.raises(TypeError):
        snapcache.PrecisionPolicy("w8")  # type: ignore[call-overload]  # name and rules together, or keywords
