"""LoadPlan and what it carries: loader, post-load methods, precision, refresh hooks, tiers,
uploaders."""

import copy

import pytest
import torch

import snapcache


def test_plan_attributes_and_conversions(tmp_path):
    def loader(plan):
        return {}

    plan = snapcache.LoadPlan(checkpoint_files=tmp_path / "a.safetensors", component="dit", dtype=torch.bfloat16,
                              topology=snapcache.Topology(tp_rank=1, tp_size=4), options={"attention": "fused"},
                              device="cpu", ordinary_loader=loader, no_cache_reason="opted out",
                              publish_in_background=False, hash_checkpoint_contents=True)
    assert plan.checkpoint_files == [str(tmp_path / "a.safetensors")]
    assert plan.dtype == "bfloat16" and plan.device == torch.device("cpu")
    assert plan.topology.tp_size == 4 and plan.options == {"attention": "fused"}
    assert plan.ordinary_loader is loader
    assert plan.no_cache_reason == "opted out" and not plan.publish_in_background
    plan.ordinary_loader = None
    assert plan.ordinary_loader is None
    with pytest.raises(TypeError):
        plan.ordinary_loader = 3  # type: ignore[assignment]  # the mistake under test
    with pytest.raises(TypeError, match="unexpected keyword argument 'checkpoint'"):
        snapcache.LoadPlan(checkpoint="x")  # type: ignore[call-arg]  # the mistake under test
    twin = copy.copy(plan)
    twin.component = "vae"
    assert plan.component == "dit"


def test_tiers_by_object_name_or_string():
    plan = snapcache.LoadPlan()
    assert plan.tiers == []
    plan.tiers = "donor, snapshot,ordinary"
    assert [t.name() for t in plan.tiers] == ["donor", "snapshot", "ordinary"]
    plan.tiers = [snapcache.donor_tier(required=True, timeout=0.5), "snapshot", snapcache.ordinary_tier()]
    assert [t.name() for t in plan.tiers] == ["donor", "snapshot", "ordinary"]
    assert [t.name() for t in snapcache.default_tiers()] == ["snapshot", "ordinary"]
    assert snapcache.ordinary_tier(read_ahead=False).name() == "ordinary"
    with pytest.raises(TypeError):
        snapcache.ordinary_tier(False)  # type: ignore[call-arg]  # keyword only: the mistake under test
    with pytest.raises(snapcache.InvalidArgument, match="unknown tier 'disk'"):
        plan.tiers = "disk"


def test_uploaders():
    assert snapcache.per_storage_uploader().name() != ""
    staged = snapcache.staged_uploader(pinned_bytes=64 << 20, threads=2, pin_ahead=False)
    plan = snapcache.LoadPlan(uploader=staged)
    assert plan.uploader is not None and plan.uploader.name() == staged.name()


def test_precision_policy_forms():
    rules: "dict[str, torch.dtype | list[torch.dtype | str]]" = {
        ".weight_scale": [torch.float32], "proj.weight": torch.int8, "": ["bfloat16", torch.float32]}
    policy = snapcache.PrecisionPolicy("w8", rules)
    assert [r.suffix for r in policy.rules] == [".weight_scale", "proj.weight", ""]
    assert policy.rules[2].allowed == [torch.bfloat16, torch.float32]
    same = snapcache.PrecisionPolicy(name="w8", rules=[(".weight_scale", [torch.float32]),
                                                        snapcache.PrecisionRule("proj.weight", [torch.int8])])
    assert same.rules[1].allowed == [torch.int8]
    snapcache.validate_precision({"a.proj.weight": torch.zeros(2, dtype=torch.int8)}, policy)
    with pytest.raises(snapcache.Mismatch, match="a.proj.weight"):
        snapcache.validate_precision({"a.proj.weight": torch.zeros(2)}, policy)


def test_builtin_int8_row_scale():
    method = snapcache.int8_row_scale(snapcache.WeightLayout.column_major)
    assert isinstance(method, snapcache.PostLoadMethod) and method.name()
    w = torch.randint(-100, 100, (4, 8), dtype=torch.int8)
    s = torch.rand(4, 1)
    tensors = {"l.weight": w, "l.weight_scale": s}
    assert sorted(method.targets(tensors)) == ["l.weight", "l.weight_scale"]
    out = method.apply(tensors)
    assert out is not None and out["l.weight_scale"].shape == (4,)
    assert torch.equal(out["l.weight"], w) and out["l.weight"].stride() == (1, 4)
    assert tensors["l.weight_scale"].shape == (4, 1)  # the input dict is unchanged


def test_builtin_fp8_and_layout_reject_what_they_cannot_convert():
    with pytest.raises(snapcache.Error, match="l.weight"):
        snapcache.layout([".weight"], snapcache.WeightLayout.column_major).apply({"l.weight": torch.zeros(2, 2)})
    fp8 = snapcache.fp8_block_scale()
    w = torch.zeros(256, 256).to(torch.float8_e4m3fn)
    out = fp8.apply({"f.weight": w, "f.weight_scale": torch.ones(2, 2)})
    assert out is not None and out["f.weight_scale"].stride() == (1, 2)
    with pytest.raises(snapcache.Error, match="f.weight"):
        fp8.apply({"f.weight": w, "f.weight_scale": torch.ones(3, 2)})


