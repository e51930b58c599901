// The GPU retention tier with real processes on a real GPU: a donor helper process serves the test
// model; consumers (this process, or helper processes that are killed or write) attach it.
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <csignal>
#include <thread>

#include <ATen/Functions.h>
#include <cuda_runtime_api.h>

#include "support/donor_fixture.h"
#include "snapcache/donor.h"
#include "snapcache/extend/post_load.h"
#include "snapcache/extend/store_tensors.h"
#include "snapcache/extend/tier.h"
#include "support/catch.h"
#include "support/child_process.h"
#include "support/temp_dir.h"

using namespace snapcache;
using test::required_tier_options;
using test::socket_options;
using namespace std::chrono_literals;

namespace {

constexpr const char* kHelper = SNAPCACHE_DONOR_HELPER;

// A private socket directory, a checkpoint, and the plan of one rank.
struct Setup {
  test::TempDir dir;
  std::string sockets = dir / "sockets";
  std::string work = dir.path();
  Setup() {
    REQUIRE(::mkdir(sockets.c_str(), 0700) == 0);
    REQUIRE(demo::write_checkpoint(test::donor_test_config(), test::donor_test_checkpoint(work)).is_ok());
  }
  LoadPlan plan(int device = 0, int rank = 0, int size = 1) const {
    return demo::make_plan(test::donor_test_config(rank, size), test::donor_test_checkpoint(work),
                           c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(device)));
  }
  std::vector<std::string> serve_args(int device = 0, int rank = 0, int size = 1, int max_consumers = 1,
                                      int timeout_ms = 20000) const {
    return {"serve", sockets, work, std::to_string(device), std::to_string(rank), std::to_string(size),
            std::to_string(max_consumers), std::to_string(timeout_ms)};
  }
  std::vector<std::string> attach_args(int hold_ms, bool write) const {
    return {"attach", sockets, work, "0", "0", "1", std::to_string(hold_ms), write ? "write" : "read"};
  }
};

LoadPlan through_donor(LoadPlan plan, const std::string& sockets, bool required, DonorTierOptions options = {}) {
  options.socket_dir = sockets;
  options.required = required;
  plan.tiers = {donor_tier(options), snapshot_tier(), ordinary_tier()};
  return plan;
}


}  // namespace

TEST_CASE("a consumer attaches the donor's weights bit-identical to an ordinary load; one consumer at a time", "[gpu][donor]") {
  Setup s;
  test::ChildProcess donor(kHelper, s.serve_args());
  REQUIRE(donor.wait_for_line("ready"));
  const LoadPlan plan = s.plan();
  auto ordinary = load_model(nullptr, plan);
  REQUIRE(ordinary.is_ok());

  auto attached = load_model(nullptr, through_donor(plan, s.sockets, true));
  REQUIRE(attached.is_ok());
  CHECK(attached->report.path == LoadPath::hit);
  REQUIRE(!attached->report.tiers.empty());
  CHECK(attached->report.tiers.front().tier == "donor");
  CHECK(attached->report.tiers.front().outcome == TierOutcome::served);
  CHECK(attached->report.integrity().empty());  // no file was read: the donor's fingerprint is in the reason
  // FP8 block-scaled and INT8 column-major weights come back with identical layouts and bytes,
  // derived buffers too, and the forward pass agrees.
  CHECK(demo::identical(*ordinary, *attached));
  CHECK(demo::identical(demo::forward(test::donor_test_config(), *ordinary), demo::forward(test::donor_test_config(), *attached)));
  for (const auto& [name, t] : attached->weights) CHECK(t.device() == plan.device);

  // A second consumer while the first holds the weights: refused (busy), and with fallback allowed
  // it loads the ordinary way.
  auto second = load_model(nullptr, through_donor(plan, s.sockets, true));
  REQUIRE(!second.is_ok());
  CHECK(second.status().message().find("attached by 1 consumer") != std::string::npos);
  auto fallback = load_model(nullptr, through_donor(plan, s.sockets, false));
  REQUIRE(fallback.is_ok());
  CHECK(fallback->report.path == LoadPath::fallback);
  CHECK(demo::identical(*ordinary, *fallback));

  // The first consumer lets go (its last tensor goes away); the next one attaches.
  *attached = LoadedModel();
  auto third = load_model(nullptr, through_donor(plan, s.sockets, true));
  REQUIRE(third.is_ok());
  CHECK(demo::identical(*ordinary, *third));
}

