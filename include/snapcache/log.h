// snapcache logs one line per load (hit, miss or fallback, and why) at `info`, more at `debug`.
// By default lines go to stderr; a server routes them into its own logger with set_log_sink.
#pragma once

#include <functional>
#include <string_view>

namespace snapcache {

enum class LogLevel { error = 0, warn = 1, info = 2, debug = 3 };

// Level from SNAPCACHE_LOG (error|warn|info|debug), default info.
void set_log_level(LogLevel level);
LogLevel log_level();
void set_log_sink(std::function<void(LogLevel, std::string_view)> sink);  // empty: stderr
void log(LogLevel level, std::string_view message);

}  // namespace snapcache
