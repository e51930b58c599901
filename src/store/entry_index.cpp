#include "store/entry_index.h"

#include <cerrno>
#include <algorithm>

#include "snapcache/extend/file_system.h"
#include "snapcache/key.h"
#include "snapcache/text.h"
#include "store/layout.h"
#include "util/hash.h"

namespace snapcache::store {
namespace {

constexpr std::size_t kHashDigits = 16;

bool is_hex(const std::string& s, std::size_t from, std::size_t count) {
  if (s.size() < from + count) return false;
  for (std::size_t i = from; i < from + count; ++i)
    if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f'))) return false;
  return true;
}

std::string hash_name(const std::string& bytes) { return format_hex64(util::xxh3_64(bytes.data(), bytes.size())); }

// The checkpoint's identity in the key's own canonical encoding (content, or path and stat; see
// checkpoint_identity), so two keys share a checkpoint name exactly when their files are the same.
std::string checkpoint_name(const Key& key) {
  Key checkpoint_only;
  checkpoint_only.checkpoint = key.checkpoint;
  return hash_name(encode_key(checkpoint_only));
}

std::string index_path(const std::string& cache_directory) { return cache_directory + "/" + kIndexDir; }

// Names in the directory `name` of `parent`, opened without following a link; none when it
// cannot be (absent, a link, not a directory).
std::vector<std::string> names_at(FileSystem& fs, int parent, const std::string& name) {
  std::vector<std::string> out;
  auto dir = fs.open_directory_at(parent, name);
  if (!dir) return out;
  auto listed = fs.list_directory_at(dir->get());
  if (!listed) return out;
  out.reserve(listed->size());
  for (auto& e : *listed) out.push_back(std::move(e.name));
  return out;
}

// The directory of the records of `key`'s component and checkpoint.
std::string bucket_path(const std::string& cache_directory, const Key& key) {
  return index_path(cache_directory) + "/" + hash_name(key.component) + "/" + checkpoint_name(key);
}

}  // namespace

bool is_index_hash_name(const std::string& name) { return name.size() == kHashDigits && is_hex(name, 0, kHashDigits); }

std::string index_record_path(const std::string& cache_directory, const Key& key, const std::string& id) {
  return bucket_path(cache_directory, key) + "/" + id;
}

void index_entry(FileSystem& fs, const std::string& cache_directory, const Key& key, const std::string& id) {
  const std::string component = index_path(cache_directory) + "/" + hash_name(key.component);
  const std::string bucket = bucket_path(cache_directory, key);
  if (!own_directory(fs, index_path(cache_directory), true) || !own_directory(fs, component, true) ||
      !own_directory(fs, bucket, true))
    return;
  // Already there (gc adding what it finds missing, say) is fine; a link there is not followed.
  (void)fs.open(bucket + "/" + id, OpenMode::create_exclusive, Follow::no);
}

void unindex_entry(FileSystem& fs, const std::string& cache_directory, const std::string& manifest_path,
                   const std::string& id) {
  auto key = read_manifest_key(fs, manifest_path);
  if (!key) return;
  const std::string component = index_path(cache_directory) + "/" + hash_name(key->component);
  const std::string bucket = bucket_path(cache_directory, *key);
  if (!own_directory(fs, index_path(cache_directory), false) || !own_directory(fs, component, false) ||
      !own_directory(fs, bucket, false))
    return;
  (void)fs.remove_file(bucket + "/" + id);
  // The last record of a checkpoint (or of a component) takes its directory with it, so evicting
  // everything leaves no index behind for gc to report. rmdir removes only an empty directory; a
  // publication that recreates it meanwhile may lose its record, which gc makes again.
  if (fs.remove_directory(bucket)) (void)fs.remove_directory(component);
}

namespace {

// The component's directory of the index, when the cache has an index (nullopt) and the component
// an entry (an empty descriptor when not).
std::optional<UniqueFd> component_directory(FileSystem& fs, const std::string& cache_directory, const Key& key) {
  auto top = fs.open_directory(cache_directory);
  if (!top) return std::nullopt;
  auto index = fs.open_directory_at(top->get(), kIndexDir);
  if (!index) return std::nullopt;
  auto component = fs.open_directory_at(index->get(), hash_name(key.component));
  return component ? std::move(*component) : UniqueFd();
}

}  // namespace

std::vector<std::string> index_siblings(FileSystem& fs, const std::string& cache_directory, const Key& key,
                                        std::size_t max) {
  std::vector<std::string> out;
  auto component = component_directory(fs, cache_directory, key);
  if (!component || !component->valid()) return out;
  for (auto& id : names_at(fs, component->get(), checkpoint_name(key)))
    if (out.size() < max && is_entry_id(id)) out.push_back(std::move(id));
  return out;
}

std::optional<std::vector<std::string>> index_candidates(FileSystem& fs, const std::string& cache_directory,
                                                         const Key& key, std::size_t max) {
  auto component = component_directory(fs, cache_directory, key);
  if (!component) return std::nullopt;
  std::vector<std::string> out;
  if (!component->valid()) return out;  // no entry of the component
  auto take = [&](const std::string& id) {
    if (out.size() < max && is_entry_id(id) && std::find(out.begin(), out.end(), id) == out.end()) out.push_back(id);
  };
  const std::string checkpoint = checkpoint_name(key);
  for (const auto& id : names_at(fs, component->get(), checkpoint)) take(id);
  if (!out.empty()) return out;
  // A checkpoint whose files changed since (touched, rewritten in place) has another name here,
  // since the name holds their stat: one record of each other checkpoint of the component, in turn,
  // for the keys read to tell which are the same files (same_checkpoint).
  auto buckets = fs.list_directory_at(component->get());
  if (!buckets) return out;
  std::vector<std::vector<std::string>> in_turn;
  for (const auto& b : *buckets) {
    if (in_turn.size() >= max) break;
    if (b.name != checkpoint && is_index_hash_name(b.name)) in_turn.push_back(names_at(fs, component->get(), b.name));
  }
  for (std::size_t round = 0; out.size() < max; ++round) {
    bool any = false;
    for (const auto& records : in_turn) {
      if (round >= records.size()) continue;
      any = true;
      take(records[round]);
    }
    if (!any) break;
  }
  return out;
}

}  // namespace snapcache::store
