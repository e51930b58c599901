#include "store/entry_index.h"

#include <cerrno>
#include <map>
#include <set>

#include "snapcache/text.h"
#include "store/layout.h"
#include "util/hash.h"

namespace snapcache::store {
namespace {

constexpr std::size_t kHashDigits = 16;

FileSystem& side_fs() {
  static const std::shared_ptr<FileSystem> fs = posix_file_system();
  return *fs;
}

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

// `path` as a directory of the cache's own, made if absent; never a link or anything else. Each
// level is checked before the next is made in it, so nothing is created through a planted link.
bool own_directory(FileSystem& fs, const std::string& path, bool create) {
  if (create) {
    if (Status made = fs.make_directory(path); !made && made.sys_errno() != EEXIST) return false;
  }
  auto st = fs.stat(path, Follow::no);
  return st && st->is_directory && !st->is_symlink;
}

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

}  // namespace

std::string index_component_name(const Key& key) { return hash_name(key.component); }

std::string index_record_name(const Key& key, const std::string& id) { return checkpoint_name(key) + "." + id; }

bool is_index_component_name(const std::string& name) {
  return name.size() == kHashDigits && is_hex(name, 0, kHashDigits);
}

std::string id_of_index_record(const std::string& name) {
  if (name.size() != kHashDigits + 1 + 32 || !is_hex(name, 0, kHashDigits) || name[kHashDigits] != '.') return "";
  std::string id = name.substr(kHashDigits + 1);
  return is_entry_id(id) ? id : "";
}

void index_entry(const std::string& cache_directory, const Key& key, const std::string& id) {
  FileSystem& fs = side_fs();
  const std::string component = index_path(cache_directory) + "/" + index_component_name(key);
  if (!own_directory(fs, index_path(cache_directory), true) || !own_directory(fs, component, true)) return;
  // Already there (gc adding what it finds missing, say) is fine; a link there is not followed.
  (void)fs.open(component + "/" + index_record_name(key, id), OpenMode::create_exclusive, Follow::no);
}

void unindex_entry(const std::string& cache_directory, const std::string& manifest_path, const std::string& id) {
  FileSystem& fs = side_fs();
  auto key = read_manifest_key(fs, manifest_path);
  if (!key) return;
  const std::string component = index_path(cache_directory) + "/" + index_component_name(*key);
  if (!own_directory(fs, index_path(cache_directory), false) || !own_directory(fs, component, false)) return;
  (void)fs.remove_file(component + "/" + index_record_name(*key, id));
}

std::vector<std::string> index_candidates(const std::string& cache_directory, const Key& key, std::size_t max) {
  std::vector<std::string> out;
  FileSystem& fs = side_fs();
  auto top = fs.open_directory(cache_directory);
  if (!top) return out;
  auto index = fs.open_directory_at(top->get(), kIndexDir);
  if (!index) return out;
  std::set<std::string> taken;
  auto take = [&](const std::string& record) {
    const std::string id = id_of_index_record(record);
    if (out.size() < max && !id.empty() && taken.insert(id).second) out.push_back(id);
  };

  const std::string own = index_component_name(key);
  const std::string same_checkpoint = checkpoint_name(key) + ".";
  const std::vector<std::string> records = names_at(fs, index->get(), own);
  for (const auto& record : records)
    if (record.starts_with(same_checkpoint)) take(record);
  if (out.size() < max) {
    // Then one entry of each other checkpoint of the component in turn (at most `max` of them):
    // a miss after a new checkpoint is best explained by an entry of an earlier one, whichever.
    std::map<std::string, std::vector<const std::string*>> by_checkpoint;
    for (const auto& record : records) {
      if (record.starts_with(same_checkpoint)) continue;
      auto it = by_checkpoint.find(record.substr(0, kHashDigits));
      if (it == by_checkpoint.end()) {
        if (by_checkpoint.size() >= max) continue;
        it = by_checkpoint.emplace(record.substr(0, kHashDigits), std::vector<const std::string*>{}).first;
      }
      if (it->second.size() < max) it->second.push_back(&record);
    }
    for (std::size_t round = 0; out.size() < max; ++round) {
      bool any = false;
      for (const auto& [checkpoint, in_turn] : by_checkpoint) {
        if (round >= in_turn.size()) continue;
        any = true;
        take(*in_turn[round]);
      }
      if (!any) break;
    }
  }
  if (out.size() >= max) return out;
  auto components = fs.list_directory_at(index->get());
  if (!components) return out;
  for (const auto& e : *components) {
    const std::string& component = e.name;
    if (out.size() >= max) break;
    if (component == own || !is_index_component_name(component)) continue;
    for (const auto& record : names_at(fs, index->get(), component)) {
      if (out.size() >= max) break;
      take(record);
    }
  }
  return out;
}

}  // namespace snapcache::store
