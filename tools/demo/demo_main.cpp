// snapcache-demo: README's main job, a server restart in miniature. Generates a small DiT-like
// safetensors checkpoint; loads one TP rank the ordinary way (no cache) and through snapcache,
// which publishes a snapshot on the first run; then starts itself again as a new process, as a
// restarted server would, which loads from the snapshot. Both processes run a forward pass; the
// weights and outputs of the no-cache, first and restarted loads must be bit-identical. The
// entry stays in the cache between runs (--fresh drops it first).
//
// With --donor it loads the model and keeps it on the GPU for other processes until SIGINT or
// SIGTERM; with --attach it loads through that donor (GPU retention tier), then checks the result
// against an ordinary load.
#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <ATen/Context.h>
#include <ATen/Functions.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string_view>
#include <vector>

#include "dit_model.h"
#include "snapcache/config.h"
#include "snapcache/donor.h"
#include "snapcache/extend/tier.h"
#include "snapcache/key.h"
#include "snapcache/log.h"
#include "snapcache/maintenance.h"
#include "snapcache/printable.h"
#include "snapcache/rank_group.h"
#include "snapcache/text.h"

extern char** environ;

using namespace snapcache;

namespace {

struct Options {
  std::string cache_dir, work_dir = "/tmp/snapcache-demo", device_name;
  std::uint64_t size_mib = 320;
  int tp_rank = 0, tp_size = 1;
  bool disable_cache = false, fresh = false;
  std::string capacity_gib;  // parsed by parse_gib, the rule SNAPCACHE_CAPACITY_GIB follows
  bool donor = false, attach = false, require_donor = false;
  std::string donor_dir;  // the donor socket directory (default: DonorOptions's)
  std::string group;      // "store" or "nccl": load once as a rank of a group (torchrun's environment)
  std::string restart_of;  // set in the restarted process: the first process's fingerprint
  double reference_seconds = 0;  // and how long its first load, without the cache, took
};

struct Run {
  LoadedModel model;
  std::string fingerprint;  // weights, derived buffers and forward output
};

int fail(const std::string& what) {
  fmt::print(stderr, "snapcache-demo: {}\n", printable(what));
  return 1;
}

// Loads and runs the forward pass; the report says how the load went.
Result<Run> load_and_run(Store* store, const LoadPlan& plan, const demo::DitConfig& dit) {
  auto model = load_model(store, plan);
  if (!model) return model.status();
  Run run{std::move(*model), {}};
  run.fingerprint = demo::fingerprint(run.model, demo::forward(dit, run.model));
  return run;
}

// The comparison loads run without the cache on purpose. The library would log each as
// "ineligible ...: no cache store is configured", which reads like a failure; the demo says what
// they are instead (load_without_cache), and its log sink leaves out their info and debug lines.
// The flag is per thread: a publication in the background logs from its own thread, and is kept.
thread_local bool in_comparison_load = false;

void demo_log_sink(LogLevel level, std::string_view message) {
  if (in_comparison_load && level >= LogLevel::info) return;
  log_to_stderr(level, message);
}

// The ordinary path alone, no cache involved: what the cache's loads are compared with.
Result<Run> load_without_cache(const LoadPlan& plan, const demo::DitConfig& dit) {
  in_comparison_load = true;
  auto run = load_and_run(nullptr, plan, dit);
  in_comparison_load = false;
  if (run)
    fmt::print("load without the cache (for comparison): {}, read by the ordinary loader\n\n",
               format_duration(run->model.report.seconds));
  std::fflush(stdout);  // before the library's next log lines (stderr)
  return run;
}

// `dir` and its missing parents, as `mkdir -p` makes them. (The library's own helper is private;
// the demo uses the public API only.)
Status make_work_dir(const std::string& dir) {
  for (std::size_t end = dir.find('/', 1);; end = dir.find('/', end + 1)) {
    const std::string part = dir.substr(0, end);
    if (::mkdir(part.c_str(), 0755) != 0 && errno != EEXIST)
      return {StatusCode::io_error, fmt::format("--work-dir: cannot create {}: {}", part, std::strerror(errno))};
    if (end == std::string::npos) break;
  }
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    return {StatusCode::invalid_argument, fmt::format("--work-dir: {} exists and is not a directory", dir)};
  return Status::ok();
}

// Reasons and stage errors may carry names from the cache or a donor's words: printed escaped.
void print_load(const std::string& title, const LoadReport& report) {
  fmt::print("{}: {} in {} — {}\n", title, to_string(report.path), format_duration(report.seconds),
             printable(report.reason));
  for (const auto& line : report.table_lines()) fmt::print("{}\n", printable(line));
  fmt::print("\n");
}

// The same program as a new process, as a restarted server: same options, plus the fingerprint it
// must reproduce.
int start_restarted_process(int argc, char** argv, const std::string& fingerprint, double reference_seconds) {
  std::vector<std::string> args(argv, argv + argc);
  for (auto it = args.begin(); it != args.end();)  // a second --fresh would drop the entry again
    it = *it == "--fresh" ? args.erase(it) : it + 1;
  args.insert(args.end(), {"--restart-of", fingerprint, "--reference-seconds", fmt::format("{:.6f}", reference_seconds)});
  std::vector<char*> c_args;
  for (auto& a : args) c_args.push_back(a.data());
  c_args.push_back(nullptr);
  std::fflush(stdout);
  std::fflush(stderr);
  pid_t pid = 0;
  if (int err = ::posix_spawn(&pid, "/proc/self/exe", nullptr, nullptr, c_args.data(), environ); err != 0)
    return fail(fmt::format("cannot start the restarted process: {}", std::strerror(err)));
  int status = 0;
  if (::waitpid(pid, &status, 0) != pid) return fail("lost the restarted process");
  return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}

// --group: one load with the other ranks of the group (every rank takes the same tier), its report
// and fingerprint; the next run of the same ranks is warm.
int load_in_group(Store* store, LoadPlan plan, const demo::DitConfig& dit, const Options& o) {
  RankGroupOptions options;
  options.timeout = std::chrono::seconds(120);
  auto group = rank_group_from_environment(o.group == "nccl" ? GroupTransport::nccl : GroupTransport::store, options);
  if (!group) return fail(group.status().to_string());
  if ((*group)->rank() != o.tp_rank || (*group)->size() != o.tp_size)
    return fail(fmt::format("--tp-rank {} --tp-size {} but the group says rank {} of {} (RANK, WORLD_SIZE)", o.tp_rank,
                            o.tp_size, (*group)->rank(), (*group)->size()));
  // The first exchange is a barrier: rank 0 has written the checkpoint when it gets there.
  if (auto ready = (*group)->exchange("checkpoint ready"); !ready) return fail(ready.status().to_string());
  plan.group = *group;
  auto run = load_and_run(store, plan, dit);
  if (!run) return fail(fmt::format("rank {}: load failed: {}", o.tp_rank, run.status().to_string()));
  print_load(fmt::format("rank {} of {} ({})", o.tp_rank, o.tp_size, (*group)->describe()), run->model.report);
  fmt::print("rank {} fingerprint {}\n", o.tp_rank, run->fingerprint);
  return 0;
}

Donor* running_donor = nullptr;
extern "C" void stop_donor(int) {
  if (running_donor != nullptr) running_donor->request_stop();
}

// --donor: load, keep the weights on the GPU for other processes, serve until SIGINT/SIGTERM.
int serve_as_donor(Store* store, const LoadPlan& plan, const demo::DitConfig& dit, const Options& o) {
  auto loaded = load_and_run(store, plan, dit);
  if (!loaded) return fail("load failed: " + loaded.status().to_string());
  print_load("donor's load", loaded->model.report);
  DonorOptions options;
  options.socket_dir = o.donor_dir;
  auto donor = Donor::start(plan.device, options);
  if (!donor) return fail("cannot start the donor: " + donor.status().to_string());
  if (Status st = (*donor)->serve(store, plan, loaded->model); !st) return fail("cannot serve: " + st.to_string());
  loaded->model = LoadedModel();  // the donor keeps its own copy
  running_donor = donor->get();
  std::signal(SIGINT, stop_donor);
  std::signal(SIGTERM, stop_donor);
  fmt::print("donor: serving {} ({}) at {}; fingerprint {}. SIGINT or SIGTERM stops it.\n", printable(plan.component),
             format_size((*donor)->bytes()), printable((*donor)->socket_path()), loaded->fingerprint);
  std::fflush(stdout);
  auto shutdown = (*donor)->run();
  running_donor = nullptr;
  if (!shutdown) return fail("donor: " + shutdown.status().to_string());
  fmt::print("donor: {}\n", printable(shutdown->summary()));
  return shutdown->changed.empty() ? 0 : 5;
}

// --attach: load through the donor (falling back to the disk snapshot and the ordinary loader
// unless --require-donor), run the forward pass, compare with an ordinary load.
int attach_to_donor(Store* store, LoadPlan plan, const demo::DitConfig& dit, const Options& o) {
  LoadPlan attached_plan = plan;
  DonorTierOptions donor_options;
  donor_options.socket_dir = o.donor_dir;
  donor_options.required = o.require_donor;
  attached_plan.tiers = {donor_tier(donor_options), snapshot_tier(), ordinary_tier()};
  auto attached = load_and_run(store, attached_plan, dit);
  if (!attached) return fail("load failed: " + attached.status().to_string());
  print_load(fmt::format("attaching process (pid {})", ::getpid()), attached->model.report);
  auto ordinary = load_without_cache(plan, dit);
  if (!ordinary) return fail("load without the cache failed: " + ordinary.status().to_string());
  const bool same = attached->fingerprint == ordinary->fingerprint;
  fmt::print("weights and outputs (ordinary load / attached): {}  (fingerprint {})\n", same ? "bit-identical" : "DIFFERENT",
             attached->fingerprint);
  fmt::print("attached load: {} ({}), ordinary load: {}\n", format_duration(attached->model.report.seconds),
             to_string(attached->model.report.path), format_duration(ordinary->model.report.seconds));
  return same ? 0 : 3;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"snapcache demo: a first load that publishes, a restarted process that reuses it, bit-identical"};
  Options o;
  app.add_option("--dir", o.cache_dir, "cache directory (default: SNAPCACHE_DIR or ~/.cache/snapcache)");
  app.add_option("--work-dir", o.work_dir, "where the generated checkpoint is written (made, with missing parents)")->capture_default_str();
  app.add_option("--size-mib", o.size_mib, "approximate checkpoint size in MiB")->capture_default_str()->check(CLI::Range(16, 65536));
  app.add_option("--tp-rank", o.tp_rank, "tensor-parallel rank to load")->capture_default_str();
  app.add_option("--tp-size", o.tp_size, "tensor-parallel size (1, 2, 4 or 8)")->capture_default_str()->check(CLI::IsMember({1, 2, 4, 8}));
  app.add_option("--device", o.device_name, "cpu or cuda[:N] (default: cuda if available, else cpu)");
  app.add_flag("--disable-cache", o.disable_cache, "load without the cache (every load takes the ordinary path)");
  app.add_flag("--fresh", o.fresh, "drop this model's cache entry first, so the first load is cold");
  app.add_option("--capacity-gib", o.capacity_gib, "cache capacity in GiB (a plain number: 2, 0.5)");
  auto* donor_flag = app.add_flag("--donor", o.donor, "load, then keep the weights on the GPU for other processes until SIGINT/SIGTERM");
  app.add_flag("--attach", o.attach, "load through the donor of this GPU (falls back to the cache, then the ordinary load)")
      ->excludes(donor_flag);
  app.add_flag("--require-donor", o.require_donor, "with --attach: fail instead of falling back when no donor serves");
  app.add_option("--donor-dir", o.donor_dir, "donor socket directory (default: SNAPCACHE_DONOR_DIR, $XDG_RUNTIME_DIR/snapcache or /tmp/snapcache-UID)");
  app.add_option("--group", o.group,
                 "load once as rank RANK of WORLD_SIZE (MASTER_ADDR, MASTER_PORT: torchrun's environment), agreeing "
                 "with the other ranks through c10d's TCPStore (store) or NCCL (nccl); run twice: cold, then warm")
      ->check(CLI::IsMember({"store", "nccl"}));
  app.add_option("--restart-of", o.restart_of, "(internal) run as the restarted process")->group("");
  app.add_option("--reference-seconds", o.reference_seconds, "(internal) the first process's no-cache load time")->group("");
  CLI11_PARSE(app, argc, argv);
  set_log_sink(demo_log_sink);
  if (o.tp_rank < 0 || o.tp_rank >= o.tp_size)
    return fail(fmt::format("--tp-rank {} is not in [0, {})", o.tp_rank, o.tp_size));
  const bool restarted = !o.restart_of.empty();

