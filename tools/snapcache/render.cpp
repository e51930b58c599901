#include "render.h"
#include "snapcache/text.h"

#include <fmt/format.h>

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

std::string describe_entry(const EntryInfo& e) {
  if (!e.manifest) return state_text(e);
  const Key& k = e.manifest->key;
  return fmt::format("{}, {}, {}, {}", k.component.empty() ? "-" : k.component, checkpoint_text(k),
                     topology_text(k.topology), state_text(e));
}

json key_json(const Key& key) {
  json files = json::array();
  for (const auto& f : key.checkpoint)
    files.push_back({{"path", f.path},
                     {"size", f.size},
                     {"mtime_ns", f.mtime_ns},
                     {"ctime_ns", f.ctime_ns},
                     {"device", f.device},
                     {"inode", f.inode},
                     {"content_digest", f.content_digest}});
  return {{"id", key_id(key)},
          {"format_version", kFormatVersion},
          {"component", key.component},
          {"checkpoint", files},
          {"source_identity", key.source_identity},
          {"torch", {{"version", key.torch.version}, {"cuda_version", key.torch.cuda_version},
                     {"cxx_abi", key.torch.cxx_abi}}},
          {"dtype", key.dtype},
          {"precision_policy", key.precision_policy},
          {"topology", {{"tp_rank", key.topology.tp_rank}, {"tp_size", key.topology.tp_size},
                        {"pp_rank", key.topology.pp_rank}, {"pp_size", key.topology.pp_size},
                        {"extra", key.topology.extra}}},
          {"options", key.options}};
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
            {"last_use_unix_ns", e.last_use_unix_ns},
            {"leased", e.leased},
            {"lease_holders", holders_json(e.lease_holders)},
            {"component", nullptr},
            {"checkpoint", nullptr},
            {"topology", nullptr},
            {"dtype", nullptr},
            {"torch_version", nullptr},
            {"created_unix_ns", nullptr}};
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
  for (const auto& d : diffs) out.push_back({{"field", d.field}, {"wanted", d.wanted}, {"found", d.found}});
  return out;
}

}  // namespace snapcache::cli
