// snapcache logs one line per load (hit, miss or fallback, and why) at `info`, more at `debug`.
// By default lines go to stderr; a server routes them into its own logger with set_log_sink.
#pragma once

#include <functional>
#include <string_view>

#include "snapcache/export.h"

namespace snapcache {

enum class LogLevel { error = 0, warn = 1, info = 2, debug = 3 };

// Level from SNAPCACHE_LOG (error|warn|info|debug), default info.
SNAPCACHE_API void set_log_level(LogLevel level);
SNAPCACHE_API LogLevel log_level();
// Routes every line to `sink` (empty: log_to_stderr). The sink is called outside the library's lock,
// possibly from several threads at once (background publications log too), so it may take locks
// of its own (the Python package's sink takes the GIL). Once set_log_sink returns, the sink it
// replaced is no longer called, except by a call of that sink on this same thread.
SNAPCACHE_API void set_log_sink(std::function<void(LogLevel, std::string_view)> sink);
SNAPCACHE_API void log(LogLevel level, std::string_view message);
// The default sink: "snapcache[warn] <message>" and a newline on stderr, the message made
// printable() (snapcache/printable.h), so a line is always one line: messages carry names from
// caches, archives and peers. The library's messages are one line each; a table is logged a line at
// a time.
SNAPCACHE_API void log_to_stderr(LogLevel level, std::string_view message);

}  // namespace snapcache
