"""load_model and reload_model from Python: cold, warm, reports, callbacks on both paths, the GIL."""

import threading
import time

import pytest
import torch

import snapcache
from conftest import clone_loader, run_python


def test_cold_then_warm(plan, store, checkpoint, cache_dir):
    path, tensors = checkpoint
    cold = snapcache.load_model(plan, store=store)
    r = cold.report
    # The checkpoint was just written, so in the page cache; its size is what the load read from.
    assert r.file_bytes == path.stat().st_size and r.bytes_from_disk == 0 and r.page_cache() == ""
    assert r.path is snapcache.LoadPath.miss and r.reason == ("no entry of component 'tiny' for this checkpoint yet: "
                                                              "this model's first load")
    assert [(t.tier, t.outcome) for t in r.tiers] == [("snapshot", snapcache.TierOutcome.missed),
                                                     ("ordinary", snapcache.TierOutcome.served)]
    # A CPU load publishes the tensors it hands out in the background, writing only the bytes they had
    # then (their fingerprint): it did not wait.
    assert r.publish is None and cold.publication.wait().result is snapcache.PublishResult.published
    # A CPU load hands the tensors out as they are: no upload stage.
    assert {s.stage for s in r.stages} >= {"key", "lookup", "ordinary load", "completeness",
                                           "fingerprint for the publication", "post-load"}
    assert "upload" not in {s.stage for s in r.stages}
    assert all(s.error == "" for s in r.stages) and r.seconds > 0 and r.entry_id
    assert str(r) == r.summary() and "miss" in r.summary() and "ordinary load" in r.table()

    warm = snapcache.load_model(plan, store=store)
    assert warm.report.path is snapcache.LoadPath.hit and warm.report.entry_id == r.entry_id
    assert warm.report.tiers[0].outcome is snapcache.TierOutcome.served
    # The publication left every byte in the page cache: nothing came from the disk.
    assert warm.report.bytes_from_disk == 0 and warm.report.page_cache() == ""
    # What a hit read from: the entry's data files, not the checkpoint.
    assert warm.report.file_bytes == sum(f.stat().st_size for f in cache_dir.rglob("data-*.bin"))
    assert list(warm.weights) == list(cold.weights) and set(warm.weights) == set(tensors)
    for name, t in tensors.items():
        assert torch.equal(warm.weights[name], t) and torch.equal(cold.weights[name], t)


def test_a_cpu_cold_load_hands_back_the_loaders_own_tensors(plan, store):
    produced = {}

    def loader(p):
        produced.update(clone_loader(p))
        return produced

    plan.ordinary_loader = loader
    cold = snapcache.load_model(plan, store=store)
    for name, t in cold.weights.items():
        assert t.data_ptr() == produced[name].data_ptr()  # no copy either way across the boundary


def test_the_loader_gets_the_plan(plan, store):
    seen = []

    def loader(p):
        seen.append((p.component, p.topology.tp_rank, list(p.checkpoint_files)))
        return clone_loader(p)

    plan.ordinary_loader = loader
    plan.topology = snapcache.Topology(tp_rank=0, tp_size=1)
    snapcache.load_model(plan, store=store)
    assert seen == [("tiny", 0, plan.checkpoint_files)]


def test_python_post_load_methods_run_on_both_paths_with_identical_results(plan, store):
    calls = []

    def scale(tensors):
        calls.append(tensors["norm.weight"].data_ptr())
        return {"norm.weight": tensors["norm.weight"] * 3}

    plan.post_load = [snapcache.post_load_method(scale, targets=["norm.weight"], writes="new_storages_only")]
    cold = snapcache.load_model(plan, store=store)
    warm = snapcache.load_model(plan, store=store)
    assert len(calls) == 2 and warm.report.path is snapcache.LoadPath.hit
    assert torch.equal(cold.weights["norm.weight"], warm.weights["norm.weight"])
    assert warm.weights["norm.weight"].tolist() == [4.5] * 4
    assert any(s.stage == "post-load" for s in warm.report.stages)


