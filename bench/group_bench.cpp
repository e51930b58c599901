// What agreeing costs a group load: N ranks (processes of this program) load the demo model's TP
// shards warm, each alone and then in a group (c10d's TCPStore from the environment), in the same
// processes, alternating; and a bare exchange of a report-sized message. Each rank prints its
// medians; the parent prints the table (medians over ranks, and the slowest rank).
//
//   snapcache_group_bench [--ranks 8] [--repeat 20] [--transport store|nccl] [--device cpu|cuda]
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "dit_model.h"
#include "snapcache/pipeline.h"
#include "snapcache/rank_group.h"
#include "support/child_process.h"
#include "support/temp_dir.h"

extern char** environ;

using namespace snapcache;
using Clock = std::chrono::steady_clock;

namespace {

struct Args {
  int ranks = 8, repeat = 20, rank = -1;
  std::string transport = "store", device = "cpu", dir, port;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

demo::DitConfig config(int rank, int ranks) {
  demo::DitConfig c;
  c.hidden = 1024;
  c.layers = 4;
  c.heads = 16;
  c.tokens = 8;
  c.tp_rank = rank;
  c.tp_size = ranks;
  return c;
}

// One rank: prints "alone_ms group_ms agreement_ms exchange_ms" (medians).
int run_rank(const Args& a) {
  ::setenv("RANK", std::to_string(a.rank).c_str(), 1);
  ::setenv("LOCAL_RANK", std::to_string(a.rank).c_str(), 1);
  auto group = rank_group_from_environment(a.transport == "nccl" ? GroupTransport::nccl : GroupTransport::store);
  if (!group) {
    std::fprintf(stderr, "rank %d: %s\n", a.rank, group.status().to_string().c_str());
    return 1;
  }
  Config cfg;
  cfg.directory = a.dir + "/cache";
  cfg.reserve_free_bytes = 0;
  auto store = Store::open(cfg);
  if (!store) return 1;
  const c10::Device device = a.device == "cuda" ? c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(a.rank))
                                                : c10::Device(c10::kCPU);
  LoadPlan alone = demo::make_plan(config(a.rank, a.ranks), a.dir + "/model.safetensors", device);
  LoadPlan together = alone;
  together.group = *group;
  if (!load_model(store->get(), together)) return 1;  // cold, publishes every shard
  std::vector<double> alone_ms, group_ms, agreement_ms, exchange_ms;
  const std::string message(300, 'x');  // about a tier answer's size
  for (int i = 0; i < a.repeat; ++i) {
    auto t0 = Clock::now();
    auto m1 = load_model(store->get(), alone);
    alone_ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
    t0 = Clock::now();
    auto m2 = load_model(store->get(), together);
    group_ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
    if (!m1 || !m2 || m1->report.path != LoadPath::hit || m2->report.path != LoadPath::hit) return 1;
    agreement_ms.push_back(m2->report.group->agreement_seconds * 1e3);
    t0 = Clock::now();
    if (!(*group)->exchange(message)) return 1;
    exchange_ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
  }
  std::printf("%.3f %.3f %.3f %.3f\n", median(alone_ms), median(group_ms), median(agreement_ms), median(exchange_ms));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--ranks") a.ranks = std::stoi(v);
    else if (k == "--repeat") a.repeat = std::stoi(v);
    else if (k == "--transport") a.transport = v;
    else if (k == "--device") a.device = v;
    else if (k == "--rank") a.rank = std::stoi(v);
    else if (k == "--dir") a.dir = v;
  }
  if (a.rank >= 0) return run_rank(a);

  test::TempDir dir;
  a.dir = dir.path();
  if (!demo::write_checkpoint(config(0, 1), a.dir + "/model.safetensors")) return 1;
  ::setenv("MASTER_ADDR", "127.0.0.1", 1);
  ::setenv("MASTER_PORT", "29531", 1);
  ::setenv("WORLD_SIZE", std::to_string(a.ranks).c_str(), 1);
  std::vector<std::unique_ptr<test::ChildProcess>> children;
  for (int r = 0; r < a.ranks; ++r)
    children.push_back(std::make_unique<test::ChildProcess>(
        "/proc/self/exe", std::vector<std::string>{"--rank", std::to_string(r), "--ranks", std::to_string(a.ranks),
                                                   "--repeat", std::to_string(a.repeat), "--transport", a.transport,
                                                   "--device", a.device, "--dir", a.dir}));
  std::vector<double> alone, together, agreement, exchange;
  for (auto& c : children) {
    if (!c->wait_for_line("")) {
      std::fprintf(stderr, "a rank failed\n");
      return 1;
    }
    double v[4] = {};
    if (std::sscanf(c->last_line().c_str(), "%lf %lf %lf %lf", &v[0], &v[1], &v[2], &v[3]) != 4) return 1;
    alone.push_back(v[0]);
    together.push_back(v[1]);
    agreement.push_back(v[2]);
    exchange.push_back(v[3]);
    if (c->wait() != 0) return 1;
  }
  auto slowest = [](const std::vector<double>& v) { return *std::max_element(v.begin(), v.end()); };
  std::printf("%d ranks (%s, %s), demo model shards of %s, warm loads, medians of %d\n", a.ranks,
              a.transport.c_str(), a.device.c_str(), "1024x4", a.repeat);
  std::printf("  %-34s %10s %14s\n", "", "median rank", "slowest rank");
  std::printf("  %-34s %8.2f ms %11.2f ms\n", "warm load alone", median(alone), slowest(alone));
  std::printf("  %-34s %8.2f ms %11.2f ms\n", "warm load in the group", median(together), slowest(together));
  std::printf("  %-34s %8.2f ms %11.2f ms\n", "  of which agreeing (2 exchanges)", median(agreement), slowest(agreement));
  std::printf("  %-34s %8.2f ms %11.2f ms\n", "one exchange (300 bytes per rank)", median(exchange), slowest(exchange));
  std::printf("  group/alone: %.2fx\n", median(together) / std::max(median(alone), 1e-9));
  return 0;
}
