// Warm and cold loads of the demo model onto the GPU, against what a user would do instead, in one
// run: the pinned host-to-device copy of the same bytes (the bus, the ceiling), the ordinary load
// without a cache, Python safetensors' load_file(device="cuda") of the checkpoint, and snapcache's
// loads: cold (ordinary loader + publication), warm with the upload engine (layout conversions
// written while staging, every chunk checked), the same with the
// conversions written on the host first, warm with the plain per-storage copy, and warm with
// view-only post-load (which isolates the upload path). `ordinary-whole` is the load without a
// cache with the demo's loader run whole: the upload after the loader, where `ordinary` uploads
// each layer while the loader makes the next. Every load
// runs in a new process, as a restarted server would. Prints a table and, with --json, JSON.
//
//   snapcache_gpu_load_bench [--size-mib N] [--tp-size T] [--work-dir DIR] [--json FILE] [--runs R]
//                            [--only warm,warm-view-only,...] [--threads N] [--chunk-mib M] [--pinned-mib P] [--pin-ahead 0|1]
//                            [--checkpoint-read-ahead 0|1]
//                            [--drop-cache 1 [--prime 1] [--disk ROWS]]
// --runs: each load R times (new processes), the best and the median printed;
// --threads/--chunk-mib/--pinned-mib/--pin-ahead: the engine's options (StagedUploadOptions) for
// every load that uses it, to measure one at a time. --checkpoint-read-ahead 0: the ordinary tier
// does not read a checkpoint off the page cache ahead of the loader (OrdinaryTierOptions).
// --drop-cache 1: every file under the work directory (the checkpoint, the cache's entries) is
// dropped from the page cache before each load (posix_fadvise DONTNEED after sync; the share of
// the pages still resident is printed), and the disk's ceilings are measured on the snapshot's
// data files the same way, one thread reading 16 MiB at a time as `dd` does, and on the
// checkpoint, the file the peers read.
// --disk ROWS: which of those disk rows (comma-separated: dd, checkpoint-dd; `none`); both by default.
// --prime 1 (with --drop-cache 1): before each timed load and disk row, the files it reads are read
// once whole, untimed, and then dropped. The GPU machine's disk is virtual and its host keeps what
// was read: one reader's time on one file moved by up to 1.7x between runs minutes apart there
// (2026-12-04), with whatever was read last the likeliest to be kept. Primed, every load meets a
// host that has just read its file, so loaders that read different files (the snapshot, the
// checkpoint) compare as readers, not by which file the host kept.
// --only without `cold` keeps the entry an earlier run published (so a sweep publishes once); with
// `cold`, only the entry of this size and topology is evicted first.
#include <ATen/Context.h>
#include <ATen/Functions.h>
#include <cuda_runtime_api.h>
#include <fmt/format.h>
#include <fcntl.h>
#include <spawn.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "dit_model.h"
#include "snapcache/extend/gpu_upload.h"
#include "snapcache/extend/tier.h"
#include "snapcache/extend/uploader.h"
#include "snapcache/key.h"
#include "snapcache/maintenance.h"
#include "snapcache/text.h"

extern char** environ;

using namespace snapcache;
using Clock = std::chrono::steady_clock;

