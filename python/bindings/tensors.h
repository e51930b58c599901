// Tensors across the boundary: torch's own pybind11 type casters (torch/csrc/utils/pybind.h)
// wrap the same TensorImpl on either side, so a tensor is never copied; these helpers only move
// names and handles between dicts and snapcache's ordered NamedTensors.
#pragma once

#include <torch/csrc/utils/pybind.h>

#include <map>
#include <string>

#include "common.h"
#include "snapcache/extend/store_tensors.h"

namespace snapcache::python {

// {name: tensor}, in order (GIL held).
py::dict to_dict(const NamedTensors& tensors);
py::dict to_dict(const std::map<std::string, at::Tensor>& tensors);
// From a mapping {name: tensor} (in its order) or an iterable of (name, tensor) pairs. A value that
// is not a tensor is a TypeError naming `what` and the name (GIL held).
NamedTensors named_tensors(const py::handle& obj, const std::string& what);
std::map<std::string, at::Tensor> tensor_map(const py::handle& obj, const std::string& what);
// A torch.device, or what torch.device() takes ("cuda:0", "cpu", 0).
c10::Device device_from_python(const py::handle& obj);

}  // namespace snapcache::python
