// Upload: one host-to-device copy per storage, then the same views on the device, so tied weights
// stay tied and strides and offsets are kept. (The GPU upload engine makes this fast; here it must
// be right.)
#include <ATen/Functions.h>
#include <c10/core/TensorImpl.h>

#include <unordered_map>

#include "snapcache/pipeline.h"
#include "util/fmt.h"

namespace snapcache {

Result<NamedTensors> upload_tensors(const NamedTensors& tensors, c10::Device device) {
  if (device.is_cpu()) return tensors;
  std::unordered_map<const c10::StorageImpl*, c10::Storage> uploaded;
  NamedTensors out;
  out.reserve(tensors.size());
  try {
    for (const auto& [name, t] : tensors) {
      if (!t.device().is_cpu())
        return Status(StatusCode::invalid_argument, fmt::format("tensor '{}' is not on the CPU before upload", name));
      const c10::Storage& host = t.storage();
      auto it = uploaded.find(host.unsafeGetStorageImpl());
      if (it == uploaded.end()) {
        const auto nbytes = static_cast<std::int64_t>(host.nbytes());
        at::Tensor dst = at::empty({nbytes}, at::TensorOptions().dtype(at::kByte).device(device));
        if (nbytes > 0) {
          at::Tensor src = at::from_blob(const_cast<void*>(host.data()), {nbytes}, at::TensorOptions().dtype(at::kByte));
          dst.copy_(src);
        }
        it = uploaded.emplace(host.unsafeGetStorageImpl(), dst.storage()).first;
      }
      at::Tensor d = at::empty({0}, at::TensorOptions().dtype(t.scalar_type()).device(device));
      d.set_(it->second, t.storage_offset(), t.sizes(), t.strides());
      out.emplace_back(name, std::move(d));
    }
  } catch (const c10::Error& e) {
    return Status(StatusCode::io_error, fmt::format("upload to {} failed: {}", device.str(), e.what_without_backtrace()));
  }
  return out;
}

Status refresh_buffer(DerivedBuffers& buffers, const std::string& name, const at::Tensor& value, c10::Device device) {
  auto it = buffers.find(name);
  if (it == buffers.end()) {
    buffers.emplace(name, value.to(device).clone());
    return Status::ok();
  }
  at::Tensor& existing = it->second;
  if (existing.sizes() != value.sizes() || existing.scalar_type() != value.scalar_type())
    return Status(StatusCode::mismatch, fmt::format("derived buffer '{}' changed shape or dtype; it cannot be refreshed "
                                                    "in place", name));
  existing.copy_(value);
  return Status::ok();
}

}  // namespace snapcache