namespace {

struct Options {
  std::uint64_t size_mib = 1024;
  int tp_size = 1;
  std::string work_dir = "/tmp/snapcache-gpu-bench";
  std::string json;
  std::string measure;  // in a child: which load
  int runs = 1;
  std::string only;     // comma-separated loads; empty: all
  StagedUploadOptions engine;
  bool engine_set = false;
  OrdinaryTierOptions ordinary;  // --checkpoint-read-ahead
  bool drop_cache = false;
  bool prime = false;
  std::string disk_rows;  // empty: all
};

// One thread's reads as `dd bs=16M` makes them: the disk rows' and --prime's.
constexpr std::uint64_t kLargeRead = 16ull << 20;

double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

demo::DitConfig config_for(const Options& o) {
  demo::DitConfig dit;
  dit.tp_size = o.tp_size;
  dit.layers = demo::layers_for(dit, static_cast<std::uint64_t>(o.size_mib * (1ull << 20)));
  return dit;
}

std::string checkpoint_path(const Options& o, const demo::DitConfig& dit) {
  return fmt::format("{}/dit-h{}-l{}.safetensors", o.work_dir, dit.hidden, dit.layers);
}

// In a child process: one load, timed; prints "result SECONDS DEVICE_BYTES" and the stage table.
int measure(const Options& o) {
  const demo::DitConfig dit = config_for(o);
  LoadPlan plan = demo::make_plan(dit, checkpoint_path(o, dit), c10::Device(c10::kCUDA, 0));
  Config config;
  config.directory = o.work_dir + "/cache";
  config.reserve_free_bytes = 0;
  config.capacity_bytes = 1ull << 40;
  auto store = Store::open(config);
  if (!store) return 1;
  Store* cache = store->get();
  if (o.measure == "ordinary" || o.measure == "ordinary-whole") cache = nullptr;
  if (o.measure == "ordinary-whole") plan = demo::with_whole_loader(std::move(plan));
  if (o.engine_set) plan.uploader = staged_uploader(o.engine);
  if (!o.ordinary.read_ahead) plan.tiers = {snapshot_tier(), ordinary_tier(o.ordinary)};
  if (o.measure == "warm-plain") plan.uploader = per_storage_uploader();
  if (o.measure == "warm-view-only")
    plan.post_load = {int8_row_scale_method(WeightLayout::row_major)};
  if (o.measure == "warm-engine") plan.uploader = staged_uploader();  // the default only from 64 MiB on
  StagedUploadOptions variant = o.engine;
  if (o.measure == "warm-host-post-load") variant.convert_layouts = false, plan.uploader = staged_uploader(variant);
  // The CUDA context and torch's allocator start outside the timing, as in a server that loads.
  (void)at::empty({1}, at::TensorOptions().device(c10::kCUDA));
  const auto t0 = Clock::now();
  auto model = load_model(cache, plan);
  (void)cudaDeviceSynchronize();
  const double seconds = since(t0);
  if (!model) {
    std::fprintf(stderr, "%s: %s\n", o.measure.c_str(), model.status().to_string().c_str());
    return 1;
  }
  std::uint64_t bytes = 0;
  for (const auto& s : model->report.stages)
    if (s.stage.starts_with("upload")) bytes = std::max(bytes, s.bytes);
  std::printf("result %.6f %llu %s\n", seconds, static_cast<unsigned long long>(bytes), to_string(model->report.path));
  std::fprintf(stderr, "%s:\n%s", o.measure.c_str(), model->report.table().c_str());
  return 0;
}

// Runs a command, returns its stdout.
std::string capture(std::vector<std::string> args) {
  int pipe_fds[2];
  if (::pipe(pipe_fds) != 0) return "";
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, pipe_fds[1], 1);
  posix_spawn_file_actions_addclose(&actions, pipe_fds[0]);
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  const int err = ::posix_spawnp(&pid, argv[0], &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  ::close(pipe_fds[1]);
  std::string out;
  char buf[4096];
  for (ssize_t n; err == 0 && (n = ::read(pipe_fds[0], buf, sizeof buf)) > 0;) out.append(buf, static_cast<std::size_t>(n));
  ::close(pipe_fds[0]);
  int status = 0;
  if (err == 0) ::waitpid(pid, &status, 0);
  return out;
}

struct Row {
  std::string method;
  double seconds = 0;  // the best run
  std::uint64_t bytes = 0;
  double median = 0;  // of the runs (the best when there was one)
};

double median_of(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// The bus: pinned host memory to the device, `bytes` in 1 GiB copies, best of three.
double pinned_copy_seconds(std::uint64_t bytes) {
  const std::uint64_t piece = std::min<std::uint64_t>(bytes, 1ull << 30);
  void* host = nullptr;
  void* device = nullptr;
  if (cudaHostAlloc(&host, piece, cudaHostAllocDefault) != cudaSuccess || cudaMalloc(&device, piece) != cudaSuccess)
    return 0;
  std::memset(host, 1, piece);
  double best = 1e30;
  for (int r = 0; r < 3; ++r) {
    const auto t0 = Clock::now();
    for (std::uint64_t done = 0; done < bytes; done += piece)
      (void)cudaMemcpy(device, host, std::min(piece, bytes - done), cudaMemcpyHostToDevice);
    best = std::min(best, since(t0));
  }
  (void)cudaFree(device);
  (void)cudaFreeHost(host);
  return best;
}


// The regular files under `dir` (links not followed) whose names pass `keep`.
std::vector<std::string> files_under(const std::string& dir, bool (*keep)(const std::string& name)) {
  std::vector<std::string> out;
  std::error_code ec;
  for (auto it = std::filesystem::recursive_directory_iterator(dir, ec); !ec && it != std::filesystem::end(it);
       it.increment(ec))
    if (it->is_regular_file(ec) && !it->is_symlink(ec) && keep(it->path().filename().string()))
      out.push_back(it->path().string());
  return out;
}
bool any_file(const std::string&) { return true; }
bool data_file(const std::string& name) { return name.starts_with("data-") && name.ends_with(".bin"); }

// Drops `files` from the page cache; returns the share of their pages still resident after.
double drop_from_page_cache(const std::vector<std::string>& files) {
  ::sync();
  std::uint64_t pages = 0, resident = 0;
  const auto page = static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
  for (const std::string& f : files) {
    const int fd = ::open(f.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) continue;
    (void)::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    struct stat st {};
    if (::fstat(fd, &st) == 0 && st.st_size > 0) {
      const auto size = static_cast<std::uint64_t>(st.st_size);
      if (void* m = ::mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0); m != MAP_FAILED) {
        std::vector<unsigned char> in_core((size + page - 1) / page);
        if (::mincore(m, size, in_core.data()) == 0) {
          pages += in_core.size();
          for (unsigned char c : in_core) resident += c & 1;
        }
        ::munmap(m, size);
      }
    }
    ::close(fd);
  }
  return pages == 0 ? 0 : static_cast<double>(resident) / static_cast<double>(pages);
}

// Reads `files` whole, `threads` at a time in `piece`-byte reads taken in file order; seconds.
double read_files(const std::vector<std::string>& files, int threads, std::uint64_t piece, std::uint64_t& bytes) {
  struct Job {
    int fd;
    std::uint64_t offset, length;
  };
  std::vector<Job> jobs;
  std::vector<int> fds;
  bytes = 0;
  for (const std::string& f : files) {
    const int fd = ::open(f.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    struct stat st {};
    if (fd < 0 || ::fstat(fd, &st) != 0) continue;
    fds.push_back(fd);
    const auto size = static_cast<std::uint64_t>(st.st_size);
    for (std::uint64_t at = 0; at < size; at += piece) jobs.push_back({fd, at, std::min(piece, size - at)});
    bytes += size;
  }
  std::atomic<std::size_t> next{0};
  const auto t0 = Clock::now();
  auto work = [&] {
    void* buffer = nullptr;
    if (::posix_memalign(&buffer, 4096, piece) != 0) return;
    for (std::size_t i; (i = next.fetch_add(1)) < jobs.size();) {
      (void)::pread(jobs[i].fd, buffer, jobs[i].length, static_cast<off_t>(jobs[i].offset));
    }
    std::free(buffer);
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) pool.emplace_back(work);
  work();
  for (auto& t : pool) t.join();
  const double seconds = since(t0);
  for (int fd : fds) ::close(fd);
  return seconds;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i], value = argv[i + 1];
    if (flag == "--size-mib") o.size_mib = std::stoull(value);
    else if (flag == "--tp-size") o.tp_size = std::stoi(value);
    else if (flag == "--work-dir") o.work_dir = value;
    else if (flag == "--json") o.json = value;
    else if (flag == "--measure") o.measure = value;
    else if (flag == "--runs") o.runs = std::max(1, std::stoi(value));
    else if (flag == "--only") o.only = value;
    else if (flag == "--threads") o.engine.threads = std::stoull(value), o.engine_set = true;
    else if (flag == "--chunk-mib") o.engine.chunk_bytes = std::stoull(value) << 20, o.engine_set = true;
    else if (flag == "--pinned-mib") o.engine.pinned_bytes = std::stoull(value) << 20, o.engine_set = true;
    else if (flag == "--pin-ahead") o.engine.pin_ahead = value == "1", o.engine_set = true;
    else if (flag == "--checkpoint-read-ahead") o.ordinary.read_ahead = value == "1";
    else if (flag == "--drop-cache") o.drop_cache = value == "1";
    else if (flag == "--prime") o.prime = value == "1";
    else if (flag == "--disk") o.disk_rows = value;
  }
  if (!o.measure.empty()) return measure(o);
  if (!at::hasCUDA()) {
    std::fprintf(stderr, "no CUDA device\n");
    return 77;
  }

