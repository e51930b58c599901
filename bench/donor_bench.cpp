// Attaching prepared weights from a GPU donor against loading the same weights warm from the disk
// snapshot, in one run on one GPU: for each size, a donor process serves N GiB of bf16 weights and
// a new consumer process attaches them (connect, key and layout checks, importing the memory
// descriptors, building the tensors) several times; for the sizes that fit the disk, the same
// weights are published to a store by one process and loaded warm by a new one.
//
//   snapcache_donor_bench [--sizes-gib 1,16,64] [--disk-sizes-gib 1,16] [--work-dir DIR]
#include <ATen/Functions.h>
#include <fmt/format.h>
#include <signal.h>
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "snapcache/config.h"
#include "snapcache/donor.h"
#include "snapcache/text.h"
#include "support/child_process.h"

using namespace snapcache;
using Clock = std::chrono::steady_clock;

namespace {

constexpr std::int64_t kRows = 8192, kCols = 16384;  // 256 MiB of bf16 per tensor
constexpr int kAttachRepeats = 5;

DonorOptions socket_options(const std::string& dir) {
  DonorOptions o;
  o.socket_dir = dir;
  return o;
}

DonorTierOptions required_tier_options(const std::string& dir) {
  DonorTierOptions o;
  o.socket_dir = dir;
  o.required = true;
  return o;
}

double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

// N GiB of bf16 weights, the same in every process: tensor i is filled with i / 64.
LoadPlan synthetic_plan(int gib, const std::string& work) {
  LoadPlan plan;
  const std::string marker = fmt::format("{}/synthetic-{}g.id", work, gib);
  struct stat st {};
  if (::stat(marker.c_str(), &st) != 0) std::ofstream(marker) << gib;  // its identity is part of the key
  plan.checkpoint_files = {marker};
  plan.component = fmt::format("synthetic-{}g", gib);
  plan.source_identity = "snapcache_donor_bench";
  plan.dtype = "bfloat16";
  plan.device = c10::Device(c10::kCUDA, 0);
  const int tensors = gib * 4;
  for (int i = 0; i < tensors; ++i) plan.expected.push_back({fmt::format("layer.{}.weight", i), DType::bfloat16, {kRows, kCols}, {}, {}});
  plan.ordinary_loader = [tensors](const LoadPlan&) -> Result<NamedTensors> {
    NamedTensors out;
    for (int i = 0; i < tensors; ++i)
      out.emplace_back(fmt::format("layer.{}.weight", i), at::full({kRows, kCols}, i / 64.0, at::kBFloat16));
    return out;
  };
  return plan;
}

Config store_config(const std::string& dir) {
  Config c;
  c.directory = dir;
  c.capacity_bytes = 200ull << 30;
  c.reserve_free_bytes = 1ull << 30;
  return c;
}

int child_donor(int gib, const std::string& work, const std::string& sockets) {
  LoadPlan plan = synthetic_plan(gib, work);
  LoadedModel model;
  for (const auto& e : plan.expected)
    model.weights.emplace_back(e.name, at::full({kRows, kCols}, std::stoi(e.name.substr(6)) / 64.0,
                                                at::TensorOptions().dtype(at::kBFloat16).device(plan.device)));
  auto donor = Donor::start(plan.device, socket_options(sockets));
  if (!donor) return std::printf("error %s\n", donor.status().to_string().c_str()), 1;
  const auto t0 = Clock::now();
  if (Status st = (*donor)->serve(nullptr, plan, model); !st) return std::printf("error %s\n", st.to_string().c_str()), 1;
  const double serve_ms = ms_since(t0);
  model = LoadedModel();
  static Donor* running = donor->get();
  signal(SIGTERM, [](int) { running->request_stop(); });
  std::printf("ready serve_ms=%.1f\n", serve_ms);
  std::fflush(stdout);
  auto shutdown = (*donor)->run();
  std::printf("shutdown %s\n", shutdown ? shutdown->summary().c_str() : shutdown.status().to_string().c_str());
  return 0;
}

int child_attach(int gib, const std::string& work, const std::string& sockets) {
  LoadPlan plan = synthetic_plan(gib, work);
  plan.tiers = {donor_tier(required_tier_options(sockets))};
  (void)at::empty({1}, at::TensorOptions().device(plan.device));  // the CUDA context, as a server has it
  std::vector<double> totals, attaches;
  for (int i = 0; i < kAttachRepeats; ++i) {
    const auto t0 = Clock::now();
    auto model = load_model(nullptr, plan);
    const double total = ms_since(t0);
    if (!model) return std::printf("error %s\n", model.status().to_string().c_str()), 1;
    for (const auto& s : model->report.stages)
      if (s.stage == "attach") attaches.push_back(s.seconds * 1e3);
    totals.push_back(total);
  }
  std::sort(totals.begin(), totals.end());
  std::sort(attaches.begin(), attaches.end());
  std::printf("result first_ms=%.2f median_ms=%.2f attach_stage_median_ms=%.2f\n", totals.front(),
              totals[totals.size() / 2], attaches.empty() ? 0.0 : attaches[attaches.size() / 2]);
  return 0;
}

int child_disk(int gib, const std::string& work, const std::string& store_dir, bool warm) {
  LoadPlan plan = synthetic_plan(gib, work);
  plan.publish_in_background = false;
  auto store = Store::open(store_config(store_dir));
  if (!store) return std::printf("error %s\n", store.status().to_string().c_str()), 1;
  (void)at::empty({1}, at::TensorOptions().device(plan.device));
  const auto t0 = Clock::now();
  auto model = load_model(store->get(), plan);
  const double total = ms_since(t0);
  if (!model) return std::printf("error %s\n", model.status().to_string().c_str()), 1;
  if (warm && model->report.path != LoadPath::hit) return std::printf("error not a hit: %s\n", model->report.reason.c_str()), 1;
  std::printf("result ms=%.1f path=%s\n", total, to_string(model->report.path));
  return 0;
}

// The value after `key=` in a "result ..." line.
double field(const std::string& line, const std::string& key) {
  auto at = line.find(key + "=");
  return at == std::string::npos ? -1 : std::stod(line.substr(at + key.size() + 1));
}

// Runs a child to its end and returns its "result" line.
std::string run_child(const std::vector<std::string>& args) {
  test::ChildProcess child("/proc/self/exe", args);
  if (!child.wait_for_line("result")) throw std::runtime_error("child " + args[0] + " failed: " + child.last_line());
  (void)child.wait();
  return child.last_line();
}

std::vector<int> parse_list(const std::string& s) {
  std::vector<int> out;
  std::stringstream in(s);
  for (std::string item; std::getline(in, item, ',');) out.push_back(std::stoi(item));
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.size() == 4 && args[0] == "donor") return child_donor(std::stoi(args[1]), args[2], args[3]);
  if (args.size() == 4 && args[0] == "attach") return child_attach(std::stoi(args[1]), args[2], args[3]);
  if (args.size() == 5 && args[0] == "disk") return child_disk(std::stoi(args[1]), args[2], args[3], args[4] == "warm");