  // A flag the user typed wrong is an error; a cache that cannot be used is not (see below).
  std::optional<std::uint64_t> capacity;
  if (!o.capacity_gib.empty()) {
    auto bytes = parse_gib(o.capacity_gib);
    if (!bytes) return fail("--capacity-gib: " + bytes.status().message());
    capacity = *bytes;
  }
  auto config = Config::from_environment();
  if (config) {
    if (!o.cache_dir.empty()) {
      config->directory = o.cache_dir;
      config->sources["directory"] = ConfigSource::flag;
      config->flags["directory"] = "--dir";
    }
    if (o.disable_cache) config->mode = CacheMode::disabled;
    if (capacity) {
      config->capacity_bytes = *capacity;
      config->sources["capacity"] = ConfigSource::flag;
      config->flags["capacity"] = "--capacity-gib";  // so a publication skipped for room names the flag
    }
  }

  c10::Device device(c10::kCPU);
  try {
    device = o.device_name.empty() ? c10::Device(at::hasCUDA() ? c10::kCUDA : c10::kCPU) : c10::Device(o.device_name);
  } catch (const c10::Error&) {
    return fail(fmt::format("unknown device '{}'", o.device_name));
  }
  if (device.is_cuda() && !at::hasCUDA()) return fail("no CUDA device here; use --device cpu");

