// Ranks that agree on two GPUs: the demo model at TP 2, one process per GPU, agreeing through the
// library's own NCCL group (from the environment). A damaged entry on rank 1 takes both ranks to
// the ordinary path; the warm load after it gives the cold load's weights and outputs.
#include <cuda_runtime_api.h>

#include "support/group_fixture.h"

namespace snapcache::test {

// On a one-GPU machine the NCCL path still runs end to end: a group of one, its messages through
// NCCL on the device.
TEST_CASE("a group of one rank agrees through NCCL on its GPU", "[gpu][group]") {
  GroupFixture f(1, {"--transport", "nccl", "--device", "cuda"});
  auto cold = f.run();
  require_all(cold, "path", "miss");
  REQUIRE(cold[0]["decision"].find("snapshot missed on the group's only rank") != std::string::npos);
  auto warm = f.run();
  require_all(warm, "path", "hit");
  REQUIRE(warm[0]["decision"] == "the snapshot tier served on the group's only rank");
  REQUIRE(fingerprints(warm) == fingerprints(cold));
}

TEST_CASE("two ranks on two GPUs agree through NCCL", "[gpu][group][multi-gpu]") {
  int devices = 0;
  REQUIRE(cudaGetDeviceCount(&devices) == cudaSuccess);
  if (devices < 2) {
    WARN("one GPU: the NCCL group case needs two (run on the 2-GPU machine)");
    return;
  }
  GroupFixture f(2, {"--transport", "nccl", "--device", "cuda"});
  auto cold = f.run();
  require_all(cold, "path", "miss");
  require_all(cold, "tier", "ordinary");
  REQUIRE_TEXT(cold[0]["decision"], contains, "snapshot missed on all 2 ranks");
  REQUIRE_TEXT(cold[0]["publication"], contains, "published on ranks 0-1");

  const EntryInfo damaged = f.entry_of(1);
  flip_byte(damaged.path + "/" + damaged.manifest->files[0].name, 4096 + 17);
  auto after = f.run();
  require_all(after, "path", "fallback");
  require_same_on_every_rank(after, "decision");
  REQUIRE_TEXT(after[0]["decision"], starts_with, "rank 1: snapshot unusable (");
  REQUIRE_TEXT(after[0]["decision"], ends_with, "the group took the ordinary tier");
  REQUIRE(fingerprints(after) == fingerprints(cold));

  auto warm = f.run();
  require_all(warm, "path", "hit");
  REQUIRE(warm[0]["decision"] == "the snapshot tier served on all 2 ranks");
  REQUIRE(fingerprints(warm) == fingerprints(cold));
  REQUIRE(fingerprints(cold)[0] != fingerprints(cold)[1]);
}

}  // namespace snapcache::test
