// GPU tests: exit 77 (ctest's "skipped") when there is no CUDA device, so CPU-only CI reports
// them as skipped rather than failed or silently passed.
#if SNAPCACHE_CATCH2_MAJOR >= 3
#include <catch2/catch_session.hpp>
#else
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>
#endif

#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstring>

int main(int argc, char* argv[]) {
  bool listing = false;
  for (int i = 1; i < argc; ++i) listing |= std::strncmp(argv[i], "--list", 6) == 0;
  int devices = 0;
  cudaError_t err = cudaGetDeviceCount(&devices);
  if (!listing && (err != cudaSuccess || devices == 0)) {
    std::printf("no CUDA device (%s): skipping GPU tests\n", err == cudaSuccess ? "0 devices" : cudaGetErrorString(err));
    return 77;
  }
  return Catch::Session().run(argc, argv);
}