TEST_CASE("a checkpoint keyed by content attaches from a copy at another path", "[gpu][donor]") {
  Setup s;
  const std::string donor_cache = s.dir / "donor-cache";
  ::setenv("SNAPCACHE_TEST_CONTENT_CACHE", donor_cache.c_str(), 1);
  test::ChildProcess donor(kHelper, s.serve_args());
  ::unsetenv("SNAPCACHE_TEST_CONTENT_CACHE");
  REQUIRE(donor.wait_for_line("ready"));
  // The consumer's checkpoint is a copy elsewhere (another path, inode and times), its own cache.
  const std::string copy_dir = s.dir / "elsewhere";
  REQUIRE(::mkdir(copy_dir.c_str(), 0755) == 0);
  const std::string copy = test::donor_test_checkpoint(copy_dir);
  {
    std::ifstream in(test::donor_test_checkpoint(s.work), std::ios::binary);
    std::ofstream out(copy, std::ios::binary);
    out << in.rdbuf();
  }
  Config c;
  c.directory = s.dir / "consumer-cache";
  auto store = Store::open(c);
  REQUIRE(store.is_ok());
  LoadPlan plan = demo::make_plan(test::donor_test_config(), copy, c10::Device(c10::kCUDA, 0));
  plan.hash_checkpoint_contents = true;
  auto attached = load_model(store->get(), through_donor(plan, s.sockets, true));
  REQUIRE(attached.is_ok());
  CHECK(attached->report.path == LoadPath::hit);
  CHECK(attached->report.tiers.front().tier == "donor");
  auto ordinary = load_model(nullptr, s.plan());
  REQUIRE(ordinary.is_ok());
  CHECK(demo::identical(*ordinary, *attached));
  *attached = LoadedModel();
  // Without content hashing the copy is another checkpoint: the key names the path.
  plan.hash_checkpoint_contents = false;
  auto by_place = load_model(store->get(), through_donor(plan, s.sockets, true));
  REQUIRE(!by_place.is_ok());
  CHECK(by_place.status().message().find("checkpoint") != std::string::npos);
}

TEST_CASE("a consumer killed with SIGKILL detaches, and the next consumer attaches", "[gpu][donor]") {
  Setup s;
  test::ChildProcess donor(kHelper, s.serve_args());
  REQUIRE(donor.wait_for_line("ready"));
  test::ChildProcess consumer(kHelper, s.attach_args(600000, false));
  REQUIRE(consumer.wait_for_line("ready"));
  auto refused = load_model(nullptr, through_donor(s.plan(), s.sockets, true));
  CHECK(!refused.is_ok());  // the killed consumer held it
  consumer.kill_now();
  Result<LoadedModel> next = Status(StatusCode::busy, "not tried");
  for (int i = 0; i < 50 && !next.is_ok(); ++i, std::this_thread::sleep_for(20ms))
    next = load_model(nullptr, through_donor(s.plan(), s.sockets, true));
  REQUIRE(next.is_ok());
  CHECK(next->report.path == LoadPath::hit);
}

TEST_CASE("a missing donor is a miss with fallback and an error without", "[gpu][donor]") {
  Setup s;
  auto loaded = load_model(nullptr, through_donor(s.plan(), s.sockets, false));
  REQUIRE(loaded.is_ok());
  REQUIRE(loaded->report.tiers.size() >= 2);
  CHECK(loaded->report.tiers[0].outcome == TierOutcome::missed);
  CHECK(loaded->report.tiers[0].reason.find("no donor listens") != std::string::npos);
  auto required = load_model(nullptr, through_donor(s.plan(), s.sockets, true));
  REQUIRE(!required.is_ok());
  CHECK(required.status().code() == StatusCode::not_found);
}

TEST_CASE("every key field that differs is named, and nothing is attached", "[gpu][donor]") {
  Setup s;
  test::ChildProcess donor(kHelper, s.serve_args());
  REQUIRE(donor.wait_for_line("ready"));
  // `says`: the difference in the words the key's field table gives it (key.h), as `why` prints it.
  struct Change {
    const char* field;
    const char* says;
    std::function<void(LoadPlan&)> apply;
  };
  const std::vector<Change> changes = {
      {"options", "option attention (absent) -> flash", [](LoadPlan& p) { p.options["attention"] = "flash"; }},
      {"dtype", "dtype bfloat16 -> float16", [](LoadPlan& p) { p.dtype = "float16"; }},
      {"source_identity", "loader source changed", [](LoadPlan& p) { p.source_identity = "another loader"; }},
      {"precision_policy", "precision policy demo-w8-fp8mlp-bf16attn -> another policy",
       [](LoadPlan& p) { p.precision.name = "another policy"; }},
      {"topology", "topology ep (absent) -> 2", [](LoadPlan& p) { p.topology.extra["ep"] = "2"; }},
      {"weight_processing", "weight processing ", [](LoadPlan& p) { p.post_load.pop_back(); }},
      {"checkpoint", "checkpoint file copy.safetensors is new",
       [&](LoadPlan& p) { p.checkpoint_files = {s.dir / "copy.safetensors"}; }},
  };
  test::write_bytes(s.dir / "copy.safetensors", test::read_bytes(test::donor_test_checkpoint(s.work)));
  for (const auto& change : changes) {
    CAPTURE(change.field);
    LoadPlan plan = s.plan();
    change.apply(plan);
    auto loaded = load_model(nullptr, through_donor(plan, s.sockets, true));
    REQUIRE(!loaded.is_ok());
    CHECK(loaded.status().message().find(change.says) != std::string::npos);
  }
  LoadPlan other = s.plan();
  other.component = "text_encoder";
  auto loaded = load_model(nullptr, through_donor(other, s.sockets, true));
  REQUIRE(!loaded.is_ok());
  CHECK(loaded.status().message().find("serves no component 'text_encoder'") != std::string::npos);
}

