// The library's log lines, handed to a Python callable (snapcache/__init__.py routes them to the
// `snapcache` logger of the `logging` module). The library calls its sink outside its own lock,
// from the loading thread or a background publication, so the sink takes the GIL itself.
#include <csignal>
#include <string>

#include "common.h"
#include "snapcache/log.h"
#include "snapcache/printable.h"

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

// A message as a str: a path in it need not be UTF-8, and a line is never lost for it.
py::str message_text(std::string_view message) {
  PyObject* text = PyUnicode_DecodeUTF8(message.data(), static_cast<Py_ssize_t>(message.size()), "backslashreplace");
  if (text == nullptr) throw py::error_already_set();
  return py::reinterpret_steal<py::str>(text);
}

// The sink raised (GIL held). An interrupt (a Ctrl-C while the sink ran, SystemExit) is kept for
// the call this thread is in, which stops at its next stage and raises it; outside such a call a
// KeyboardInterrupt goes back to the interpreter's SIGINT handling (it arrives as soon as Python
// code runs again). Anything else is reported as unraisable: a broken logger never fails a load.
void sink_raised(py::error_already_set& e) {
  if (!e.matches(PyExc_Exception)) {
    if (CallbackScope::active()) {
      (void)status_of_python_error(e, "the log sink");  // kept for the call; the Status is its words only
      return;
    }
    if (e.matches(PyExc_KeyboardInterrupt) && on_main_thread() && PyErr_SetInterruptEx(SIGINT) == 0) return;
  }
  e.discard_as_unraisable("snapcache log sink");
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
          if (!interpreter_usable()) return log_to_stderr(level, message);
          py::gil_scoped_acquire gil;
          try {
            fn.get()(level, message_text(message));
          } catch (py::error_already_set& e) {
            sink_raised(e);
          }
        };
        py::gil_scoped_release release;  // it waits for calls of the old sink, which take the GIL
        set_log_sink(std::move(f));
      },
      py::arg("sink"),
      "Routes the library's log lines to sink(level: LogLevel, message: str), from any thread; None: "
      "stderr. The package sets one that logs to logging.getLogger('snapcache').");
  m.def(
      "log",
      [](LogLevel level, const std::string& message) {
        CallbackScope scope;  // a Ctrl-C in the sink is raised here
        {
          py::gil_scoped_release release;
          log(level, message);
        }
        raise_if_interrupted();
      },
      py::arg("level"), py::arg("message"), "Logs a line as the library does.");
  m.def("printable", [](std::string_view text) { return printable(text); }, py::arg("text"),
        "Text made safe to print on a terminal, as the library prints names it did not write: controls, "
        "bidirectional overrides and bytes that are not UTF-8 as \\x1b, \\n, \\u202e-style escapes, a "
        "backslash as two (snapcache/printable.h).");
}

}  // namespace snapcache::python
