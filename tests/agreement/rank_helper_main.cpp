// One rank of a group load, as its own process: the group tests start several (tests/agreement) and
// the two-GPU run starts two with NCCL. The rank loads the demo model's shard through the
// pipeline with LoadPlan::group from the environment this helper sets (MASTER_ADDR=127.0.0.1,
// MASTER_PORT, RANK, WORLD_SIZE, LOCAL_RANK), then prints what a test checks, one "key value" per
// line:
//   group_ms <time to make the group>  path <hit|miss|fallback|ineligible>  tier <tier>
//   decision <...>  publication <...>  reason <...>  ranks <each rank's answers>  agreement_ms <...>
//   stages <the report's stage names>
//   tensors <count>  fingerprint <hex>       or: error <status>
//
// usage: snapcache_rank_helper --checkpoint FILE --cache DIR --rank R --world W --port P
//          [--transport store|nccl] [--device cpu|cuda] [--timeout-ms T] [--loads N]
//          [--fail-publication] [--die-in-loader] [--heads H] [--component NAME] [--delay-ms D]
//          [--agent-store] [--restart-count N] [--write-delay-ms D] [--stderr-to-stdout]
//
// Two more modes play the other processes a group's port can meet:
//   --serve-store --port P [--serve-ms S]   serves a c10d TCPStore there, as torchrun's agent does
//                                           (prints "serving"), for S ms (default 60000)
//   --forge-rank R --port P [--timeout-ms T]  an adversary on the same host: connects to the group's
//                                           store as a client, waits for rank R's answer from the
//                                           first tier, rewrites it to "served" and reads it back
//                                           (prints "forged <was> -> <now>")
//     [--forge-round N] [--forge-shape S]   rank R's message of round N instead (0: the first tier's
//                                           answers), rewritten to a malformed one of shape S (see
//                                           malformed()); prints "forged S" once it reads it back
#include <signal.h>
#include <stdlib.h>

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <string>
#include <thread>

#include "dit_model.h"
#include "snapcache/pipeline.h"
#include "snapcache/rank_group.h"
#include "support/fault_injection.h"

using namespace snapcache;

namespace {

struct Args {
  std::string checkpoint, cache, port = "29500", transport = "store", device = "cpu", component;
  int rank = 0, world = 1, loads = 1, heads = 8, timeout_ms = 60000, delay_ms = 0, serve_ms = 60000, forge_rank = -1,
      restart_count = -1, forge_round = 0, write_delay_ms = 0;
  std::string forge_shape = "served";
  bool fail_publication = false, die_in_loader = false, agent_store = false, serve_store = false,
       stderr_to_stdout = false;
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
    else if (k == "--component") a.component = value();
    else if (k == "--delay-ms") a.delay_ms = std::stoi(value());
    else if (k == "--serve-ms") a.serve_ms = std::stoi(value());
    else if (k == "--forge-rank") a.forge_rank = std::stoi(value());
    else if (k == "--forge-round") a.forge_round = std::stoi(value());
    else if (k == "--forge-shape") a.forge_shape = value();
    else if (k == "--write-delay-ms") a.write_delay_ms = std::stoi(value());
    else if (k == "--agent-store") a.agent_store = true;
    else if (k == "--restart-count") a.restart_count = std::stoi(value());
    else if (k == "--serve-store") a.serve_store = true;
    else if (k == "--stderr-to-stdout") a.stderr_to_stdout = true;
    else if (k == "--fail-publication") a.fail_publication = true;
    else if (k == "--die-in-loader") a.die_in_loader = true;
    else usage(("unknown argument " + k).c_str());
  }
  if (!a.serve_store && a.forge_rank < 0 && (a.checkpoint.empty() || a.cache.empty()))
    usage("--checkpoint and --cache are required");
  return a;
}

// "0: snapshot served; 1: snapshot missed, ordinary served"
std::string fmt_ranks(const std::vector<std::string>& ranks) {
  std::string out;
  for (std::size_t r = 0; r < ranks.size(); ++r) out += (out.empty() ? "" : "; ") + std::to_string(r) + ": " + ranks[r];
  return out;
}

// "key, lookup, ordinary load, ...": the stages the load's report lists.
std::string stage_names(const LoadReport& report) {
  std::string out;
  for (const StageTime& s : report.stages) out += (out.empty() ? "" : ", ") + s.stage;
  return out;
}

// One line per value: newlines in a reason would split it.
std::string one_line(std::string s) {
  for (char& c : s)
    if (c == '\n') c = ' ';
  return s;
}

c10d::TCPStoreOptions client_of(const Args& a) {
  c10d::TCPStoreOptions options;
  options.port = static_cast<std::uint16_t>(std::stoi(a.port));
  options.timeout = std::chrono::milliseconds(a.timeout_ms);
  return options;
}

// torchrun's agent: a store no rank serves, which outlives them.
int serve_store(const Args& a) {
  c10d::TCPStoreOptions options = client_of(a);
  options.isServer = true;
  options.waitWorkers = false;
  c10d::TCPStore store("127.0.0.1", options);
  std::cout << "serving" << std::endl;
  std::this_thread::sleep_for(std::chrono::milliseconds(a.serve_ms));
  return 0;
}

