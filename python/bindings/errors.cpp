// Errors: a failed Status becomes an instance of snapcache.Error's subclass for its code, with
// the same message; a Python exception raised in a callback (loader, post-load method, refresh
// hook, log sink) becomes a Status on its way through the library and the __cause__ of the error
// raised at the end. An interrupt (KeyboardInterrupt, SystemExit: a BaseException that is not an
// Exception) is raised as itself at the end instead, after the library has stopped at its next stage.
#include <array>
#include <cstdint>

#include "common.h"

namespace snapcache::python {
namespace {

constexpr std::uint8_t kCodes = static_cast<std::uint8_t>(StatusCode::exception) + 1;

struct ErrorClass {
  StatusCode code;
  const char* name;
  const char* doc;
};

// One class per StatusCode but ok; names as Python spells them.
constexpr std::array<ErrorClass, kCodes - 1> kClasses{{
    {StatusCode::not_found, "NotFound", "No such entry or file."},
    {StatusCode::damaged, "Damaged", "Data or a manifest failed a check; the entry is never reused."},
    {StatusCode::unfinished, "Unfinished", "An entry without its commit."},
    {StatusCode::foreign, "Foreign", "Not a snapcache entry or cache, or a format version this one does not read."},
    {StatusCode::mismatch, "Mismatch", "What was loaded differs from what the caller expects (names the tensors)."},
    {StatusCode::no_space, "NoSpace", "ENOSPC, EDQUOT, or the capacity and reserve rules leave no room."},
    {StatusCode::read_only, "ReadOnly", "A read-only file system (EROFS)."},
    {StatusCode::permission_denied, "PermissionDenied", "EACCES or EPERM."},
    {StatusCode::io_error, "IoError", "EIO and every other system error."},
    {StatusCode::busy, "Busy", "Leased, or locked by another process."},
    {StatusCode::disabled, "Disabled", "The cache is switched off by configuration."},
    {StatusCode::invalid_argument, "InvalidArgument", "Bad input from the caller or the user (also a ValueError)."},
    {StatusCode::unsupported, "Unsupported", "A tensor or request snapcache cannot represent."},
    {StatusCode::exception, "ExceptionRaised",
     "Something the load called raised: libtorch, or a callback of the plan (the Python exception is the "
     "__cause__)."},
}};

// Owned for the life of the process (never released: the classes outlive every module state).
PyObject* g_base = nullptr;
std::array<PyObject*, kCodes> g_class_of{};

// The exception a callback raised on this thread during the current call (GIL held to touch it).
thread_local PyObject* t_callback_error = nullptr;
// The first interrupt of the current call on this thread, and its words for the Status that stops
// the load: written with the GIL held, read by check_interrupt on this same thread without it.
thread_local PyObject* t_interrupt = nullptr;
thread_local std::string t_interrupt_text;
thread_local int t_scopes = 0;  // CallbackScopes open on this thread

StatusCode code_from_name(const std::string& name) {
  for (std::uint8_t c = 1; c < kCodes; ++c)
    if (name == to_string(static_cast<StatusCode>(c))) return static_cast<StatusCode>(c);
  return StatusCode::exception;
}

bool is_interrupt(PyObject* exc) { return PyErr_GivenExceptionMatches(exc, PyExc_Exception) == 0; }

void remember(PyObject* exc, const std::string& text) {
  Py_XINCREF(exc);
  Py_XDECREF(t_callback_error);
  t_callback_error = exc;
  // Kept for the call that raises it at its end; outside one nothing would, and a stale interrupt
  // must not surface in a later call.
  if (exc == nullptr || t_scopes == 0 || t_interrupt != nullptr || !is_interrupt(exc)) return;
  Py_INCREF(exc);
  t_interrupt = exc;
  t_interrupt_text = text;
}

void forget_callback_errors() {
  remember(nullptr, "");
  Py_XDECREF(t_interrupt);
  t_interrupt = nullptr;
  t_interrupt_text.clear();
}

}  // namespace

CallbackScope::CallbackScope() {
  forget_callback_errors();
  ++t_scopes;
}

CallbackScope::~CallbackScope() {
  --t_scopes;
  forget_callback_errors();
}

bool CallbackScope::active() { return t_scopes > 0; }

void raise_if_interrupted() {
  if (t_interrupt == nullptr) return;
  PyObject* exc = t_interrupt;
  t_interrupt = nullptr;
  t_interrupt_text.clear();
  remember(nullptr, "");
  // As it was raised, with its traceback: the frames of the callback (or of the signal handler),
  // then the caller's as it unwinds.
  PyErr_Restore(PyObject_Type(exc), exc, PyException_GetTraceback(exc));
  throw py::error_already_set();
}

Status check_interrupt(bool main_thread) {
  if (t_interrupt != nullptr) return Status(StatusCode::exception, t_interrupt_text);
  if (!main_thread) return Status::ok();  // signal handlers run on the main thread only
  py::gil_scoped_acquire gil;
  if (PyErr_CheckSignals() == 0) return Status::ok();
  py::error_already_set e;
  return status_of_python_error(e, "");
}

bool on_main_thread() {
  const py::object main = py::module_::import("threading").attr("main_thread")();
  return main.attr("ident").cast<unsigned long>() == PyThread_get_thread_ident();
}

Status status_of_python_error(py::error_already_set& e, const std::string& context) {
  const py::object value = e.value();
  // Before Python 3.12 the traceback is held apart from the exception: keep it with it, so the
  // exception raised or chained at the end shows where the callback raised it.
  if (e.trace() && PyException_SetTraceback(value.ptr(), e.trace().ptr()) != 0) PyErr_Clear();
  StatusCode code = StatusCode::exception;
  std::string message;
  if (g_base != nullptr && PyObject_IsInstance(value.ptr(), g_base) == 1) {
    code = code_from_name(py::str(value.attr("code")).cast<std::string>());
    message = py::str(value).cast<std::string>();
  } else {
    const std::string what = py::str(value).cast<std::string>();  // "" for a bare KeyboardInterrupt
    message = py::str(py::type::handle_of(value).attr("__name__")).cast<std::string>();
    if (!what.empty()) message += ": " + what;
  }
  remember(value.ptr(), message);
  return Status(code, context.empty() ? message : context + ": " + message);
}

void raise_status(const Status& st) {
  raise_if_interrupted();
  const auto c = static_cast<std::uint8_t>(st.code());
  PyObject* cls = c > 0 && c < kCodes ? g_class_of[c] : g_class_of[static_cast<std::uint8_t>(StatusCode::exception)];
  py::object exc = py::reinterpret_borrow<py::object>(cls)(st.message());
  if (st.sys_errno() != 0) exc.attr("sys_errno") = st.sys_errno();
  if (t_callback_error != nullptr) {
    PyException_SetCause(exc.ptr(), t_callback_error);  // steals the reference
    t_callback_error = nullptr;
  }
  PyErr_SetObject(cls, exc.ptr());
  throw py::error_already_set();
}

void bind_errors(py::module_& m) {
  py::dict base_dict;
  base_dict["code"] = "";
  base_dict["sys_errno"] = 0;
  base_dict["__module__"] = "snapcache";
  base_dict["message"] = py::module_::import("builtins").attr("property")(
      py::cpp_function([](const py::object& self) -> py::object {
        py::tuple args = self.attr("args");
        return args.empty() ? py::str("") : py::str(args[0]);
      }),
      py::none(), py::none(), "The message, as the C++ Status gives it.");
  g_base = PyErr_NewExceptionWithDoc(
      "snapcache.Error",
      "Every error snapcache raises. `code` is the C++ StatusCode's name (\"no_space\"), the message "
      "is the Status's message, and `sys_errno` the errno behind it (0 when none). Subclasses, one per "
      "code: NotFound, Damaged, Unfinished, Foreign, Mismatch, NoSpace, ReadOnly, PermissionDenied, "
      "IoError, Busy, Disabled, InvalidArgument, Unsupported, ExceptionRaised.",
      PyExc_Exception, base_dict.ptr());
  if (g_base == nullptr) throw py::error_already_set();
  m.attr("Error") = py::reinterpret_borrow<py::object>(g_base);
  for (const auto& e : kClasses) {
    py::dict dict;
    dict["code"] = to_string(e.code);
    dict["__module__"] = "snapcache";
    PyObject* bases = e.code == StatusCode::invalid_argument ? PyTuple_Pack(2, g_base, PyExc_ValueError)
                                                             : PyTuple_Pack(1, g_base);
    const std::string qualified = std::string("snapcache.") + e.name;
    PyObject* cls = PyErr_NewExceptionWithDoc(qualified.c_str(), e.doc, bases, dict.ptr());
    Py_DECREF(bases);
    if (cls == nullptr) throw py::error_already_set();
    g_class_of[static_cast<std::uint8_t>(e.code)] = cls;
    m.attr(e.name) = py::reinterpret_borrow<py::object>(cls);
  }
  m.def(
      "error_class",
      [](const std::string& code) {
        const auto c = static_cast<std::uint8_t>(code_from_name(code));
        return py::reinterpret_borrow<py::object>(g_class_of[c]);
      },
      py::arg("code"), "The snapcache.Error subclass for a StatusCode name (\"no_space\" -> NoSpace).");
}

void set_attributes(const py::object& target, const py::kwargs& kwargs) {
  const auto type = py::reinterpret_borrow<py::object>(py::type::handle_of(target));
  const py::object property = py::module_::import("builtins").attr("property");
  for (const auto& [key, value] : kwargs) {
    const std::string name = py::str(key).cast<std::string>();
    if (name.empty() || name[0] == '_' || !py::hasattr(type, name.c_str()) ||
        !py::isinstance(type.attr(name.c_str()), property))
      throw py::type_error(py::str("{}() got an unexpected keyword argument '{}'")
                               .format(type.attr("__name__"), name)
                               .cast<std::string>());
    py::setattr(target, key, value);
  }
}

}  // namespace snapcache::python
