#include "snapcache/store.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <random>

#include "util/fmt.h"

#include "format/codec.h"
#include "format/manifest.h"
#include "store/layout.h"

namespace snapcache {
namespace store {

std::int64_t now_unix_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string unique_suffix() {
  static std::atomic<unsigned> counter{0};
  static const unsigned seed = std::random_device{}();
  return fmt::format("{}-{}-{:08x}", ::getpid(), counter.fetch_add(1), seed);
}

std::string data_file_name(std::uint32_t index) { return fmt::format("data-{:04}.bin", index); }

bool is_entry_id(const std::string& name) {
  return name.size() == 32 &&
         std::all_of(name.begin(), name.end(), [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

std::string short_id(const std::string& id) { return id.substr(0, 12); }

Result<UniqueFd> take_lease(FileSystem& fs, const std::string& entry_path, LockMode mode) {
  std::string path = entry_path + "/" + kLeaseFile;
  auto fd = fs.open(path, OpenMode::read);
  if (!fd) return fd.status();
  Status st = fs.lock(fd->get(), mode, LockWait::no_wait);
  if (!st) return st;
  auto held = fs.fstat(fd->get());
  auto now = fs.stat(path);
  if (!held) return held.status();
  if (!now || now->inode != held->inode || now->device != held->device)
    return Status(StatusCode::not_found, "entry was removed while its lease was being taken");
  return std::move(*fd);
}

}  // namespace store

const char* to_string(PublishResult r) {
  switch (r) {
    case PublishResult::published: return "published";
    case PublishResult::already_present: return "already_present";
    case PublishResult::skipped: return "skipped";
    case PublishResult::failed: return "failed";
  }
  return "?";
}

const char* to_string(LookupResult r) {
  switch (r) {
    case LookupResult::hit: return "hit";
    case LookupResult::miss: return "miss";
    case LookupResult::damaged: return "damaged";
    case LookupResult::fallback: return "fallback";
    case LookupResult::disabled: return "disabled";
  }
  return "?";
}

const char* to_string(EntryState s) {
  switch (s) {
    case EntryState::ok: return "ok";
    case EntryState::damaged: return "damaged";
    case EntryState::unfinished: return "unfinished";
  }
  return "?";
}

Store::Store(Config config, std::shared_ptr<FileSystem> fs) : config_(std::move(config)), fs_(std::move(fs)) {}

Result<std::shared_ptr<Store>> Store::open(Config config, std::shared_ptr<FileSystem> fs) {
  if (config.directory.empty()) config.directory = Config::default_directory();
  while (config.directory.size() > 1 && config.directory.back() == '/') config.directory.pop_back();
  std::shared_ptr<Store> store(new Store(std::move(config), std::move(fs)));
  if (!store->config_.enabled()) return store;  // a disabled cache touches no disk
  FileSystem& f = *store->fs_;
  const std::string& dir = store->config_.directory;
  for (const char* sub : {store::kEntriesDir, store::kTmpDir, store::kTrashDir}) {
    Status st = make_directories(f, dir + "/" + sub);
    if (!st) return st.with_context("cache directory " + dir);
  }
  if (!f.stat(dir + "/" + store::kTagFile)) {
    (void)write_file_atomic(f, dir + "/" + store::kTagFile,
                            "Signature: 8a477f597d28d172789f06886806bc55\n"
                            "# This directory is a snapcache cache; see https://bford.info/cachedir/\n");
  }
  return store;
}

DigestMemo Store::digest_memo() const {
  return DigestMemo(fs_, config_.directory + "/" + store::kDigestsFile);
}

std::string Store::entry_path(const std::string& id) const {
  return config_.directory + "/" + store::kEntriesDir + "/" + id;
}

namespace {

// Reads just the key at the front of a manifest: enough to explain a miss, without reading (or
// trusting) the rest. The full manifest is checksummed when the entry is actually loaded.
Result<Key> read_manifest_key(FileSystem& fs, const std::string& manifest_path) {
  auto fd = fs.open(manifest_path, OpenMode::read);
  if (!fd) return fd.status();
  std::string head(4096, '\0');
  auto n = fs.pread(fd->get(), head.data(), head.size(), 0);
  if (!n) return n.status();
  head.resize(*n);
  constexpr std::size_t kHeader = 32;
  if (head.size() < kHeader + 4 || head.compare(0, 16, std::string(format::kManifestMagic)) != 0)
    return Status(StatusCode::foreign, "not a snapcache manifest");
  std::uint32_t len = 0;
  std::memcpy(&len, head.data() + kHeader, 4);
  if (len > format::kMaxManifestBytes) return Status(StatusCode::damaged, "key length out of range");
  std::string key(len, '\0');
  Status st = read_all(fs, fd->get(), key.data(), len, kHeader + 4);
  if (!st) return st;
  return decode_key(key);
}

}  // namespace

std::vector<std::pair<std::string, Key>> Store::entry_keys() {
  std::vector<std::pair<std::string, Key>> keys;
  auto names = fs_->list_directory(config_.directory + "/" + store::kEntriesDir);
  if (!names) return keys;
  for (const auto& e : *names) {
    if (!store::is_entry_id(e.name)) continue;
    auto key = read_manifest_key(*fs_, entry_path(e.name) + "/" + store::kManifestFile);
    if (key) keys.emplace_back(e.name, std::move(*key));
  }
  return keys;
}

std::optional<std::pair<std::string, std::vector<KeyDifference>>> Store::nearest_entry(const Key& key) {
  std::optional<std::pair<std::string, std::vector<KeyDifference>>> best;
  for (auto& [id, k] : entry_keys()) {
    auto diffs = diff_keys(key, k);
    // Same component first: a miss for "dit" is best explained by the other "dit" entry.
    auto score = [&](const std::vector<KeyDifference>& d, const Key& other) {
      return d.size() + (other.component == key.component ? 0 : 100);
    };
    if (!best || score(diffs, k) < score(best->second, k)) best = std::make_pair(id, std::move(diffs));
  }
  return best;
}

}  // namespace snapcache