// `message` (a rank's, as it sent it) made into one of a shape no rank sends, keeping its group
// and step so that only the shape is wrong: a list where a string goes (the campaign's
// {"tier": ["x"]}), a field left out, a field of the wrong type holding a nested one, a string of
// two megabytes, an error code as text, a flag as text, text that is not JSON.
std::string malformed(nlohmann::json message, const std::string& shape) {
  if (shape == "tier-list") message["tier"] = {"x"};
  else if (shape == "no-outcome") message.erase("outcome");
  else if (shape == "nested") message["reason"] = {{"text", {"x", {{"y", 1}}}}};
  else if (shape == "huge") message["reason"] = std::string(2u << 20, 'x');
  else if (shape == "code-text") message["code"] = "5";
  else if (shape == "ok-text") message["ok"] = "yes";
  else if (shape == "not-json") return "{\"tier\": [";
  else usage(("unknown --forge-shape " + shape).c_str());
  return message.dump();
}

// Rewrites rank R's message of a round (round N of the first store group: snapcache/store/0/N/R; a
// key holds 'm' and the agreement's JSON): its first answer to "served", keeping everything else
// of it, as an adversary who read the exchange would, or to a malformed one (--forge-shape); then
// reads it back, so the test knows the forgery landed.
int forge(const Args& a) {
  auto tcp = c10::make_intrusive<c10d::TCPStore>("127.0.0.1", client_of(a));
  c10d::PrefixStore store("snapcache/store/0", tcp);
  const std::string key = std::to_string(a.forge_round) + "/" + std::to_string(a.forge_rank);
  store.wait({key});
  const std::vector<std::uint8_t> was = store.get(key);
  const std::string frame = !was.empty() && was[0] == 'm' ? "m" : "";  // before the framing, a key held bare JSON
  auto answer = nlohmann::json::parse(std::string(was.begin() + static_cast<long>(frame.size()), was.end()));
  const std::string before = answer.value("outcome", "");
  if (a.forge_shape == "served") answer["outcome"] = "served";
  const std::string forged = frame + (a.forge_shape == "served" ? answer.dump() : malformed(answer, a.forge_shape));
  store.set(key, std::vector<std::uint8_t>(forged.begin(), forged.end()));
  const std::vector<std::uint8_t> now = store.get(key);
  const bool landed = std::string(now.begin(), now.end()) == forged;
  if (a.forge_shape != "served") std::cout << "forged " << (landed ? a.forge_shape : "(not landed)") << std::endl;
  else std::cout << "forged " << before << " -> " << (landed ? "served" : "(not landed)") << std::endl;
  return landed ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  const Args a = parse(argc, argv);
  if (a.stderr_to_stdout) ::dup2(1, 2);
  if (a.serve_store) return serve_store(a);
  if (a.forge_rank >= 0) return forge(a);
  ::setenv("MASTER_ADDR", "127.0.0.1", 1);
  ::setenv("MASTER_PORT", a.port.c_str(), 1);
  ::setenv("RANK", std::to_string(a.rank).c_str(), 1);
  ::setenv("LOCAL_RANK", std::to_string(a.rank).c_str(), 1);
  ::setenv("WORLD_SIZE", std::to_string(a.world).c_str(), 1);
  if (a.agent_store) ::setenv("TORCHELASTIC_USE_AGENT_STORE", "True", 1);
  if (a.restart_count >= 0) ::setenv("TORCHELASTIC_RESTART_COUNT", std::to_string(a.restart_count).c_str(), 1);

  RankGroupOptions group_options;
  group_options.timeout = std::chrono::milliseconds(a.timeout_ms);
  const auto started = std::chrono::steady_clock::now();
  auto group = rank_group_from_environment(a.transport == "nccl" ? GroupTransport::nccl : GroupTransport::store,
                                           group_options);
  std::cout << "group_ms "
            << std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started).count()
            << std::endl;
  if (!group) {
    std::cout << "error " << one_line(group.status().to_string()) << std::endl;
    return 1;
  }

  auto fs = std::make_shared<FaultInjectingFileSystem>();
  Config config;
  config.directory = a.cache;
  config.reserve_free_bytes = 0;
  auto store = Store::open(config, fs);
  if (!store) {
    std::cout << "error " << one_line(store.status().to_string()) << std::endl;
    return 1;
  }
  // A rank whose publication fails: every write of its store fails with EIO once the store is
  // open. Not before: the rank that happens to open an empty cache first writes its tag, and a
  // rank that fails there exits before the group starts, which is a different test.
  if (a.fail_publication) {
    Fault fault;
    fault.op = FsOp::pwrite;
    fault.times = -1;
    fs->inject(fault);
  }
  // A rank whose disk is slow: its publication, and so its outcome of the load, comes late.
  if (a.write_delay_ms > 0) fs->slow_writes(std::chrono::milliseconds(a.write_delay_ms));

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
  if (!a.component.empty()) plan.component = a.component;
  if (a.die_in_loader) {
    // Dies where a real rank might: inside the ordinary loader, after the group agreed to run it.
    plan.ordinary_loader = [](const LoadPlan&) -> Result<NamedTensors> {
      std::cout << "dying" << std::endl;
      ::raise(SIGKILL);
      return Status(StatusCode::exception, "not reached");
    };
  }

  std::this_thread::sleep_for(std::chrono::milliseconds(a.delay_ms));
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
              << "ranks " << one_line(fmt_ranks(r.group->ranks)) << "\n"
              << "tensors " << model->weights.size() << "\n"
              << "agreement_ms " << r.group->agreement_seconds * 1e3 << "\n"
              << "load_ms " << r.seconds * 1e3 << "\n"
              << "stages " << one_line(stage_names(r)) << std::endl;  // out before the forward pass, which may fail
    std::cout << "fingerprint " << demo::fingerprint(*model, demo::forward(dit, *model)) << std::endl;
  }
  return failed;
}
