// An ordinary load is complete when it gives exactly the tensors the model declares: the same
// check a warm load's entry passes (check_expected_layout), alias groups included, so nothing the
// warm path would refuse is ever published.
#include <unordered_map>

#include "snapcache/extend/store_tensors.h"
#include "snapcache/manifest.h"
#include "snapcache/pipeline.h"
#include "util/fmt.h"

namespace snapcache {
namespace {

// The tensors as the records a snapshot would hold: each storage numbered in order of first use,
// so tensors that share one share a number, as in a manifest.
Result<std::vector<TensorRecord>> layout_records(const NamedTensors& tensors) {
  std::vector<TensorRecord> records;
  records.reserve(tensors.size());
  std::unordered_map<const c10::StorageImpl*, std::uint32_t> storage_index;
  storage_index.reserve(tensors.size());
  for (const auto& [name, t] : tensors) {
    if (!t.defined()) return Status(StatusCode::mismatch, fmt::format("tensor '{}' is undefined", name));
    auto dtype = to_dtype(t.scalar_type());
    if (!dtype) return dtype.status().with_context(fmt::format("tensor '{}'", name));
    TensorRecord r;
    r.name = name;
    r.dtype = *dtype;
    r.sizes.assign(t.sizes().begin(), t.sizes().end());
    r.strides.assign(t.strides().begin(), t.strides().end());
    r.storage_offset = t.storage_offset();
    const c10::StorageImpl* storage = t.has_storage() ? t.storage().unsafeGetStorageImpl() : nullptr;
    r.storage = storage_index.emplace(storage, static_cast<std::uint32_t>(storage_index.size())).first->second;
    records.push_back(std::move(r));
  }
  return records;
}

}  // namespace

Status check_completeness(const NamedTensors& tensors, const ExpectedLayout& expected) {
  auto records = layout_records(tensors);
  if (!records) return records.status();
  return check_expected_layout(*records, expected, "the ordinary loader's output");
}

}  // namespace snapcache
