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
SNAPCACHE_API void set_log_sink(std::function<void(LogLevel, std::string_view)> sink);  // empty: stderr
SNAPCACHE_API void log(LogLevel level, std::string_view message);

}  // namespace snapcache