  std::string sizes = "1,16,64", disk_sizes = "1,16", work = "/tmp/snapcache-donor-bench";
  for (std::size_t i = 0; i + 1 < args.size(); i += 2) {
    if (args[i] == "--sizes-gib") sizes = args[i + 1];
    else if (args[i] == "--disk-sizes-gib") disk_sizes = args[i + 1];
    else if (args[i] == "--work-dir") work = args[i + 1];
  }
  ::mkdir(work.c_str(), 0755);
  const std::string sockets = work + "/sockets", store_dir = work + "/store";
  ::mkdir(sockets.c_str(), 0700);
  const std::vector<int> disk = parse_list(disk_sizes);
  fmt::print("{:>6} | {:>13} | {:>13} | {:>12} | {:>15} | {:>9}\n", "GiB", "attach (ms)", "attach stage", "first (ms)",
             "warm disk (ms)", "ratio");
  for (int gib : parse_list(sizes)) {
    double disk_ms = -1;
    if (std::find(disk.begin(), disk.end(), gib) != disk.end()) {
      (void)run_child({"disk", std::to_string(gib), work, store_dir, "cold"});
      disk_ms = field(run_child({"disk", std::to_string(gib), work, store_dir, "warm"}), "ms");
    }
    test::ChildProcess donor("/proc/self/exe", {"donor", std::to_string(gib), work, sockets});
    if (!donor.wait_for_line("ready")) return std::fprintf(stderr, "donor of %d GiB failed: %s\n", gib, donor.last_line().c_str()), 1;
    const std::string serve = donor.last_line();
    const std::string attach = run_child({"attach", std::to_string(gib), work, sockets});
    ::kill(donor.pid(), SIGTERM);
    donor.wait_for_line("shutdown");
    const std::string shutdown = donor.last_line();
    (void)donor.wait();
    const double median = field(attach, "median_ms");
    fmt::print("{:>6} | {:>13.2f} | {:>13.2f} | {:>12.2f} | {:>15} | {:>9}\n", gib, median,
               field(attach, "attach_stage_median_ms"), field(attach, "first_ms"),
               disk_ms < 0 ? "-" : fmt::format("{:.1f}", disk_ms), disk_ms < 0 ? "-" : fmt::format("{:.0f}x", disk_ms / median));
    fmt::print("         donor: {}; {}\n", serve, shutdown);
    std::fflush(stdout);
  }
  return 0;
}
