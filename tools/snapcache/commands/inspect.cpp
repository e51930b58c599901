// snapcache inspect: one entry, summarised (its tensors grouped by dtype and by name); --chunks
// and --all list its parts. Reads only; never changes its LRU position.
#include <algorithm>
#include <map>
#include <numeric>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "commands/commands.h"
#include "render.h"
#include "snapcache/key.h"
#include "snapcache/manifest.h"
#include "snapcache/text.h"

namespace snapcache::cli {
namespace {

std::uint64_t tensor_bytes(const TensorRecord& t) {
  std::uint64_t n = 1;
  for (auto s : t.sizes) n *= static_cast<std::uint64_t>(s);
  return n * element_size(t.dtype);
}


// The chunks of its data file a storage's bytes lie in, as [first, last].
std::pair<std::uint64_t, std::uint64_t> chunk_span(const Manifest& m, const StorageRecord& s) {
  const std::uint64_t chunk = m.files.at(s.file).chunk_size;
  const std::uint64_t last_byte = s.nbytes ? s.offset + s.nbytes - 1 : s.offset;
  return {s.offset / chunk, last_byte / chunk};
}

std::string verification_text(const EntryInfo& e) {
  std::string proven = e.verified_unix_ns ? fmt::format("rehashed and proven {} ({})", when(*e.verified_unix_ns),
                                                        ago(*e.verified_unix_ns))
                                          : "never rehashed since publication";
  return proven + (e.identity_trusted ? "; data files unchanged since, loads trust the checksums"
                                      : "; data files changed since, the next load rehashes");
}

// Where the entry came from and when this cache recorded it; why the record cannot be read.
std::string origin_row(const EntryInfo& e) {
  if (!e.origin_problem.empty()) return "not known: its record cannot be read (" + e.origin_problem + ")";
  if (e.origin.kind == EntryOriginKind::unrecorded) return describe_origin(e.origin);
  return fmt::format("{} ({})", describe_origin(e.origin), when(e.origin.recorded_unix_ns));
}

json inspect_json(const EntryInfo& e) {
  json j = entry_summary_json(e);
  j["origin_problem"] = e.origin_problem.empty() ? json(nullptr) : json(e.origin_problem);
  j["verified_unix_ns"] = e.verified_unix_ns ? json(*e.verified_unix_ns) : json(nullptr);
  j["identity_trusted"] = e.identity_trusted;
  j["key"] = nullptr;
  j["creation"] = nullptr;
  j["files"] = json::array();
  j["storages"] = json::array();
  j["tensors"] = json::array();
  if (!e.manifest) return j;
  const Manifest& m = *e.manifest;
  j["key"] = key_json(m.key);
  j["creation"] = {{"created_unix_ns", m.creation.created_unix_ns},
                   {"snapcache_version", m.creation.snapcache_version},
                   {"host", m.creation.host},
                   {"pid", m.creation.pid}};
  for (const auto& f : m.files) {
    json hashes = json::array();
    for (auto h : f.chunk_hashes) hashes.push_back(format_hex64(h));
    j["files"].push_back({{"name", f.name},
                          {"size", f.size},
                          {"chunk_size", f.chunk_size},
                          {"chunk_hashes", hashes},
                          {"identity", {{"device", f.identity.device}, {"inode", f.identity.inode},
                                        {"size", f.identity.size}, {"mtime_ns", f.identity.mtime_ns},
                                        {"ctime_ns", f.identity.ctime_ns}}}});
  }
  for (std::size_t i = 0; i < m.storages.size(); ++i) {
    const auto& s = m.storages[i];
    auto [first, last] = chunk_span(m, s);
    json hashes = json::array();
    for (auto c = first; c <= last && c < m.files[s.file].chunk_hashes.size(); ++c)
      hashes.push_back(format_hex64(m.files[s.file].chunk_hashes[c]));
    j["storages"].push_back({{"index", i},
                             {"file", m.files[s.file].name},
                             {"offset", s.offset},
                             {"nbytes", s.nbytes},
                             {"chunks", {first, last}},
                             {"chunk_hashes", hashes}});
  }
  for (const auto& t : m.tensors)
    j["tensors"].push_back({{"name", t.name},
                            {"dtype", std::string(dtype_name(t.dtype))},
                            {"shape", t.sizes},
                            {"strides", t.strides},
                            {"storage", t.storage},
                            {"storage_offset", t.storage_offset},
                            {"bytes", tensor_bytes(t)}});
  return j;
}

void print_key(const Key& k) {
  Table t({}, "  ");
  t.add({"id", key_id(k)});
  for (auto& [name, value] : key_rows(k)) t.add({std::move(name), std::move(value)});
  t.print();
}

struct Detail {
  bool chunks = false;  // --chunks: every data file's chunks and checksums
  bool all = false;     // --all: those, every storage and every tensor
};

// A name with each index made "*" ("blocks.12.attn.qkv.weight" -> "blocks.*.attn.qkv.weight"):
// the layers of a model share a pattern, so a model has a row per kind of tensor, not per tensor.
std::string name_pattern(const std::string& name) {
  std::string out;
  std::size_t start = 0;
  while (true) {
    const std::size_t dot = name.find('.', start);
    const std::string part = name.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    const bool index = !part.empty() && part.find_first_not_of("0123456789") == std::string::npos;
    out += index ? "*" : part;
    if (dot == std::string::npos) return out;
    out += '.';
    start = dot + 1;
  }
}

// Rows of tensors that share a key (a dtype, a name pattern), in the order the entry lists them.
struct Group {
  std::string key;
  std::size_t tensors = 0;
  std::uint64_t bytes = 0;
  std::vector<std::string> dtypes;  // each once, in order of appearance
  std::string shape;                // the tensors' shape when they all have one, else "various"
};

std::vector<Group> group_tensors(const Manifest& m, std::string (*key_of)(const TensorRecord&)) {
  std::vector<Group> groups;
  std::map<std::string, std::size_t> index;
  for (const auto& t : m.tensors) {
    auto [it, added] = index.try_emplace(key_of(t), groups.size());
    if (added) groups.push_back({it->first, 0, 0, {}, format_dims(t.sizes)});
    Group& g = groups[it->second];
    ++g.tensors;
    g.bytes += tensor_bytes(t);
    const std::string dtype(dtype_name(t.dtype));
    if (std::find(g.dtypes.begin(), g.dtypes.end(), dtype) == g.dtypes.end()) g.dtypes.push_back(dtype);
    if (g.shape != format_dims(t.sizes)) g.shape = "various";
  }
  return groups;
}

// What the tensors are, in a screenful whatever the model's size: by dtype, then by name pattern.
void print_tensor_summary(const Manifest& m) {
  // Bounds the summary of a model whose names share little (more is in --all).
  constexpr std::size_t kMaxNameRows = 40;
  std::uint64_t bytes = 0;
  std::set<std::uint32_t> shared, seen;
  for (const auto& t : m.tensors) {
    bytes += tensor_bytes(t);
    if (!seen.insert(t.storage).second) shared.insert(t.storage);
  }
  std::size_t views = 0;
  for (const auto& t : m.tensors) views += shared.count(t.storage);
  say("\ntensors ({}, {} in {} storage(s){})\n", m.tensors.size(), size(bytes), m.storages.size(),
      views ? fmt::format("; {} tensors share {} of them", views, shared.size()) : "");
  if (m.tensors.empty()) return;

  Table by_dtype({"DTYPE", "TENSORS", "BYTES"}, "  ");
  by_dtype.right_align(1);
  by_dtype.right_align(2);
  for (const auto& g : group_tensors(m, [](const TensorRecord& t) { return std::string(dtype_name(t.dtype)); }))
    by_dtype.add({g.key, std::to_string(g.tensors), size(g.bytes)});
  by_dtype.print();

  const auto by_name = group_tensors(m, [](const TensorRecord& t) { return name_pattern(t.name); });
  say("\n");
  Table names({"NAME (* = each index)", "TENSORS", "DTYPE", "SHAPE", "BYTES"}, "  ");
  names.right_align(1);
  names.right_align(4);
  for (std::size_t i = 0; i < by_name.size() && i < kMaxNameRows; ++i) {
    const Group& g = by_name[i];
    names.add({g.key, std::to_string(g.tensors), fmt::format("{}", fmt::join(g.dtypes, ", ")), g.shape, size(g.bytes)});
  }
  names.print();
  if (by_name.size() > kMaxNameRows)
    say("  ... and {} more names (--all lists every tensor)\n", by_name.size() - kMaxNameRows);
}

void print_chunks(const Manifest& m) {
  say("\ndata files\n");
  for (const auto& f : m.files) {
    say("  {}  {}, {} chunk(s) of {}\n", f.name, size(f.size), f.chunk_hashes.size(), size(f.chunk_size));
    Table chunks({"CHUNK", "BYTES", "XXH3-64"}, "    ");
    chunks.right_align(0);
    for (std::size_t c = 0; c < f.chunk_hashes.size(); ++c) {
      std::uint64_t begin = c * f.chunk_size;
      chunks.add({std::to_string(c), fmt::format("{}..{}", begin, std::min(begin + f.chunk_size, f.size)),
                  format_hex64(f.chunk_hashes[c])});
    }
    chunks.print();
  }
}

void print_text(const EntryInfo& e, const Detail& detail) {
  Table head;
  head.add({"entry", e.id});
  head.add({"path", e.path});
  head.add({"state", to_string(e.state) + (e.problem.empty() ? "" : ": " + e.problem)});
  if (!e.stale.empty()) head.add({"stale", e.stale + ": no load can reach it (snapcache evict --stale removes it)"});
  if (e.manifest) {
    const Creation& c = e.manifest->creation;
    head.add({"size", fmt::format("{} on disk, {} of data in {} file(s)", size(e.bytes), size(e.manifest->data_bytes()),
                                  e.manifest->files.size())});
    head.add({"created", fmt::format("{} ({}) by snapcache {} on {}, pid {}", when(c.created_unix_ns),
                                     ago(c.created_unix_ns), c.snapcache_version, c.host.empty() ? "?" : c.host,
                                     c.pid)});
  } else {
    head.add({"size", size(e.bytes) + " on disk"});
  }
  head.add({"last use", fmt::format("{} ({})", when(e.last_use_unix_ns), ago(e.last_use_unix_ns))});
  if (e.state != EntryState::unfinished) head.add({"origin", origin_row(e)});
  if (e.manifest) head.add({"verified", verification_text(e)});
  head.add({"leases", e.leased ? describe_processes(e.lease_holders) : "none"});
  head.print();
  if (!e.manifest) return;
  const Manifest& m = *e.manifest;

  say("\nkey\n");
  print_key(m.key);

  print_tensor_summary(m);
  if (detail.chunks || detail.all) print_chunks(m);
  if (!detail.all) {
    if (detail.chunks) say("\n--all also lists every storage and tensor\n");
    else say("\n--chunks lists every chunk and its checksum; --all also every storage and tensor\n");
    return;
  }

  say("\nstorages ({})\n", m.storages.size());
  Table storages({"#", "FILE", "OFFSET", "BYTES", "CHUNKS"}, "  ");
  storages.right_align(0);
  storages.right_align(2);
  storages.right_align(3);
  for (std::size_t i = 0; i < m.storages.size(); ++i) {
    const auto& s = m.storages[i];
    auto [first, last] = chunk_span(m, s);
    storages.add({std::to_string(i), m.files[s.file].name, std::to_string(s.offset), std::to_string(s.nbytes),
                  first == last ? std::to_string(first) : fmt::format("{}-{}", first, last)});
  }
  storages.print();

  say("\ntensors ({})\n", m.tensors.size());
  Table tensors({"NAME", "DTYPE", "SHAPE", "STRIDES", "OFFSET", "STORAGE", "BYTES"}, "  ");
  tensors.right_align(4);
  tensors.right_align(5);
  tensors.right_align(6);
  for (const auto& t : m.tensors)
    tensors.add({t.name, std::string(dtype_name(t.dtype)), format_dims(t.sizes), format_dims(t.strides),
                 std::to_string(t.storage_offset), std::to_string(t.storage), std::to_string(tensor_bytes(t))});
  tensors.print();
}

}  // namespace

Command add_inspect(CLI::App& app, GlobalOptions& options) {
  auto* cmd = app.add_subcommand(
      "inspect", "Show an entry: key, state, stamp, leases, its tensors grouped by dtype and name (--chunks, --all: more)");
  auto id = std::make_shared<std::string>();
  auto detail = std::make_shared<Detail>();
  cmd->add_option("id", *id, "Entry id or a unique prefix of one")->required();
  cmd->add_flag("--chunks", detail->chunks, "Also list each data file's chunks and their checksums");
  cmd->add_flag("--all", detail->all, "Also list the chunks, every storage and every tensor");
  add_common_options(*cmd, options);
  return {cmd, [id, detail](Context& ctx) {
            Store& store = ctx.store();
            auto info = entry_info(store, resolve_entry(store, *id));
            if (!info) throw CliError(kFailure, info.status().message());
            // The JSON is always whole: a script should not need a flag to get every part.
            if (ctx.options.json) print_json(inspect_json(*info));
            else print_text(*info, *detail);
            return kOk;
          }};
}

}  // namespace snapcache::cli
