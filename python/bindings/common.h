// What the binding files share: raising a Status as a Python exception, Python exceptions from
// callbacks as a Status, Python objects that C++ may copy and drop without the GIL, and keyword
// constructors for the plain structs. Torch-free; tensors.h adds the tensor conversions.
#pragma once

#include <pybind11/native_enum.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>
#include <string>
#include <utility>

#include "snapcache/dtype.h"
#include "snapcache/rank_group.h"
#include "snapcache/status.h"

namespace snapcache {
class RankGroup;
struct LoadPlan;
}

namespace snapcache::python {

namespace py = pybind11;

// --- errors (errors.cpp) ----------------------------------------------------------------------

// Raises the snapcache.Error subclass of st.code() with st.message() (GIL held; never returns).
// A Python exception a callback raised during the call that failed becomes its __cause__; an
// interrupt (below) is raised itself instead.
[[noreturn]] void raise_status(const Status& st);
inline void check(const Status& st) {
  if (!st) raise_status(st);
}
template <class T>
T unwrap(Result<T>&& r) {
  if (!r) raise_status(r.status());
  return std::move(*r);
}
// The Python exception being handled, as a Status (GIL held, called in the catch block of a
// callback): a snapcache.Error keeps its code; any other is `exception`, "TypeName: message".
// Remembers the exception on this thread, for raise_status to chain it.
Status status_of_python_error(py::error_already_set& e, const std::string& context);
void bind_errors(py::module_& m);

// A call into the library that runs callbacks (load_model, reload_model, log): the exceptions they
// raise are remembered on this thread for as long as it lasts, and forgotten when it starts and
// ends, so only the call that raised chains them.
class CallbackScope {
 public:
  CallbackScope();
  ~CallbackScope();
  CallbackScope(const CallbackScope&) = delete;
  CallbackScope& operator=(const CallbackScope&) = delete;
  // Whether this thread is inside one.
  static bool active();
};

// An interrupt: a BaseException that is not an Exception (KeyboardInterrupt, SystemExit,
// GeneratorExit, ...) that a callback raised, or a signal handler raised between two stages, during
// this thread's CallbackScope. The library cannot be stopped by it, so it stops at the next stage
// (check_interrupt) and the call then raises the interrupt itself, with its traceback: never
// wrapped in ExceptionRaised (which `except snapcache.Error` would catch), never swallowed.
// GIL held: raises the pending interrupt, if there is one (then never returns).
void raise_if_interrupted();
// The check LoadPlan::interrupt_check runs between stages (GIL not held): a pending interrupt, or
// on the main thread one that the interpreter's signal handlers raise now (a Ctrl-C that arrived
// while C++ code ran), as a failed Status.
Status check_interrupt(bool main_thread);
// Whether this is the interpreter's main thread, the one that runs signal handlers (GIL held).
bool on_main_thread();

// Runs a callback body under the GIL; a Python exception becomes a Status naming `context`.
template <class F>
auto call_python(const std::string& context, F&& f) -> decltype(f()) {
  py::gil_scoped_acquire gil;
  try {
    return f();
  } catch (py::error_already_set& e) {
    return status_of_python_error(e, context);
  } catch (const py::builtin_exception& e) {  // a conversion of what the callback returned
    return Status(StatusCode::invalid_argument, context.empty() ? e.what() : context + ": " + e.what());
  }
}

// --- Python objects held by C++ ---------------------------------------------------------------

// A reference to a Python object that C++ code may copy and destroy on any thread without the
// GIL (std::function copies, background threads): the count is C++'s, and the last owner takes
// the GIL to let go of the object.
class PyRef {
 public:
  PyRef() = default;
  explicit PyRef(py::object obj)
      : obj_(new py::object(std::move(obj)), [](py::object* o) {
          if (Py_IsInitialized() == 0) {  // the interpreter is gone: leak rather than crash
            (void)o->release();
            delete o;
            return;
          }
          py::gil_scoped_acquire gil;
          delete o;
        }) {}
  // GIL held.
  const py::object& get() const { return *obj_; }
  explicit operator bool() const { return obj_ != nullptr; }

 private:
  std::shared_ptr<py::object> obj_;
};

// --- keyword constructors ---------------------------------------------------------------------

// Sets attributes of `target` (a bound object) from keyword arguments through its own
// properties, so a keyword converts and validates exactly as an assignment does. An unknown
// keyword is a TypeError naming it.
void set_attributes(const py::object& target, const py::kwargs& kwargs);

// `T(**kwargs)`: default-constructs, then sets each keyword as the attribute of that name.
template <class T, class... Options>
void keyword_init(py::class_<T, Options...>& cls) {
  cls.def(py::init([](const py::kwargs& kwargs) {
            T value{};
            {
              py::object view = py::cast(&value, py::return_value_policy::reference);
              set_attributes(view, kwargs);
            }
            return value;
          }),
          "Default values, then each keyword argument assigned to the attribute of that name.");
}

// --- small conversions (config.cpp) -----------------------------------------------------------

// os.fspath(obj) for a str or os.PathLike.
std::string path_string(const py::handle& obj);
std::vector<std::string> path_strings(const py::handle& sequence);
// torch.dtype (or its name, "bfloat16") <-> snapcache's DType, without torch headers.
py::object dtype_to_python(DType dtype);
DType dtype_from_python(const py::handle& obj);
// A size in bytes from an int, or from a string with a unit ("64GiB"; snapcache::parse_size).
std::uint64_t size_from_python(const py::handle& obj, const char* what);

// --- rank groups (group.cpp) ------------------------------------------------------------------

// LoadPlan.group from Python: None, a RankGroup, or a torch.distributed ProcessGroup (GIL held).
std::shared_ptr<RankGroup> group_from_python(const py::handle& obj);

// --- plans (plan.cpp) -------------------------------------------------------------------------

// The plan, with source_identity defaulted (when empty) to a digest of the file that defines its
// Python ordinary loader; `note` then says so, for the report. GIL held.
LoadPlan with_default_source_identity(const LoadPlan& plan, std::string& note);

// --- bind_* of each file ----------------------------------------------------------------------
void bind_group(py::module_& m);
void bind_logging(py::module_& m);
void bind_config(py::module_& m);
void bind_tensors(py::module_& m);
void bind_plan(py::module_& m);
void bind_load(py::module_& m);

}  // namespace snapcache::python
