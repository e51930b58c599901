// Grouping tensors by the storage they view: written once, used by publication, the expected
// layout of a load, the report and the uploader.
#include "snapcache/extend/host_storage.h"

#include <ATen/EmptyTensor.h>
#include <ATen/Functions.h>
#include <ATen/core/Tensor.h>

#include <bit>
#include <unordered_map>

#include "torch/tensor_over.h"
#include "util/fmt.h"

namespace snapcache {
namespace {

Status refuse(const std::string& name, const std::string& why) {
  return {StatusCode::unsupported, fmt::format("tensor '{}': {}", name, why)};
}

std::uint64_t alignment_of(const void* p) {
  const auto address = reinterpret_cast<std::uintptr_t>(p);
  if (address == 0) return 4096;
  return std::min<std::uint64_t>(4096, std::uint64_t{1} << std::countr_zero(address));
}

}  // namespace

Status PendingTranspose::check(std::uint64_t storage_bytes) const {
  if (!source.defined() || !source.device().is_cpu() || source.dim() != 2 || !source.is_contiguous())
    return Status(StatusCode::invalid_argument,
                  "a pending layout conversion's source is not a contiguous two-dimensional CPU tensor");
  if (rows() * cols() * element_size() != storage_bytes)
    return Status(StatusCode::invalid_argument, "a pending layout conversion does not fill its storage");
  return Status::ok();
}

std::uint64_t HostStorages::total_bytes() const {
  std::uint64_t total = 0;
  for (const auto& s : storages) total += s.nbytes;
  return total;
}

Result<HostStorages> describe_host_storages(const NamedTensors& tensors) {
  HostStorages out;
  out.storage_of.reserve(tensors.size());
  out.storages.reserve(tensors.size());  // at most one each; a load describes thousands, twice
  std::unordered_map<const c10::StorageImpl*, std::uint32_t> index;
  index.reserve(tensors.size());
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const auto& [name, t] = tensors[i];
    if (!t.defined()) return refuse(name, "undefined tensor");
    if (!t.device().is_cpu()) return refuse(name, "on " + t.device().str() + ", not on the CPU");
    if (t.layout() != c10::kStrided) return refuse(name, "not a strided (dense) tensor");
    const c10::Storage& storage = t.storage();
    // torch's own rule for the bytes a view reaches (offset + largest index + 1, in elements).
    const auto reach = static_cast<std::uint64_t>(at::detail::computeStorageNbytes(
        t.sizes(), t.strides(), t.element_size(), static_cast<std::size_t>(t.storage_offset())));
    if (reach > storage.nbytes())
      return refuse(name, fmt::format("reaches {} bytes into a storage of {}", reach, storage.nbytes()));
    auto [it, inserted] = index.emplace(storage.unsafeGetStorageImpl(), static_cast<std::uint32_t>(out.storages.size()));
    if (inserted) {
      HostStorage s;
      s.data = static_cast<const std::byte*>(storage.data());
      s.nbytes = storage.nbytes();
      s.alignment = alignment_of(s.data);
      s.owner = storage;
      out.storages.push_back(std::move(s));
    }
    HostStorage& s = out.storages[it->second];
    s.tensors.push_back(i);
    if (t.numel() > 0) s.used_bytes = std::max(s.used_bytes, reach);
    out.storage_of.push_back(it->second);
  }
  return out;
}

NamedTensors views_over(const NamedTensors& tensors, const HostStorages& host,
                        const std::vector<c10::Storage>& storages) {
  NamedTensors out;
  out.reserve(tensors.size());
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const at::Tensor& t = tensors[i].second;
    const c10::Storage& storage = storages.at(host.storage_of.at(i));
    out.emplace_back(tensors[i].first, tensor_over(storage, t.scalar_type(), t.sizes(), t.strides(), t.storage_offset()));
  }
  return out;
}

}  // namespace snapcache
