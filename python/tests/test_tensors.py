"""Tensors in and out: safetensors, sharding, layouts, uploads; nothing is copied at the boundary."""

import pytest
import torch

import snapcache


def test_safetensors_round_trip_over_the_mapping(tmp_path):
    tensors = {"a": torch.arange(6, dtype=torch.bfloat16).reshape(2, 3), "b": torch.tensor([1, 2], dtype=torch.int8)}
    path = tmp_path / "x.safetensors"
    snapcache.write_safetensors(path, tensors, metadata={"format": "pt"})
    f = snapcache.SafetensorsFile.open(path)
    assert f.keys() == ["a", "b"] and len(f) == 2 and "a" in f and "c" not in f
    assert f.metadata == {"format": "pt"} and f.path == str(path)
    layout = f.layout()
    assert [(e.name, e.dtype, e.shape) for e in layout] == [("a", torch.bfloat16, [2, 3]), ("b", torch.int8, [2])]
    a = f.tensor("a")
    assert torch.equal(a, tensors["a"])
    # Both views of one mapping: the bytes sit where the file's data section is, back to back.
    b = f.tensor("b")
    assert b.data_ptr() - a.data_ptr() == 12
    with pytest.raises(snapcache.NotFound):
        f.tensor("c")


def test_the_reference_reader_agrees(tmp_path):
    safetensors = pytest.importorskip("safetensors.torch")
    tensors = {"w": torch.randn(3, 5), "i": torch.arange(4)}
    safetensors.save_file(tensors, str(tmp_path / "ref.safetensors"))
    ours = snapcache.SafetensorsFile.open(tmp_path / "ref.safetensors").tensors()
    assert all(torch.equal(ours[k], v) for k, v in tensors.items())


def test_shard_and_fuse_qkv():
    full = torch.arange(24.0).reshape(4, 6)
    rows = snapcache.shard(full, snapcache.ShardAxis.rows, 1, 2, "w")
    cols = snapcache.shard(full, snapcache.ShardAxis.columns, 0, 3, "w")
    assert torch.equal(rows, full[2:]) and torch.equal(cols, full[:, :2])
    assert rows.untyped_storage().nbytes() == rows.numel() * 4  # a compact storage of its own
    assert rows.data_ptr() == full[2:].data_ptr()  # rows are not copied: the same memory, as a view
    assert cols.untyped_storage().nbytes() == cols.numel() * 4
    assert cols.data_ptr() != full.data_ptr()  # columns are
    with pytest.raises(snapcache.InvalidArgument, match="w"):
        snapcache.shard(full, snapcache.ShardAxis.rows, 0, 3, "w")
    del full
    assert rows[:, 0].tolist() == [12.0, 18.0]  # the share keeps the bytes alive
    q, k, v = (torch.full((4, 2), float(i)) for i in range(3))
    fused = snapcache.fuse_qkv(q, k, v, 1, 2, "qkv")
    assert fused.shape == (6, 2) and fused[:, 0].tolist() == [0, 0, 1, 1, 2, 2]


def test_expected_layout_of_and_completeness():
    w = torch.randn(4, 4)
    tensors = {"w": w, "w_t": w.t(), "b": torch.zeros(4)}
    layout = snapcache.expected_layout_of(tensors)
    by_name = {e.name: e for e in layout}
    assert by_name["w_t"].strides == [1, 4]
    assert by_name["w"].alias_group == by_name["w_t"].alias_group != ""
    snapcache.check_completeness(tensors, layout)
    with pytest.raises(snapcache.Mismatch, match="tensor 'b' is missing"):
        snapcache.check_completeness({"w": w, "w_t": w.t()}, layout)
    e = snapcache.ExpectedTensor("x", "bfloat16", [2])
    assert e.dtype is torch.bfloat16 and e.strides is None and "bfloat16" in repr(e)
    with pytest.raises(snapcache.InvalidArgument, match="unknown dtype"):
        snapcache.ExpectedTensor("x", "float7", [1])


def test_upload_tensors_keeps_aliases_and_does_not_copy_on_cpu():
    w = torch.randn(3, 3)
    out = snapcache.upload_tensors({"w": w, "v": w[1]}, "cpu")
    assert out["w"].data_ptr() == w.data_ptr()  # a CPU "upload" hands the tensors back as they are
    assert out["v"].data_ptr() == w[1].data_ptr()


def test_tensors_are_the_same_objects_storage_across_the_boundary():
    t = torch.randn(5)
    back = snapcache.upload_tensors([("t", t)], torch.device("cpu"))["t"]
    back[0] = 42.0
    assert t[0].item() == 42.0


def test_a_non_tensor_is_a_type_error():
    with pytest.raises(TypeError, match="'x' is a str"):
        snapcache.expected_layout_of({"x": "nope"})  # type: ignore[arg-type]  # the mistake under test
