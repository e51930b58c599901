// The second process of the donor tests: a donor that serves the test model until SIGTERM, or a
// consumer that attaches it (required: no fallback), optionally writes to it, and holds it.
//   snapcache_donor_helper serve  SOCKET_DIR WORK_DIR DEVICE TP_RANK TP_SIZE MAX_CONSUMERS TIMEOUT_MS
//   snapcache_donor_helper attach SOCKET_DIR WORK_DIR DEVICE TP_RANK TP_SIZE HOLD_MS write|read
// Prints "ready ..." once serving or attached; the donor prints
// "shutdown changed=N consumers=N timed_out=N" when it ends.
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include <ATen/ops/add.h>

#include "support/donor_fixture.h"
#include "snapcache/donor.h"

using namespace snapcache;
using test::required_tier_options;
using test::socket_options;

namespace {

Donor* running = nullptr;
extern "C" void stop(int) {
  if (running != nullptr) running->request_stop();
}

int fail(const std::string& what) {
  std::printf("error %s\n", what.c_str());
  std::fflush(stdout);
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 9) return fail("usage: see donor_helper_main.cpp");
  const std::string mode = argv[1], socket_dir = argv[2], work_dir = argv[3];
  const c10::Device device(c10::kCUDA, static_cast<c10::DeviceIndex>(std::stoi(argv[4])));
  const auto config = test::donor_test_config(std::stoi(argv[5]), std::stoi(argv[6]));
  LoadPlan plan = demo::make_plan(config, test::donor_test_checkpoint(work_dir), device);
  // SNAPCACHE_TEST_CONTENT_CACHE=DIR: serve under a key that names the checkpoint by its bytes
  // (content hashing, digests memoized in the cache at DIR), as a fleet that moves checkpoints does.
  std::shared_ptr<Store> store;
  if (const char* cache = std::getenv("SNAPCACHE_TEST_CONTENT_CACHE"); cache != nullptr) {
    Config c;
    c.directory = cache;
    auto opened = Store::open(c);
    if (!opened) return fail(opened.status().to_string());
    store = *opened;
    plan.hash_checkpoint_contents = true;
  }
  if (mode == "serve") {
    auto model = load_model(nullptr, plan);
    if (!model) return fail(model.status().to_string());
    DonorOptions options;
    options.socket_dir = socket_dir;
    options.max_consumers_per_key = std::stoi(argv[7]);
    options.shutdown_timeout = std::chrono::milliseconds(std::stoi(argv[8]));
    auto donor = Donor::start(device, options);
    if (!donor) return fail(donor.status().to_string());
    if (Status st = (*donor)->serve(store.get(), plan, *model); !st) return fail(st.to_string());
    *model = LoadedModel();
    running = donor->get();
    std::signal(SIGTERM, stop);
    std::signal(SIGINT, stop);
    std::printf("ready %s\n", (*donor)->socket_path().c_str());
    std::fflush(stdout);
    auto shutdown = (*donor)->run();
    if (!shutdown) return fail(shutdown.status().to_string());
    std::printf("shutdown changed=%zu consumers=%zu timed_out=%d\n", shutdown->changed.size(), shutdown->consumers_at_stop,
                shutdown->timed_out ? 1 : 0);
    std::fflush(stdout);
    return 0;
  }
  if (mode == "attach") {
    plan.tiers = {donor_tier(required_tier_options(socket_dir))};
    auto model = load_model(nullptr, plan);
    if (!model) return fail(model.status().to_string());
    if (std::string(argv[8]) == "write") {
      // What a consumer must never do: write to weights it shares with the donor.
      at::Tensor& w = model->weights.front().second;
      w.add_(1);
      (void)w.sum().item();  // wait for it
    }
    std::printf("ready %s\n", model->report.reason.c_str());
    std::fflush(stdout);
    std::this_thread::sleep_for(std::chrono::milliseconds(std::stoi(argv[7])));
    return 0;
  }
  return fail("unknown mode " + mode);
}
