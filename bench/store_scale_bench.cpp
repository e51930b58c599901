// A cache of many entries: N small entries (100,000, 1,000,000), and what making room in it,
// `evict ID`, `ls`, `verify`, a hit and a miss cost there, each beside what the plain way would
// cost (the whole cache measured for each publication and every lease read to evict, every
// manifest read on each miss).
// Side by side in one run; the ratios are the result. No torch: the entries are raw storages.
//
//   snapcache_store_scale_bench [--entries N] [--dir DIR] [--keep]
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "format/manifest.h"
#include "snapcache/extend/file_system.h"
#include "snapcache/key.h"
#include "snapcache/log.h"
#include "snapcache/maintenance.h"
#include "snapcache/manifest.h"
#include "snapcache/text.h"
#include "store/entry_index.h"
#include "store/size_ledger.h"
#include "store/use_order.h"
#include "store/layout.h"
#include "util/clock.h"
#include "util/fmt.h"

using namespace snapcache;
using Clock = std::chrono::steady_clock;

namespace {

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

constexpr std::size_t kScaleStorageBytes = 4096;

// Entry i of the scale cache: rank i % 8 of checkpoint i / 8, as the ranks of a node publish.
Key scale_key(std::size_t i) {
  Key k;
  CheckpointFile f;
  f.path = fmt::format("/checkpoints/model-{}/model.safetensors", i / 8);
  f.size = 1ull << 30;
  f.mtime_ns = 1'700'000'000'000'000'000;
  f.ctime_ns = 1'700'000'000'000'000'001;
  f.device = 2049;
  f.inode = 1000 + i / 8;
  k.checkpoint.push_back(f);
  k.source_identity = "bench-loader-v1";
  k.torch = {"2.11.0+cu130", "13.0", "cxx11"};
  k.dtype = "bfloat16";
  k.precision_policy = "none";
  k.topology = {static_cast<int>(i % 8), 8, 0, 1, {}};
  k.component = "dit";
  return k;
}

PublishOutcome publish_bytes(Store& store, const Key& key, std::size_t bytes) {
  std::vector<std::byte> data(bytes, std::byte{0x5a});
  StorageSource source{data.data(), data.size()};
  std::vector<TensorRecord> tensors{{"w", DType::uint8, {static_cast<std::int64_t>(bytes)}, {1}, 0, 0}};
  return store.publish(key, std::span<const StorageSource>(&source, 1), tensors);
}

void write_file(const std::string& path, const void* data, std::size_t size) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0444);
  if (fd < 0 || ::write(fd, data, size) != static_cast<ssize_t>(size)) std::abort();
  ::close(fd);
}

// Entry `key` as a publication leaves it (the template's data and manifest with this key and the
// data file's identity, a lease marked as taken, its index record), without the fsyncs, renamed
// into entries/. Publication itself measures the cache each time, so a million of them would
// take days; this takes a minute or two.
void write_entry(const std::string& cache, const Manifest& sample, const std::vector<std::byte>& data, const Key& key,
                 std::size_t i) {
  const std::string id = key_id(key);
  const std::string tmp = fmt::format("{}/tmp/bench-{}", cache, i);
  if (::mkdir(tmp.c_str(), 0755) != 0) std::abort();
  Manifest m = sample;
  m.key = key_identity(key);
  const std::string data_path = tmp + "/" + m.files[0].name;
  write_file(data_path, data.data(), data.size());
  m.files[0].identity = posix_file_system()->stat(data_path, Follow::no).value();
  m.files[0].identity.is_directory = false;
  const std::string manifest = format::encode_manifest(m);
  write_file(tmp + "/" + store::kManifestFile, manifest.data(), manifest.size());
  write_file(tmp + "/" + store::kLeaseFile, store::kLeaseTakenMark.data(), store::kLeaseTakenMark.size());
  if (::rename(tmp.c_str(), (cache + "/" + store::kEntriesDir + "/" + id).c_str()) != 0) std::abort();
  store::index_entry(*posix_file_system(), cache, m.key, id);
  store::record_use(*posix_file_system(), cache, id, util::now_unix_ns());
}

