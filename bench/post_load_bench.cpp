// Post-load layout conversion: snapcache's blocked, multi-threaded transpose against torch's
// `t().contiguous()` (what the methods used before, and what a loader would write), on the
// shapes and dtypes the demo model converts. Both run in this process, side by side; the ratio is
// the result. Bit-identical outputs are checked, not assumed.
//
//   snapcache_post_load_bench [--mib N] [--repeat N]
#include <ATen/Functions.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "methods/layout_kernels.h"
#include "util/parallel.h"

using Clock = std::chrono::steady_clock;

namespace {

double best_seconds(int repeat, const auto& fn) {
  double best = 1e30;
  for (int r = 0; r < repeat; ++r) {
    const auto t0 = Clock::now();
    fn();
    best = std::min(best, std::chrono::duration<double>(Clock::now() - t0).count());
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  std::int64_t mib = 256;
  int repeat = 3;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--mib") == 0) mib = std::atoll(argv[i + 1]);
    if (std::strcmp(argv[i], "--repeat") == 0) repeat = std::atoi(argv[i + 1]);
  }
  std::printf("post-load layout conversion, %lld MiB per tensor, best of %d, %zu worker threads\n",
              static_cast<long long>(mib), repeat, snapcache::util::worker_count());
  std::printf("%-10s %-14s %12s %12s %8s %14s %s\n", "dtype", "shape", "torch GB/s", "ours GB/s", "ratio",
              "memcpy GB/s", "identical");
  struct Case {
    const char* name;
    at::ScalarType type;
  };
  for (Case c : {Case{"int8", at::kChar}, Case{"float16", at::kHalf}, Case{"float32", at::kFloat}}) {
    const std::int64_t elements = mib * (1 << 20) / static_cast<std::int64_t>(c10::elementSize(c.type));
    const auto rows = static_cast<std::int64_t>(std::sqrt(static_cast<double>(elements) / 2));
    const std::int64_t cols = elements / rows;  // [N, 2N]-ish, as a [2h, h] adaLN or [h, 4h] MLP
    at::Tensor t = at::randint(-100, 100, {rows, cols}, at::TensorOptions().dtype(c.type));
    at::Tensor ref, ours;
    const double torch_s = best_seconds(repeat, [&] { ref = t.t().contiguous().t(); });
    const double ours_s = best_seconds(repeat, [&] { ours = snapcache::methods::column_major(t); });
    // The ceiling: the same bytes copied as they are into fresh memory (page faults included).
    const double copy_s = best_seconds(repeat, [&] {
      at::Tensor fresh = at::empty_like(t);
      std::memcpy(fresh.data_ptr(), t.data_ptr(), static_cast<std::size_t>(t.nbytes()));
    });
    const bool same = ref.strides() == ours.strides() &&
                      std::memcmp(ref.data_ptr(), ours.data_ptr(), static_cast<std::size_t>(t.nbytes())) == 0;
    const double bytes = static_cast<double>(t.nbytes());
    std::printf("%-10s %-14s %12.2f %12.2f %7.1fx %14.2f %s\n", c.name,
                (std::to_string(rows) + "x" + std::to_string(cols)).c_str(), bytes / torch_s / 1e9,
                bytes / ours_s / 1e9, torch_s / ours_s, bytes / copy_s / 1e9, same ? "yes" : "NO");
    if (!same) return 1;
  }
  return 0;
}
