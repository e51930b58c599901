// Prepared weights as one block of device memory: the donor packs each storage of the weights and
// derived buffers at an aligned offset and describes the tensors over them (PreparedLayout); a
// consumer checks that description and builds tensors over its own mapping of the block.
#pragma once

#include <ATen/core/Tensor.h>

#include <map>
#include <memory>
#include <string>

#include "donor/protocol.h"
#include "snapcache/extend/store_tensors.h"

namespace snapcache::donor {

// The layout of `weights` and `derived` packed storage by storage, and each packed storage's
// source (in layout order). Fails, naming the tensor, on one that is not a strided tensor on `device`.
struct Packing {
  PreparedLayout layout;
  std::vector<c10::Storage> sources;
};
Result<Packing> pack(const NamedTensors& weights, const std::map<std::string, at::Tensor>& derived, c10::Device device);

// Every tensor inside its storage and every storage inside `mapped_bytes`, element sizes known:
// what the consumer checks before it builds anything over the memory.
Status check_bounds(const PreparedLayout& layout, std::uint64_t mapped_bytes);

// Tensors over `base` (a mapping of the packed block on `device`); each storage's DataPtr holds
// `keep_alive`, so the mapping lives as long as any tensor, view or storage made from them.
struct Unpacked {
  NamedTensors weights;
  std::map<std::string, at::Tensor> derived;
};
Unpacked unpack(const PreparedLayout& layout, std::byte* base, c10::Device device, std::shared_ptr<void> keep_alive);

}  // namespace snapcache::donor
