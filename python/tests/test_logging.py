"""The library's log lines go to the `snapcache` logger."""

import logging
import re

import snapcache


def test_a_load_logs_its_line_to_the_snapcache_logger(plan, store, caplog):
    with caplog.at_level(logging.DEBUG, logger="snapcache"):
        snapcache.load_model(plan, store=store)
    lines = [(r.levelno, r.getMessage()) for r in caplog.records if r.name == "snapcache"]
    assert any(level == logging.INFO and msg.startswith("load tiny (tp 0/1, pp 0/1): miss") for level, msg in lines)
    assert any(level == logging.DEBUG and msg.startswith("stages:") for level, msg in lines)


def test_levels_and_routing_back_to_stderr(capfd, caplog):
    with caplog.at_level(logging.INFO, logger="snapcache"):
        snapcache.log(snapcache.LogLevel.warn, "a warning from the library")
    assert [(r.levelno, r.getMessage()) for r in caplog.records] == [(logging.WARNING, "a warning from the library")]
    snapcache.route_logs_to_logging(False)
    try:
        snapcache.log(snapcache.LogLevel.error, "to stderr")
        assert "snapcache[error] to stderr" in capfd.readouterr().err
    finally:
        snapcache.route_logs_to_logging(True)


def test_the_level_can_be_set():
    before = snapcache.log_level()
    try:
        snapcache.set_log_level(snapcache.LogLevel.error)
        assert snapcache.log_level() is snapcache.LogLevel.error
    finally:
        snapcache.set_log_level(before)


def test_a_failing_sink_does_not_break_the_library(recwarn):
    def sink(level, message):
        raise RuntimeError("sink broke")

    import sys

    unraisable: list = []
    old_hook = sys.unraisablehook
    sys.unraisablehook = unraisable.append
    try:
        snapcache.set_log_sink(sink)
        snapcache.log(snapcache.LogLevel.error, "x")
    finally:
        sys.unraisablehook = old_hook
        snapcache.route_logs_to_logging(True)
    assert unraisable and "sink broke" in str(unraisable[0].exc_value)


# A script that loads a checkpoint twice (a miss, then a hit) and once more from a cache it cannot
# use (a fallback), after CONFIGURE.
SCRIPT = """
import sys
import torch
import snapcache
CONFIGURE
path, cache, broken = sys.argv[1:4]
snapcache.write_safetensors(path, {"w": torch.ones(4)})
plan = snapcache.LoadPlan(checkpoint_files=path, component="quiet", source_identity="v1", dtype="float32",
                          expected=[snapcache.ExpectedTensor("w", "float32", [4])],
                          ordinary_loader=lambda p: {"w": torch.ones(4)})
store = snapcache.Store.open(snapcache.Config(directory=cache))
for _ in range(2):
    snapcache.load_model(plan, store=store)
    snapcache.wait_for_publications()
open(broken, "w").close()
snapcache.load_model(plan, store=snapcache.Store.open_for_loading(directory=broken + "/cache"))
"""


def run_script(tmp_path, configure, name):
    import subprocess
    import sys

    script = tmp_path / f"{name}.py"
    script.write_text(SCRIPT.replace("CONFIGURE", configure))
    args = [str(tmp_path / f"{name}.safetensors"), str(tmp_path / f"{name}-cache"), str(tmp_path / f"{name}-file")]
    done = subprocess.run([sys.executable, str(script), *args], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return done.stdout + done.stderr


def documented_configuration():
    from conftest import REPO

    text = (REPO / "docs/python.md").read_text()
    section = text[text.index("## Logging"):]
    return re.findall(r"```python\n(.*?)```", section, re.S)[0]


def test_a_plain_script_prints_fallbacks_but_no_hit_or_miss(tmp_path):
    out = run_script(tmp_path, "", "plain")
    assert "miss" not in out and "hit" not in out, out
    assert "load quiet (tp 0/1, pp 0/1): fallback" in out  # Python's last-resort handler: WARNING and up


def test_the_two_documented_lines_show_the_hit_and_the_miss(tmp_path):
    configure = documented_configuration()
    assert configure.count("\n") == 2 and "logging.basicConfig(level=logging.INFO)" in configure
    out = run_script(tmp_path, configure, "configured")
    assert "INFO:snapcache:load quiet (tp 0/1, pp 0/1): miss" in out, out
    assert "INFO:snapcache:load quiet (tp 0/1, pp 0/1): hit" in out, out
    assert "WARNING:snapcache:load quiet (tp 0/1, pp 0/1): fallback" in out, out
    # snapcache's logger alone, as the docs say.
    alone = run_script(tmp_path, "import logging\nlogging.basicConfig()\n"
                                 "logging.getLogger('snapcache').setLevel(logging.INFO)\n", "alone")
    assert "INFO:snapcache:load quiet (tp 0/1, pp 0/1): hit" in alone, alone


def test_snapcache_log_drops_lines_in_the_library_whatever_logging_shows(tmp_path, monkeypatch):
    monkeypatch.setenv("SNAPCACHE_LOG", "warn")
    out = run_script(tmp_path, documented_configuration(), "warn")
    assert "INFO:snapcache:load" not in out and "WARNING:snapcache:load quiet (tp 0/1, pp 0/1): fallback" in out, out
