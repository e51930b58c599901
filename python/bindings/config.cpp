// Config, Store, Key and the outcomes of lookups and publications: the store as a loader uses it
// (snapcache/config.h, store.h, key.h). No torch here: dtypes cross as torch.dtype by name.
#include <cmath>
#include <cstdint>
#include <optional>

#include <pybind11/operators.h>

#include "common.h"
#include "snapcache/config.h"
#include "snapcache/extend/file_system.h"
#include "snapcache/extend/store_access.h"
#include "snapcache/key.h"
#include "snapcache/manifest.h"
#include "snapcache/text.h"

namespace snapcache::python {

std::string path_string(const py::handle& obj) {
  return py::str(py::module_::import("os").attr("fspath")(obj)).cast<std::string>();
}

std::vector<std::string> path_strings(const py::handle& sequence) {
  if (py::isinstance<py::str>(sequence) || py::hasattr(sequence, "__fspath__"))
    return {path_string(sequence)};  // one path, not a sequence of characters
  std::vector<std::string> out;
  for (const auto& item : py::iter(sequence)) out.push_back(path_string(item));
  return out;
}

py::object dtype_to_python(DType dtype) {
  return py::module_::import("torch").attr(std::string(dtype_name(dtype)).c_str());
}

DType dtype_from_python(const py::handle& obj) {
  std::string name = py::str(obj).cast<std::string>();
  if (name.rfind("torch.", 0) == 0) name = name.substr(6);
  if (auto d = dtype_from_name(name)) return *d;
  raise_status(Status(StatusCode::invalid_argument, "unknown dtype " + py::repr(obj).cast<std::string>()));
}

std::uint64_t size_from_python(const py::handle& obj, const char* what) {
  if (py::isinstance<py::str>(obj)) {
    auto size = parse_size(obj.cast<std::string>());
    if (!size) raise_status(size.status().with_context(what));
    return *size;
  }
  if (py::isinstance<py::bool_>(obj) || !py::isinstance<py::int_>(obj))
    throw py::type_error(std::string(what) + ": a number of bytes (int) or a size with a unit (\"64GiB\")");
  if (obj.cast<py::int_>() < py::int_(0))
    raise_status(Status(StatusCode::invalid_argument, std::string(what) + ": a size cannot be negative"));
  return obj.cast<std::uint64_t>();
}

namespace {

// A setting assigned from Python: from the caller, named as Python code names it in messages.
void set_by_caller(Config& c, const std::string& setting, const std::string& name) {
  c.sources[setting] = ConfigSource::flag;
  c.flags[setting] = name;
}

// Applies keyword overrides to a Config through its properties (the same rules as assignments).
void override_config(Config& c, const py::kwargs& overrides) {
  if (overrides.empty()) return;
  py::object view = py::cast(&c, py::return_value_policy::reference);
  set_attributes(view, overrides);
}

std::string config_repr(const Config& c) {
  return "Config(directory=" + py::repr(py::str(c.directory)).cast<std::string>() +
         ", enabled=" + (c.enabled() ? "True" : "False") + ", capacity=" + format_size(c.capacity_bytes) +
         ", reserve=" + format_size(c.reserve_free_bytes) + ")";
}

void bind_config_class(py::module_& m) {
  py::class_<Config> cls(m, "Config",
                         "The cache's settings: defaults < settings file < environment < the caller.\n\n"
                         "Config() has the defaults; Config.from_environment(**overrides) and "
                         "Config.load(path, **overrides) read the settings file and SNAPCACHE_* variables. "
                         "Keywords are attributes: directory, secondary, enabled, capacity, reserve, and the names "
                         "loaders use, prepared_weight_cache (= enabled) and prepared_weight_cache_gib "
                         "(= capacity in GiB).");
  keyword_init(cls);
  cls.def_property(
         "directory", [](const Config& c) { return c.directory; },
         [](Config& c, const py::object& v) {
           c.directory = path_string(v);
           set_by_caller(c, "directory", "Config.directory");
         },
         "The cache directory; empty: the default ($XDG_CACHE_HOME/snapcache or ~/.cache/snapcache).")
      .def_property(
          "secondary", [](const Config& c) { return c.secondary_directory; },
          [](Config& c, const py::object& v) {
            c.secondary_directory = path_string(v);
            set_by_caller(c, "secondary", "Config.secondary");
          },
          "A read-only store searched after a local miss (SNAPCACHE_SECONDARY_DIR; docs/scale-out.md): an entry "
          "found there is copied into this cache, every chunk proven. Empty: none.")
      .def_property(
          "enabled", [](const Config& c) { return c.enabled(); },
          [](Config& c, bool v) {
            c.mode = v ? CacheMode::enabled : CacheMode::disabled;
            set_by_caller(c, "mode", "Config.enabled");
          },
          "False: every load is ineligible and takes the ordinary path (SNAPCACHE_DISABLE=1).")
      .def_property(
          "prepared_weight_cache", [](const Config& c) { return c.enabled(); },
          [](Config& c, bool v) {
            c.mode = v ? CacheMode::enabled : CacheMode::disabled;
            set_by_caller(c, "mode", "prepared_weight_cache");
          },
          "The switch as loaders name it: the same as `enabled`.")
      .def_property(
          "capacity", [](const Config& c) { return c.capacity_bytes; },
          [](Config& c, const py::object& v) {
            c.capacity_bytes = size_from_python(v, "capacity");
            set_by_caller(c, "capacity", "Config.capacity");
          },
          "Total bytes of all entries (default 128 GiB). Assign bytes or a size with a unit (\"64GiB\").")
      .def_property(
          "prepared_weight_cache_gib", [](const Config& c) { return static_cast<double>(c.capacity_bytes) / kGiB; },
          [](Config& c, const py::object& v) {
            if (py::isinstance<py::bool_>(v) || !(py::isinstance<py::int_>(v) || py::isinstance<py::float_>(v) ||
                                                  py::isinstance<py::str>(v)))
              throw py::type_error("prepared_weight_cache_gib: a number of GiB");
            auto bytes = parse_gib(py::str(v).cast<std::string>());
            if (!bytes) raise_status(bytes.status().with_context("prepared_weight_cache_gib"));
            c.capacity_bytes = *bytes;
            set_by_caller(c, "capacity", "prepared_weight_cache_gib");
          },
          "The capacity as loaders name it: a plain number of GiB (the rules of SNAPCACHE_CAPACITY_GIB).")
      .def_property(
          "reserve", [](const Config& c) { return c.reserve_free_bytes; },
          [](Config& c, const py::object& v) {
            c.reserve_free_bytes = size_from_python(v, "reserve");
            set_by_caller(c, "reserve", "Config.reserve");
          },
          "Free disk a publication must leave (default 1 GiB). Bytes or a size with a unit.")
      .def_property_readonly(
          "sources",
          [](const Config& c) {
            std::map<std::string, std::string> out;
            for (const auto& [k, v] : c.sources) out[k] = to_string(v);
            return out;
          },
          "Where each setting came from: {'capacity': 'environment', ...} (default, environment, file, flag).")
      .def_readonly("config_file", &Config::config_file, "The settings file that was read; '' when none was.")
      .def("origin", &Config::origin, py::arg("setting"),
           "What set a setting ('directory', 'mode', 'capacity', 'reserve'), as the user would change it: "
           "'SNAPCACHE_CAPACITY_GIB', the settings file, 'prepared_weight_cache_gib'; '' for a default.")
      .def_static(
          "from_environment",
          [](const py::kwargs& overrides) {
            Config c = unwrap(Config::from_environment());
            override_config(c, overrides);
            return c;
          },
          "Defaults, the settings file ($SNAPCACHE_CONFIG or the default one), SNAPCACHE_DIR, "
          "SNAPCACHE_DISABLE, SNAPCACHE_CAPACITY_GIB, SNAPCACHE_RESERVE_GIB, then the keyword overrides. "
          "Raises InvalidArgument naming the variable (or file and line) and the value.")
      .def_static(
          "load",
          [](const py::object& config_file, const py::kwargs& overrides) {
            Config c = unwrap(Config::load(config_file.is_none() ? std::string() : path_string(config_file)));
            override_config(c, overrides);
            return c;
          },
          py::arg("config_file") = py::none(),
          "As from_environment, reading `config_file` (which must exist) as the settings file.")
      .def_static("default_directory", &Config::default_directory)
      .def_static("default_config_file", &Config::default_config_file)
      .def("__repr__", &config_repr);
}

void bind_store(py::module_& m) {
  py::native_enum<LookupResult>(m, "LookupResult", "enum.Enum", "What a lookup found.")
      .value("hit", LookupResult::hit)
      .value("miss", LookupResult::miss)
      .value("damaged", LookupResult::damaged)
      .value("fallback", LookupResult::fallback)
      .value("disabled", LookupResult::disabled)
      .finalize();
  py::native_enum<PublishResult>(m, "PublishResult", "enum.Enum", "What a publication did.")
      .value("published", PublishResult::published)
      .value("already_present", PublishResult::already_present)
      .value("skipped", PublishResult::skipped)
      .value("failed", PublishResult::failed)
      .finalize();
  py::native_enum<VerifyPolicy>(m, "VerifyPolicy", "enum.Enum", "How much a lookup rehashes.")
      .value("trust_identity", VerifyPolicy::trust_identity)
      .value("always_rehash", VerifyPolicy::always_rehash)
      .finalize();

  py::class_<PublishOutcome>(m, "PublishOutcome", "What a publication did, and why when it did not publish.")
      .def_readonly("result", &PublishOutcome::result)
      .def_property_readonly(
          "ok",
          [](const PublishOutcome& p) {
            return p.result == PublishResult::published || p.result == PublishResult::already_present;
          },
          "Published now or already present.")
      .def_property_readonly(
          "code", [](const PublishOutcome& p) { return std::string(to_string(p.status.code())); },
          "The Status code behind a skip or failure ('no_space', ...); 'ok' when published.")
      .def_property_readonly(
          "reason", [](const PublishOutcome& p) { return p.status.message(); }, "Why not published; ''.")
      .def_readonly("entry_id", &PublishOutcome::entry_id)
      .def_readonly("bytes", &PublishOutcome::bytes)
      .def_readonly("seconds", &PublishOutcome::seconds)
      .def_property_readonly(
          "evicted",
          [](const PublishOutcome& p) {
            std::vector<std::string> ids;
            for (const EvictedEntry& e : p.evicted) ids.push_back(e.id);
            return ids;
          },
          "Ids of the entries removed to make room.")
      .def("__repr__", [](const PublishOutcome& p) {
        return std::string("PublishOutcome(") + to_string(p.result) +
               (p.status ? "" : ", " + py::repr(py::str(p.status.to_string())).cast<std::string>()) + ")";
      });

  py::class_<Snapshot, std::shared_ptr<Snapshot>>(m, "Snapshot",
                                                  "An opened, verified, leased entry (its tensors keep it alive).")
      .def_property_readonly("id", &Snapshot::id)
      .def_property_readonly("path", &Snapshot::path, "The entry directory.")
      .def_property_readonly(
          "tensor_names",
          [](const Snapshot& s) {
            std::vector<std::string> names;
            for (const auto& t : s.manifest().tensors) names.push_back(t.name);
            return names;
          })
      .def_property_readonly("data_bytes", [](const Snapshot& s) { return s.manifest().data_bytes(); })
      .def("data_file_path", &Snapshot::data_file_path, py::arg("file") = 0);

  py::class_<LookupOutcome>(m, "LookupOutcome", "What a lookup found, and why.")
      .def_readonly("result", &LookupOutcome::result)
      .def_readonly("reason", &LookupOutcome::reason, "One line a person can act on.")
      .def_readonly("entry_id", &LookupOutcome::entry_id)
      .def_readonly("snapshot", &LookupOutcome::snapshot, "The opened entry on a hit, else None.")
      .def_readonly("rehashed", &LookupOutcome::rehashed)
      .def_readonly("bytes_hashed", &LookupOutcome::bytes_hashed)
      .def_readonly("seconds", &LookupOutcome::seconds)
      .def("__repr__", [](const LookupOutcome& l) {
        return std::string("LookupOutcome(") + to_string(l.result) + ", " +
               py::repr(py::str(l.reason)).cast<std::string>() + ")";
      });

  py::class_<Store, std::shared_ptr<Store>>(
      m, "Store",
      "A cache directory. Store.open_for_loading() never fails a load: a cache it cannot use is "
      "`unavailable` (every lookup a fallback, every publication skipped, with the reason).")
      .def_static(
          "open",
          [](const py::object& config) {
            Config c = config.is_none() ? unwrap(Config::from_environment()) : config.cast<Config>();
            Result<std::shared_ptr<Store>> store = Status();
            {
              py::gil_scoped_release release;
              store = Store::open(std::move(c));
            }
            return unwrap(std::move(store));
          },
          py::arg("config") = py::none(),
          "The cache the configuration names (default: Config.from_environment()), made if absent. Raises "
          "(Foreign, PermissionDenied, ...) when it cannot be used: for tools that must say so.")
      .def_static(
          "open_for_loading",
          [](const py::object& config, const py::kwargs& overrides) {
            Result<Config> c = config.is_none() ? Config::from_environment() : Result<Config>(config.cast<Config>());
            if (c) override_config(*c, overrides);
            py::gil_scoped_release release;
            return Store::open_for_loading(c);
          },
          py::arg("config") = py::none(),
          "For loaders: a store that never fails a load. `config` defaults to Config.from_environment() "
          "(invalid settings make the store unavailable, with the reason); keywords override settings "
          "(Store.open_for_loading(prepared_weight_cache_gib=64)).")
      .def_property_readonly("unavailable_reason", &Store::unavailable_reason,
                             "Why this store cannot be used; '' when it can.")
      .def_property_readonly("available", [](const Store& s) { return s.unavailable_reason().empty(); })
      .def_property_readonly("config", &Store::config)
      .def_property_readonly("directory", [](const Store& s) { return s.config().directory; })
      .def("entry_path", &Store::entry_path, py::arg("entry_id"))
      .def(
          "lookup",
          [](Store& s, const Key& key, VerifyPolicy policy, const std::optional<ExpectedLayout>& expected) {
            py::gil_scoped_release release;
            return s.lookup(key, policy, expected ? &*expected : nullptr);
          },
          py::arg("key"), py::arg("policy") = VerifyPolicy::trust_identity, py::arg("expected") = py::none(),
          "Finds the entry for `key`: hit (with the opened snapshot), miss, damaged (quarantined), fallback "
          "or disabled, with the reason. With `expected`, an entry of another layout is a miss.")
      .def("__repr__", [](const Store& s) {
        return "Store(" + py::repr(py::str(s.config().directory)).cast<std::string>() +
               (s.unavailable_reason().empty() ? "" : ", unavailable: " + s.unavailable_reason()) + ")";
      });
}

// Each field of a key record (snapcache/key.h: fields()) as a read-write attribute of its name.
template <class Record, class... Options>
void def_fields(py::class_<Record, Options...>& cls) {
  std::apply([&](auto... field) { (cls.def_readwrite(field.name, field.member), ...); }, Record::fields());
}

void bind_key(py::module_& m) {
  py::class_<CheckpointFile> checkpoint(m, "CheckpointFile", "A checkpoint file by identity (stat, no reading).");
  keyword_init(checkpoint);
  def_fields(checkpoint);
  checkpoint.def(py::self == py::self)
      .def("__repr__", [](const CheckpointFile& f) {
        return "CheckpointFile(" + py::repr(py::str(f.path)).cast<std::string>() + ", size=" +
               std::to_string(f.size) + ")";
      });

  py::class_<Topology> topology(m, "Topology", "Where this rank sits: tensor and pipeline parallel rank and size.");
  keyword_init(topology);
  def_fields(topology);
  topology.def(py::self == py::self)
      .def("__repr__", [](const Topology& t) {
        return "Topology(tp " + std::to_string(t.tp_rank) + "/" + std::to_string(t.tp_size) + ", pp " +
               std::to_string(t.pp_rank) + "/" + std::to_string(t.pp_size) + ")";
      });

  py::class_<TorchIdentity> torch_identity(m, "TorchIdentity", "The torch build: version, CUDA version, C++ ABI.");
  keyword_init(torch_identity);
  def_fields(torch_identity);
  torch_identity.def(py::self == py::self)
      .def("__repr__", [](const TorchIdentity& t) {
        return "TorchIdentity(" + t.version + ", cuda " + (t.cuda_version.empty() ? "none" : t.cuda_version) + ", " +
               t.cxx_abi + ")";
      });

  py::class_<Key> key(m, "Key",
                      "What an entry is keyed by; any field that differs is another entry. (Fields are "
                      "copied in and out: assign a whole list or dict, do not append to one.)");
  keyword_init(key);
  def_fields(key);
  key.def_property_readonly("id", &key_id, "The entry id: XXH3-128 of the canonical encoding, 32 hex digits.")
      .def(py::self == py::self)
      .def("__repr__", [](const Key& k) {
        return "Key(" + k.component + ", " + k.dtype + ", id " + key_id(k).substr(0, 12) + ")";
      });

  py::class_<KeyDifference>(m, "KeyDifference", "One field that differs between two keys.")
      .def_readonly("field", &KeyDifference::field)
      .def_readonly("wanted", &KeyDifference::wanted)
      .def_readonly("found", &KeyDifference::found)
      .def_readonly("words", &KeyDifference::words, "What changed, in words: 'torch 2.10.0 -> 2.11.0'.")
      .def("__repr__", [](const KeyDifference& d) { return "KeyDifference(" + d.field + ": " + d.wanted + " != " + d.found + ")"; });

  m.def("key_id", &key_id, py::arg("key"));
  m.def("encode_key", [](const Key& k) { return py::bytes(encode_key(k)); }, py::arg("key"),
        "The canonical, versioned bytes of a key.");
  m.def("decode_key", [](const py::bytes& b) { return unwrap(decode_key(std::string(b))); }, py::arg("data"));
  m.def("diff_keys", &diff_keys, py::arg("wanted"), py::arg("found"));
  m.def("describe_differences", &describe_differences, py::arg("differences"), py::arg("max") = 4,
        "\"torch.version 2.11.0 != 2.10.0, dtype bfloat16 != float16\"");
  m.def(
      "write_key_file",
      [](const py::object& path, const Key& k) {
        const std::string p = path_string(path);
        Status st;
        {
          py::gil_scoped_release release;
          st = write_key_file(*posix_file_system(), p, k);
        }
        check(st);
      },
      py::arg("path"), py::arg("key"), "A key file for `snapcache why FILE`.");
  m.def(
      "read_key_file", [](const py::object& path) { return unwrap(read_key_file(*posix_file_system(), path_string(path))); },
      py::arg("path"));
  m.def(
      "describe_checkpoint",
      [](const py::object& paths) {
        auto p = path_strings(paths);
        Result<std::vector<CheckpointFile>> files = Status();
        {
          py::gil_scoped_release release;
          files = describe_checkpoint(*posix_file_system(), p);
        }
        return unwrap(std::move(files));
      },
      py::arg("paths"), "Checkpoint files by identity (stat only).");
  m.def(
      "digest_source_files",
      [](const py::object& paths) {
        auto p = path_strings(paths);
        Result<std::string> digest = Status();
        {
          py::gil_scoped_release release;
          digest = digest_source_files(*posix_file_system(), p);
        }
        return unwrap(std::move(digest));
      },
      py::arg("paths"),
      "A digest of the code that prepares weights (each file's path and bytes): a LoadPlan's "
      "source_identity. Pass your loader's files, e.g. [__file__].");
}

void bind_expected(py::module_& m) {
  py::class_<ExpectedTensor> cls(m, "ExpectedTensor",
                                 "A tensor the model declares: name, dtype, shape, optionally strides and an "
                                 "alias group (tensors of one group share a storage; different groups must not).");
  keyword_init(cls);
  cls.def(py::init([](std::string name, const py::object& dtype, std::vector<std::int64_t> shape,
                      std::optional<std::vector<std::int64_t>> strides, std::string alias_group) {
            return ExpectedTensor{std::move(name), dtype_from_python(dtype), std::move(shape), std::move(strides),
                                  std::move(alias_group)};
          }),
          py::arg("name"), py::arg("dtype"), py::arg("shape"), py::arg("strides") = py::none(),
          py::arg("alias_group") = "")
      .def_readwrite("name", &ExpectedTensor::name)
      .def_property(
          "dtype", [](const ExpectedTensor& e) { return dtype_to_python(e.dtype); },
          [](ExpectedTensor& e, const py::object& v) { e.dtype = dtype_from_python(v); }, "A torch.dtype.")
      .def_property(
          "shape", [](const ExpectedTensor& e) { return e.sizes; },
          [](ExpectedTensor& e, std::vector<std::int64_t> v) { e.sizes = std::move(v); })
      .def_readwrite("strides", &ExpectedTensor::strides, "Unchecked when None.")
      .def_readwrite("alias_group", &ExpectedTensor::alias_group)
      .def("__repr__", [](const ExpectedTensor& e) {
        return "ExpectedTensor(" + py::repr(py::str(e.name)).cast<std::string>() + ", " +
               std::string(dtype_name(e.dtype)) + ", " + format_dims(e.sizes) +
               (e.alias_group.empty() ? "" : ", alias_group=" + e.alias_group) + ")";
      });
}

}  // namespace

void bind_config(py::module_& m) {
  bind_config_class(m);
  bind_key(m);
  bind_expected(m);
  bind_store(m);
  m.def(
      "parse_size", [](const std::string& text) { return unwrap(parse_size(text)); }, py::arg("text"),
      "\"64GiB\" -> bytes, by the rule every snapcache size follows (a unit is required, except for 0).");
  m.def("format_size", &format_size, py::arg("bytes"), "1610612736 -> \"1.5 GiB\"");
}

}  // namespace snapcache::python
