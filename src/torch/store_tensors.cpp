// at::Tensor <-> store descriptors. Tensors built here sit directly on the entry's private
// mapping (no copy) and keep it, with the entry's lease, alive through their storage's DataPtr.
#include "snapcache/extend/store_tensors.h"

#include "snapcache/extend/host_storage.h"

#include <ATen/Functions.h>
#include <c10/core/CPUAllocator.h>
#include <c10/core/TensorImpl.h>

#include "torch/tensor_over.h"
#include "util/fmt.h"

#include "snapcache/key.h"
#include "snapcache/log.h"
#include "snapcache/manifest.h"
#include "snapcache/text.h"

namespace snapcache {
namespace {

struct DTypePair {
  c10::ScalarType scalar;
  DType dtype;
};

constexpr DTypePair kDTypes[] = {
    {c10::ScalarType::Bool, DType::bool_},
    {c10::ScalarType::Byte, DType::uint8}, {c10::ScalarType::Char, DType::int8},
    {c10::ScalarType::Short, DType::int16}, {c10::ScalarType::Int, DType::int32},
    {c10::ScalarType::Long, DType::int64}, {c10::ScalarType::UInt16, DType::uint16},
    {c10::ScalarType::UInt32, DType::uint32}, {c10::ScalarType::UInt64, DType::uint64},
    {c10::ScalarType::Half, DType::float16}, {c10::ScalarType::BFloat16, DType::bfloat16},
    {c10::ScalarType::Float, DType::float32}, {c10::ScalarType::Double, DType::float64},
    {c10::ScalarType::ComplexHalf, DType::complex32}, {c10::ScalarType::ComplexFloat, DType::complex64},
    {c10::ScalarType::ComplexDouble, DType::complex128},
    {c10::ScalarType::Float8_e4m3fn, DType::float8_e4m3fn}, {c10::ScalarType::Float8_e5m2, DType::float8_e5m2},
    {c10::ScalarType::Float8_e4m3fnuz, DType::float8_e4m3fnuz},
    {c10::ScalarType::Float8_e5m2fnuz, DType::float8_e5m2fnuz},
    {c10::ScalarType::Float8_e8m0fnu, DType::float8_e8m0fnu},
    {c10::ScalarType::Float4_e2m1fn_x2, DType::float4_e2m1fn_x2},
    {c10::ScalarType::Bits1x8, DType::bits1x8}, {c10::ScalarType::Bits2x4, DType::bits2x4},
    {c10::ScalarType::Bits4x2, DType::bits4x2}, {c10::ScalarType::Bits8, DType::bits8},
    {c10::ScalarType::Bits16, DType::bits16},
    {c10::ScalarType::UInt1, DType::uint1}, {c10::ScalarType::UInt2, DType::uint2},
    {c10::ScalarType::UInt3, DType::uint3}, {c10::ScalarType::UInt4, DType::uint4},
    {c10::ScalarType::UInt5, DType::uint5}, {c10::ScalarType::UInt6, DType::uint6},
    {c10::ScalarType::UInt7, DType::uint7},
    {c10::ScalarType::Int1, DType::int1}, {c10::ScalarType::Int2, DType::int2},
    {c10::ScalarType::Int3, DType::int3}, {c10::ScalarType::Int4, DType::int4},
    {c10::ScalarType::Int5, DType::int5}, {c10::ScalarType::Int6, DType::int6},
    {c10::ScalarType::Int7, DType::int7},
};

Status unsupported(const std::string& name, const std::string& why) {
  return {StatusCode::unsupported, fmt::format("tensor '{}': {}", name, why)};
}

}  // namespace

Result<DType> to_dtype(c10::ScalarType type) {
  for (const auto& p : kDTypes)
    if (p.scalar == type) return p.dtype;
  return Status(StatusCode::unsupported, fmt::format("dtype {} cannot be stored (quantized dtypes need their "
                                                     "quantizer, which a snapshot does not keep)",
                                                     c10::toString(type)));
}

c10::ScalarType to_scalar_type(DType dtype) {
  for (const auto& p : kDTypes)
    if (p.dtype == dtype) return p.scalar;
  return c10::ScalarType::Undefined;
}

Result<CapturedTensors> capture_tensors(const NamedTensors& tensors) {
  auto host = describe_host_storages(tensors);
  if (!host) return host.status();
  CapturedTensors out;
  for (const HostStorage& s : host->storages) out.storages.push_back({s.data, s.used_bytes});
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const auto& [name, t] = tensors[i];
    if (t.is_quantized()) return unsupported(name, "quantized tensors are not supported");
    if (t.is_conj() || t.is_neg())
      return unsupported(name, "has the conjugate or negative bit set; call resolve_conj()/resolve_neg() first");
    auto dtype = to_dtype(t.scalar_type());
    if (!dtype) return dtype.status().with_context("tensor '" + name + "'");
    TensorRecord rec;
    rec.name = name;
    rec.dtype = *dtype;
    rec.sizes.assign(t.sizes().begin(), t.sizes().end());
    rec.strides.assign(t.strides().begin(), t.strides().end());
    rec.storage_offset = t.storage_offset();
    rec.storage = host->storage_of[i];
    out.tensors.push_back(std::move(rec));
  }
  return out;
}

