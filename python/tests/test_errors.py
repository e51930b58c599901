"""snapcache.Error and its subclasses: one per StatusCode, the C++ Status's messages, Python
exceptions from callbacks chained as the cause."""

import pytest
import torch

import snapcache

CODES = {
    "not_found": "NotFound", "damaged": "Damaged", "unfinished": "Unfinished", "foreign": "Foreign",
    "mismatch": "Mismatch", "no_space": "NoSpace", "read_only": "ReadOnly",
    "permission_denied": "PermissionDenied", "io_error": "IoError", "busy": "Busy", "disabled": "Disabled",
    "invalid_argument": "InvalidArgument", "unsupported": "Unsupported", "exception": "ExceptionRaised",
}


def test_one_subclass_per_status_code():
    for code, name in CODES.items():
        cls = getattr(snapcache, name)
        assert issubclass(cls, snapcache.Error)
        assert cls.code == code
        assert snapcache.error_class(code) is cls
        assert cls.__module__ == "snapcache"
    assert issubclass(snapcache.InvalidArgument, ValueError)
    assert snapcache.Error.code == ""


def test_an_error_carries_the_status_message_and_code():
    with pytest.raises(snapcache.InvalidArgument) as raised:
        snapcache.parse_size("500")
    e = raised.value
    assert e.code == "invalid_argument"
    assert e.message == str(e)
    # The C++ message, word for word (src/util/text.cpp).
    assert str(e) == "size '500' has no unit: write 500B for bytes, or 500GiB, 500GB, ... (only 0 may be written without one)"


def test_a_missing_file_is_not_found_with_its_errno(tmp_path):
    with pytest.raises(snapcache.NotFound) as raised:
        snapcache.SafetensorsFile.open(tmp_path / "absent.safetensors")
    assert "absent.safetensors" in str(raised.value)
    assert raised.value.sys_errno == 2


def test_a_malformed_file_is_invalid_argument(tmp_path):
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00{bad}")
    with pytest.raises(snapcache.InvalidArgument, match="bad.safetensors"):
        snapcache.SafetensorsFile.open(bad)


def test_an_exception_in_the_loader_is_the_cause(plan, store):
    def broken(_plan):
        raise KeyError("no such tensor in my checkpoint")

    plan.ordinary_loader = broken
    with pytest.raises(snapcache.ExceptionRaised) as raised:
        snapcache.load_model(plan, store=store)
    assert str(raised.value) == "ordinary loader: KeyError: 'no such tensor in my checkpoint'"
    assert isinstance(raised.value.__cause__, KeyError)


def test_a_snapcache_error_in_a_callback_keeps_its_code(plan, store):
    def missing(_plan):
        raise snapcache.NotFound("shard 3 of 4 is not on this node")

    plan.ordinary_loader = missing
    with pytest.raises(snapcache.NotFound, match="ordinary loader: shard 3 of 4 is not on this node"):
        snapcache.load_model(plan, store=store)


def test_a_loader_that_returns_no_tensors_is_named(plan, store):
    plan.ordinary_loader = lambda _plan: {"layer0.weight": 3}
    with pytest.raises(snapcache.InvalidArgument, match="'layer0.weight' is a int, not a torch.Tensor"):
        snapcache.load_model(plan, store=store)


def test_errors_from_one_load_are_not_chained_to_the_next(plan, store):
    def broken(_plan):
        raise RuntimeError("first")

    plan.ordinary_loader = broken
    with pytest.raises(snapcache.ExceptionRaised):
        snapcache.load_model(plan, store=store)
    with pytest.raises(snapcache.InvalidArgument) as raised:
        snapcache.parse_size("7")
    assert raised.value.__cause__ is None


def test_an_incomplete_load_is_a_mismatch_naming_the_tensor(plan, store):
    plan.ordinary_loader = lambda p: {k: v for k, v in
                                      snapcache.SafetensorsFile.open(p.checkpoint_files[0]).tensors().items()
                                      if k != "norm.weight"}
    with pytest.raises(snapcache.Mismatch, match="tensor 'norm.weight' is missing"):
        snapcache.load_model(plan, store=store)


def test_errors_can_be_raised_and_caught_from_python():
    with pytest.raises(snapcache.Error) as raised:
        raise snapcache.Busy("leased")
    assert raised.value.code == "busy" and raised.value.message == "leased"
    assert torch is not None