TEST_CASE("a layout mismatch binds nothing and leaves the consumer's tensors untouched", "[gpu][donor]") {
  Setup s;
  test::ChildProcess donor(kHelper, s.serve_args());
  REQUIRE(donor.wait_for_line("ready"));
  auto model = load_model(nullptr, s.plan());
  REQUIRE(model.is_ok());
  NamedTensors before;
  std::vector<const void*> addresses;
  for (const auto& [name, t] : model->weights) {
    before.emplace_back(name, t.clone());
    addresses.push_back(t.data_ptr());
  }
  // The consumer expects another shape for one tensor (a model built for another config).
  DonorTierOptions options;
  options.expected_prepared = ExpectedLayout{};
  for (const auto& [name, t] : model->weights) {
    ExpectedTensor e{name, *to_dtype(t.scalar_type()), std::vector<std::int64_t>(t.sizes().begin(), t.sizes().end()),
                     std::vector<std::int64_t>(t.strides().begin(), t.strides().end()), {}};
    options.expected_prepared->push_back(std::move(e));
  }
  // The full layout as it is: attaches.
  {
    auto ok = load_model(nullptr, through_donor(s.plan(), s.sockets, true, options));
    REQUIRE(ok.is_ok());
  }
  options.expected_prepared->back().sizes.back() += 1;
  auto reloaded = reload_model(nullptr, through_donor(s.plan(), s.sockets, true, options), *model);
  REQUIRE(!reloaded.is_ok());
  CHECK(reloaded.status().message().find(options.expected_prepared->back().name) != std::string::npos);
  for (std::size_t i = 0; i < before.size(); ++i) {
    CHECK(model->weights[i].second.data_ptr() == addresses[i]);
    CHECK(demo::identical(model->weights[i].second, before[i].second));
  }
}

TEST_CASE("a second donor on the GPU and a socket directory that is not private are refused", "[gpu][donor]") {
  Setup s;
  test::ChildProcess donor(kHelper, s.serve_args());
  REQUIRE(donor.wait_for_line("ready"));
  auto second = Donor::start(c10::Device(c10::kCUDA, 0), socket_options(s.sockets));
  REQUIRE(!second.is_ok());
  CHECK(second.status().code() == StatusCode::busy);
  CHECK(second.status().message().find(std::to_string(donor.pid())) != std::string::npos);

  const std::string open_dir = s.dir / "open";
  REQUIRE(::mkdir(open_dir.c_str(), 0755) == 0);
  REQUIRE(::chmod(open_dir.c_str(), 0755) == 0);
  auto refused = Donor::start(c10::Device(c10::kCUDA, 0), socket_options(open_dir));
  REQUIRE(!refused.is_ok());
  CHECK(refused.status().code() == StatusCode::permission_denied);
  auto consumer = load_model(nullptr, through_donor(s.plan(), open_dir, true));
  REQUIRE(!consumer.is_ok());
  CHECK(consumer.status().message().find(open_dir) != std::string::npos);
}

TEST_CASE("unsupported processing is refused before anything is served", "[gpu][donor]") {
  Setup s;
  LoadPlan plan = s.plan();
  auto model = load_model(nullptr, plan);
  REQUIRE(model.is_ok());
  auto donor = Donor::start(plan.device, socket_options(s.sockets));
  REQUIRE(donor.is_ok());
  LoadPlan fp8_64 = plan;
  fp8_64.post_load = {fp8_block_scale_method(64, 64)};
  Status st = (*donor)->serve(nullptr, fp8_64, *model);
  CHECK(st.code() == StatusCode::unsupported);
  CHECK(st.message().find("128x128") != std::string::npos);
  struct Custom final : PostLoadMethod {
    std::string name() const override { return "custom"; }
    std::vector<std::string> targets(const NamedTensors&) const override { return {}; }
    Status apply(NamedTensors&) const override { return Status::ok(); }
  };
  LoadPlan custom = plan;
  custom.post_load.push_back(std::make_shared<Custom>());
  st = (*donor)->serve(nullptr, custom, *model);
  CHECK(st.code() == StatusCode::unsupported);
  CHECK((*donor)->bytes() == 0);
  CHECK((*donor)->serve(nullptr, plan, *model).is_ok());
  CHECK((*donor)->bytes() > 0);
}

