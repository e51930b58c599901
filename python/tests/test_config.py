"""Config: defaults, keywords (and the loaders' aliases), the environment and the settings file."""

import os
import sys

import pytest

import snapcache

GiB = 1 << 30


def test_defaults():
    c = snapcache.Config()
    assert c.enabled and c.prepared_weight_cache
    assert c.capacity == 128 * GiB and c.reserve == 1 * GiB
    assert c.directory == ""
    assert c.sources == {} and c.origin("capacity") == ""


def test_keywords_are_attributes(tmp_path):
    c = snapcache.Config(directory=tmp_path, enabled=False, capacity="64GiB", reserve=2 * GiB)
    assert c.directory == str(tmp_path) and not c.enabled
    assert c.capacity == 64 * GiB and c.reserve == 2 * GiB
    assert c.sources == {"directory": "flag", "mode": "flag", "capacity": "flag", "reserve": "flag"}
    with pytest.raises(TypeError, match="unexpected keyword argument 'capacity_gb'"):
        snapcache.Config(capacity_gb=3)  # type: ignore[call-arg]  # the mistake under test


def test_the_loaders_names_for_the_switch_and_the_size():
    c = snapcache.Config(prepared_weight_cache=False, prepared_weight_cache_gib=64)
    assert not c.enabled and c.capacity == 64 * GiB
    assert c.prepared_weight_cache_gib == 64.0
    assert c.origin("capacity") == "prepared_weight_cache_gib"
    assert c.origin("mode") == "prepared_weight_cache"
    assert snapcache.Config(prepared_weight_cache_gib=0.5).capacity == GiB // 2


def test_sizes_follow_the_library_rule():
    with pytest.raises(snapcache.InvalidArgument, match="prepared_weight_cache_gib"):
        snapcache.Config(prepared_weight_cache_gib=-1)
    with pytest.raises(snapcache.InvalidArgument, match="0x10"):
        snapcache.Config(prepared_weight_cache_gib="0x10")
    with pytest.raises(snapcache.InvalidArgument, match="capacity: size '12' has no unit"):
        snapcache.Config(capacity="12")
    with pytest.raises(snapcache.InvalidArgument, match="negative"):
        snapcache.Config(reserve=-5)
    with pytest.raises(TypeError):
        snapcache.Config(capacity=True)


def test_from_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("SNAPCACHE_DIR", str(tmp_path / "env-cache"))
    monkeypatch.setenv("SNAPCACHE_CAPACITY_GIB", "3")
    monkeypatch.setenv("SNAPCACHE_DISABLE", "1")
    c = snapcache.Config.from_environment()
    assert c.directory == str(tmp_path / "env-cache")
    assert c.capacity == 3 * GiB and not c.enabled
    assert c.origin("capacity") == "SNAPCACHE_CAPACITY_GIB"
    # Keywords override the environment, as the caller's flags do.
    c = snapcache.Config.from_environment(prepared_weight_cache=True, prepared_weight_cache_gib=5)
    assert c.enabled and c.capacity == 5 * GiB and c.origin("capacity") == "prepared_weight_cache_gib"


def test_an_invalid_variable_names_itself(monkeypatch):
    monkeypatch.setenv("SNAPCACHE_CAPACITY_GIB", "lots")
    with pytest.raises(snapcache.InvalidArgument, match="SNAPCACHE_CAPACITY_GIB"):
        snapcache.Config.from_environment()


def test_settings_file(tmp_path):
    conf = tmp_path / "snapcache.conf"
    conf.write_text(f"# settings\ndirectory = {tmp_path / 'file-cache'}\ncapacity = 10GiB\nreserve = 0\n")
    c = snapcache.Config.load(conf)
    assert c.directory == str(tmp_path / "file-cache")
    assert c.capacity == 10 * GiB and c.reserve == 0
    assert c.config_file == str(conf) and c.origin("capacity") == str(conf)
    bad = tmp_path / "bad.conf"
    bad.write_text("capacity = 500\n")
    with pytest.raises(snapcache.InvalidArgument, match="bad.conf"):
        snapcache.Config.load(bad)


def test_default_locations(tmp_path):
    assert snapcache.Config.default_directory() == str(tmp_path / "xdg-cache" / "snapcache")
    assert snapcache.Config.default_config_file() == str(tmp_path / "config" / "snapcache" / "snapcache.conf")


def test_sizes_in_words():
    assert snapcache.parse_size("1.5GiB") == 3 * GiB // 2
    assert snapcache.format_size(3 * GiB // 2) == "1.5 GiB"


def test_no_home_means_no_default_cache(tmp_path):
    """A process with no home (HOME unset, as in some services and containers) has no default cache,
    never a shared /tmp path: a loader's store is unavailable and says to set SNAPCACHE_DIR."""
    import subprocess

    env = {k: v for k, v in os.environ.items()
           if k not in ("HOME", "XDG_CACHE_HOME", "XDG_CONFIG_HOME") and not k.startswith("SNAPCACHE_")}
    code = ("import snapcache\n"
            "store = snapcache.Store.open_for_loading()\n"
            "print(repr(snapcache.Config.default_directory()))\n"
            "print(store.available)\n"
            "print(store.unavailable_reason)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=tmp_path,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    default, available, reason = done.stdout.splitlines()[-3:]
    assert default == "''" and available == "False"
    assert "no cache directory: HOME is not set" in reason and "set SNAPCACHE_DIR" in reason
    assert list(tmp_path.iterdir()) == []  # nothing made where it ran
