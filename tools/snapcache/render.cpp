#include "render.h"
#include "snapcache/key.h"
#include "snapcache/manifest.h"
#include "snapcache/text.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <string_view>
#include <type_traits>

namespace snapcache::cli {

std::string checkpoint_text(const Key& key) {
  if (key.checkpoint.empty()) return "-";
  // A checkpoint keyed by content is the same wherever it lies, so the entry records no path: its
  // bytes are named instead, by the first file's digest.
  if (key.checkpoint.front().keyed_by_content()) {
    const std::string digest = "content " + key.checkpoint.front().content_digest.substr(0, 12);
    return key.checkpoint.size() == 1 ? digest : fmt::format("{} ({} files)", digest, key.checkpoint.size());
  }
  const std::string& first = key.checkpoint.front().path;
  if (key.checkpoint.size() == 1) return first;
  // Shards of one checkpoint share a directory; naming it says more than the first shard.
  std::string common = first.substr(0, first.find_last_of('/') + 1);
  for (const auto& f : key.checkpoint)
    while (!common.empty() && !f.path.starts_with(common)) {
      common.pop_back();
      common = common.substr(0, common.find_last_of('/') + 1);
    }
  while (common.size() > 1 && common.back() == '/') common.pop_back();
  return fmt::format("{} ({} files)", common.empty() ? first : common, key.checkpoint.size());
}

std::string topology_text(const Topology& t) {
  std::string s = fmt::format("tp {}/{} pp {}/{}", t.tp_rank, t.tp_size, t.pp_rank, t.pp_size);
  for (const auto& [k, v] : t.extra) s += fmt::format(" {}={}", k, v);
  return s;
}

std::string torch_text(const TorchIdentity& t) {
  return fmt::format("{} (cuda {}, abi {})", t.version.empty() ? "?" : t.version,
                     t.cuda_version.empty() ? "none" : t.cuda_version, t.cxx_abi.empty() ? "?" : t.cxx_abi);
}

std::string state_text(const EntryInfo& e) {
  std::string s = to_string(e.state);
  if (e.leased) s += ", leased by " + describe_processes(e.lease_holders);
  // Its bytes are sound (the state says so), but no load reaches it any more: `inspect` says why.
  if (!e.stale.empty()) s += ", stale";
  return s;
}

std::string origin_text(const EntryInfo& e) {
  const EntryOrigin& o = e.origin;
  switch (o.kind) {
    case EntryOriginKind::unrecorded: return "-";
    case EntryOriginKind::published: return "here";
    case EntryOriginKind::imported_signed: {
      // The key's first digits, as ids are shortened: enough to tell a fleet's few keys apart.
      const std::size_t prefix = std::string_view("ed25519:").size();
      return "signed " + o.signer.substr(std::min(prefix, o.signer.size()), 12);
    }
    case EntryOriginKind::imported_unproven: return "unproven";
    case EntryOriginKind::secondary: return "secondary";
  }
  return "?";
}

json origin_json(const EntryInfo& e) {
  const EntryOrigin& o = e.origin;
  const bool recorded = o.kind != EntryOriginKind::unrecorded;
  return {{"kind", to_string(o.kind)},
          {"signer", o.signer.empty() ? json(nullptr) : json(o.signer)},
          {"source", o.source.empty() ? json(nullptr) : json(o.source)},
          {"recorded_unix_ns", recorded ? json(o.recorded_unix_ns) : json(nullptr)},
          {"words", describe_origin(o)}};
}

std::string describe_entry(const EntryInfo& e) {
  if (!e.manifest) return state_text(e);
  const Key& k = e.manifest->key;
  return fmt::format("{}, {}, {}, {}", k.component.empty() ? "-" : k.component, checkpoint_text(k),
                     topology_text(k.topology), state_text(e));
}

namespace {

// A key record as JSON, walking its field list (snapcache/key.h).
struct ToJson {
  json& out;
  template <class Value>
  void operator()(const char* name, const Value& value) const {
    out[name] = value;
  }
  void operator()(const char* name, const std::vector<CheckpointFile>& files) const {
    json list = json::array();
    for (const auto& f : files) list.push_back(of(f));
    out[name] = std::move(list);
  }
  template <FieldRecord Record>
  void operator()(const char* name, const Record& record) const {
    out[name] = of(record);
  }
  template <FieldRecord Record>
  static json of(const Record& record) {
    json j = json::object();
    for_each_field(record, ToJson{j});
    return j;
  }
};

}  // namespace

json key_json(const Key& key) {
  json j = {{"id", key_id(key)}, {"format_version", kFormatVersion}};
  j.update(ToJson::of(key));
  return j;
}

namespace {

std::string shown(const std::string& v) { return v.empty() ? std::string("''") : v; }

// A key record as `inspect` rows, walking its field list (snapcache/key.h).
struct Rows {
  std::vector<std::pair<std::string, std::string>>& rows;
  std::string prefix;
  void operator()(const char* name, const std::string& v) const { rows.emplace_back(prefix + name, shown(v)); }
  template <class Number>
    requires std::is_arithmetic_v<Number>
  void operator()(const char* name, Number v) const {
    rows.emplace_back(prefix + name, std::to_string(v));
  }
  void operator()(const char* name, const std::map<std::string, std::string>& m) const {
    // Entries of a map are named under its owner, as key diffs name them: "options.adapter".
    const std::string owner = prefix.empty() ? std::string(name) : prefix.substr(0, prefix.size() - 1);
    if (m.empty() && prefix.empty()) rows.emplace_back(owner, "(none)");
    for (const auto& [k, v] : m) rows.emplace_back(owner + "." + k, v);
  }
  void operator()(const char*, const std::vector<CheckpointFile>& files) const {
    for (std::size_t i = 0; i < files.size(); ++i) {
      const CheckpointFile& f = files[i];
      const std::string index = fmt::format("checkpoint[{}]", i);
      if (f.keyed_by_content()) {  // its bytes are its identity, wherever they lie
        rows.emplace_back(index, "content digest " + f.content_digest);
        rows.emplace_back("", fmt::format("size {} (keyed by content: any path with these bytes hits)", f.size));
        continue;
      }
      rows.emplace_back(index, f.path);
      std::vector<std::string> stats;
      for_each_field(f, [&](const char* field, const auto& v) {
        if constexpr (std::is_arithmetic_v<std::decay_t<decltype(v)>>) stats.push_back(fmt::format("{} {}", field, v));
      });
      rows.emplace_back("", fmt::format("{}", fmt::join(stats, ", ")));
    }
  }
  template <FieldRecord Record>
  void operator()(const char* name, const Record& record) const {
    for_each_field(record, Rows{rows, prefix + name + "."});
  }
};

}  // namespace

std::vector<std::pair<std::string, std::string>> key_rows(const Key& key) {
  std::vector<std::pair<std::string, std::string>> rows;
  rows.emplace_back("component", shown(key.component));
  for_each_field(key, [&](const char* name, const auto& v) {
    if (std::string_view(name) != "component") Rows{rows, ""}(name, v);
  });
  return rows;
}

json holders_json(const std::vector<int>& pids) {
  json out = json::array();
  for (int pid : pids) out.push_back({{"pid", pid}, {"name", process_name(pid)}});
  return out;
}

json entry_summary_json(const EntryInfo& e) {
  json j = {{"id", e.id},
            {"short_id", e.id.substr(0, 12)},
            {"path", e.path},
            {"state", to_string(e.state)},
            {"problem", e.problem},
            {"stale", e.stale.empty() ? json(nullptr) : json(e.stale)},
            {"bytes", e.bytes},
            {"shared_bytes", e.shared_bytes},
            {"last_use_unix_ns", e.last_use_unix_ns},
            {"leased", e.leased},
            {"lease_holders", holders_json(e.lease_holders)},
            {"component", nullptr},
            {"checkpoint", nullptr},
            {"topology", nullptr},
            {"dtype", nullptr},
            {"torch_version", nullptr},
            {"created_unix_ns", nullptr},
            {"origin", origin_json(e)}};
  if (e.manifest) {
    const Key& k = e.manifest->key;
    json paths = json::array();
    for (const auto& f : k.checkpoint) paths.push_back(f.keyed_by_content() ? "content:" + f.content_digest : f.path);
    j["component"] = k.component;
    j["checkpoint"] = paths;
    j["topology"] = key_json(k)["topology"];
    j["dtype"] = k.dtype;
    j["torch_version"] = k.torch.version;
    j["created_unix_ns"] = e.manifest->creation.created_unix_ns;
  }
  return j;
}

json differences_json(const std::vector<KeyDifference>& diffs) {
  json out = json::array();
  for (const auto& d : diffs)
    out.push_back({{"field", d.field}, {"wanted", d.wanted}, {"found", d.found}, {"words", d.words}});
  return out;
}

json nearest_json(const std::optional<NearestEntry>& nearest) {
  if (!nearest) return nullptr;
  return {{"id", nearest->id}, {"differences", differences_json(nearest->differences)}};
}

}  // namespace snapcache::cli