  demo::DitConfig dit;
  dit.tp_rank = o.tp_rank;
  dit.tp_size = o.tp_size;
  dit.layers = demo::layers_for(dit, static_cast<std::uint64_t>(o.size_mib * (1ull << 20)));

  while (o.work_dir.size() > 1 && o.work_dir.back() == '/') o.work_dir.pop_back();
  if (Status made = make_work_dir(o.work_dir); !made) return fail(made.to_string());
  const std::string checkpoint = fmt::format("{}/dit-h{}-l{}.safetensors", o.work_dir, dit.hidden, dit.layers);
  struct stat st {};
  // In a group rank 0 writes the checkpoint; the others wait for it in load_in_group.
  if (!restarted && (o.group.empty() || o.tp_rank == 0) &&
      (::stat(checkpoint.c_str(), &st) != 0 || static_cast<std::uint64_t>(st.st_size) < demo::checkpoint_bytes(dit))) {
    fmt::print("generating {} ({} layers, {})\n", checkpoint, dit.layers, format_size(demo::checkpoint_bytes(dit)));
    if (Status s = demo::write_checkpoint(dit, checkpoint); !s) return fail(s.to_string());
  }

  // A cache that cannot be used (invalid settings, a read-only or foreign directory) is no reason
  // for a load to fail: the store is then unavailable and every load takes the ordinary path,
  // its report saying why.
  std::shared_ptr<Store> store = Store::open_for_loading(config);
  LoadPlan plan = demo::make_plan(dit, checkpoint, device);

