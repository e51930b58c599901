#include "cli_fixtures.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <stdexcept>

namespace snapcache::test {

Cache::Cache() : store(*Store::open(test_config(dir.path()))) {}

std::string Cache::publish(int seed, std::size_t mib) { return publish(store_key(seed), seed, mib); }

std::string Cache::publish(const Key& key, int seed, std::size_t mib) {
  PublishOptions options;
  options.chunk_size = 1 << 20;
  auto out = publish_raw(*store, key, raw_model(seed, mib), options);
  if (out.result != PublishResult::published) throw std::runtime_error("publish: " + out.status.to_string());
  return out.entry_id;
}

std::string Cache::checkpoint_file(int seed) const {
  return dir / ("model-" + std::to_string(seed) + ".safetensors");
}

Key Cache::reachable_key(int seed) {
  const std::string file = checkpoint_file(seed);
  write_bytes(file, std::string(100 + seed, 'w'));
  auto described = describe_checkpoint(*posix_file_system(), {file});
  if (!described) throw std::runtime_error("describe " + file + ": " + described.status().to_string());
  Key key = store_key(seed);
  key.checkpoint = *described;
  return key;
}

std::vector<std::string> with_dir(const Cache& cache, std::vector<std::string> args) {
  args.push_back("--dir");
  args.push_back(cache.path());
  return args;
}

namespace {
void snapshot_into(const std::string& path, std::vector<std::string>& lines) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) return;
  lines.push_back(path + " " + std::to_string(st.st_size) + " " + std::to_string(st.st_mtim.tv_sec) + "." +
                  std::to_string(st.st_mtim.tv_nsec));
  if (!S_ISDIR(st.st_mode)) return;
  for (const auto& n : test::list_names(path)) snapshot_into(path + "/" + n, lines);
}
}  // namespace

std::string tree_snapshot(const std::string& dir) {
  std::vector<std::string> lines;
  snapshot_into(dir, lines);
  std::sort(lines.begin(), lines.end());
  std::string out;
  for (const auto& l : lines) out += l + "\n";
  return out;
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace snapcache::test