def test_a_failing_post_load_method_fails_the_load_with_its_name(plan, store):
    def broken(tensors):
        raise ValueError("scale grid 3x3 does not match")

    plan.post_load = [snapcache.post_load_method(broken, name="fp8-check")]
    with pytest.raises(snapcache.ExceptionRaised, match="post-load method fp8-check: ValueError: scale grid") as raised:
        snapcache.load_model(plan, store=store)
    assert isinstance(raised.value.__cause__, ValueError)


def test_the_precision_policy_is_checked(plan, store):
    plan.precision = snapcache.PrecisionPolicy("bf16-only", {"": [torch.bfloat16]})
    with pytest.raises(snapcache.Mismatch, match="tensor 'layer0.(bias|weight)': dtype Float but precision policy 'bf16-only'"):
        snapcache.load_model(plan, store=store)


def test_refresh_hooks_build_derived_buffers_and_reload_keeps_addresses(plan, store, checkpoint):
    def norms(weights, buffers, device):
        snapcache.refresh_buffer(buffers, "norm2", weights["norm.weight"] * 2, device)

    plan.refresh_hooks = [norms]
    model = snapcache.load_model(plan, store=store)
    buffer = model.derived["norm2"]
    weight_addresses = {n: t.data_ptr() for n, t in model.weights.items()}
    assert buffer.tolist() == [3.0] * 4

    path, tensors = checkpoint
    changed = dict(tensors)
    changed["norm.weight"] = torch.full((4,), 7.0)
    snapcache.write_safetensors(path, changed)  # a new identity: a new key, a cold load
    report = snapcache.reload_model(plan, model, store=store)
    assert report.path is snapcache.LoadPath.miss
    assert {n: t.data_ptr() for n, t in model.weights.items()} == weight_addresses
    assert model.derived["norm2"].data_ptr() == buffer.data_ptr()
    assert model.weights["norm.weight"].tolist() == [7.0] * 4 and buffer.tolist() == [14.0] * 4


def test_ineligible_loads(plan, store):
    plan.no_cache_reason = "the caller opted out of caching"
    r = snapcache.load_model(plan, store=store).report
    assert r.path is snapcache.LoadPath.ineligible and "opted out" in r.reason
    assert r.not_cached is snapcache.NotCached.opted_out
    plan.no_cache_reason = "fused LoRA adapter"
    assert snapcache.load_model(plan, store=store).report.reason == "fused LoRA adapter"
    plan.no_cache_reason = ""
    r = snapcache.load_model(plan, store=None).report
    assert r.path is snapcache.LoadPath.ineligible and "no cache store" in r.reason
    assert r.not_cached is snapcache.NotCached.no_store


def test_a_plan_that_declares_no_layout_is_refused_before_its_loader_runs(plan, store):
    ran = []

    def loader(p):
        ran.append(p.component)
        return clone_loader(p)

    plan.ordinary_loader = loader
    plan.expected = []
    for where in (store, None):
        with pytest.raises(snapcache.InvalidArgument) as raised:
            snapcache.load_model(plan, store=where)
        message = str(raised.value)
        assert "declares no tensors (LoadPlan::expected is empty)" in message, message
        assert "snapcache.module_layout(module)" in message and "expected_layout_of" in message, message
        assert "not expected" not in message
    assert ran == []
    # Declared, the same plan loads.
    plan.expected = snapcache.expected_layout_of(clone_loader(plan))
    assert snapcache.load_model(plan, store=store).report.path is snapcache.LoadPath.miss


def test_load_model_in_the_cpp_order_says_which_order_the_package_takes(plan, store):
    with pytest.raises(TypeError, match=r"takes the plan first: snapcache\.load_model\(plan, store=store\)"):
        snapcache.load_model(store, plan)
    with pytest.raises(TypeError, match=r"takes the plan first: snapcache\.load_model\(plan, store=None\)"):
        snapcache.load_model(None, plan)  # type: ignore[arg-type]
    loaded = snapcache.load_model(plan, store=store)
    with pytest.raises(TypeError, match=r"snapcache\.reload_model\(plan, model, store=store\)"):
        snapcache.reload_model(store, plan, loaded)  # type: ignore[arg-type]
    # Anything else in the plan's place: what is expected, by name.
    with pytest.raises(TypeError, match=r"plan must be a snapcache\.LoadPlan, not dict"):
        snapcache.load_model({}, store=store)  # type: ignore[arg-type]