  if ((o.donor || o.attach) && !device.is_cuda()) return fail("--donor and --attach need a CUDA device");
  if (o.donor) return serve_as_donor(store.get(), plan, dit, o);
  if (o.attach) return attach_to_donor(store.get(), plan, dit, o);

  if (!o.group.empty()) return load_in_group(store.get(), plan, dit, o);

  if (!restarted) {
    if (o.fresh && store->config().enabled() && store->unavailable_reason().empty())
      if (auto key = key_for_plan(*store, plan)) {
        auto removed = remove_entry(*store, key_id(*key));
        if (!removed && removed.status().code() != StatusCode::not_found)  // say so, and load anyway
          fmt::print("--fresh: the entry could not be dropped ({}); the first load may be warm\n\n",
                     printable(removed.status().to_string()));
      }
    const std::string cache = !store->unavailable_reason().empty() ? "unavailable, loading without it: " +
                                                                         store->unavailable_reason()
                              : store->config().enabled() ? store->config().directory
                                                          : "disabled";
    fmt::print("checkpoint {} | tp {}/{} | device {} | cache {}\n\n", printable(checkpoint), o.tp_rank, o.tp_size,
               device.str(), printable(cache));
    std::fflush(stdout);  // keep the library's log lines (stderr) in order with ours
    auto reference = load_without_cache(plan, dit);
    if (!reference) return fail("load without the cache failed: " + reference.status().to_string());
    auto first = load_and_run(store.get(), plan, dit);
    if (!first) return fail("load failed: " + first.status().to_string());
    print_load("first process", first->model.report);
    if (first->model.report.path == LoadPath::hit)
      fmt::print("(the entry was kept from an earlier run; --fresh starts with a cold load)\n\n");
    const bool same = reference->fingerprint == first->fingerprint;
    fmt::print("weights and outputs (no cache / first process): {}\n\n", same ? "bit-identical" : "DIFFERENT");
    if (!same) return 3;
    if (first->model.publication.started()) {
      // On a GPU the load returned while the snapshot was still being written; a server would go
      // on serving. The restarted process needs the entry, so this one waits for it.
      const PublicationReport p = first->model.publication.wait();
      fmt::print("background publication: {}{}{}\n\n", p.outcome(),
                 p.written ? fmt::format(" ({} in {})", format_size(p.bytes), format_duration(p.seconds))
                           : ": " + printable(p.status.to_string()),
                 p.evictions.empty() ? "" : "; " + printable(p.evictions));
    }
    fmt::print("restarting as a new process...\n\n");
    return start_restarted_process(argc, argv, first->fingerprint, reference->model.report.seconds);
  }

