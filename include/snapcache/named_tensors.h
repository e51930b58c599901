// A rank's tensors by name, in order: what a loader returns, a snapshot holds and a load hands out.
#pragma once

#include <ATen/core/Tensor.h>

#include <string>
#include <utility>
#include <vector>

namespace snapcache {

// Ordered: the order of publication is the order of loading.
using NamedTensors = std::vector<std::pair<std::string, at::Tensor>>;

}  // namespace snapcache
