// The load plan and what it carries: the Python ordinary loader, post-load methods (the built-in
// ones, Python subclasses of PostLoadMethod through a trampoline, plain callables), the precision
// policy, refresh hooks, tiers (the donor tier among them) and uploaders. Every callback takes the
// GIL when the library calls it (the load itself runs without it), and a Python exception it
// raises comes back as a Status, then as the __cause__ of the error the load raises.
#include <algorithm>
#include <chrono>

#include "snapcache/donor.h"
#include "snapcache/extend/file_system.h"
#include "snapcache/extend/gpu_upload.h"
#include "snapcache/extend/post_load.h"
#include "snapcache/extend/tier.h"
#include "snapcache/extend/uploader.h"
#include "snapcache/key.h"
#include "snapcache/pipeline.h"
#include "tensors.h"

namespace snapcache::python {
namespace {

std::string type_name(const py::handle& obj) {
  return py::str(py::type::handle_of(obj).attr("__name__")).cast<std::string>();
}

// A Python exception in a method that cannot return a Status (name, targets, writes, version):
// thrown on as a C++ exception, which the executor turns into a Status; the Python exception is
// remembered for the __cause__.
[[noreturn]] void throw_python_error(py::error_already_set& e, const std::string& context) {
  throw std::runtime_error(status_of_python_error(e, context).message());
}

std::vector<std::string> all_names(const NamedTensors& tensors) {
  std::vector<std::string> names;
  for (const auto& [name, _] : tensors) names.push_back(name);
  return names;
}

// Runs a Python `apply`-like callable on the tensors as a dict: it may change the dict in place or
// return a mapping of replacements; the dict, in its order, becomes the tensors.
Status apply_python(const py::object& fn, NamedTensors& tensors, const std::string& context) {
  return call_python(context, [&]() -> Status {
    py::dict d = to_dict(tensors);
    py::object result = fn(d);
    if (!result.is_none()) {
      if (!py::hasattr(result, "items"))
        return Status(StatusCode::invalid_argument,
                      context + ": apply returned a " + type_name(result) + "; return None or a dict of tensors");
      for (const auto& item : result.attr("items")()) {
        auto pair = item.cast<py::tuple>();
        d[pair[0]] = pair[1];
      }
    }
    tensors = named_tensors(d, context);
    return Status::ok();
  });
}

PostLoadWrites writes_from_python(const py::object& v) {
  if (py::isinstance<py::str>(v)) {
    const auto s = v.cast<std::string>();
    if (s == "new_storages_only") return PostLoadWrites::new_storages_only;
    if (s == "may_write_in_place") return PostLoadWrites::may_write_in_place;
    throw py::value_error("writes: 'new_storages_only' or 'may_write_in_place', not '" + s + "'");
  }
  return v.cast<PostLoadWrites>();
}

// Python subclasses of PostLoadMethod. With the smart holder, a shared_ptr the library holds keeps
// the Python object alive (and takes the GIL to let go of it).
class PyPostLoadMethod : public PostLoadMethod, public py::trampoline_self_life_support {
 public:
  std::string name() const override {
    py::gil_scoped_acquire gil;
    try {
      py::function f = py::get_override(static_cast<const PostLoadMethod*>(this), "name");
      if (!f) return type_name(py::cast(static_cast<const PostLoadMethod*>(this)));
      return py::str(f()).cast<std::string>();
    } catch (py::error_already_set& e) {
      throw_python_error(e, "post-load method name()");
    }
  }
  std::vector<std::string> targets(const NamedTensors& tensors) const override {
    py::gil_scoped_acquire gil;
    try {
      py::function f = py::get_override(static_cast<const PostLoadMethod*>(this), "targets");
      if (!f) return all_names(tensors);  // undeclared: it may transform anything
      return f(to_dict(tensors)).cast<std::vector<std::string>>();
    } catch (py::error_already_set& e) {
      throw_python_error(e, "targets()");
    }
  }
  Status apply(NamedTensors& tensors) const override {
    py::gil_scoped_acquire gil;
    py::function f = py::get_override(static_cast<const PostLoadMethod*>(this), "apply");
    if (!f) return Status(StatusCode::unsupported, "the PostLoadMethod subclass defines no apply()");
    return apply_python(f, tensors, "");
  }
  // A Python method says what it writes (writes(), the Python API); the rest of its properties are
  // the defaults: it may read anything, and it is not built in.
  MethodProperties properties() const override {
    py::gil_scoped_acquire gil;
    try {
      py::function f = py::get_override(static_cast<const PostLoadMethod*>(this), "writes");
      MethodProperties p;
      if (f) p.writes = writes_from_python(f());
      return p;
    } catch (py::error_already_set& e) {
      throw_python_error(e, "writes()");
    }
  }
  std::string version() const override {
    py::gil_scoped_acquire gil;
    try {
      py::function f = py::get_override(static_cast<const PostLoadMethod*>(this), "version");
      return f ? py::str(f()).cast<std::string>() : PostLoadMethod::version();
    } catch (py::error_already_set& e) {
      throw_python_error(e, "version()");
    }
  }
};

// A plain callable as a post-load method: fn(tensors: dict) -> dict | None.
class CallablePostLoadMethod final : public PostLoadMethod {
 public:
  CallablePostLoadMethod(PyRef fn, std::string name, std::optional<std::vector<std::string>> targets,
                         PyRef targets_fn, PostLoadWrites writes, std::string version)
      : fn_(std::move(fn)), name_(std::move(name)), targets_(std::move(targets)), targets_fn_(std::move(targets_fn)),
        writes_(writes), version_(std::move(version)) {}
  std::string name() const override { return name_; }
  std::vector<std::string> targets(const NamedTensors& tensors) const override {
    if (targets_) return *targets_;
    if (!targets_fn_) return all_names(tensors);
    py::gil_scoped_acquire gil;
    try {
      return targets_fn_.get()(to_dict(tensors)).cast<std::vector<std::string>>();
    } catch (py::error_already_set& e) {
      throw_python_error(e, "targets");
    }
  }
  Status apply(NamedTensors& tensors) const override {
    py::gil_scoped_acquire gil;
    return apply_python(fn_.get(), tensors, "");
  }
  MethodProperties properties() const override {
    MethodProperties p;
    p.writes = writes_;
    return p;
  }
  std::string version() const override { return version_; }
  const PyRef& function() const { return fn_; }

