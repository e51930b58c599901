// snapcache._core: the bindings of the shared library, one file per job (see CMakeLists.txt).
#include <torch/version.h>

#include <string>

#include "common.h"
#include "snapcache/version.h"

PYBIND11_MODULE(_core, m) {
  namespace sp = snapcache::python;
  namespace py = pybind11;
  // The module links the libtorch it was compiled against (no C++ ABI across torch releases): with
  // another torch it must not run. snapcache/__init__.py checks before loading the module; this is
  // the same check for whoever imports the module itself, when the other torch let it load at all.
  std::string running = py::str(py::module_::import("torch").attr("__version__"));
  if (std::string release = running.substr(0, running.find('+')); release != TORCH_VERSION) {
    throw py::import_error("snapcache was built against torch " TORCH_VERSION
                           " and needs exactly that torch, but this environment has torch " + running +
                           "; install torch==" TORCH_VERSION " or rebuild snapcache against this torch");
  }
  m.doc() = "The C++ library snapcache, bound; import the package `snapcache`, not this module.";
  m.attr("__version__") = SNAPCACHE_VERSION_STRING;
  m.attr("TORCH_PINNED") = SNAPCACHE_TORCH_PINNED;
  m.attr("TORCH_BUILT") = TORCH_VERSION;
  sp::bind_errors(m);
  sp::bind_logging(m);
  sp::bind_config(m);
  sp::bind_tensors(m);
  sp::bind_group(m);
  sp::bind_plan(m);
  sp::bind_load(m);
}
