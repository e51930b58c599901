// Small helpers over NamedTensors shared by the pipeline's files.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "snapcache/extend/snapshot.h"

namespace snapcache::pipeline {

inline bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

inline at::Tensor* find(NamedTensors& tensors, const std::string& name) {
  for (auto& [n, t] : tensors)
    if (n == name) return &t;
  return nullptr;
}
inline const at::Tensor* find(const NamedTensors& tensors, const std::string& name) {
  return find(const_cast<NamedTensors&>(tensors), name);
}

// Names of "<p>.weight" tensors of `dtype` that have a "<p>.weight_scale", each followed by its
// scale's name: the pairs a scaled-weight quantizer transforms.
std::vector<std::string> weight_scale_pairs(const NamedTensors& tensors, at::ScalarType dtype);

}  // namespace snapcache::pipeline