class Doubler(snapcache.PostLoadMethod):
    """A Python post-load method: doubles the tensors whose names end with '.weight'."""

    def __init__(self):
        super().__init__()
        self.calls = 0

    def name(self):
        return "doubler"

    def targets(self, tensors):
        return [n for n in tensors if n.endswith(".weight")]

    def apply(self, tensors):
        self.calls += 1
        return {n: tensors[n] * 2 for n in self.targets(tensors)}

    def writes(self):
        return snapcache.PostLoadWrites.new_storages_only

    def version(self):
        return "2"


def test_a_python_subclass_is_a_post_load_method():
    d = Doubler()
    assert isinstance(d, snapcache.PostLoadMethod) and d.name() == "doubler"
    out = d.apply({"a.weight": torch.ones(2), "a.bias": torch.ones(2)})  # the subclass's own method
    assert list(out) == ["a.weight"] and out["a.weight"].tolist() == [2, 2]
    assert d.writes() is snapcache.PostLoadWrites.new_storages_only and d.version() == "2"
    plan = snapcache.LoadPlan(post_load=[d, snapcache.int8_row_scale()])
    assert plan.post_load[0] is d  # the same Python object comes back


def test_a_subclass_outlives_the_python_reference():
    plan = snapcache.LoadPlan(post_load=[Doubler()])
    import gc

    gc.collect()
    assert plan.post_load[0].name() == "doubler"


def test_callables_as_post_load_methods():
    def halve(tensors):
        tensors["x"] = tensors["x"] / 2

    method = snapcache.post_load_method(halve, targets=["x"], writes="new_storages_only", version="1")
    assert method.name() == "halve" and method.targets({"x": torch.ones(1), "y": torch.ones(1)}) == ["x"]
    out = method.apply({"x": torch.ones(1)})
    assert out is not None and out["x"].item() == 0.5
    plan = snapcache.LoadPlan(post_load=[halve])
    assert plan.post_load[0].name() == "halve"
    assert plan.post_load[0].writes() is snapcache.PostLoadWrites.may_write_in_place
    with pytest.raises(TypeError):
        snapcache.LoadPlan(post_load=[42])  # type: ignore[list-item]  # the mistake under test


def test_refresh_hooks_and_refresh_buffer():
    def norms(weights: "dict[str, torch.Tensor]", buffers: "dict[str, torch.Tensor]", device: "torch.device | str"):
        snapcache.refresh_buffer(buffers, "norms", weights["n"] * 2, device)

    plan = snapcache.LoadPlan(refresh_hooks=[norms, ("other", norms), snapcache.RefreshHook("third", norms)])
    assert [h.name for h in plan.refresh_hooks] == ["norms", "other", "third"]
    buffers: dict[str, torch.Tensor] = {}
    norms({"n": torch.ones(3)}, buffers, torch.device("cpu"))
    first = buffers["norms"]
    norms({"n": torch.full((3,), 5.0)}, buffers, "cpu")
    assert buffers["norms"] is first or buffers["norms"].data_ptr() == first.data_ptr()
    assert first.tolist() == [10, 10, 10]
    with pytest.raises(snapcache.Mismatch, match="norms"):
        snapcache.refresh_buffer(buffers, "norms", torch.ones(4), "cpu")
    assert plan.refresh_hooks[0].fn is norms  # the same object (last: `is` narrows norms' type)


def test_key_for_plan(store, plan):
    key = snapcache.key_for_plan(store, plan)
    assert key.component == "tiny" and key.dtype == "float32" and key.source_identity == "tests-v1"
    assert key.checkpoint[0].path == plan.checkpoint_files[0]


def test_the_load_dtype_is_a_dtype_torch_knows_and_only_a_label(store, plan):
    # A torch.dtype or its name, read back as the canonical name; None or "": none stated.
    forms: "list[tuple[torch.dtype | str | None, str]]" = [(torch.bfloat16, "bfloat16"), ("bfloat16", "bfloat16"), ("torch.bfloat16", "bfloat16"),
             ("half", "float16"), (torch.float8_e4m3fn, "float8_e4m3fn"), (None, ""), ("", "")]
    for given, label in forms:
        assert snapcache.LoadPlan(dtype=given).dtype == label
        plan.dtype = given
        assert plan.dtype == label
    plan.dtype = "bfloat16"
    for wrong in ("bf16", "checkpoint", "torch.nn", "fp16"):
        with pytest.raises(snapcache.InvalidArgument, match=r"is not a dtype torch knows; give a torch.dtype "
                                                            r"\(torch.bfloat16\) or its name \('bfloat16' or"):
            plan.dtype = wrong
        with pytest.raises(ValueError):  # InvalidArgument is a ValueError
            snapcache.LoadPlan(dtype=wrong)
    with pytest.raises(TypeError, match="LoadPlan.dtype: int is not a dtype"):
        plan.dtype = 16  # the mistake under test (`plan`, a fixture, is not typed here)
    assert plan.dtype == "bfloat16"  # a refused value changes nothing
    # Each spelling is one key.
    ids = set()
    for given in (torch.bfloat16, "bfloat16", "torch.bfloat16"):
        plan.dtype = given
        ids.add(snapcache.key_for_plan(store, plan).id)
    assert len(ids) == 1 and snapcache.key_for_plan(store, plan).dtype == "bfloat16"
    # A label in the key: nothing is cast. The loader's float32 tensors come back float32.
    loaded = snapcache.load_model(plan, store=store)
    assert {t.dtype for t in loaded.weights.values()} <= {torch.float32, torch.int64}
    assert loaded.weights["layer0.weight"].dtype is torch.float32