def test_a_python_loader_is_identified_by_its_source_file_by_default(plan, store):
    import inspect

    plan.source_identity = ""
    r = snapcache.load_model(plan, store=store).report
    assert r.path is snapcache.LoadPath.miss and r.not_cached is None
    source = inspect.getsourcefile(plan.ordinary_loader)
    assert source is not None
    assert any(source in note and "default" in note for note in r.notes), r.notes
    assert source in str(r)  # the summary says it too
    assert snapcache.load_model(plan, store=store).report.path is snapcache.LoadPath.hit
    # A plan that names its loader itself gets no note.
    plan.source_identity = "tests-v1"
    assert snapcache.load_model(plan, store=store).report.notes == []


def test_a_plan_without_checkpoint_files_or_weights_identity_is_not_cached(store):
    def ones(plan):
        return {"w": torch.ones(2)}

    plan = snapcache.LoadPlan(component="made", source_identity="v1", ordinary_loader=ones,
                              expected=[snapcache.ExpectedTensor("w", torch.float32, [2])])
    r = snapcache.load_model(plan, store=store).report
    assert r.path is snapcache.LoadPath.ineligible and r.not_cached is snapcache.NotCached.no_checkpoint_identity
    plan.weights_identity = "ones-v1"
    assert snapcache.load_model(plan, store=store).report.path is snapcache.LoadPath.miss


def test_the_default_store_is_the_environments(plan, cache_dir, monkeypatch):
    monkeypatch.setenv("SNAPCACHE_DIR", str(cache_dir))
    assert snapcache.load_model(plan).report.path is snapcache.LoadPath.miss
    assert snapcache.load_model(plan).report.path is snapcache.LoadPath.hit
    monkeypatch.setenv("SNAPCACHE_DISABLE", "1")
    assert snapcache.load_model(plan).report.path is snapcache.LoadPath.ineligible


def test_an_unusable_cache_is_a_fallback_never_an_error(plan, tmp_path):
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "file").write_text("x")
    s = snapcache.Store.open_for_loading(snapcache.Config(directory=foreign))
    r = snapcache.load_model(plan, store=s).report
    assert r.path is snapcache.LoadPath.fallback and "foreign" in r.reason


def test_a_background_publication_can_be_waited_for(plan, store):
    plan.device = "cpu"
    model = snapcache.load_model(plan, store=store)
    # A CPU load's publication writes the weights in the background; the handle waits for it.
    assert model.report.publish is None
    assert model.publication.wait().result is snapcache.PublishResult.published
    assert not model.publication.pending
    assert snapcache.load_model(plan, store=store).report.path is snapcache.LoadPath.hit


_FREED_OFF_THE_CALLERS_PATH = """
import sys, threading, weakref
import torch, snapcache

path, = sys.argv[1:]
weights = {"a.weight": torch.randn(256, 256)}
main = threading.get_ident()


def say(line):  # one write per line: the library's thread may print between two of print()'s writes
    sys.stdout.write(line + "\\n")
    sys.stdout.flush()


def loader(plan):
    made = {n: t.clone() for n, t in weights.items()}
    # Runs on the thread that lets the last reference go; atexit=False: only that thread runs it.
    done = weakref.finalize(made["a.weight"], lambda: say("freed by the caller" if threading.get_ident() == main
                                                          else "freed off the caller's path"))
    done.atexit = False
    return made


class M(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(256, 256, bias=False)


# A device's load: "meta" keeps no bytes, so the library holds the loader's tensors' last references.
plan = snapcache.LoadPlan(checkpoint_files=[path], component="m", source_identity="v1", dtype="float32",
                          device="meta", ordinary_loader=loader)
for last in (False, True):
    with torch.device("meta"):
        m = M()
    snapcache.load_module(m, plan, store=None)
    say("loaded")
    if not last:
        snapcache.wait_for_publications()
        say("waited")
# Exits without waiting: the package waits at exit, while Python still runs the finalizer.
"""


