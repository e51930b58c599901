// FP8 e4m3fn weights with one float32 scale per 128x128 block.
#include <algorithm>

#include "methods/built_in_properties.h"
#include "methods/deferred_layout.h"
#include "methods/layout_kernels.h"
#include "methods/named.h"
#include "snapcache/extend/post_load.h"
#include "snapcache/text.h"
#include "snapcache/version.h"
#include "util/fmt.h"

namespace snapcache {
namespace {

class Fp8BlockScale final : public PostLoadMethod {
 public:
  Fp8BlockScale(std::int64_t rows, std::int64_t cols) : rows_(rows), cols_(cols) {}
  std::string name() const override { return fmt::format("fp8-block-scale({}x{})", rows_, cols_); }
  std::string version() const override { return kVersion; }  // built in: its output changes only with snapcache

  std::vector<std::string> targets(const NamedTensors& tensors) const override {
    return methods::weight_scale_pairs(tensors, at::kFloat8_e4m3fn);
  }

  // Results are views of the inputs or fresh contiguous copies; nothing is written in place, and
  // only the targets are read. Block-scaled GEMM kernels read 128x128 blocks; that limit is stated
  // here once, and apply() and the GPU retention tier both read it.
  MethodProperties properties() const override {
    MethodProperties p = methods::built_in_properties();
    if (rows_ != 128 || cols_ != 128)
      p.unsupported = fmt::format("{}x{} scale blocks are not supported (only 128x128)", rows_, cols_);
    return p;
  }

  Status apply(NamedTensors& tensors) const override {
    auto t = targets(tensors);
    const std::string unsupported = properties().unsupported;
    const methods::TensorsByName by_name(tensors);
    for (std::size_t i = 0; i + 1 < t.size(); i += 2) {
      at::Tensor& w = *by_name.find(t[i]);
      at::Tensor& s = *by_name.find(t[i + 1]);
      if (!unsupported.empty())
        return Status(StatusCode::unsupported, fmt::format("tensor '{}': {}", t[i], unsupported));
      if (w.dim() != 2 || !w.is_contiguous())
        return Status(StatusCode::unsupported,
                      fmt::format("tensor '{}': fp8 block-scaled weights must be row-major [N, K], got {} with strides {}",
                                  t[i], format_dims(w.sizes()), format_dims(w.strides())));
      const std::int64_t n = w.size(0), k = w.size(1);
      const std::int64_t bn = (n + 127) / 128, bk = (k + 127) / 128;
      if (s.scalar_type() != at::kFloat || s.dim() != 2 || s.size(0) != bn || s.size(1) != bk)
        return Status(StatusCode::invalid_argument,
                      fmt::format("tensor '{}': expected float32 scales [{}, {}] (128x128 blocks of [{}, {}]), got {} {}",
                                  t[i + 1], bn, bk, n, k, c10::toString(s.scalar_type()),
                                  format_dims(s.sizes())));
      s = methods::column_major(s);  // MN-major: the scales of one K-block are adjacent
    }
    return Status::ok();
  }

 private:
  std::int64_t rows_, cols_;
};

}  // namespace

std::shared_ptr<PostLoadMethod> fp8_block_scale_method(std::int64_t block_rows, std::int64_t block_cols) {
  return std::make_shared<Fp8BlockScale>(block_rows, block_cols);
}

}  // namespace snapcache
