#include "util/fmt.h"

#include "snapcache/key.h"

namespace snapcache {
namespace {

void add(std::vector<KeyDifference>& out, std::string field, const std::string& wanted,
         const std::string& found) {
  if (wanted != found) out.push_back({std::move(field), wanted, found});
}

void add_map(std::vector<KeyDifference>& out, const std::string& field,
             const std::map<std::string, std::string>& wanted,
             const std::map<std::string, std::string>& found) {
  if (wanted == found) return;
  for (const auto& [k, v] : wanted) {
    auto it = found.find(k);
    add(out, field + "." + k, v, it == found.end() ? "(absent)" : it->second);
  }
  for (const auto& [k, v] : found)
    if (!wanted.count(k)) add(out, field + "." + k, "(absent)", v);
}

}  // namespace

std::vector<KeyDifference> diff_keys(const Key& wanted, const Key& found) {
  std::vector<KeyDifference> out;
  add(out, "component", wanted.component, found.component);
  if (wanted.checkpoint.size() != found.checkpoint.size()) {
    add(out, "checkpoint.files", std::to_string(wanted.checkpoint.size()) + " files",
        std::to_string(found.checkpoint.size()) + " files");
  }
  for (std::size_t i = 0; i < std::min(wanted.checkpoint.size(), found.checkpoint.size()); ++i) {
    // Identities only (the rule of the id): a file keyed by content has no path to differ in.
    const CheckpointFile w = checkpoint_identity(wanted.checkpoint[i]);
    const CheckpointFile f = checkpoint_identity(found.checkpoint[i]);
    const std::string index = "checkpoint[" + std::to_string(i) + "]";
    if (w.keyed_by_content() != f.keyed_by_content()) {
      auto how = [](const CheckpointFile& c) {
        return c.keyed_by_content() ? "content (size, digest)" : "path and stat (" + c.path + ")";
      };
      add(out, index + ".keyed_by", how(w), how(f));
      continue;
    }
    if (w.keyed_by_content()) {
      add(out, index + ".size", std::to_string(w.size), std::to_string(f.size));
      add(out, index + ".content_digest", w.content_digest, f.content_digest);
      continue;
    }
    std::string p = "checkpoint[" + w.path + "].";
    add(out, index + ".path", w.path, f.path);
    add(out, p + "size", std::to_string(w.size), std::to_string(f.size));
    add(out, p + "mtime_ns", std::to_string(w.mtime_ns), std::to_string(f.mtime_ns));
    add(out, p + "ctime_ns", std::to_string(w.ctime_ns), std::to_string(f.ctime_ns));
    add(out, p + "device", std::to_string(w.device), std::to_string(f.device));
    add(out, p + "inode", std::to_string(w.inode), std::to_string(f.inode));
  }
  add(out, "source_identity", wanted.source_identity, found.source_identity);
  add(out, "torch.version", wanted.torch.version, found.torch.version);
  add(out, "torch.cuda_version", wanted.torch.cuda_version, found.torch.cuda_version);
  add(out, "torch.cxx_abi", wanted.torch.cxx_abi, found.torch.cxx_abi);
  add(out, "dtype", wanted.dtype, found.dtype);
  add(out, "precision_policy", wanted.precision_policy, found.precision_policy);
  add(out, "topology.tp_rank", std::to_string(wanted.topology.tp_rank), std::to_string(found.topology.tp_rank));
  add(out, "topology.tp_size", std::to_string(wanted.topology.tp_size), std::to_string(found.topology.tp_size));
  add(out, "topology.pp_rank", std::to_string(wanted.topology.pp_rank), std::to_string(found.topology.pp_rank));
  add(out, "topology.pp_size", std::to_string(wanted.topology.pp_size), std::to_string(found.topology.pp_size));
  add_map(out, "topology", wanted.topology.extra, found.topology.extra);
  add_map(out, "options", wanted.options, found.options);
  return out;
}

std::string describe_differences(const std::vector<KeyDifference>& diffs, std::size_t max) {
  std::string s;
  for (std::size_t i = 0; i < diffs.size() && i < max; ++i) {
    if (i) s += ", ";
    s += fmt::format("{} {} != {}", diffs[i].field, diffs[i].wanted.empty() ? "''" : diffs[i].wanted,
                     diffs[i].found.empty() ? "''" : diffs[i].found);
  }
  if (diffs.size() > max) s += fmt::format(" (and {} more)", diffs.size() - max);
  return s;
}

}  // namespace snapcache
