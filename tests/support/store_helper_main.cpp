// The second process of the store's multi-process tests; no torch. Usage:
//   store_helper publish DIR SEED MIB    publish raw_model(SEED, MIB); print "ready" first, then
//                                        "result <outcome>"
//   store_helper load DIR SEED           look up store_key(SEED), compare with raw_model(SEED, m)
//                                        for the m it was published with; exit 0 on an exact hit
//   store_helper hold DIR SEED           the same, then hold the snapshot (and so the lease); print
//                                        "holding"; wait to be killed
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "snapcache/log.h"
#include "support/raw_storages.h"

using namespace snapcache;

int main(int argc, char** argv) {
  set_log_level(LogLevel::error);
  if (argc < 4) {
    std::fprintf(stderr, "usage: %s publish|load|hold DIR SEED [MIB]\n", argv[0]);
    return 2;
  }
  const std::string cmd = argv[1];
  auto store = Store::open(test::test_config(argv[2]));
  if (!store) {
    std::printf("error %s\n", store.status().to_string().c_str());
    return 3;
  }
  const int seed = std::atoi(argv[3]);
  const std::size_t mib = argc > 4 ? static_cast<std::size_t>(std::atoi(argv[4])) : 1;
  if (cmd == "publish") {
    test::RawModel model = test::raw_model(seed, mib);
    std::printf("ready\n");
    std::fflush(stdout);
    PublishOptions options;
    options.chunk_size = 1 << 20;
    auto out = test::publish_raw(**store, test::store_key(seed), model, options);
    std::printf("result %s %s\n", to_string(out.result), out.status.to_string().c_str());
    return out.result == PublishResult::published || out.result == PublishResult::already_present ? 0 : 1;
  }
  if (cmd == "load" || cmd == "hold") {
    auto found = (*store)->lookup(test::store_key(seed));
    if (found.result != LookupResult::hit) {
      std::printf("result %s %s\n", to_string(found.result), found.reason.c_str());
      return 1;
    }
    // Compare with the size the entry was published with: the entry knows its sizes.
    bool exact = false;
    for (std::size_t m : {1, 2, 4, 8, 16, 32, 64}) exact |= test::same_data(*found.snapshot, test::raw_model(seed, m));
    std::printf("result %s\n", exact ? "hit" : "wrong-data");
    std::fflush(stdout);
    if (!exact) return 4;
    if (cmd == "hold") {
      std::printf("holding\n");
      std::fflush(stdout);
      ::alarm(300);  // never outlive a test run that forgot us
      for (;;) ::pause();
    }
    return 0;
  }
  return 2;
}
