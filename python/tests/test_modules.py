"""load_module / reload_module: binding into an nn.Module built on the meta device."""

import pytest
import torch

import snapcache


class Tiny(torch.nn.Module):
    """Tied embedding and head, a persistent and a non-persistent buffer, a nested block."""

    scale: torch.Tensor
    positions: torch.Tensor

    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(16, 4)
        self.block = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 4))
        self.head = torch.nn.Linear(4, 16, bias=False)
        self.head.weight = self.embed.weight
        self.register_buffer("scale", torch.ones(4))
        self.register_buffer("positions", torch.arange(16), persistent=False)

    def forward(self, ids):
        x = self.embed(ids + self.positions[: ids.numel()] * 0)
        return self.head(self.block(x) * self.scale)


def tiny_weights(seed=0):
    torch.manual_seed(seed)
    ref = Tiny()
    return {name: t.detach().clone() for name, t in ref.named_parameters()} | {
        "scale": torch.full((4,), 0.5), "positions": torch.arange(16)}


@pytest.fixture
def tiny_checkpoint(tmp_path):
    weights = tiny_weights()
    path = tmp_path / "tiny.safetensors"
    snapcache.write_safetensors(path, weights)
    return path, weights


def tiny_plan(path, loader=None):
    def load(plan):
        return {n: t.clone() for n, t in snapcache.SafetensorsFile.open(plan.checkpoint_files[0]).tensors().items()}

    return snapcache.LoadPlan(checkpoint_files=[path], component="tiny-module", source_identity="v1",
                              dtype="float32", ordinary_loader=loader or load)


def meta_tiny():
    with torch.device("meta"):
        return Tiny()


def test_module_layout_lists_each_tensor_once_under_its_first_name():
    layout = snapcache.module_layout(meta_tiny())
    names = [e.name for e in layout]
    assert names == ["embed.weight", "block.0.weight", "block.0.bias", "block.2.weight", "block.2.bias",
                     "scale", "positions"]  # head.weight is embed.weight
    assert layout[-1].dtype is torch.int64 and layout[0].shape == [16, 4]
    assert [e.name for e in snapcache.module_layout(meta_tiny(), exclude=["positions"])][-1] == "scale"


def test_cold_and_warm_binds_parameters_and_buffers_ties_kept(tiny_checkpoint, store):
    path, weights = tiny_checkpoint
    plan = tiny_plan(path)
    ids = torch.tensor([1, 5, 7])
    reference = Tiny()
    reference.load_state_dict({k: v for k, v in weights.items() if k != "positions"}, strict=False)

    for expected_path in (snapcache.LoadPath.miss, snapcache.LoadPath.hit):
        model = meta_tiny()
        setattr(model.embed.weight, "weight_loader", "kept")  # an attribute a loader set on the parameter
        loaded = snapcache.load_module(model, plan, store=store)
        assert loaded.report.path is expected_path
        assert model.head.weight is model.embed.weight  # still one Parameter, now bound
        assert getattr(model.embed.weight, "weight_loader") == "kept"
        assert isinstance(model.embed.weight, torch.nn.Parameter) and model.embed.weight.requires_grad
        assert not any(t.is_meta for t in model.state_dict().values()) and not model.positions.is_meta
        assert "positions" in model._non_persistent_buffers_set and "positions" not in model.state_dict()
        for name, t in loaded.weights.items():  # bound, not copied
            bound = model.get_parameter(name) if name in dict(model.named_parameters()) else model.get_buffer(name)
            assert bound.data_ptr() == t.data_ptr()
        assert torch.equal(model(ids), reference(ids))


def test_a_mismatch_binds_nothing_and_names_the_tensors(tiny_checkpoint, store):
    path, weights = tiny_checkpoint

    def wrong(plan):
        out = {n: t.clone() for n, t in weights.items()}
        out["block.0.weight"] = torch.zeros(8, 5)
        del out["scale"]
        out["extra.weight"] = torch.zeros(1)
        return out

    model = meta_tiny()
    plan = tiny_plan(path, wrong)
    plan.expected = snapcache.expected_layout_of(wrong(plan))  # the loader's own declaration passes
    with pytest.raises(snapcache.Mismatch) as raised:
        snapcache.load_module(model, plan, store=store)
    message = str(raised.value)
    assert "'block.0.weight': shape [8, 5] loaded, [8, 4] in the module" in message
    assert "'scale' was not loaded" in message
    assert "'extra.weight' was loaded but Tiny has no parameter or buffer of that name" in message
    assert message.endswith("nothing was bound")
    assert all(t.is_meta for t in list(model.parameters()) + list(model.buffers()))


