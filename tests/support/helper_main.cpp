// The second process of the multi-process tests. Usage:
//   helper publish DIR SEED MIB        publish model_tensors(SEED, MIB); print "result <name>"
//   helper load DIR SEED               load, compare with model_tensors(SEED); exit 0 on an exact hit
//   helper hold DIR SEED               load and hold the tensors (and so the lease); print "holding";
//                                      wait to be killed
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "snapcache/log.h"
#include "support/fixtures.h"

using namespace snapcache;

int main(int argc, char** argv) {
  set_log_level(LogLevel::error);
  if (argc < 4) {
    std::fprintf(stderr, "usage: %s publish|load|hold DIR SEED [MIB]\n", argv[0]);
    return 2;
  }
  std::string cmd = argv[1];
  auto store = Store::open(test::test_config(argv[2]));
  if (!store) {
    std::printf("error %s\n", store.status().to_string().c_str());
    return 3;
  }
  int seed = std::atoi(argv[3]);
  std::size_t mib = argc > 4 ? static_cast<std::size_t>(std::atoi(argv[4])) : 1;
  if (cmd == "publish") {
    NamedTensors tensors = test::model_tensors(seed, mib);
    std::printf("ready\n");
    std::fflush(stdout);
    PublishOptions options;
    options.chunk_size = 1 << 20;
    auto out = publish_tensors(**store, test::test_key(seed), tensors, options);
    std::printf("result %s %s\n", to_string(out.result), out.status.to_string().c_str());
    return out.result == PublishResult::published || out.result == PublishResult::already_present ? 0 : 1;
  }
  if (cmd == "load" || cmd == "hold") {
    auto loaded = load_tensors(**store, test::test_key(seed));
    if (loaded.lookup.result != LookupResult::hit) {
      std::printf("result %s %s\n", to_string(loaded.lookup.result), loaded.lookup.reason.c_str());
      return 1;
    }
    // Compare with the same mib the entry was published with: the entry knows its sizes.
    bool exact = false;
    for (std::size_t m : {1, 2, 4, 8, 16, 32, 64}) exact |= test::same_tensors(loaded.tensors, test::model_tensors(seed, m));
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
