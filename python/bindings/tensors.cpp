// Tensors in and out: the snapshot front end (publish and load named tensors), the strict
// safetensors reader and writer, TP sharding and QKV fusion, and the plain upload. Every tensor
// crosses as the same TensorImpl (no copy); calls that read files or move bytes release the GIL.
#include "tensors.h"

#include <torch/csrc/autograd/python_variable.h>

#include "snapcache/extend/host_storage.h"
#include "snapcache/extend/store_tensors.h"
#include "snapcache/key.h"
#include "snapcache/pipeline.h"
#include "snapcache/safetensors.h"
#include "snapcache/sharding.h"

namespace snapcache::python {

py::dict to_dict(const NamedTensors& tensors) {
  py::dict d;
  for (const auto& [name, t] : tensors) d[py::str(name)] = py::cast(t);
  return d;
}

py::dict to_dict(const std::map<std::string, at::Tensor>& tensors) {
  py::dict d;
  for (const auto& [name, t] : tensors) d[py::str(name)] = py::cast(t);
  return d;
}

c10::Device device_from_python(const py::handle& obj) {
  py::object device = py::reinterpret_borrow<py::object>(obj);
  if (py::isinstance<py::str>(obj) || py::isinstance<py::int_>(obj))
    device = py::module_::import("torch").attr("device")(obj);
  return device.cast<c10::Device>();
}

namespace {

at::Tensor tensor_of(const py::handle& value, const std::string& what, const std::string& name) {
  if (!THPVariable_Check(value.ptr()))
    throw py::type_error(what + ": '" + name + "' is a " +
                         py::str(py::type::handle_of(value).attr("__name__")).cast<std::string>() +
                         ", not a torch.Tensor");
  return THPVariable_Unpack(value.ptr());
}

}  // namespace

NamedTensors named_tensors(const py::handle& obj, const std::string& what) {
  NamedTensors out;
  if (py::isinstance<py::dict>(obj) || py::hasattr(obj, "items")) {
    for (const auto& item : obj.attr("items")()) {
      auto pair = item.cast<py::tuple>();
      std::string name = py::str(pair[0]).cast<std::string>();
      at::Tensor t = tensor_of(pair[1], what, name);
      out.emplace_back(std::move(name), std::move(t));
    }
    return out;
  }
  if (!py::hasattr(obj, "__iter__"))
    throw py::type_error(what + ": expected a dict of name -> tensor or (name, tensor) pairs, got " +
                         py::str(py::type::handle_of(obj).attr("__name__")).cast<std::string>());
  for (const auto& item : obj) {
    auto pair = item.cast<py::sequence>();
    if (pair.size() != 2) throw py::type_error(what + ": expected (name, tensor) pairs");
    std::string name = py::str(pair[0]).cast<std::string>();
    at::Tensor t = tensor_of(pair[1], what, name);
    out.emplace_back(std::move(name), std::move(t));
  }
  return out;
}

std::map<std::string, at::Tensor> tensor_map(const py::handle& obj, const std::string& what) {
  std::map<std::string, at::Tensor> out;
  for (auto& [name, t] : named_tensors(obj, what)) out.insert_or_assign(name, std::move(t));
  return out;
}

namespace {

struct LoadedTensorsView {
  LookupOutcome lookup;
  NamedTensors tensors;
};

void bind_safetensors(py::module_& m) {
  py::class_<SafetensorsFile, std::shared_ptr<SafetensorsFile>>(
      m, "SafetensorsFile",
      "A safetensors file, strictly validated and mapped privately (copy-on-write): each tensor is a "
      "view of the mapping that keeps it alive, no bytes are read until used.")
      .def_static(
          "open",
          [](const py::object& path) {
            const std::string p = path_string(path);
            Result<std::shared_ptr<SafetensorsFile>> file = Status();
            {
              py::gil_scoped_release release;
              file = SafetensorsFile::open(p);
            }
            return unwrap(std::move(file));
          },
          py::arg("path"), "Opens and validates; a malformed file raises InvalidArgument naming the problem.")
      .def_property_readonly("path", &SafetensorsFile::path)
      .def_property_readonly("metadata", &SafetensorsFile::metadata)
      .def("keys",
           [](const SafetensorsFile& f) {
             std::vector<std::string> names;
             for (const auto& e : f.entries()) names.push_back(e.name);
             return names;
           },
           "Tensor names in file order.")
      .def("layout",
           [](const SafetensorsFile& f) {
             ExpectedLayout layout;
             for (const auto& e : f.entries()) layout.push_back({e.name, e.dtype, e.shape, std::nullopt, ""});
             return layout;
           },
           "Each tensor's name, dtype and shape as ExpectedTensor: a plan's `expected` for a loader that "
           "returns the file as it is.")
      .def("__len__", [](const SafetensorsFile& f) { return f.entries().size(); })
      .def("__contains__", [](const SafetensorsFile& f, const std::string& name) { return f.find(name) != nullptr; })
      .def(
          "tensor",
          [](const SafetensorsFile& f, const std::string& name) {
            Result<at::Tensor> t = Status();
            {
              py::gil_scoped_release release;
              t = f.tensor(name);
            }
            return unwrap(std::move(t));
          },
          py::arg("name"), "A CPU tensor over the mapping (no copy); NotFound if absent.")
      .def(
          "tensors",
          [](const SafetensorsFile& f) {
            NamedTensors t;
            {
              py::gil_scoped_release release;
              t = f.tensors();
            }
            return to_dict(t);
          },
          "Every tensor, in file order, over the mapping.");

  m.def(
      "write_safetensors",
      [](const py::object& path, const py::handle& tensors, const std::map<std::string, std::string>& metadata) {
        const std::string p = path_string(path);
        NamedTensors t = named_tensors(tensors, "write_safetensors");
        Status st;
        {
          py::gil_scoped_release release;
          st = write_safetensors(p, t, metadata);
        }
        check(st);
      },
      py::arg("path"), py::arg("tensors"), py::arg("metadata") = std::map<std::string, std::string>{},
      "Writes tensors (made contiguous) as a safetensors file, through a temporary file.");
}

void bind_sharding(py::module_& m) {
  py::native_enum<ShardAxis>(m, "ShardAxis", "enum.Enum", "Which dimension a tensor-parallel shard splits.")
      .value("rows", ShardAxis::rows, "dim 0: column-parallel layers (q, k, v, up/gate projections)")
      .value("columns", ShardAxis::columns, "dim 1: row-parallel layers (output and down projections)")
      .finalize();
  m.def(
      "shard",
      [](const at::Tensor& full, ShardAxis axis, int rank, int size, const std::string& name) {
        Result<at::Tensor> t = Status();
        {
          py::gil_scoped_release release;
          t = shard(full, axis, rank, size, name);
        }
        return unwrap(std::move(t));
      },
      py::arg("full"), py::arg("axis"), py::arg("rank"), py::arg("size"), py::arg("name") = "",
      "Rank `rank` of `size` equal parts of `full` along `axis`, in a compact storage of its own (so a "
      "snapshot holds the rank's share only). A contiguous share (rows) is not copied: it shares memory "
      "with `full`, as a view does. InvalidArgument naming the tensor when it does not divide.");
  m.def(
      "fuse_qkv",
      [](const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, int rank, int size, const std::string& name) {
        Result<at::Tensor> t = Status();
        {
          py::gil_scoped_release release;
          t = fuse_qkv(q, k, v, rank, size, name);
        }
        return unwrap(std::move(t));
      },
      py::arg("q"), py::arg("k"), py::arg("v"), py::arg("rank"), py::arg("size"), py::arg("name") = "",
      "This rank's rows of q, k and v, concatenated into one fused QKV weight (or bias).");
}

void bind_snapshot_front_end(py::module_& m) {
  m.def("current_torch_identity", &current_torch_identity, "The torch this process runs (part of every key).");
  m.def(
      "expected_layout_of",
      [](const py::handle& tensors) {
        NamedTensors t = named_tensors(tensors, "expected_layout_of");
        return unwrap(expected_layout_of(t));
      },
      py::arg("tensors"),
      "The layout of CPU tensors (names, dtypes, shapes, strides, alias groups): what a warm load of "
      "them is checked against.");
  m.def(
      "check_completeness",
      [](const py::handle& tensors, const ExpectedLayout& expected) {
        NamedTensors t = named_tensors(tensors, "check_completeness");
        check(check_completeness(t, expected));
      },
      py::arg("tensors"), py::arg("expected"),
      "Raises Mismatch unless the tensors are exactly the expected ones (names, dtypes, shapes, strides).");
  m.def(
      "publish_tensors",
      [](Store& store, const Key& key, const py::handle& tensors, std::uint64_t chunk_size, std::size_t threads) {
        NamedTensors t = named_tensors(tensors, "publish_tensors");
        PublishOptions options;
        options.chunk_size = chunk_size;
        options.threads = threads;
        py::gil_scoped_release release;
        return publish_tensors(store, key, t, options);
      },
      py::arg("store"), py::arg("key"), py::arg("tensors"), py::arg("chunk_size") = kDefaultChunkSize,
      py::arg("threads") = 0,
      "Publishes CPU tensors under `key` (storages once each, aliases kept). Never raises for the "
      "store's sake: the outcome says published, already_present, skipped or failed, and why.");

  py::class_<LoadedTensorsView>(m, "LoadedTensors", "A lookup's outcome and, on a hit, the tensors.")
      .def_readonly("lookup", &LoadedTensorsView::lookup)
      .def_property_readonly("tensors", [](const LoadedTensorsView& l) { return to_dict(l.tensors); },
                             "On a hit, CPU tensors over the entry's private mapping (no copy); else {}.");
  m.def(
      "load_tensors",
      [](Store& store, const Key& key, const std::optional<ExpectedLayout>& expected, VerifyPolicy policy) {
        LoadedTensors loaded;
        {
          py::gil_scoped_release release;
          loaded = load_tensors(store, key, expected ? &*expected : nullptr, policy);
        }
        return LoadedTensorsView{std::move(loaded.lookup), std::move(loaded.tensors)};
      },
      py::arg("store"), py::arg("key"), py::arg("expected") = py::none(),
      py::arg("policy") = VerifyPolicy::trust_identity,
      "Looks `key` up and, on a hit, gives its tensors over the entry's private mapping. A layout other "
      "than `expected` is a miss, with the reason.");
  m.def(
      "upload_tensors",
      [](const py::handle& tensors, const py::handle& device_like) {
        NamedTensors t = named_tensors(tensors, "upload_tensors");
        const c10::Device device = device_from_python(device_like);
        Result<NamedTensors> out = Status();
        {
          py::gil_scoped_release release;
          out = upload_tensors(t, device);
        }
        return to_dict(unwrap(std::move(out)));
      },
      py::arg("tensors"), py::arg("device"),
      "Moves tensors to `device` with one allocation and one copy per storage, so aliases stay aliases.");
}

}  // namespace

void bind_tensors(py::module_& m) {
  bind_safetensors(m);
  bind_sharding(m);
  bind_snapshot_front_end(m);
}

}  // namespace snapcache::python
