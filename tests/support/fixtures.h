// Deterministic tensors and keys shared by the tests and the helper process.
#pragma once

#include <string>

#include "snapcache/snapshot.h"

namespace snapcache::test {

// A key as a loader would build it; `seed` varies the checkpoint path so keys differ.
Key test_key(int seed, const std::string& component = "dit");

// A small model-like set: bf16 attention weights, a tied embedding (two names, one storage), a
// transposed view, an int8 weight with (N, 1) fp32 scales, a zero-size tensor. About `mib` MiB.
NamedTensors model_tensors(int seed, std::size_t mib = 1);

// Byte-exact comparison of data, dtype, shape, strides and storage offset.
bool same_tensor(const at::Tensor& a, const at::Tensor& b);
// Same names, and same_tensor for each, in order.
bool same_tensors(const NamedTensors& a, const NamedTensors& b);

Config test_config(const std::string& dir);

}  // namespace snapcache::test
