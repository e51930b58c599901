"""The library's log lines go to the `snapcache` logger."""

import logging

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
