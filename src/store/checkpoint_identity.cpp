// Identities of checkpoint files and of loader source code, and the content-digest memo.
#include <unistd.h>

#include "util/fmt.h"
#include "util/file_io.h"
#include "snapcache/manifest.h"

#include <nlohmann/json.hpp>

#include <vector>

#include "snapcache/extend/file_system.h"
#include "snapcache/key.h"
#include "util/hash.h"

namespace snapcache {
namespace {

std::string absolute(const std::string& path) {
  if (!path.empty() && path[0] == '/') return path;
  std::vector<char> buf(4096);
  if (::getcwd(buf.data(), buf.size()) == nullptr) return path;
  return std::string(buf.data()) + "/" + path;
}

// XXH3-128 of a checkpoint file's bytes, read in large pieces through the FileSystem, only while
// the file is the one `f` describes: a digest is remembered under that identity, so bytes read
// from a file that changed since it was described would key the old identity by other bytes.
Result<util::Hash128> hash_file(FileSystem& fs, const CheckpointFile& f, std::uint64_t& bytes) {
  auto fd = fs.open(f.path, OpenMode::read);
  if (!fd) return fd.status();
  auto before = fs.fstat(fd->get());
  if (!before) return before.status();
  const FileIdentity described{f.device, f.inode, f.size, f.mtime_ns, f.ctime_ns};
  if (!(*before == described)) return Status(StatusCode::mismatch, f.path + " changed since it was described");
  util::Hasher128 h;
  std::vector<char> buf(8u << 20);
  std::uint64_t offset = 0;
  for (;;) {
    auto n = fs.pread(fd->get(), buf.data(), buf.size(), offset);
    if (!n) return n.status().with_context(f.path);
    if (*n == 0) break;
    h.update(buf.data(), *n);
    offset += *n;
  }
  bytes += offset;
  auto after = fs.fstat(fd->get());
  if (!after || !(*after == *before) || offset != before->size)
    return Status(StatusCode::mismatch, f.path + " changed while it was being hashed");
  return h.digest();
}

std::string identity_key(const CheckpointFile& f) {
  return fmt::format("{}:{}:{}:{}:{}", f.device, f.inode, f.size, f.mtime_ns, f.ctime_ns);
}

}  // namespace

Result<std::vector<CheckpointFile>> describe_checkpoint(FileSystem& fs, const std::vector<std::string>& paths) {
  std::vector<CheckpointFile> files;
  for (const auto& p : paths) {
    std::string path = absolute(p);
    auto id = fs.stat(path);
    if (!id) return id.status().with_context("checkpoint file");
    CheckpointFile f;
    f.path = path;
    f.size = id->size;
    f.mtime_ns = id->mtime_ns;
    f.ctime_ns = id->ctime_ns;
    f.device = id->device;
    f.inode = id->inode;
    files.push_back(std::move(f));
  }
  return files;
}

Result<std::string> digest_source_files(FileSystem& fs, const std::vector<std::string>& paths) {
  util::Hasher128 h;
  std::string version = fmt::format("snapcache-format-{}", kFormatVersion);
  h.update(version.data(), version.size());
  for (const auto& path : paths) {
    // Loader sources are code; a file of this size is a mistake in the list, not source.
    constexpr std::uint64_t kMaxSourceFileBytes = 64ull << 20;
    auto bytes = read_file(fs, path, kMaxSourceFileBytes, Follow::yes);
    if (!bytes) return bytes.status().with_context("source file");
    std::uint64_t sizes[2] = {path.size(), bytes->size()};
    h.update(sizes, sizeof sizes);
    h.update(path.data(), path.size());
    h.update(bytes->data(), bytes->size());
  }
  return h.digest().hex();
}

DigestMemo::DigestMemo(std::shared_ptr<FileSystem> fs, std::string memo_path)
    : fs_(std::move(fs)), path_(std::move(memo_path)) {}

namespace {

nlohmann::json read_memo(FileSystem& fs, const std::string& path) {
  using nlohmann::json;
  // One line per checkpoint file ever digested; inside the cache, so never followed, and not
  // trusted when it has a second name (a digest read from a file someone else writes would key
  // a checkpoint by bytes it does not have).
  constexpr std::uint64_t kMaxMemoBytes = 64ull << 20;
  if (auto text = read_own_file(fs, path, kMaxMemoBytes)) {
    json memo = json::parse(*text, nullptr, /*allow_exceptions=*/false);
    if (!memo.is_discarded() && memo.is_object()) return memo;  // a damaged memo is only a cache
  }
  return json::object();
}

}  // namespace

std::optional<std::string> DigestMemo::recorded(const CheckpointFile& file) const {
  const nlohmann::json memo = read_memo(*fs_, path_);
  if (auto it = memo.find(identity_key(file)); it != memo.end() && it->is_string()) return it->get<std::string>();
  return std::nullopt;
}

Status DigestMemo::fill_digests(std::vector<CheckpointFile>& files) {
  nlohmann::json memo = read_memo(*fs_, path_);
  bool changed = false;
  for (auto& f : files) {
    std::string k = identity_key(f);
    if (auto it = memo.find(k); it != memo.end() && it->is_string()) {
      f.content_digest = it->get<std::string>();
      continue;
    }
    auto digest = hash_file(*fs_, f, bytes_hashed_);
    if (!digest) return digest.status();
    f.content_digest = digest->hex();
    memo[k] = f.content_digest;
    changed = true;
  }
  if (changed) {
    // Best effort: failing to remember a digest costs a rehash next time, nothing more.
    (void)write_file_atomic(*fs_, path_, memo.dump());
  }
  return Status::ok();
}

}  // namespace snapcache