def test_a_load_from_the_checkpoint_frees_the_loaders_tensors_off_the_callers_path(tmp_path):
    path = tmp_path / "w.safetensors"
    snapcache.write_safetensors(path, {"a.weight": torch.zeros(256, 256)})
    script = tmp_path / "freed.py"
    script.write_text(_FREED_OFF_THE_CALLERS_PATH)
    lines = run_python([str(script), str(path)], timeout=120).splitlines()
    # The first load's tensors were freed by the time wait_for_publications returned, the second's
    # before the process ended; each by a thread of the library's, under the GIL it took.
    assert lines[:2] == ["loaded", "freed off the caller's path"] or lines[:2] == ["freed off the caller's path", "loaded"]
    assert lines[2] == "waited"
    assert sorted(lines[3:]) == ["freed off the caller's path", "loaded"]


def test_the_gil_is_released_while_the_library_loads(tmp_path, store):
    # 256 MiB to publish and hash: long enough that a thread holding the GIL would starve the other.
    big = {f"w{i}": torch.full((16, 1 << 20), float(i)) for i in range(4)}
    path = tmp_path / "big.bin"
    path.write_bytes(b"identity only")
    plan = snapcache.LoadPlan(checkpoint_files=[path], component="big", source_identity="gil", dtype="float32",
                              expected=snapcache.expected_layout_of(big), ordinary_loader=lambda p: big)
    ticks = []
    done = threading.Event()

    def count():
        while not done.is_set():
            ticks.append(time.perf_counter())
            time.sleep(0.001)

    loading: dict = {}

    def load():
        started = time.perf_counter()
        loading["report"] = snapcache.load_model(plan, store=store).report
        # A CPU load returns once it has fingerprinted the tensors (tens of ms here): the publication's
        # write, waited for here, is most of the library's work.
        snapcache.wait_for_publications()
        loading["span"] = (started, time.perf_counter())
        done.set()

    counter = threading.Thread(target=count)
    loader = threading.Thread(target=load)
    counter.start()
    loader.start()
    loader.join(120)
    counter.join(5)
    start, end = loading["span"]
    assert loading["report"].path is snapcache.LoadPath.miss
    assert snapcache.load_model(plan, store=store).report.path is snapcache.LoadPath.hit
    during = [t for t in ticks if start < t < end]
    # The other thread kept running: no gap of more than a fraction of the load.
    gaps = [b - a for a, b in zip(during, during[1:])]
    assert end - start > 0.05 and len(during) > 10
    assert max(gaps) < max(0.05, (end - start) / 3)


def test_a_secondary_store_fills_the_local_cache(plan, tmp_path, monkeypatch):
    fleet = snapcache.Store.open(snapcache.Config(directory=tmp_path / "fleet"))
    cold = snapcache.load_model(plan, store=fleet)
    assert cold.report.path is snapcache.LoadPath.miss
    monkeypatch.setenv("SNAPCACHE_SECONDARY_DIR", str(tmp_path / "fleet"))
    config = snapcache.Config.from_environment(directory=tmp_path / "local")
    assert config.secondary == str(tmp_path / "fleet") and config.origin("secondary") == "SNAPCACHE_SECONDARY_DIR"
    local = snapcache.Store.open(config)
    warm = snapcache.load_model(plan, store=local)
    assert warm.report.path is snapcache.LoadPath.hit
    assert "copied from the secondary store" in warm.report.reason
    for name, t in cold.weights.items():
        assert torch.equal(warm.weights[name], t)
    # The copy is local now: the next load hits without the secondary store, and names where the
    # entry came from (recorded when it was copied).
    again = snapcache.load_model(plan, store=snapcache.Store.open(snapcache.Config(directory=tmp_path / "local")))
    assert again.report.path is snapcache.LoadPath.hit and "every chunk proven" not in again.report.reason
    assert f"entry copied from the secondary store {tmp_path / 'fleet'}; " in again.report.reason