def test_with_the_modules_own_layout_the_loader_is_checked_before_publication(tiny_checkpoint, store):
    path, weights = tiny_checkpoint
    plan = tiny_plan(path, lambda p: {n: t for n, t in weights.items() if n != "scale"})
    model = meta_tiny()
    with pytest.raises(snapcache.Mismatch, match="tensor 'scale' is missing"):
        snapcache.load_module(model, plan, store=store)
    assert all(t.is_meta for t in model.parameters())
    plan.expected = snapcache.module_layout(model)
    assert store.lookup(snapcache.key_for_plan(store, plan)).result is snapcache.LookupResult.miss  # not published


def test_tied_names_loaded_as_different_tensors_are_refused(tiny_checkpoint, store):
    path, weights = tiny_checkpoint

    def untied(plan):
        out = {n: t.clone() for n, t in weights.items()}
        out["head.weight"] = out["embed.weight"].clone()
        return out

    plan = tiny_plan(path, untied)
    plan.expected = snapcache.expected_layout_of(untied(plan))
    model = meta_tiny()
    with pytest.raises(snapcache.Mismatch, match="'head.weight' is tied to 'embed.weight'"):
        snapcache.load_module(model, plan, store=store)
    assert model.embed.weight.is_meta


def test_tied_names_loaded_as_one_tensor_are_bound_once(tiny_checkpoint, store):
    path, weights = tiny_checkpoint

    def both(plan):
        out = {n: t.clone() for n, t in weights.items()}
        out["head.weight"] = out["embed.weight"]
        return out

    plan = tiny_plan(path, both)
    plan.expected = snapcache.expected_layout_of(both(plan))
    for _ in range(2):  # cold, then warm: the snapshot keeps the alias
        model = meta_tiny()
        snapcache.load_module(model, plan, store=store)
        assert model.head.weight is model.embed.weight


def test_reload_module_refreshes_in_place(tiny_checkpoint, store):
    path, weights = tiny_checkpoint
    plan = tiny_plan(path)
    model = meta_tiny()
    snapcache.load_module(model, plan, store=store)
    addresses = {n: t.data_ptr() for n, t in list(model.named_parameters()) + list(model.named_buffers())}
    fresh = tiny_weights(seed=1)
    snapcache.write_safetensors(path, fresh)
    report = snapcache.reload_module(model, plan, store=store)
    assert report.path is snapcache.LoadPath.miss
    assert {n: t.data_ptr() for n, t in list(model.named_parameters()) + list(model.named_buffers())} == addresses
    assert torch.equal(model.get_parameter("block.0.weight"), fresh["block.0.weight"])
    assert torch.equal(model.head.weight, fresh["embed.weight"])


def test_reload_module_refuses_an_unbound_module(tiny_checkpoint, store):
    with pytest.raises(snapcache.InvalidArgument, match="meta device"):
        snapcache.reload_module(meta_tiny(), tiny_plan(tiny_checkpoint[0]), store=store)


def test_a_refresh_hook_named_like_a_buffer_fills_it(tiny_checkpoint, store):
    path, weights = tiny_checkpoint

    def positions(w, buffers, device):
        snapcache.refresh_buffer(buffers, "positions", torch.arange(16), device)

    plan = tiny_plan(path, lambda p: {n: t.clone() for n, t in weights.items() if n != "positions"})
    plan.refresh_hooks = [snapcache.RefreshHook("positions", positions)]
    model = meta_tiny()
    loaded = snapcache.load_module(model, plan, store=store)
    assert "positions" not in loaded.weights
    assert model.positions.data_ptr() == loaded.derived["positions"].data_ptr()


def test_post_load_methods_change_what_is_bound(tiny_checkpoint, store):
    path, _ = tiny_checkpoint

    class Halve(snapcache.PostLoadMethod):
        def name(self):
            return "halve-scale"

        def targets(self, tensors):
            return ["scale"]

        def apply(self, tensors):
            tensors["scale"] = tensors["scale"] / 2

    plan = tiny_plan(path)
    plan.post_load = [Halve()]
    for _ in range(2):
        model = meta_tiny()
        snapcache.load_module(model, plan, store=store)
        assert model.scale.tolist() == [0.25] * 4
