"""Store, Key and the outcomes of lookups and publications."""

import os

import pytest
import torch

import snapcache


def make_key(path, **fields):
    key = snapcache.Key(checkpoint=snapcache.describe_checkpoint([path]), source_identity="v1",
                        torch=snapcache.current_torch_identity(), dtype="float32", component="tiny")
    for name, value in fields.items():
        setattr(key, name, value)
    return key


def test_open_makes_a_cache(store, cache_dir):
    assert store.available and store.unavailable_reason == ""
    assert store.directory == str(cache_dir)
    assert (cache_dir / "CACHEDIR.TAG").exists()
    assert "Store(" in repr(store)


def test_a_directory_that_is_not_a_cache_is_refused_or_unavailable(tmp_path):
    foreign = tmp_path / "not-a-cache"
    foreign.mkdir()
    (foreign / "precious.txt").write_text("mine")
    with pytest.raises(snapcache.Foreign):
        snapcache.Store.open(snapcache.Config(directory=foreign))
    loading = snapcache.Store.open_for_loading(snapcache.Config(directory=foreign))
    assert not loading.available and "not-a-cache" in loading.unavailable_reason


def test_open_for_loading_never_raises_for_the_environment(monkeypatch):
    monkeypatch.setenv("SNAPCACHE_CAPACITY_GIB", "-1")
    s = snapcache.Store.open_for_loading()
    assert not s.available and "SNAPCACHE_CAPACITY_GIB" in s.unavailable_reason
    assert not snapcache.default_store().available


def test_open_for_loading_takes_the_loaders_keywords(cache_dir, monkeypatch):
    monkeypatch.setenv("SNAPCACHE_DIR", str(cache_dir))
    s = snapcache.Store.open_for_loading(prepared_weight_cache_gib=2, prepared_weight_cache=False)
    assert s.config.capacity == 2 << 30 and not s.config.enabled


def test_key_fields_and_id(checkpoint):
    path, _ = checkpoint
    key = make_key(path, topology=snapcache.Topology(tp_rank=1, tp_size=2), options={"attention": "fused"})
    assert key.checkpoint[0].path == str(path) and key.checkpoint[0].size == os.path.getsize(path)
    assert key.topology.tp_rank == 1 and key.options == {"attention": "fused"}
    assert key.torch.version.split("+")[0] == torch.__version__.split("+")[0]
    assert len(key.id) == 32 and key.id == snapcache.key_id(key)
    assert snapcache.decode_key(snapcache.encode_key(key)) == key
    other = make_key(path, topology=key.topology, options=key.options, dtype="bfloat16")
    diffs = snapcache.diff_keys(other, key)
    assert [(d.field, d.wanted, d.found) for d in diffs] == [("dtype", "bfloat16", "float32")]
    assert diffs[0].words == "dtype float32 -> bfloat16"
    assert snapcache.describe_differences(diffs) == "dtype float32 -> bfloat16"


def test_key_files_round_trip(checkpoint, tmp_path):
    key = make_key(checkpoint[0])
    snapcache.write_key_file(tmp_path / "k.key", key)
    assert snapcache.read_key_file(tmp_path / "k.key") == key


def test_digest_source_files(tmp_path):
    src = tmp_path / "loader.py"
    src.write_text("print(1)\n")
    first = snapcache.digest_source_files([src])
    assert first == snapcache.digest_source_files(src)
    src.write_text("print(2)\n")
    assert snapcache.digest_source_files([src]) != first


def test_publish_then_lookup_and_load(store, checkpoint):
    path, tensors = checkpoint
    key = make_key(path)
    miss = store.lookup(key)
    assert miss.result is snapcache.LookupResult.miss and miss.snapshot is None and miss.reason
    published = snapcache.publish_tensors(store, key, tensors)
    assert published.result is snapcache.PublishResult.published and published.ok
    assert published.entry_id == key.id and published.bytes > 0 and published.reason == ""
    again = snapcache.publish_tensors(store, key, tensors)
    assert again.result is snapcache.PublishResult.already_present and again.ok

    hit = store.lookup(key)
    assert hit.result is snapcache.LookupResult.hit
    assert hit.snapshot.id == key.id and set(hit.snapshot.tensor_names) == set(tensors)
    loaded = snapcache.load_tensors(store, key, expected=snapcache.expected_layout_of(tensors))
    assert loaded.lookup.result is snapcache.LookupResult.hit
    assert list(loaded.tensors) == list(tensors)
    for name, t in tensors.items():
        assert torch.equal(loaded.tensors[name], t)


def test_a_layout_other_than_expected_is_a_miss_with_the_reason(store, checkpoint):
    path, tensors = checkpoint
    key = make_key(path)
    snapcache.publish_tensors(store, key, tensors)
    expected = snapcache.expected_layout_of(tensors)
    expected[0].shape = [2, 2]
    loaded = snapcache.load_tensors(store, key, expected=expected)
    assert loaded.lookup.result is snapcache.LookupResult.miss
    assert "layer0.weight" in loaded.lookup.reason and loaded.tensors == {}


def test_a_publication_too_large_is_skipped_naming_the_setting(tmp_path, checkpoint):
    path, tensors = checkpoint
    small = snapcache.Store.open(snapcache.Config(directory=tmp_path / "small", capacity="1KiB"))
    outcome = snapcache.publish_tensors(small, make_key(path), tensors)
    assert outcome.result is snapcache.PublishResult.skipped and not outcome.ok
    assert outcome.code == "no_space" and "Config.capacity" in outcome.reason


def test_a_disabled_cache_looks_up_nothing(tmp_path, checkpoint):
    off = snapcache.Store.open(snapcache.Config(directory=tmp_path / "off", prepared_weight_cache=False))
    assert off.lookup(make_key(checkpoint[0])).result is snapcache.LookupResult.disabled
