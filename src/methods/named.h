// Small helpers over NamedTensors shared by the pipeline's files.
#pragma once

#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "snapcache/extend/store_tensors.h"

namespace snapcache::methods {

inline bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

// Tensors by name, indexed in one pass, for code that looks up many names: a model has thousands
// of tensors, and a linear search per name made post-load quadratic (the demo's three built-in
// methods took 27-31 ms of a 16 GiB warm load, 3,820 tensors). The first of two equal names wins.
class TensorsByName {
 public:
  explicit TensorsByName(NamedTensors& tensors) {
    index_.reserve(tensors.size());
    for (auto& [n, t] : tensors) index_.emplace(n, &t);
  }
  at::Tensor* find(std::string_view name) const {
    auto it = index_.find(name);
    return it == index_.end() ? nullptr : it->second;
  }

 private:
  std::unordered_map<std::string_view, at::Tensor*> index_;  // views of the tensors' names
};

// A set of names to test many tensors against.
inline std::unordered_set<std::string_view> name_set(const std::vector<std::string>& names) {
  return {names.begin(), names.end()};
}

// Names of "<p>.weight" tensors of `dtype` that have a "<p>.weight_scale", each followed by its
// scale's name: the pairs a scaled-weight quantizer transforms.
std::vector<std::string> weight_scale_pairs(const NamedTensors& tensors, at::ScalarType dtype);

}  // namespace snapcache::methods
