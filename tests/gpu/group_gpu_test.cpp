// Ranks that agree on two GPUs: the demo model at TP 2, one process per GPU, agreeing through the
// library's own NCCL group (from the environment). A damaged entry on rank 1 takes both ranks to
// the ordinary path; the warm load after it gives the cold load's weights and outputs.
#include <cuda_runtime_api.h>

#include "group_fixture.h"

namespace snapcache::test {

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
  REQUIRE_THAT(cold[0]["decision"], Catch::Matchers::Contains("snapshot missed on all 2 ranks"));
  REQUIRE_THAT(cold[0]["publication"], Catch::Matchers::Contains("published on ranks 0-1"));

  const EntryInfo damaged = f.entry_of(1);
  flip_byte(damaged.path + "/" + damaged.manifest->files[0].name, 4096 + 17);
  auto after = f.run();
  require_all(after, "path", "fallback");
  require_same_on_every_rank(after, "decision");
  REQUIRE_THAT(after[0]["decision"], Catch::Matchers::StartsWith("rank 1: snapshot unusable ("));
  REQUIRE_THAT(after[0]["decision"], Catch::Matchers::EndsWith("the group took the ordinary tier"));
  REQUIRE(fingerprints(after) == fingerprints(cold));

  auto warm = f.run();
  require_all(warm, "path", "hit");
  REQUIRE(warm[0]["decision"] == "the snapshot tier served on all 2 ranks");
  REQUIRE(fingerprints(warm) == fingerprints(cold));
  REQUIRE(fingerprints(cold)[0] != fingerprints(cold)[1]);
}

}  // namespace snapcache::test
