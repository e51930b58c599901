#include "torch/exceptions.h"

#include <c10/util/Exception.h>

#include <exception>
#include <new>
#include <string>

namespace snapcache {

Status status_of_current_exception() {
  try {
    throw;
  } catch (const c10::OutOfMemoryError& e) {
    return Status(StatusCode::no_space, std::string("out of device memory: ") + e.what_without_backtrace());
  } catch (const c10::Error& e) {
    return Status(StatusCode::exception, e.what_without_backtrace());
  } catch (const std::bad_alloc&) {
    return Status(StatusCode::no_space, "out of host memory");
  } catch (const std::exception& e) {
    return Status(StatusCode::exception, e.what());
  } catch (...) {
    return Status(StatusCode::exception, "an exception that is not a std::exception");
  }
}

}  // namespace snapcache