// The plain way to find the least recently used entry: read every entry's lease.
void read_every_lease(Store& store) {
  const auto ids = entry_ids(store);
  for (const auto& id : ids.value()) {
    struct stat st;
    (void)::lstat((store.entry_path(id) + "/" + store::kLeaseFile).c_str(), &st);
  }
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int scale_bench(const std::string& dir, std::size_t n) {
  Config config;
  config.directory = dir + "/cache";
  config.capacity_bytes = 1ull << 50;
  config.reserve_free_bytes = 0;
  auto store = *Store::open(config);

  // Entry 0 through the library; the others copy it (the same 4 KiB of data, their own key).
  auto t0 = Clock::now();
  if (publish_bytes(*store, scale_key(0), kScaleStorageBytes).result != PublishResult::published) return 1;
  const Manifest sample = *entry_info(*store, key_id(scale_key(0)))->manifest;
  const std::vector<std::byte> data(kScaleStorageBytes, std::byte{0x5a});
  const unsigned threads = std::max(1u, std::min(4u, std::thread::hardware_concurrency()));
  std::vector<std::thread> writers;
  for (unsigned t = 0; t < threads; ++t)
    writers.emplace_back([&, t] {
      for (std::size_t i = 1 + t; i < n; i += threads) write_entry(config.directory, sample, data, scale_key(i), i);
    });
  for (auto& w : writers) w.join();
  const double built = seconds_since(t0);
  const std::uint64_t bytes = total_bytes(*store).value();
  const std::uint64_t entry_bytes = bytes / n;
  fmt::print("cache of {} entries ({} each on disk, one {} B storage; {} in all), built in {:.1f} s ({} threads; "
             "the first published, the rest written as publication leaves them, without fsync)\n\n",
             n, format_size(entry_bytes), kScaleStorageBytes, format_size(bytes), built, threads);

  // The plain way to make room: a measure of the whole cache for each publication, and a read of
  // every lease for one that evicts.
  std::vector<double> measures;
  for (int r = 0; r < 3; ++r) {
    t0 = Clock::now();
    if (!total_bytes(*store)) return 1;
    measures.push_back(seconds_since(t0));
  }
  const double measure = median(measures);
  t0 = Clock::now();
  read_every_lease(*store);
  const double leases = seconds_since(t0);
  fmt::print("  measure the cache (total_bytes)        {:>9}\n", format_duration(measure));
  fmt::print("  read every lease                       {:>9}\n\n",
             format_duration(leases));

  std::size_t next_key = n;
  auto publish_timed = [&](Store& s, std::size_t storage_bytes, PublishOutcome& out) {
    auto start = Clock::now();
    out = publish_bytes(s, scale_key(next_key++), storage_bytes);
    return seconds_since(start);
  };
  PublishOutcome out;
  // The entries were written beside the library: the figure entry 0's publication recorded is not
  // the cache's size. Without one, a publication measures the cache once, as after an upgrade.
  std::filesystem::remove(config.directory + "/" + store::kSizeFile);
  const double first = publish_timed(*store, kScaleStorageBytes, out);
  if (out.result != PublishResult::published) return 1;
  fmt::print("  publish, no size figure yet (measured) {:>9}\n", format_duration(first));
  const double with_room = publish_timed(*store, kScaleStorageBytes, out);
  if (out.result != PublishResult::published || !out.evicted.empty()) return 1;
  fmt::print("  publish, room already there            {:>9}   measuring the cache instead: {} ({:.0f}x)\n", format_duration(with_room),
             format_duration(measure), measure / with_room);
  Config tight = config;
  tight.capacity_bytes = store::size_now(*store).value() + entry_bytes / 2;
  auto tight_store = *Store::open(tight);
  const double evict_one = publish_timed(*tight_store, kScaleStorageBytes, out);
  if (out.result != PublishResult::published || out.evicted.size() != 1) return 1;
  fmt::print("  publish evicting 1 entry               {:>9}   measuring and reading every lease instead: {} ({:.0f}x)\n", format_duration(evict_one),
             format_duration(measure + leases), (measure + leases) / evict_one);
  const std::size_t k = 1000;
  const double evict_k = publish_timed(*tight_store, (k - 1) * entry_bytes, out);
  if (out.result != PublishResult::published) return 1;
  const std::size_t evicted = out.evicted.size();
  const double per_eviction = (evict_k - evict_one) / static_cast<double>(evicted - 1);
  fmt::print("  publish evicting {} entries          {:>9}   {} per further eviction (its rename made durable, "
             "its files removed)\n",
             evicted, format_duration(evict_k), format_duration(per_eviction));

  // Eight publishers at once into the full cache, each needing an eviction: each waits for the
  // others' reservations, never for a measure of the cache.
  {
    constexpr int kPublishers = 8;
    std::vector<PublishOutcome> outs(kPublishers);
    std::vector<double> took(kPublishers);
    std::vector<std::thread> publishers;
    t0 = Clock::now();
    for (int p = 0; p < kPublishers; ++p)
      publishers.emplace_back([&, p, key = next_key + static_cast<std::size_t>(p)] {
        auto start = Clock::now();
        outs[p] = publish_bytes(*tight_store, scale_key(key), kScaleStorageBytes);
        took[p] = seconds_since(start);
      });
    for (auto& p : publishers) p.join();
    next_key += kPublishers;
    const double all = seconds_since(t0);
    int landed = 0;
    std::size_t evictions = 0;
    for (const auto& o : outs) {
      landed += o.result == PublishResult::published;
      evictions += o.evicted.size();
    }
    fmt::print("  {} publishers at once, each evicting   {:>9}   {} of {} published, {} evictions, the slowest {}\n",
               kPublishers, format_duration(all), landed, kPublishers, evictions,
               format_duration(*std::max_element(took.begin(), took.end())));
    if (landed != kPublishers) return 1;
  }

  // `snapcache evict ID`: the entry alone, and the counted size.
  {
    EvictRequest request;
    request.ids = {key_id(scale_key(n - 2))};  // one the evictions above left
    t0 = Clock::now();
    auto gone = evict(*store, request);
    const double took = seconds_since(t0);
    if (!gone || gone->evicted.size() != 1) return 1;
    fmt::print("  evict one entry by id (evict)          {:>9}\n", format_duration(took));
  }

  // `snapcache ls`: visit_entries hands each entry over as it is read.
  t0 = Clock::now();
  double first_row = 0;
  std::vector<EntryInfo> listed_entries;
  if (!visit_entries(*store, [&](EntryInfo e) {
        if (listed_entries.empty()) first_row = seconds_since(t0);
        listed_entries.push_back(std::move(e));
      }))
    return 1;
  const double ls = seconds_since(t0);
  const auto* listed = &listed_entries;
  fmt::print("  ls, its first row (visit_entries)      {:>9}\n", format_duration(first_row));
  fmt::print("  ls, every row ({} entries)        {:>9}   {} per entry\n", listed->size(), format_duration(ls),
             format_duration(ls / static_cast<double>(listed->size())));

  t0 = Clock::now();
  std::size_t sound = 0;
  for (const auto& e : *listed) sound += verify_entry(*store, e.id).status.is_ok();
  const double verify = seconds_since(t0);
  if (sound != listed->size()) return 1;
  fmt::print("  verify every entry                     {:>9}   {} per entry\n", format_duration(verify),
             format_duration(verify / static_cast<double>(sound)));

  std::vector<double> hits;
  const Key present = scale_key(n - 1);
  for (int r = 0; r < 5; ++r) {
    t0 = Clock::now();
    auto hit = store->lookup(present);
    hits.push_back(seconds_since(t0));
    if (hit.result != LookupResult::hit) return 1;
  }
  fmt::print("  hit (lookup, lease, map), median of 5  {:>9}\n", format_duration(median(hits)));
  t0 = Clock::now();
  auto keys = entry_keys(*store);  // every manifest's key: the plain way to explain a miss
  const double every_manifest = seconds_since(t0);
  if (!keys) return 1;
  Key upgraded = scale_key(n - 1);
  upgraded.torch.version = "2.12.0+cu130";  // a torch upgrade: same checkpoint and rank, one field
  Key fresh = scale_key(n - 1);
  fresh.checkpoint[0].path = "/checkpoints/model-new/model.safetensors";  // a new checkpoint
  for (const auto& [what, key] : {std::pair<const char*, Key>{"torch upgrade", upgraded}, {"new checkpoint", fresh}}) {
    std::vector<double> misses;
    std::string reason;
    for (int r = 0; r < 5; ++r) {
      t0 = Clock::now();
      auto miss = store->lookup(key);
      misses.push_back(seconds_since(t0));
      if (miss.result != LookupResult::miss) return 1;
      reason = miss.reason;
    }
    fmt::print("  miss ({}), median of 5     {:>9}   reading every manifest instead {} ({:.0f}x)\n", what,
               format_duration(median(misses)), format_duration(every_manifest), every_manifest / median(misses));
    fmt::print("    \"{}\"\n", reason);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string dir = "/tmp/snapcache-scale-bench";
  std::size_t entries = 100000;
  bool keep = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--keep") keep = true;
    else if (i + 1 >= argc) break;
    else if (a == "--dir") dir = argv[++i];
    else if (a == "--entries") entries = static_cast<std::size_t>(std::atoll(argv[++i]));
  }
  if (entries < 2000) {
    fmt::print(stderr, "--entries: at least 2000 (the bench evicts 1000)\n");
    return 2;
  }
  set_log_level(LogLevel::error);
  const std::string cmd = "rm -rf '" + dir + "'";
  if (std::system(cmd.c_str()) != 0) return 1;
  const int rc = scale_bench(dir, entries);
  if (rc != 0) fmt::print(stderr, "scale bench failed\n");
  if (keep) {
    fmt::print("(the cache is left in {}/cache)\n", dir);
    return rc;
  }
  const auto t0 = Clock::now();
  if (std::system(cmd.c_str()) != 0) return 1;
  fmt::print("(removing the cache took {})\n", format_duration(seconds_since(t0)));
  return rc;
}
