#include "snapcache/sharding.h"

#include <ATen/Functions.h>

#include "util/fmt.h"

namespace snapcache {

Result<at::Tensor> shard(const at::Tensor& full, ShardAxis axis, int rank, int size, const std::string& name) {
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
  return full.narrow(dim, part * rank, part).clone(at::MemoryFormat::Contiguous);
}

Result<at::Tensor> fuse_qkv(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, int rank, int size,
                            const std::string& name) {
  auto qs = shard(q, ShardAxis::rows, rank, size, name + " (q)");
  if (!qs) return qs.status();
  auto ks = shard(k, ShardAxis::rows, rank, size, name + " (k)");
  if (!ks) return ks.status();
  auto vs = shard(v, ShardAxis::rows, rank, size, name + " (v)");
  if (!vs) return vs.status();
  if (qs->scalar_type() != ks->scalar_type() || qs->scalar_type() != vs->scalar_type())
    return Status(StatusCode::invalid_argument, fmt::format("{}: q, k and v have different dtypes", name));
  if (qs->dim() > 1 && (qs->size(1) != ks->size(1) || qs->size(1) != vs->size(1)))
    return Status(StatusCode::invalid_argument, fmt::format("{}: q, k and v have different input sizes", name));
  return at::cat({*qs, *ks, *vs}, 0);
}

}  // namespace snapcache