  // The restarted process: what a server restart costs with the snapshot, and without it.
  auto warm = load_and_run(store.get(), plan, dit);
  if (!warm) return fail("load failed: " + warm.status().to_string());
  print_load(fmt::format("restarted process (pid {})", ::getpid()), warm->model.report);
  auto ordinary = load_without_cache(plan, dit);
  if (!ordinary) return fail("load without the cache failed: " + ordinary.status().to_string());
  const bool same = warm->fingerprint == o.restart_of && ordinary->fingerprint == o.restart_of;
  fmt::print("weights and outputs (no cache / first process / restarted process): {}  (fingerprint {})\n",
             same ? "bit-identical" : "DIFFERENT", warm->fingerprint);
  // Compared with the same load as the first of a process (the first process's no-cache load), as
  // a restarted server does it: a load after another in one process finds staging buffers pinned
  // and CUDA kernels loaded, which a restart never does.
  const double with = warm->model.report.seconds;
  const double without = o.reference_seconds > 0 ? o.reference_seconds : ordinary->model.report.seconds;
  fmt::print("restarted load: {} with snapcache ({}), {} without it (a process's first load): {:.2f}x the time\n",
             format_duration(with), to_string(warm->model.report.path), format_duration(without),
             without > 0 ? with / without : 0.0);
  return same ? 0 : 3;
}