TEST_CASE("shutdown waits for the active consumer; fingerprints catch a consumer that writes", "[gpu][donor]") {
  Setup s;
  {
    test::ChildProcess donor(kHelper, s.serve_args(0, 0, 1, 2, 20000));
    REQUIRE(donor.wait_for_line("ready"));
    test::ChildProcess reader(kHelper, s.attach_args(1500, false));
    REQUIRE(reader.wait_for_line("ready"));
    {
      // This donor allows two consumers at once: a second reader shares the weights.
      auto shared = load_model(nullptr, through_donor(s.plan(), s.sockets, true));
      REQUIRE(shared.is_ok());
      auto third = load_model(nullptr, through_donor(s.plan(), s.sockets, true));
      CHECK(!third.is_ok());
    }
    const auto t0 = std::chrono::steady_clock::now();
    REQUIRE(::kill(donor.pid(), SIGTERM) == 0);
    CHECK(donor.wait_for_line("shutdown changed=0 consumers=1 timed_out=0"));
    CHECK(donor.wait() == 0);
    CHECK(std::chrono::steady_clock::now() - t0 > 700ms);  // it waited for the reader to let go
    CHECK(reader.wait() == 0);
  }
  {
    test::ChildProcess donor(kHelper, s.serve_args());
    REQUIRE(donor.wait_for_line("ready"));
    test::ChildProcess writer(kHelper, s.attach_args(0, true));
    REQUIRE(writer.wait_for_line("ready"));
    CHECK(writer.wait() == 0);
    REQUIRE(::kill(donor.pid(), SIGTERM) == 0);
    CHECK(donor.wait_for_line("shutdown changed=1 consumers="));
  }
}

TEST_CASE("a donor that dies leaves attached weights readable; the next load falls back", "[gpu][donor]") {
  Setup s;
  auto ordinary = load_model(nullptr, s.plan());
  REQUIRE(ordinary.is_ok());
  test::ChildProcess donor(kHelper, s.serve_args());
  REQUIRE(donor.wait_for_line("ready"));
  auto attached = load_model(nullptr, through_donor(s.plan(), s.sockets, true));
  REQUIRE(attached.is_ok());
  donor.kill_now();
  // The imported memory is held by this process's mapping, not by the donor.
  CHECK(demo::identical(ordinary->weights, attached->weights));
  auto next = load_model(nullptr, through_donor(s.plan(), s.sockets, false));
  REQUIRE(next.is_ok());
  CHECK(next->report.path != LoadPath::hit);
  CHECK(next->report.tiers.front().reason.find("stale") != std::string::npos);
}

TEST_CASE("two ranks on two GPUs each attach the donor of their own GPU", "[gpu][donor][multi-gpu]") {
  int devices = 0;
  REQUIRE(cudaGetDeviceCount(&devices) == cudaSuccess);
  if (devices < 2) {
    WARN("one GPU: the two-rank case needs two (run on the 2-GPU machine)");
    return;
  }
  Setup s;
  REQUIRE(demo::write_checkpoint(test::donor_test_config(0, 2), test::donor_test_checkpoint(s.work)).is_ok());
  test::ChildProcess donor0(kHelper, s.serve_args(0, 0, 2));
  test::ChildProcess donor1(kHelper, s.serve_args(1, 1, 2));
  REQUIRE(donor0.wait_for_line("ready"));
  REQUIRE(donor1.wait_for_line("ready"));
  for (int rank = 0; rank < 2; ++rank) {
    CAPTURE(rank);
    const LoadPlan plan = s.plan(rank, rank, 2);
    auto ordinary = load_model(nullptr, plan);
    auto attached = load_model(nullptr, through_donor(plan, s.sockets, true));
    REQUIRE(ordinary.is_ok());
    REQUIRE(attached.is_ok());
    CHECK(demo::identical(*ordinary, *attached));
    for (const auto& [name, t] : attached->weights) CHECK(t.device().index() == rank);
  }
  auto donors = list_donors(s.sockets);
  REQUIRE(donors.is_ok());
  CHECK(donors->size() == 2);
}
