"""Ctrl-C and SystemExit during a load: an interrupt raised in a loader, a post-load method, a
refresh hook or the log sink is raised as itself once the library has stopped, never wrapped in
snapcache.ExceptionRaised and never swallowed; a SIGINT that arrives while C++ runs stops the load
at the next stage. The SIGINT cases are real signals sent to new processes (interrupt_worker.py),
each several times, since what they guard against depended on timing."""

import copy
import logging
import os
import pathlib
import signal
import subprocess
import sys
import time

import pytest

import snapcache

HERE = pathlib.Path(__file__).resolve().parent
WORKER = HERE / "interrupt_worker.py"
TRIALS = int(os.environ.get("SNAPCACHE_INTERRUPT_TRIALS", "10"))


def interrupted_runs(mode, checkpoint, caches, *extra, delay=0.0):
    """Starts one worker per cache (together: most of a worker's start is importing torch), sends
    each a SIGINT once it says it is blocking (and `delay` more), and returns (returncode, stdout,
    stderr) of each."""
    # A shell's background job (`cmd &` without job control) starts with SIGINT ignored, which its
    # children inherit, and Python then installs no KeyboardInterrupt handler: the workers would
    # never stop. Each worker starts with SIGINT at its default, as under a terminal.
    children = [subprocess.Popen([sys.executable, str(WORKER), mode, str(checkpoint), str(cache), *map(str, extra)],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                 preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
                for cache in caches]
    results = []
    try:
        # Each gets its signal as soon as it blocks, the others still running.
        for child in children:
            assert child.stdout is not None and child.stderr is not None
            line = child.stdout.readline()
            assert line == "blocking\n", f"the worker said {line!r}; stderr: {child.stderr.read()}"
            time.sleep(delay)
            os.kill(child.pid, signal.SIGINT)
        for child in children:
            # Through the same buffered readers readline() used (they may hold more than the line).
            assert child.stdout is not None and child.stderr is not None
            out, err = child.stdout.read(), child.stderr.read()
            results.append((child.wait(timeout=300), "blocking\n" + out, err))
    finally:
        for child in children:
            if child.poll() is None:
                child.kill()
                child.wait()
    return results


def assert_keyboard_interrupt(returncode, out, err):
    """Python's death by an unhandled KeyboardInterrupt: its traceback, then SIGINT."""
    report = f"exit {returncode}\nstdout:\n{out}\nstderr:\n{err}"
    assert "returned" not in out, report
    assert "Traceback (most recent call last)" in err, report
    assert err.rstrip().splitlines()[-1] == "KeyboardInterrupt", report
    assert "ExceptionRaised" not in err and "Exception ignored" not in err, report
    assert returncode == -signal.SIGINT, report


@pytest.mark.parametrize("mode", ["loader", "post_load", "refresh", "sink"])
def test_ctrl_c_in_a_blocked_callback_raises_keyboard_interrupt_every_time(mode, checkpoint, tmp_path):
    path, _ = checkpoint
    caches = [tmp_path / f"cache-{trial}" for trial in range(TRIALS)]
    for cache, (returncode, out, err) in zip(caches, interrupted_runs(mode, path, caches)):
        assert_keyboard_interrupt(returncode, out, err)
        # Whatever the load had started is finished or was never begun: no half-written entry.
        leftovers = list((cache / "tmp").iterdir()) if (cache / "tmp").exists() else []
        assert leftovers == [], leftovers


def test_ctrl_c_during_a_long_stage_in_cpp_stops_the_load_at_the_next_stage(checkpoint, tmp_path):
    path, _ = checkpoint
    # A checkpoint file whose digest takes a while (sparse: no disk is used), hashed in the key stage
    # with the GIL released. The SIGINT arrives during it; the load must stop before the next stage
    # (the snapshot tier, then the ordinary loader), so the loader never runs.
    big = tmp_path / "big.bin"
    with open(big, "wb") as f:
        f.truncate(4 << 30)
    caches = [tmp_path / f"cache-{trial}" for trial in range(TRIALS)]
    for returncode, out, err in interrupted_runs("stage", path, caches, big, delay=0.1):
        assert_keyboard_interrupt(returncode, out, err)
        assert "loader called" not in out, out


def test_system_exit_from_a_loader_or_a_hook_propagates_as_itself(plan, store):
    def exits(_plan):
        raise SystemExit(7)

    exiting = copy.copy(plan)
    exiting.ordinary_loader = exits
    with pytest.raises(SystemExit) as raised:
        snapcache.load_model(exiting, store=store)
    assert raised.value.code == 7

    def refresh(weights, buffers, device):
        raise SystemExit("refresh hook said stop")

    plan.refresh_hooks = [refresh]
    with pytest.raises(SystemExit, match="refresh hook said stop"):
        snapcache.load_model(plan, store=store)
    # The store is still usable, and the cold load's entry was published whole.
    plan.refresh_hooks = []
    assert snapcache.load_model(plan, store=store).report.path == snapcache.LoadPath.hit


def test_any_base_exception_that_is_not_an_exception_is_raised_as_itself(plan, store):
    class Stop(BaseException):
        pass

    def method(tensors):
        raise Stop("stop the load")

    plan.post_load = [method]
    with pytest.raises(Stop, match="stop the load") as raised:
        snapcache.load_model(plan, store=store)
    # With its own traceback: the frame that raised is the method's.
    frames = []
    tb = raised.value.__traceback__
    while tb is not None:
        frames.append(tb.tb_frame.f_code.co_name)
        tb = tb.tb_next
    assert frames[-1] == "method", frames

    # An Exception still becomes ExceptionRaised, and the next load is not affected by the last.
    def failing(tensors):
        raise ValueError("bad tensors")

    plan.post_load = [failing]
    with pytest.raises(snapcache.ExceptionRaised) as error:
        snapcache.load_model(plan, store=store)
    assert isinstance(error.value.__cause__, ValueError)
    plan.post_load = []
    assert snapcache.load_model(plan, store=store).weights


def test_an_interrupt_in_the_log_sink_outside_a_load_is_raised_by_log():
    def sink(level, message):
        raise KeyboardInterrupt

    try:
        snapcache.set_log_sink(sink)
        with pytest.raises(KeyboardInterrupt):
            snapcache.log(snapcache.LogLevel.error, "x")
    finally:
        snapcache.route_logs_to_logging(True)


def test_log_lines_reach_logging_escaped(caplog):
    with caplog.at_level(logging.INFO, logger="snapcache"):
        snapcache.log(snapcache.LogLevel.warn, "entry \x1b[31mred\x07 damaged\nsnapcache[info] load forged: hit")
    assert [r.getMessage() for r in caplog.records if r.name == "snapcache"] == [
        "entry \\x1b[31mred\\x07 damaged\\nsnapcache[info] load forged: hit"]
    assert snapcache.printable("\u202eabc\\") == "\\u202eabc\\\\"
