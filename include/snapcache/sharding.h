// Tensor-parallel sharding for the common cases. Every result has a compact storage of its own
// (exactly its bytes), so what gets published is the rank's share, not the whole checkpoint tensor.
// A share that is contiguous in its tensor (rows, or the whole tensor at one rank) is not copied:
// its storage covers those bytes where they lie (a SafetensorsFile's mapping) and keeps the
// tensor's storage alive, so it shares memory with `full` as a view would; clone it before writing
// to it. A share of columns is copied. fuse_qkv writes the three shares once, into a new tensor.
#pragma once

#include <string>

#include "snapcache/export.h"
#include "snapcache/extend/store_tensors.h"

namespace snapcache {

enum class ShardAxis {
  rows,     // dim 0: column-parallel linear layers (q, k, v, up/gate projections)
  columns,  // dim 1: row-parallel linear layers (output and down projections)
};

// Rank `rank` of `size` equal parts of `full` along `axis`; invalid_argument naming the tensor if
// the dimension does not divide evenly or the rank is out of range.
SNAPCACHE_API Result<at::Tensor> shard(const at::Tensor& full, ShardAxis axis, int rank, int size, const std::string& name);

// This rank's rows of q, k and v, concatenated into one fused QKV weight (or bias).
SNAPCACHE_API Result<at::Tensor> fuse_qkv(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, int rank, int size,
                            const std::string& name);

}  // namespace snapcache
