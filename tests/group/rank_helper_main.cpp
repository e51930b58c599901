// One rank of a group load, as its own process: the group tests start several (tests/group) and
// the two-GPU run starts two with NCCL. The rank loads the demo model's shard through the
// pipeline with LoadPlan::group from the environment this helper sets (MASTER_ADDR=127.0.0.1,
// MASTER_PORT, RANK, WORLD_SIZE, LOCAL_RANK), then prints what a test checks, one "key value" per
// line:
//   path <hit|miss|fallback|ineligible>  tier <tier>  decision <...>  publication <...>
//   reason <...>  agreement_ms <...>  fingerprint <hex>       or: error <status>
//
// usage: snapcache_rank_helper --checkpoint FILE --cache DIR --rank R --world W --port P
//          [--transport store|nccl] [--device cpu|cuda] [--timeout-ms T] [--loads N]
//          [--fail-publication] [--die-in-loader] [--heads H]
#include <signal.h>
#include <stdlib.h>

#include <cstdio>
#include <cstring>
#include <iostream>
#include <string>

#include "dit_model.h"
#include "snapcache/pipeline.h"
#include "snapcache/rank_group.h"
#include "util/fault_injection.h"

using namespace snapcache;

namespace {

struct Args {
  std::string checkpoint, cache, port = "29500", transport = "store", device = "cpu";
  int rank = 0, world = 1, loads = 1, heads = 8, timeout_ms = 60000;
  bool fail_publication = false, die_in_loader = false;
};

[[noreturn]] void usage(const char* why) {
  std::fprintf(stderr, "snapcache_rank_helper: %s\n", why);
  std::exit(2);
}

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    std::string k = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage(("missing value for " + k).c_str());
      return argv[++i];
    };
    if (k == "--checkpoint") a.checkpoint = value();
    else if (k == "--cache") a.cache = value();
    else if (k == "--rank") a.rank = std::stoi(value());
    else if (k == "--world") a.world = std::stoi(value());
    else if (k == "--port") a.port = value();
    else if (k == "--transport") a.transport = value();
    else if (k == "--device") a.device = value();
    else if (k == "--timeout-ms") a.timeout_ms = std::stoi(value());
    else if (k == "--loads") a.loads = std::stoi(value());
    else if (k == "--heads") a.heads = std::stoi(value());
    else if (k == "--fail-publication") a.fail_publication = true;
    else if (k == "--die-in-loader") a.die_in_loader = true;
    else usage(("unknown argument " + k).c_str());
  }
  if (a.checkpoint.empty() || a.cache.empty()) usage("--checkpoint and --cache are required");
  return a;
}

// One line per value: newlines in a reason would split it.
std::string one_line(std::string s) {
  for (char& c : s)
    if (c == '\n') c = ' ';
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  const Args a = parse(argc, argv);
  ::setenv("MASTER_ADDR", "127.0.0.1", 1);
  ::setenv("MASTER_PORT", a.port.c_str(), 1);
  ::setenv("RANK", std::to_string(a.rank).c_str(), 1);
  ::setenv("LOCAL_RANK", std::to_string(a.rank).c_str(), 1);
  ::setenv("WORLD_SIZE", std::to_string(a.world).c_str(), 1);

  RankGroupOptions group_options;
  group_options.timeout = std::chrono::milliseconds(a.timeout_ms);
  auto group = rank_group_from_environment(a.transport == "nccl" ? GroupTransport::nccl : GroupTransport::store,
                                           group_options);
  if (!group) {
    std::cout << "error " << one_line(group.status().to_string()) << std::endl;
    return 1;
  }

  // A rank whose publication fails: every data-file write of its store fails with EIO.
  auto fs = std::make_shared<FaultInjectingFileSystem>();
  if (a.fail_publication) {
    Fault fault;
    fault.op = FsOp::pwrite;
    fault.times = -1;
    fs->inject(fault);
  }
  Config config;
  config.directory = a.cache;
  config.reserve_free_bytes = 0;
  auto store = Store::open(config, fs);
  if (!store) {
    std::cout << "error " << one_line(store.status().to_string()) << std::endl;
    return 1;
  }

  demo::DitConfig dit;
  dit.hidden = 256;
  dit.layers = 2;
  dit.heads = a.heads;
  dit.tokens = 8;
  dit.tp_rank = a.rank;
  dit.tp_size = a.world;
  const c10::Device device = a.device == "cuda" ? c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(a.rank))
                                                : c10::Device(c10::kCPU);
  LoadPlan plan = demo::make_plan(dit, a.checkpoint, device);
  plan.group = *group;
  if (a.die_in_loader) {
    // Dies where a real rank might: inside the ordinary loader, after the group agreed to run it.
    plan.ordinary_loader = [](const LoadPlan&) -> Result<NamedTensors> {
      std::cout << "dying" << std::endl;
      ::raise(SIGKILL);
      return Status(StatusCode::exception, "not reached");
    };
  }

  int failed = 0;
  for (int i = 0; i < a.loads; ++i) {
    auto model = load_model(store->get(), plan);
    if (!model) {
      std::cout << "error " << one_line(model.status().to_string()) << std::endl;
      failed = 1;
      continue;
    }
    const LoadReport& r = model->report;
    std::cout << "path " << to_string(r.path) << "\n"
              << "tier " << r.group->tier << "\n"
              << "decision " << one_line(r.group->decision) << "\n"
              << "publication " << one_line(r.group->publication) << "\n"
              << "reason " << one_line(r.reason) << "\n"
              << "agreement_ms " << r.group->agreement_seconds * 1e3 << "\n"
              << "load_ms " << r.seconds * 1e3 << "\n"
              << "fingerprint " << demo::fingerprint(*model, demo::forward(dit, *model)) << std::endl;
  }
  return failed;
}
