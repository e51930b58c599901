#include "snapcache/sharding.h"

#include <ATen/Functions.h>
#include <c10/core/Storage.h>

#include "util/fmt.h"

namespace snapcache {
namespace {

// Rank `rank`'s part of `full` along `axis`, as a view (nothing copied), after checking it exists.
Result<at::Tensor> part_of(const at::Tensor& full, ShardAxis axis, int rank, int size, const std::string& name) {
  const std::int64_t dim = axis == ShardAxis::rows ? 0 : 1;
  if (size < 1 || rank < 0 || rank >= size)
    return Status(StatusCode::invalid_argument, fmt::format("{}: rank {} of {} is out of range", name, rank, size));
  if (full.dim() <= dim)
    return Status(StatusCode::invalid_argument,
                  fmt::format("{}: cannot shard a {}-d tensor along dimension {}", name, full.dim(), dim));
  const std::int64_t extent = full.size(dim);
  if (extent % size != 0)
    return Status(StatusCode::invalid_argument,
                  fmt::format("{}: dimension {} ({}) does not divide into {} shards", name, dim, extent, size));
  const std::int64_t part = extent / size;
  return full.narrow(dim, part * rank, part);
}

// `part` in a storage of exactly its own bytes. A contiguous part keeps its bytes where they are
// (a checkpoint's mapping: loading a rank's rows copies nothing) in a storage that covers those
// bytes only and holds `part`'s storage alive, so what a snapshot publishes is the share, never
// the whole tensor around it. Anything else, and a tensor autograd tracks, is copied.
at::Tensor compact(const at::Tensor& part) {
  const bool aliasable = part.layout() == at::kStrided && part.has_storage() && !part.is_meta() &&
                         !part.requires_grad() && part.is_contiguous() && part.numel() > 0;
  if (!aliasable) return part.clone(at::MemoryFormat::Contiguous);
  const std::uint64_t bytes = static_cast<std::uint64_t>(part.numel()) * part.element_size();
  if (part.storage_offset() == 0 && part.storage().nbytes() == bytes) return part;  // already its own
  auto* owner = new c10::Storage(part.storage());
  c10::DataPtr ptr(part.data_ptr(), owner, [](void* ctx) { delete static_cast<c10::Storage*>(ctx); }, part.device());
  c10::Storage storage(c10::Storage::use_byte_size_t(), bytes, std::move(ptr), /*allocator=*/nullptr,
                       /*resizable=*/false);
  return at::empty({0}, part.options()).set_(storage, 0, part.sizes(), part.strides());
}

}  // namespace

Result<at::Tensor> shard(const at::Tensor& full, ShardAxis axis, int rank, int size, const std::string& name) {
  auto part = part_of(full, axis, rank, size, name);
  if (!part) return part.status();
  return compact(*part);
}

Result<at::Tensor> fuse_qkv(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, int rank, int size,
                            const std::string& name) {
  // The parts are views: the rows cross memory once, into the fused tensor.
  auto qs = part_of(q, ShardAxis::rows, rank, size, name + " (q)");
  if (!qs) return qs.status();
  auto ks = part_of(k, ShardAxis::rows, rank, size, name + " (k)");
  if (!ks) return ks.status();
  auto vs = part_of(v, ShardAxis::rows, rank, size, name + " (v)");
  if (!vs) return vs.status();
  if (qs->scalar_type() != ks->scalar_type() || qs->scalar_type() != vs->scalar_type())
    return Status(StatusCode::invalid_argument, fmt::format("{}: q, k and v have different dtypes", name));
  if (qs->dim() > 1 && (qs->size(1) != ks->size(1) || qs->size(1) != vs->size(1)))
    return Status(StatusCode::invalid_argument, fmt::format("{}: q, k and v have different input sizes", name));
  return at::cat({*qs, *ks, *vs}, 0);
}

}  // namespace snapcache