 private:
  PyRef fn_;
  std::string name_;
  std::optional<std::vector<std::string>> targets_;
  PyRef targets_fn_;
  PostLoadWrites writes_;
  std::string version_;
};

std::shared_ptr<PostLoadMethod> make_callable_method(const py::object& fn, const py::object& name,
                                                     const py::object& targets, const py::object& writes,
                                                     const std::string& version) {
  if (!PyCallable_Check(fn.ptr())) throw py::type_error("post_load_method: fn must be callable");
  std::string method_name = !name.is_none()                   ? py::str(name).cast<std::string>()
                            : py::hasattr(fn, "__name__") ? py::str(fn.attr("__name__")).cast<std::string>()
                                                              : type_name(fn);
  std::optional<std::vector<std::string>> target_list;
  PyRef targets_fn;
  if (!targets.is_none()) {
    if (PyCallable_Check(targets.ptr())) targets_fn = PyRef(targets);
    else target_list = targets.cast<std::vector<std::string>>();
  }
  return std::make_shared<CallablePostLoadMethod>(PyRef(fn), std::move(method_name), std::move(target_list),
                                                  std::move(targets_fn), writes_from_python(writes), version);
}

std::shared_ptr<PostLoadMethod> post_load_from_python(const py::handle& item) {
  if (py::isinstance<PostLoadMethod>(item)) return item.cast<std::shared_ptr<PostLoadMethod>>();
  if (PyCallable_Check(item.ptr()))
    return make_callable_method(py::reinterpret_borrow<py::object>(item), py::none(), py::none(),
                                py::str("may_write_in_place"), "");
  throw py::type_error("post_load: a PostLoadMethod or a callable, not a " + type_name(item));
}

// --- the ordinary loader and refresh hooks ----------------------------------------------------

struct PythonLoader {
  PyRef fn;
  Result<NamedTensors> operator()(const LoadPlan& plan) const {
    return call_python("", [&]() -> Result<NamedTensors> {
      py::object out = fn.get()(py::cast(plan, py::return_value_policy::copy));
      return named_tensors(out, "the loader's result");
    });
  }
};

}  // namespace

LoadPlan with_default_source_identity(const LoadPlan& plan, std::string& note) {
  note.clear();
  if (!plan.source_identity.empty()) return plan;
  const auto* loader = plan.ordinary_loader.target<PythonLoader>();
  if (loader == nullptr) return plan;
  // The file that defines the loader (through functools.partial and bound methods): its code is
  // what prepares the weights. A loader without a source file (a builtin, a lambda typed at a
  // prompt) gets no default, and the load is not cached for want of an identity.
  py::object fn = loader->fn.get();
  while (py::hasattr(fn, "func")) fn = fn.attr("func");
  if (py::hasattr(fn, "__func__")) fn = fn.attr("__func__");
  py::object file = py::none();
  try {
    file = py::module_::import("inspect").attr("getsourcefile")(fn);
  } catch (py::error_already_set&) {
    return plan;
  }
  if (file.is_none()) return plan;
  const std::string path = py::str(file).cast<std::string>();
  auto digest = digest_source_files(*posix_file_system(), {path});
  if (!digest) return plan;
  LoadPlan with = plan;
  with.source_identity = *digest;
  note = "source_identity: a digest of " + path + " (the default for a Python loader; set LoadPlan.source_identity to "
         "choose what identifies the loader)";
  return with;
}

namespace {

struct PythonRefresh {
  PyRef fn;
  Status operator()(const NamedTensors& weights, DerivedBuffers& buffers, c10::Device device) const {
    return call_python("", [&]() -> Status {
      py::dict b = to_dict(buffers);
      fn.get()(to_dict(weights), b, py::cast(device));
      buffers = tensor_map(b, "derived buffers");
      return Status::ok();
    });
  }
};

RefreshHook refresh_hook_from_python(const py::handle& item) {
  if (py::isinstance<RefreshHook>(item)) return item.cast<RefreshHook>();
  if (py::isinstance<py::tuple>(item)) {
    auto t = item.cast<py::tuple>();
    if (t.size() != 2) throw py::type_error("refresh_hooks: (name, fn) pairs");
    return RefreshHook{py::str(t[0]).cast<std::string>(), PythonRefresh{PyRef(t[1])}};
  }
  if (PyCallable_Check(item.ptr())) {
    std::string name = py::hasattr(item, "__name__") ? py::str(item.attr("__name__")).cast<std::string>() : "hook";
    return RefreshHook{std::move(name), PythonRefresh{PyRef(py::reinterpret_borrow<py::object>(item))}};
  }
  throw py::type_error("refresh_hooks: a RefreshHook, a (name, fn) pair or a callable, not a " + type_name(item));
}

// --- tiers ------------------------------------------------------------------------------------

std::shared_ptr<Tier> tier_by_name(std::string name) {
  name.erase(std::remove_if(name.begin(), name.end(), [](char c) { return c == ' '; }), name.end());
  if (name == "snapshot") return snapshot_tier();
  if (name == "ordinary") return ordinary_tier();
  if (name == "donor") return donor_tier();
  raise_status(Status(StatusCode::invalid_argument,
                      "unknown tier '" + name + "' (donor, snapshot, ordinary; or a Tier object)"));
}

std::vector<std::shared_ptr<Tier>> tiers_from_python(const py::handle& obj) {
  std::vector<std::shared_ptr<Tier>> tiers;
  if (obj.is_none()) return tiers;
  if (py::isinstance<py::str>(obj)) {
    std::string spec = obj.cast<std::string>();
    std::size_t start = 0;
    while (start <= spec.size()) {
      std::size_t comma = spec.find(',', start);
      std::string part = spec.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
      if (!part.empty()) tiers.push_back(tier_by_name(part));
      if (comma == std::string::npos) break;
      start = comma + 1;
    }
    return tiers;
  }
  for (const auto& item : obj) {
    if (py::isinstance<py::str>(item)) tiers.push_back(tier_by_name(item.cast<std::string>()));
    else tiers.push_back(item.cast<std::shared_ptr<Tier>>());
  }
  return tiers;
}

// LoadPlan.dtype from Python. It is a label in the key, nothing is cast, so that a label names one
// load it must be a dtype torch knows, in one spelling: a torch.dtype, or the name of one ("bfloat16",
// "torch.bfloat16"; torch's aliases, "half", become the canonical name). None or "": none stated.
std::string load_dtype_from_python(const py::handle& v) {
  static constexpr const char* kForms =
      "a torch.dtype (torch.bfloat16) or its name ('bfloat16' or 'torch.bfloat16'), or None for none; it labels "
      "the key, nothing is cast";
  if (v.is_none()) return "";
  const py::module_ torch = py::module_::import("torch");
  const py::object dtype_type = torch.attr("dtype");
  py::object dtype;
  if (py::isinstance(v, dtype_type)) {
    dtype = py::reinterpret_borrow<py::object>(v);
  } else if (py::isinstance<py::str>(v)) {
    const std::string given = v.cast<std::string>();
    if (given.empty()) return "";
    const std::string name = given.rfind("torch.", 0) == 0 ? given.substr(6) : given;
    py::object found = py::getattr(torch, name.c_str(), py::none());
    if (!py::isinstance(found, dtype_type))
      raise_status(Status(StatusCode::invalid_argument, "LoadPlan.dtype: " + py::repr(v).cast<std::string>() +
                                                            " is not a dtype torch knows; give " + kForms));
    dtype = std::move(found);
  } else {
    throw py::type_error("LoadPlan.dtype: " + type_name(v) + " is not a dtype; give " + kForms);
  }
  const std::string s = py::str(dtype).cast<std::string>();  // "torch.bfloat16"
  return s.rfind("torch.", 0) == 0 ? s.substr(6) : s;
}

std::vector<PrecisionRule> rules_from_python(const py::handle& obj) {
  std::vector<PrecisionRule> rules;
  auto allowed_of = [](const py::handle& dtypes) {
    std::vector<DType> allowed;
    if (py::isinstance<py::str>(dtypes) || !py::hasattr(dtypes, "__iter__")) {
      allowed.push_back(dtype_from_python(dtypes));
    } else {
      for (const auto& d : dtypes) allowed.push_back(dtype_from_python(d));
    }
    return allowed;
  };
  if (py::isinstance<py::dict>(obj)) {
    for (const auto& [suffix, dtypes] : obj.cast<py::dict>())
      rules.push_back({py::str(suffix).cast<std::string>(), allowed_of(dtypes)});
    return rules;
  }
  for (const auto& item : obj) {
    if (py::isinstance<PrecisionRule>(item)) {
      rules.push_back(item.cast<PrecisionRule>());
    } else {
      auto t = item.cast<py::sequence>();
      rules.push_back({py::str(t[0]).cast<std::string>(), allowed_of(t[1])});
    }
  }
  return rules;
}

void bind_post_load(py::module_& m) {
  py::native_enum<WeightLayout>(m, "WeightLayout", "enum.Enum", "The memory layout a kernel wants for a weight.")
      .value("row_major", WeightLayout::row_major)
      .value("column_major", WeightLayout::column_major)
      .finalize();
  py::native_enum<PostLoadWrites>(m, "PostLoadWrites", "enum.Enum",
                                  "What a post-load method does to the bytes of its targets.")
      .value("new_storages_only", PostLoadWrites::new_storages_only,
             "results are views of their inputs or live in storages the method allocated")
      .value("may_write_in_place", PostLoadWrites::may_write_in_place,
             "it may change the bytes of its targets' storages (the default)")
      .finalize();

  py::class_<PostLoadMethod, PyPostLoadMethod, py::smart_holder>(
      m, "PostLoadMethod",
      "A quantizer layout step, run on CPU tensors after the weights exist, on both paths (cold: from "
      "the ordinary loader; warm: from the snapshot) and before upload, so cold and warm loads are "
      "bit-identical.\n\n"
      "Subclass it in Python: name() -> str; targets(tensors) -> list of the names it transforms (default: "
      "all); apply(tensors) changes the dict in place or returns {name: tensor} replacements; writes() -> "
      "PostLoadWrites (default may_write_in_place); version() -> str. Methods must be deterministic. "
      "The built-in ones are int8_row_scale(), fp8_block_scale() and layout().")
      .def(py::init<>())
      .def("name", &PostLoadMethod::name)
      .def(
          "targets", [](const PostLoadMethod& self, const py::handle& tensors) {
            NamedTensors t = named_tensors(tensors, "targets");
            return self.targets(t);
          },
          py::arg("tensors"))
      .def(
          "apply",
          [](const PostLoadMethod& self, const py::handle& tensors) {
            CallbackScope scope;  // a Ctrl-C in a Python method's apply is raised as itself
            NamedTensors t = named_tensors(tensors, "apply");
            Status st;
            {
              py::gil_scoped_release release;
              st = self.apply(t);
            }
            raise_if_interrupted();
            check(st);
            return to_dict(t);
          },
          py::arg("tensors"), "Runs the method on {name: tensor}; returns the new dict (the input is unchanged).")
      .def("writes", [](const PostLoadMethod& self) { return self.properties().writes; })
      .def("version", &PostLoadMethod::version)
      .def("__repr__", [](const PostLoadMethod& self) { return "PostLoadMethod(" + self.name() + ")"; });

  m.def("int8_row_scale", &int8_row_scale_method, py::arg("weight_layout") = WeightLayout::row_major,
        "INT8 per-row quantized weights: '<p>.weight' (int8 [N, K]) with '<p>.weight_scale' float32 (N, 1) "
        "-> scale (N,), weight in the given layout.");
  m.def("fp8_block_scale", &fp8_block_scale_method, py::arg("block_rows") = 128, py::arg("block_cols") = 128,
        "FP8 (e4m3fn) block-scaled weights: checks the 128x128 block grid of '<p>.weight_scale' and gives "
        "the scales the column-major (MN-major) layout.");
  m.def("layout", &layout_method, py::arg("suffixes"), py::arg("layout"),
        "FP16 and INT8 layout conversion of the 2-d tensors whose names end with one of `suffixes`.");
  m.def("post_load_method", &make_callable_method, py::arg("fn"), py::kw_only(), py::arg("name") = py::none(),
        py::arg("targets") = py::none(), py::arg("writes") = PostLoadWrites::may_write_in_place,
        py::arg("version") = "",
        "A post-load method from a callable fn(tensors: dict) -> dict | None. `targets`: the names it "
        "transforms, or a callable(tensors) -> names; None: all. A plain callable in LoadPlan.post_load is "
        "the same with the defaults.");

  py::class_<PrecisionRule> rule_class(m, "PrecisionRule", "Tensors whose names end with `suffix` may have these dtypes.");
  keyword_init(rule_class);
  rule_class.def(py::init([](std::string suffix, const py::handle& allowed) {
             PrecisionRule r{std::move(suffix), {}};
             for (const auto& d : allowed) r.allowed.push_back(dtype_from_python(d));
             return r;
           }),
           py::arg("suffix"), py::arg("allowed"))
      .def_readwrite("suffix", &PrecisionRule::suffix)
      .def_property(
          "allowed",
          [](const PrecisionRule& r) {
            py::list l;
            for (DType d : r.allowed) l.append(dtype_to_python(d));
            return l;
          },
          [](PrecisionRule& r, const py::handle& v) {
            r.allowed.clear();
            for (const auto& d : v) r.allowed.push_back(dtype_from_python(d));
          });

  py::class_<PrecisionPolicy> policy_class(
      m, "PrecisionPolicy",
      "Mixed precision: after post-load, every tensor must match a rule (first matching suffix) and have "
      "one of its dtypes. `name` is part of the key. rules: [PrecisionRule], [(suffix, dtypes)] or "
      "{suffix: dtypes}.");
  keyword_init(policy_class);
  policy_class
      .def(py::init([](std::string name, const py::handle& rules) {
             return PrecisionPolicy{std::move(name), rules_from_python(rules)};
           }),
           py::arg("name"), py::arg("rules"))
      .def_readwrite("name", &PrecisionPolicy::name)
      .def_property(
          "rules", [](const PrecisionPolicy& p) { return p.rules; },
          [](PrecisionPolicy& p, const py::handle& v) { p.rules = rules_from_python(v); });
  m.def(
      "validate_precision",
      [](const py::handle& tensors, const PrecisionPolicy& policy) {
        NamedTensors t = named_tensors(tensors, "validate_precision");
        check(validate_precision(t, policy));
      },
      py::arg("tensors"), py::arg("policy"), "Raises Mismatch naming the first tensor the policy rejects.");
}

void bind_hooks_tiers_uploaders(py::module_& m) {
  py::class_<RefreshHook>(m, "RefreshHook",
                          "Rebuilds derived buffers from the weights: fn(weights: dict, buffers: dict, device). "
                          "Use refresh_buffer() so a buffer keeps its address across reloads.")
      .def(py::init([](std::string name, const py::object& fn) {
             if (!PyCallable_Check(fn.ptr())) throw py::type_error("RefreshHook: fn must be callable");
             return RefreshHook{std::move(name), PythonRefresh{PyRef(fn)}};
           }),
           py::arg("name"), py::arg("fn"))
      .def_readonly("name", &RefreshHook::name)
      .def_property_readonly("fn", [](const RefreshHook& h) -> py::object {
        const auto* f = h.refresh.target<PythonRefresh>();
        return f != nullptr ? f->fn.get() : py::none();
      });
  m.def(
      "refresh_buffer",
      [](py::dict buffers, const std::string& name, const at::Tensor& value, const py::handle& device) {
        DerivedBuffers b = tensor_map(buffers, "refresh_buffer");
        c10::Device d = device_from_python(device);
        Status st;
        {
          py::gil_scoped_release release;
          st = refresh_buffer(b, name, value, d);
        }
        check(st);
        buffers[py::str(name)] = py::cast(b.at(name));
      },
      py::arg("buffers"), py::arg("name"), py::arg("value"), py::arg("device"),
      "buffers[name] = value on `device`: allocated the first time, copied in place afterwards (the address "
      "never changes; Mismatch if the shape or dtype did).");

  py::class_<Tier, std::shared_ptr<Tier>>(m, "Tier", "A source of a load's weights (snapshot_tier(), ...).")
      .def("name", &Tier::name)
      .def("__repr__", [](const Tier& t) { return "Tier(" + t.name() + ")"; });
  m.def("snapshot_tier", &snapshot_tier, "The disk tier: the store's snapshot, checked; publishes a cold load.");
  const OrdinaryTierOptions ordinary_defaults;  // the C++ defaults, stated once (extend/tier.h)
  m.def(
      "ordinary_tier", [](bool read_ahead) { return ordinary_tier({.read_ahead = read_ahead}); }, py::kw_only(),
      py::arg("read_ahead") = ordinary_defaults.read_ahead,
      "The plan's ordinary loader, its output checked against `expected`. With `read_ahead`, a checkpoint mostly "
      "off the page cache is read ahead, whole and in order, while a loader that reads it whole (onto a device, TP 1, "
      "PP 1) runs.");
  m.def("default_tiers", &default_tiers, "snapshot_tier(), then ordinary_tier().");
  m.def(
      "donor_tier",
      [](const py::object& socket_dir, std::vector<std::string> copy_on_attach,
         std::optional<ExpectedLayout> expected_prepared, std::vector<std::string> expected_derived, bool required,
         double timeout) {
        DonorTierOptions o;
        if (!socket_dir.is_none()) o.socket_dir = path_string(socket_dir);
        o.copy_on_attach = std::move(copy_on_attach);
        o.expected_prepared = std::move(expected_prepared);
        o.expected_derived = std::move(expected_derived);
        o.required = required;
        o.timeout = std::chrono::milliseconds(static_cast<std::int64_t>(timeout * 1000));
        return donor_tier(std::move(o));
      },
      py::kw_only(), py::arg("socket_dir") = py::none(), py::arg("copy_on_attach") = std::vector<std::string>{},
      py::arg("expected_prepared") = py::none(), py::arg("expected_derived") = std::vector<std::string>{},
      py::arg("required") = false, py::arg("timeout") = 10.0,
      "The GPU retention tier: attaches prepared weights a donor process serves over CUDA IPC for "
      "plan.device's GPU (put it first: tiers=[donor_tier(), snapshot_tier(), ordinary_tier()] or "
      "tiers='donor,snapshot,ordinary'). See docs/gpu-retention.md.");

  py::class_<Uploader, std::shared_ptr<Uploader>>(m, "Uploader", "Host tensors to the plan's device.")
      .def("name", &Uploader::name)
      .def("__repr__", [](const Uploader& u) { return "Uploader(" + u.name() + ")"; });
  m.def("per_storage_uploader", &per_storage_uploader, "One allocation and one copy per host storage.");
  const StagedUploadOptions defaults;  // the C++ defaults, stated once (extend/gpu_upload.h)
  m.def(
      "staged_uploader",
      [](std::uint64_t pinned_bytes, std::uint64_t chunk_bytes, std::size_t threads, bool convert_layouts,
         bool pin_ahead) {
        StagedUploadOptions options;
        options.pinned_bytes = pinned_bytes;
        options.chunk_bytes = chunk_bytes;
        options.threads = threads;
        options.convert_layouts = convert_layouts;
        options.pin_ahead = pin_ahead;
        return staged_uploader(options);
      },
      py::kw_only(), py::arg("pinned_bytes") = defaults.pinned_bytes, py::arg("chunk_bytes") = defaults.chunk_bytes,
      py::arg("threads") = defaults.threads, py::arg("convert_layouts") = defaults.convert_layouts,
      py::arg("pin_ahead") = defaults.pin_ahead,
      "The GPU upload engine (pinned staging pool, copy streams; checks every snapshot chunk). LoadPlan "
      "uses it by default for loads of 64 MiB or more onto CUDA.");
}

void bind_load_plan(py::module_& m) {
  py::class_<LoadPlan> cls(
      m, "LoadPlan",
      "Everything a load needs: what is loaded (the key), the declared tensors, the ordinary loader, "
      "post-load methods, precision policy, device, refresh hooks, tiers and uploader. Keywords are "
      "attributes: LoadPlan(checkpoint_files=[...], component='dit', dtype='bfloat16', "
      "ordinary_loader=fn, ...). List and dict attributes are copied in and out: assign, do not append.");
  keyword_init(cls);
  cls.def_property(
         "checkpoint_files", [](const LoadPlan& p) { return p.checkpoint_files; },
         [](LoadPlan& p, const py::handle& v) { p.checkpoint_files = path_strings(v); },
         "The checkpoint's files (str or os.PathLike), identified by stat for the key.")
      .def_readwrite("component", &LoadPlan::component, "One entry per component: 'dit', 'text_encoder', ...")
      .def_readwrite("source_identity", &LoadPlan::source_identity,
                     "A digest of the loader's code (digest_source_files) or a version string.")
      .def_property(
          "dtype", [](const LoadPlan& p) { return p.dtype; },
          [](LoadPlan& p, const py::handle& v) { p.dtype = load_dtype_from_python(v); },
          "The dtype the loader gives the weights, as a label in the key: nothing is cast. A torch.dtype or its "
          "name ('bfloat16', 'torch.bfloat16'), read back as the name; None or '': none stated. Another "
          "string is an InvalidArgument.")
      .def_readwrite("precision", &LoadPlan::precision)
      .def_readwrite("topology", &LoadPlan::topology)
      .def_readwrite("options", &LoadPlan::options, "Anything else that changes the prepared tensors: {str: str}.")
      .def_readwrite("hash_checkpoint_contents", &LoadPlan::hash_checkpoint_contents)
      .def_readwrite("weights_identity", &LoadPlan::weights_identity,
                     "What identifies weights that come from no checkpoint file (a version, a digest); kept in "
                     "the key. Without checkpoint files or this, a load is not cached.")
      .def_readwrite("no_cache_reason", &LoadPlan::no_cache_reason,
                     "Not empty: this load is not cached, for this reason (e.g. 'fused LoRA adapter').")
      .def_readwrite("expected", &LoadPlan::expected, "The TP-local tensors the model declares: [ExpectedTensor].")
      .def_property(
          "ordinary_loader",
          [](const LoadPlan& p) -> py::object {
            const auto* f = p.ordinary_loader.target<PythonLoader>();
            return f != nullptr ? f->fn.get() : py::none();
          },
          [](LoadPlan& p, const py::object& fn) {
            if (fn.is_none()) {
              p.ordinary_loader = nullptr;
              return;
            }
            if (!PyCallable_Check(fn.ptr())) throw py::type_error("ordinary_loader must be callable");
            p.ordinary_loader = PythonLoader{PyRef(fn)};
          },
          "Your loader: fn(plan) -> {name: CPU tensor} (or (name, tensor) pairs): read the checkpoint, shard "
          "for this rank, fuse. Return tensors that own compact storages.")
      .def_property(
          "post_load",
          [](const LoadPlan& p) {
            py::list l;
            for (const auto& method : p.post_load) l.append(py::cast(method));
            return l;
          },
          [](LoadPlan& p, const py::handle& v) {
            std::vector<std::shared_ptr<PostLoadMethod>> methods;
            for (const auto& item : v) methods.push_back(post_load_from_python(item));
            p.post_load = std::move(methods);
          },
          "Post-load methods in order: PostLoadMethod objects or plain callables fn(tensors) -> dict | None.")
      .def_property(
          "device", [](const LoadPlan& p) { return p.device; },
          [](LoadPlan& p, const py::handle& v) { p.device = device_from_python(v); },
          "Where the weights go: torch.device or 'cuda:0' (default cpu).")
      .def_property(
          "refresh_hooks", [](const LoadPlan& p) { return p.refresh_hooks; },
          [](LoadPlan& p, const py::handle& v) {
            std::vector<RefreshHook> hooks;
            for (const auto& item : v) hooks.push_back(refresh_hook_from_python(item));
            p.refresh_hooks = std::move(hooks);
          },
          "RefreshHook objects, (name, fn) pairs or callables fn(weights, buffers, device).")
      .def_property(
          "tiers", [](const LoadPlan& p) { return p.tiers; },
          [](LoadPlan& p, const py::handle& v) { p.tiers = tiers_from_python(v); },
          "The sources tried in order: Tier objects or names, or 'donor,snapshot,ordinary'. Empty: "
          "snapshot then ordinary.")
      .def_property(
          "group", [](const LoadPlan& p) { return p.group; },
          [](LoadPlan& p, const py::handle& v) { p.group = group_from_python(v); },
          "The ranks that load together (every rank takes the same tier; docs/scale-out.md): a RankGroup, "
          "or a torch.distributed ProcessGroup such as dist.group.WORLD. None: this rank decides alone.")
      .def_readwrite("uploader", &LoadPlan::uploader, "None: the upload engine for 64 MiB+ onto CUDA, else per-storage.")
      .def_readwrite("publish_in_background", &LoadPlan::publish_in_background)
      .def("__copy__", [](const LoadPlan& p) { return LoadPlan(p); })
      .def("__deepcopy__", [](const LoadPlan& p, const py::handle&) { return LoadPlan(p); }, py::arg("memo"))
      .def("__repr__", [](const LoadPlan& p) {
        return "LoadPlan(component=" + py::repr(py::str(p.component)).cast<std::string>() + ", dtype=" +
               py::repr(py::str(p.dtype)).cast<std::string>() + ", device=" + p.device.str() + ", " +
               std::to_string(p.expected.size()) + " expected tensors)";
      });

  m.def(
      "key_for_plan",
      [](Store& store, const LoadPlan& plan) {
        Result<Key> key = Status();
        {
          py::gil_scoped_release release;
          key = key_for_plan(store, plan);
        }
        return unwrap(std::move(key));
      },
      py::arg("store"), py::arg("plan"), "The key a plan loads under.");
}

}  // namespace

void bind_plan(py::module_& m) {
  bind_post_load(m);
  bind_hooks_tiers_uploaders(m);
  bind_load_plan(m);
}

}  // namespace snapcache::python