Result<ExpectedLayout> expected_layout_of(const NamedTensors& tensors) {
  auto host = describe_host_storages(tensors);
  if (!host) return host.status();
  ExpectedLayout layout;
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const auto& [name, t] = tensors[i];
    auto dtype = to_dtype(t.scalar_type());
    if (!dtype) return dtype.status().with_context("tensor '" + name + "'");
    ExpectedTensor e;
    e.name = name;
    e.dtype = *dtype;
    e.sizes.assign(t.sizes().begin(), t.sizes().end());
    e.strides = std::vector<std::int64_t>(t.strides().begin(), t.strides().end());
    e.alias_group = fmt::format("storage{}", host->storage_of[i]);
    layout.push_back(std::move(e));
  }
  return layout;
}

PublishOutcome publish_tensors(Store& store, const Key& key, const NamedTensors& tensors,
                               const PublishOptions& options) {
  auto captured = capture_tensors(tensors);
  if (!captured) {
    PublishOutcome out;
    out.result = PublishResult::skipped;
    out.status = captured.status();
    out.entry_id = key_id(key);
    log(LogLevel::info, fmt::format("publish {}: skipped ({})", key.component, out.status.to_string()));
    return out;
  }
  return store.publish(key, captured->storages, std::move(captured->tensors), options);
}

NamedTensors tensors_of(const std::shared_ptr<Snapshot>& snapshot) {
  const Manifest& m = snapshot->manifest();
  std::vector<c10::Storage> storages;
  storages.reserve(m.storages.size());
  for (std::uint32_t i = 0; i < m.storages.size(); ++i) {
    // Each storage's DataPtr owns a reference to the snapshot: the mapping and the lease outlive
    // every tensor, view or clone-of-storage made from it.
    auto* owner = new std::shared_ptr<Snapshot>(snapshot);
    c10::DataPtr ptr(snapshot->storage_data(i), owner,
                     [](void* ctx) { delete static_cast<std::shared_ptr<Snapshot>*>(ctx); }, c10::Device(c10::kCPU));
    storages.emplace_back(c10::Storage::use_byte_size_t(), m.storages[i].nbytes, std::move(ptr),
                          /*allocator=*/nullptr, /*resizable=*/false);
  }
  NamedTensors out;
  out.reserve(m.tensors.size());
  for (const auto& rec : m.tensors)
    out.emplace_back(rec.name, tensor_over(storages[rec.storage], to_scalar_type(rec.dtype), rec.sizes, rec.strides,
                                           rec.storage_offset));
  return out;
}

LoadedTensors load_tensors(Store& store, const Key& key, const ExpectedLayout* expected, VerifyPolicy policy) {
  LoadedTensors out;
  out.lookup = store.lookup(key, policy, expected);
  LookupOutcome& lk = out.lookup;
  if (lk.result == LookupResult::hit) out.tensors = tensors_of(lk.snapshot);
  std::string what = fmt::format("load {} [{}]: {}", key.component.empty() ? "(component)" : key.component,
                                 lk.entry_id.substr(0, 12), to_string(lk.result));
  if (lk.result == LookupResult::hit)
    log(LogLevel::info, fmt::format("{} ({} in {} tensors, {:.1f} ms; {})", what,
                                    format_size(lk.snapshot->manifest().data_bytes()), out.tensors.size(),
                                    lk.seconds * 1e3, lk.reason));
  else
    log(lk.result == LookupResult::fallback ? LogLevel::warn : LogLevel::info, what + ": " + lk.reason);
  return out;
}

Result<HostStorages> snapshot_storages(const std::shared_ptr<Snapshot>& snapshot, const NamedTensors& tensors) {
  auto host = describe_host_storages(tensors);
  if (!host) return host.status();
  const Manifest& m = snapshot->manifest();
  if (tensors.size() != m.tensors.size())
    return Status(StatusCode::invalid_argument,
                  fmt::format("{} tensors for a snapshot of {}", tensors.size(), m.tensors.size()));
  const std::vector<std::shared_ptr<const StoredFile>> files = stored_files(snapshot);
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const std::uint32_t record = m.tensors[i].storage;
    HostStorage& s = host->storages[host->storage_of[i]];
    if (tensors[i].first != m.tensors[i].name || s.data != snapshot->storage_data(record))
      return Status(StatusCode::invalid_argument,
                    fmt::format("tensor '{}' is not the snapshot's tensor {} over its storage", tensors[i].first, i));
    s.file = StoredBytes{files.at(m.storages[record].file), m.storages[record].offset};
  }
  return host;
}

}  // namespace snapcache
