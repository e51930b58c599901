// The built-in post-load methods and the precision check, on their own.
#include <ATen/Functions.h>
#include <ATen/TensorOperators.h>

#include "snapcache/extend/post_load.h"
#include "support/catch.h"

using namespace snapcache;

namespace {
const at::Tensor& get(const NamedTensors& t, const std::string& name) {
  for (const auto& [n, x] : t)
    if (n == name) return x;
  throw std::runtime_error(name);
}
}  // namespace

TEST_CASE("int8 row scales are flattened from (N 1) to (N) and weights can go column-major", "[post-load]") {
  NamedTensors t = {{"l.weight", at::arange(12, at::kChar).reshape({4, 3})},
                    {"l.weight_scale", at::arange(4, at::kFloat).reshape({4, 1})}};
  auto m = int8_row_scale_method(WeightLayout::column_major);
  CHECK(m->targets(t) == std::vector<std::string>{"l.weight", "l.weight_scale"});
  REQUIRE(m->apply(t).is_ok());
  CHECK(get(t, "l.weight_scale").sizes() == at::IntArrayRef({4}));
  CHECK(get(t, "l.weight").strides() == at::IntArrayRef({1, 4}));  // column-major
  CHECK(at::equal(get(t, "l.weight"), at::arange(12, at::kChar).reshape({4, 3})));

  NamedTensors bad = {{"l.weight", at::zeros({4, 3}, at::kChar)}, {"l.weight_scale", at::zeros({4}, at::kFloat)}};
  Status st = m->apply(bad);
  CHECK(st.message().find("'l.weight_scale'") != std::string::npos);
  CHECK(st.message().find("(4, 1)") != std::string::npos);
}

TEST_CASE("fp8 block scales are checked against 128x128 blocks and laid out MN-major", "[post-load]") {
  auto w = at::zeros({256, 384}, at::kFloat).to(at::kFloat8_e4m3fn);
  NamedTensors t = {{"d.weight", w}, {"d.weight_scale", at::arange(6, at::kFloat).reshape({2, 3})}};
  REQUIRE(fp8_block_scale_method()->apply(t).is_ok());
  CHECK(get(t, "d.weight_scale").strides() == at::IntArrayRef({1, 2}));
  CHECK(at::equal(get(t, "d.weight_scale"), at::arange(6, at::kFloat).reshape({2, 3})));

  NamedTensors wrong_grid = {{"d.weight", w}, {"d.weight_scale", at::zeros({4, 6}, at::kFloat)}};
  Status st = fp8_block_scale_method()->apply(wrong_grid);
  CHECK(st.message().find("'d.weight_scale'") != std::string::npos);
  CHECK(st.message().find("[2, 3]") != std::string::npos);

  NamedTensors ok = {{"d.weight", w}, {"d.weight_scale", at::zeros({2, 3}, at::kFloat)}};
  st = fp8_block_scale_method(64, 64)->apply(ok);
  CHECK(st.code() == StatusCode::unsupported);
  CHECK(st.message().find("'d.weight'") != std::string::npos);

  NamedTensors transposed = {{"d.weight", at::zeros({384, 256}, at::kFloat).to(at::kFloat8_e4m3fn).t()},
                             {"d.weight_scale", at::zeros({2, 3}, at::kFloat)}};
  st = fp8_block_scale_method()->apply(transposed);
  CHECK(st.code() == StatusCode::unsupported);
  CHECK(st.message().find("row-major") != std::string::npos);
}

TEST_CASE("layout conversion handles fp16 and int8 and names any other dtype", "[post-load]") {
  NamedTensors t = {{"a.weight", at::arange(6, at::kHalf).reshape({2, 3})},
                    {"b.weight", at::arange(6, at::kChar).reshape({2, 3})}};
  auto col = layout_method({".weight"}, WeightLayout::column_major);
  REQUIRE(col->apply(t).is_ok());
  CHECK(get(t, "a.weight").strides() == at::IntArrayRef({1, 2}));
  CHECK(get(t, "b.weight").strides() == at::IntArrayRef({1, 2}));
  REQUIRE(layout_method({".weight"}, WeightLayout::row_major)->apply(t).is_ok());
  CHECK(get(t, "a.weight").is_contiguous());
  NamedTensors bf = {{"c.weight", at::zeros({2, 2}, at::kBFloat16)}};
  Status st = col->apply(bf);
  CHECK(st.message().find("'c.weight'") != std::string::npos);
}

TEST_CASE("mixed-precision validation names the tensor and the rule", "[post-load]") {
  PrecisionPolicy p{"w8", {{".weight_scale", {DType::float32}}, {".weight", {DType::int8, DType::float8_e4m3fn}}}};
  NamedTensors ok = {{"x.weight", at::zeros({2}, at::kChar)}, {"x.weight_scale", at::zeros({2}, at::kFloat)}};
  CHECK(validate_precision(ok, p).is_ok());
  NamedTensors wrong = {{"x.weight", at::zeros({2}, at::kBFloat16)}};
  Status st = validate_precision(wrong, p);
  CHECK(st.message().find("'x.weight'") != std::string::npos);
  CHECK(st.message().find("int8 or float8_e4m3fn") != std::string::npos);
  NamedTensors uncovered = {{"x.bias", at::zeros({2}, at::kFloat)}};
  CHECK(validate_precision(uncovered, p).message().find("no rule") != std::string::npos);
}
