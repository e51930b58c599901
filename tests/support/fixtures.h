// Deterministic tensors and keys for the tests of the torch bridge and the layers above it. The store's
// tests and the CLI's use raw_storages.h, without torch, and the one helper process
// (kStoreHelper in child_process.h).
#pragma once

#include <map>
#include <memory>
#include <string>

#include "snapcache/extend/host_storage.h"
#include "snapcache/extend/post_load.h"
#include "snapcache/extend/store_tensors.h"
#include "snapcache/key.h"
#include "support/raw_storages.h"

namespace snapcache::test {

// store_key(seed, component) with the torch identity of this process, as a loader builds it.
Key test_key(int seed, const std::string& component = "dit");

// A small model-like set: bf16 attention weights, a tied embedding (two names, one storage), a
// transposed view, an int8 weight with (N, 1) fp32 scales, a zero-size tensor. About `mib` MiB.
NamedTensors model_tensors(int seed, std::size_t mib = 1);

// A post-load method that doubles `tensor` in place and declares (by default) that it may write in
// place: what an uploader must never send from the file, and a background publication must not see.
std::shared_ptr<PostLoadMethod> double_in_place(const std::string& tensor);

// Odd shapes in every element size the layout transposes handle, one storage each: rows that
// straddle staging units and checksum chunks, columns that are no multiple of any block.
NamedTensors odd_matrices();

// Pending transposes of `tensors` (row-major, each its own storage) as an uploader that converts
// layouts receives them, read from where `stored` (the storages of `tensors`, e.g. a snapshot's,
// snapshot_storages) says a tensor's storage also lies.
HostStorages pending_transposes(const NamedTensors& tensors, const HostStorages* stored = nullptr);

// Byte-exact comparison of data, dtype, shape, strides and storage offset.
bool same_tensor(const at::Tensor& a, const at::Tensor& b);
// Same names, and same_tensor for each, in order.
bool same_tensors(const NamedTensors& a, const NamedTensors& b);

}  // namespace snapcache::test
