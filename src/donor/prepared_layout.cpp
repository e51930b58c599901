#include "donor/prepared_layout.h"

#include <c10/core/TensorImpl.h>

#include <unordered_map>

#include "snapcache/extend/store_tensors.h"
#include "snapcache/manifest.h"
#include "snapcache/text.h"
#include "util/fmt.h"

namespace snapcache::donor {
namespace {

// What torch's CUDA allocator guarantees, so kernels that assume it keep working on served tensors.
constexpr std::uint64_t kStorageAlignment = 512;

Status add_tensor(Packing& p, std::unordered_map<const c10::StorageImpl*, std::uint32_t>& index, const std::string& name,
                  const at::Tensor& t, Role role, c10::Device device) {
  if (!t.defined() || t.layout() != at::kStrided || !t.has_storage())
    return Status(StatusCode::unsupported, fmt::format("tensor '{}' is not a strided tensor with storage", name));
  if (t.device() != device)
    return Status(StatusCode::mismatch, fmt::format("tensor '{}' is on {}, the donor serves {}", name, t.device().str(),
                                                    device.str()));
  auto dtype = to_dtype(t.scalar_type());
  if (!dtype) return dtype.status().with_context("tensor '" + name + "'");
  const c10::StorageImpl* impl = t.storage().unsafeGetStorageImpl();
  auto [it, added] = index.emplace(impl, static_cast<std::uint32_t>(p.layout.storages.size()));
  if (added) {
    const std::uint64_t offset = (p.layout.bytes + kStorageAlignment - 1) / kStorageAlignment * kStorageAlignment;
    p.layout.storages.push_back({offset, t.storage().nbytes()});
    p.sources.push_back(t.storage());
    p.layout.bytes = offset + t.storage().nbytes();
  }
  TensorRecord r;
  r.name = name;
  r.dtype = *dtype;
  r.sizes.assign(t.sizes().begin(), t.sizes().end());
  r.strides.assign(t.strides().begin(), t.strides().end());
  r.storage = it->second;
  r.storage_offset = t.storage_offset();
  p.layout.tensors.push_back({std::move(r), role});
  return Status::ok();
}

}  // namespace

Result<Packing> pack(const NamedTensors& weights, const std::map<std::string, at::Tensor>& derived, c10::Device device) {
  Packing p;
  std::unordered_map<const c10::StorageImpl*, std::uint32_t> index;
  for (const auto& [name, t] : weights) SNAPCACHE_RETURN_IF_ERROR(add_tensor(p, index, name, t, Role::weight, device));
  for (const auto& [name, t] : derived) SNAPCACHE_RETURN_IF_ERROR(add_tensor(p, index, name, t, Role::derived, device));
  return p;
}

Status check_bounds(const PreparedLayout& layout, std::uint64_t mapped_bytes) {
  if (layout.bytes > mapped_bytes)
    return Status(StatusCode::mismatch, fmt::format("the layout spans {} but {} are mapped", format_size(layout.bytes),
                                                    format_size(mapped_bytes)));
  for (const auto& s : layout.storages)
    if (s.offset > layout.bytes || s.nbytes > layout.bytes - s.offset)
      return Status(StatusCode::mismatch, "a storage of the layout lies outside the mapped memory");
  for (const auto& [r, role] : layout.tensors) {
    const std::uint32_t size = element_size(r.dtype);
    if (r.storage >= layout.storages.size() || size == 0 || r.sizes.size() != r.strides.size() || r.storage_offset < 0)
      return Status(StatusCode::mismatch, fmt::format("tensor '{}' has a malformed record", r.name));
    // The last element any index reaches, in elements from the storage's start; an empty tensor
    // reaches none. Checked arithmetic: a description whose sizes wrap around must not pass.
    std::uint64_t last = static_cast<std::uint64_t>(r.storage_offset);
    bool empty = false, overflow = false;
    for (std::size_t d = 0; d < r.sizes.size(); ++d) {
      if (r.sizes[d] < 0 || r.strides[d] < 0) return Status(StatusCode::mismatch, fmt::format("tensor '{}' has a negative size or stride", r.name));
      if (r.sizes[d] == 0) {
        empty = true;
        continue;
      }
      std::uint64_t reach = 0;
      overflow |= __builtin_mul_overflow(static_cast<std::uint64_t>(r.sizes[d] - 1), static_cast<std::uint64_t>(r.strides[d]), &reach);
      overflow |= __builtin_add_overflow(last, reach, &last);
    }
    std::uint64_t end = 0;
    overflow |= __builtin_add_overflow(last, 1, &end) || __builtin_mul_overflow(end, std::uint64_t{size}, &end);
    if (!empty && (overflow || end > layout.storages[r.storage].nbytes))
      return Status(StatusCode::mismatch, fmt::format("tensor '{}' reaches past the end of its storage", r.name));
  }
  return Status::ok();
}

Unpacked unpack(const PreparedLayout& layout, std::byte* base, c10::Device device, std::shared_ptr<void> keep_alive) {
  std::vector<c10::Storage> storages;
  storages.reserve(layout.storages.size());
  for (const auto& s : layout.storages) {
    auto* owner = new std::shared_ptr<void>(keep_alive);
    c10::DataPtr ptr(base + s.offset, owner, [](void* ctx) { delete static_cast<std::shared_ptr<void>*>(ctx); }, device);
    storages.emplace_back(c10::Storage::use_byte_size_t(), s.nbytes, std::move(ptr), /*allocator=*/nullptr,
                          /*resizable=*/false);
  }
  Unpacked out;
  for (const auto& [r, role] : layout.tensors) {
    auto impl = c10::make_intrusive<c10::TensorImpl>(c10::Storage(storages[r.storage]),
                                                     c10::DispatchKeySet(device.is_cuda() ? c10::DispatchKey::CUDA
                                                                                          : c10::DispatchKey::CPU),
                                                     caffe2::TypeMeta::fromScalarType(to_scalar_type(r.dtype)));
    impl->set_sizes_and_strides(r.sizes, r.strides, r.storage_offset);
    at::Tensor t(std::move(impl));
    if (role == Role::weight) out.weights.emplace_back(r.name, std::move(t));
    else out.derived.emplace(r.name, std::move(t));
  }
  return out;
}

}  // namespace snapcache::donor
