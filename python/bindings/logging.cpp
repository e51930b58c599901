// The library's log lines, handed to a Python callable (snapcache/__init__.py routes them to the
// `snapcache` logger of the `logging` module). The library calls its sink outside its own lock,
// from the loading thread or a background publication, so the sink takes the GIL itself.
#include <cstdio>
#include <string>

#include "common.h"
#include "snapcache/log.h"

namespace snapcache::python {
namespace {

bool interpreter_usable() {
  if (Py_IsInitialized() == 0) return false;
#if PY_VERSION_HEX >= 0x030D0000
  return Py_IsFinalizing() == 0;
#else
  return _Py_IsFinalizing() == 0;
#endif
}

void to_stderr(LogLevel level, std::string_view message) {
  static constexpr const char* kNames[] = {"error", "warn", "info", "debug"};
  std::string line = std::string("snapcache[") + kNames[static_cast<int>(level)] + "] ";
  line.append(message);
  line.push_back('\n');
  std::fwrite(line.data(), 1, line.size(), stderr);
}

}  // namespace

void bind_logging(py::module_& m) {
  py::native_enum<LogLevel>(m, "LogLevel", "enum.IntEnum", "How much the library logs (SNAPCACHE_LOG).")
      .value("error", LogLevel::error)
      .value("warn", LogLevel::warn)
      .value("info", LogLevel::info)
      .value("debug", LogLevel::debug)
      .finalize();

  m.def("set_log_level", &set_log_level, py::arg("level"), py::call_guard<py::gil_scoped_release>(),
        "Lines above this level are not produced (default: SNAPCACHE_LOG, else info).");
  m.def("log_level", &log_level, py::call_guard<py::gil_scoped_release>());
  m.def(
      "set_log_sink",
      [](const py::object& sink) {
        if (sink.is_none()) {
          py::gil_scoped_release release;
          set_log_sink({});
          return;
        }
        if (!PyCallable_Check(sink.ptr())) throw py::type_error("set_log_sink: the sink must be callable or None");
        std::function<void(LogLevel, std::string_view)> f = [fn = PyRef(sink)](LogLevel level,
                                                                             std::string_view message) {
          if (!interpreter_usable()) return to_stderr(level, message);
          py::gil_scoped_acquire gil;
          try {
            fn.get()(level, py::str(message.data(), message.size()));
          } catch (py::error_already_set& e) {
            e.discard_as_unraisable("snapcache log sink");
          }
        };
        py::gil_scoped_release release;  // it waits for calls of the old sink, which take the GIL
        set_log_sink(std::move(f));
      },
      py::arg("sink"),
      "Routes the library's log lines to sink(level: LogLevel, message: str), from any thread; None: "
      "stderr. The package sets one that logs to logging.getLogger('snapcache').");
  m.def(
      "log", [](LogLevel level, const std::string& message) { log(level, message); }, py::arg("level"),
      py::arg("message"), py::call_guard<py::gil_scoped_release>(), "Logs a line as the library does.");
}

}  // namespace snapcache::python
