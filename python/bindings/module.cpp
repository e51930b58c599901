// snapcache._core: the bindings of the shared library, one file per job (see CMakeLists.txt).
#include "common.h"
#include "snapcache/version.h"

PYBIND11_MODULE(_core, m) {
  namespace sp = snapcache::python;
  m.doc() = "The C++ library snapcache, bound; import the package `snapcache`, not this module.";
  m.attr("__version__") = SNAPCACHE_VERSION_STRING;
  m.attr("TORCH_PINNED") = SNAPCACHE_TORCH_PINNED;
  sp::bind_errors(m);
  sp::bind_logging(m);
  sp::bind_config(m);
  sp::bind_tensors(m);
  sp::bind_group(m);
  sp::bind_plan(m);
  sp::bind_load(m);
}
