// Derived buffers are refreshed in place, so their addresses survive reloads.
#include "snapcache/pipeline.h"
#include "torch/exceptions.h"
#include "util/fmt.h"

namespace snapcache {

Status refresh_buffer(DerivedBuffers& buffers, const std::string& name, const at::Tensor& value, c10::Device device) {
  return guarded([&]() -> Status {
    auto it = buffers.find(name);
    if (it == buffers.end()) {
      buffers.emplace(name, value.to(device).clone());
      return Status::ok();
    }
    at::Tensor& existing = it->second;
    if (existing.sizes() != value.sizes() || existing.scalar_type() != value.scalar_type())
      return Status(StatusCode::mismatch, fmt::format("derived buffer '{}' changed shape or dtype; it cannot be "
                                                      "refreshed in place", name));
    existing.copy_(value);
    return Status::ok();
  });
}

}  // namespace snapcache