  const demo::DitConfig dit = config_for(o);
  const std::string checkpoint = checkpoint_path(o, dit);
  ::mkdir(o.work_dir.c_str(), 0755);
  struct stat st {};
  if (::stat(checkpoint.c_str(), &st) != 0) {
    if (Status s = demo::write_checkpoint(dit, checkpoint); !s) return 1;
  }
  auto named_in = [](const std::string& list, const std::string& what) {
    return list.empty() || ("," + list + ",").find("," + what + ",") != std::string::npos;
  };
  auto wanted = [&](const std::string& what) { return named_in(o.only, what); };
  auto open_cache = [&] {
    Config config;
    config.directory = o.work_dir + "/cache";
    return Store::open(config);
  };
  // The entry this size and topology load from: evicted to start cold, read for the disk's rows.
  std::string entry_id;
  auto store = wanted("cold") || o.drop_cache ? open_cache() : Status(StatusCode::not_found, "not needed");
  if (store) {
    auto key = key_for_plan(**store, demo::make_plan(dit, checkpoint, c10::Device(c10::kCUDA, 0)));
    if (!key) {
      std::fprintf(stderr, "the load's key: %s\n", key.status().to_string().c_str());
      return 1;
    }
    entry_id = key_id(*key);
  }
  if (store && wanted("cold")) {
    // Start cold: this load's entry goes, and only it. The entries of other topologies stay, so a
    // later run without `cold` (another TP size, the page cache dropped) still loads warm; evicting
    // every entry here once turned such a run's warm row into a miss.
    EvictRequest mine;
    mine.ids = {entry_id};
    (void)evict(**store, mine);
  }
  double still_resident = 0;  // the most of the work directory's pages a drop left in the page cache
  // The data files of this load's entry, which the warm loads read (once `cold` has published it).
  auto entry_data_files = [&] {
    std::vector<std::string> data;
    if (auto entries = store ? list_entries(**store) : store.status())
      for (const EntryInfo& e : *entries)
        if (e.id == entry_id && e.state != EntryState::unfinished) data = files_under(e.path, data_file);
    if (data.empty()) data = files_under(o.work_dir + "/cache", data_file);
    return data;
  };
  auto files_read_by = [&](const std::string& what) {
    return what == "cold" || what.starts_with("ordinary") ? std::vector<std::string>{checkpoint} : entry_data_files();
  };
  // --prime: `files` read once whole, untimed; the caller drops them next.
  auto prime = [&](const std::vector<std::string>& files) {
    std::uint64_t ignored = 0;
    if (o.prime) (void)read_files(files, 1, kLargeRead, ignored);
  };
  auto child = [&](const std::string& what) -> Row {
    std::vector<std::string> args{"/proc/self/exe", "--measure", what, "--size-mib", std::to_string(o.size_mib),
                                  "--tp-size", std::to_string(o.tp_size), "--work-dir", o.work_dir};
    if (o.engine.threads) args.insert(args.end(), {"--threads", std::to_string(o.engine.threads)});
    if (o.engine_set)
      args.insert(args.end(), {"--chunk-mib", std::to_string(o.engine.chunk_bytes >> 20), "--pinned-mib",
                               std::to_string(o.engine.pinned_bytes >> 20), "--pin-ahead",
                               o.engine.pin_ahead ? "1" : "0"});
    if (!o.ordinary.read_ahead) args.insert(args.end(), {"--checkpoint-read-ahead", "0"});
    Row row{what};
    std::vector<double> all;
    for (int run = 0; run < (what == "cold" ? 1 : o.runs); ++run) {  // a cold load happens once
      if (o.drop_cache) {
        prime(files_read_by(what));
        still_resident = std::max(still_resident, drop_from_page_cache(files_under(o.work_dir, any_file)));
      }
      const std::string out = capture(args);
      double seconds = 0;
      char path[32] = {};
      unsigned long long bytes = 0;
      if (auto at = out.find("result "); at != std::string::npos)
        std::sscanf(out.c_str() + at, "result %lf %llu %31s", &seconds, &bytes, path);
      if (seconds > 0 && (row.seconds == 0 || seconds < row.seconds)) row.seconds = seconds, row.bytes = bytes;
      if (seconds > 0) all.push_back(seconds);
    }
    row.median = median_of(all);
    return row;
  };
  std::vector<Row> rows;
  if (wanted("cold")) rows.push_back(child("cold"));  // it publishes the entry the warm loads read
  for (const char* what : {"ordinary", "ordinary-whole", "warm", "warm-engine", "warm-host-post-load",
                           "warm-plain", "warm-view-only"}) {
    if (std::string(what) == "warm-engine" && o.size_mib >= 64) continue;  // the default from 64 MiB
    if (wanted(what)) rows.push_back(child(what));
  }
  std::uint64_t bytes = 0;
  for (const Row& r : rows) bytes = std::max(bytes, r.bytes);
  rows.insert(rows.begin(), Row{"pinned copy (ceiling)", pinned_copy_seconds(bytes), bytes});
  if (o.drop_cache) {
    // The disk's ceilings on the files the warm loads read, and on the checkpoint, which the peers
    // read: a virtual disk need not give two files the same rate. Only this load's entry: another
    // topology's entries are not what the load reads.
    const std::vector<std::string> data = entry_data_files(), peers_file{checkpoint};
    for (const auto& [flag, name, files] :
         {std::tuple{"dd", "disk: 1 thread, 16 MiB reads (dd)", data},
          std::tuple{"checkpoint-dd", "disk: dd of the checkpoint", peers_file}}) {
      if (!named_in(o.disk_rows, flag)) continue;
      prime(files);
      still_resident = std::max(still_resident, drop_from_page_cache(files));
      Row row{name};
      row.seconds = read_files(files, 1, kLargeRead, row.bytes);
      rows.insert(rows.begin() + 1, row);
    }
  }
  double load_file = 0;
  if (o.tp_size == 1 && wanted("load_file")) {  // load_file reads the whole checkpoint: comparable at TP 1 only
    const std::string script = fmt::format(
        "import time, torch; from safetensors.torch import load_file; torch.cuda.init(); torch.empty(1, device='cuda'); "
        "t = time.perf_counter(); d = load_file('{}', device='cuda'); torch.cuda.synchronize(); "
        "print('result', time.perf_counter() - t, sum(v.numel() * v.element_size() for v in d.values()))",
        checkpoint);
    if (o.drop_cache) {
      prime({checkpoint});
      still_resident = std::max(still_resident, drop_from_page_cache({checkpoint}));
    }
    const std::string out = capture({"python3", "-c", script});
    Row row{"python safetensors load_file(cuda)"};
    unsigned long long b = 0;
    if (auto at = out.find("result "); at != std::string::npos) std::sscanf(out.c_str() + at, "result %lf %llu", &row.seconds, &b);
    row.bytes = b;
    load_file = row.seconds;
    rows.push_back(row);
  }

  std::printf("demo model %s, tp %d (rank 0), %s on the device, %s\n", format_size(demo::checkpoint_bytes(dit)).c_str(),
              o.tp_size, format_size(bytes).c_str(),
              o.drop_cache ? fmt::format("page cache dropped before each load{} ({:.1f}% of the pages resident after)",
                                         o.prime ? ", its files read once just before" : "", 100 * still_resident).c_str()
                           : "page cache warm");
  std::printf("%-40s %10s %10s %10s %14s\n", "method", "seconds", "median", "GB/s", "vs load_file");
  for (const Row& r : rows) {
    const double rate = r.seconds > 0 ? static_cast<double>(r.bytes) / r.seconds / 1e9 : 0;
    std::printf("%-40s %10.3f %10s %10.2f %14s\n", r.method.c_str(), r.seconds,
                r.median > 0 ? fmt::format("{:.3f}", r.median).c_str() : "-", rate,
                load_file > 0 && r.seconds > 0 ? fmt::format("{:.2f}x", load_file / r.seconds).c_str() : "-");
  }
  if (!o.json.empty()) {
    std::ofstream out(o.json);
    out << "{\"size_mib\": " << o.size_mib << ", \"tp_size\": " << o.tp_size << ", \"device_bytes\": " << bytes
        << ", \"page_cache\": \"" << (o.drop_cache ? "dropped" : "warm") << "\", \"primed\": " << (o.prime ? "true" : "false")
        << ", \"rows\": [";
    for (std::size_t i = 0; i < rows.size(); ++i)
      out << (i ? ", " : "") << "{\"method\": \"" << rows[i].method << "\", \"seconds\": " << rows[i].seconds
          << ", \"median_seconds\": " << rows[i].median << ", \"bytes\": " << rows[i].bytes << "}";
    out << "]}\n";
  }
  return 0;
}
