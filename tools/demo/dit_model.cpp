#include "dit_model.h"

#include <ATen/Functions.h>
#include <ATen/TensorOperators.h>

#include <cmath>
#include <cstring>
#include <map>
#include <stdexcept>

#include "snapcache/safetensors.h"
#include "snapcache/sharding.h"
#include <fmt/format.h>

namespace snapcache::demo {
namespace {

std::string layer(std::int64_t i, const char* rest) { return fmt::format("blocks.{}.{}", i, rest); }

// Fills bytes from a counter-based generator: reproducible, and leaves torch's RNG alone.
void fill_bytes(at::Tensor& t, std::uint32_t seed) {
  auto* p = static_cast<std::uint8_t*>(t.data_ptr());
  const std::size_t n = static_cast<std::size_t>(t.numel()) * t.element_size();
  std::uint64_t x = 0x9E3779B97F4A7C15ull * (seed + 1);
  for (std::size_t i = 0; i < n; i += 8) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    std::memcpy(p + i, &x, std::min<std::size_t>(8, n - i));
  }
}

// Values in [-1, 1) of the given float dtype.
at::Tensor uniform(at::IntArrayRef shape, at::ScalarType type, std::uint32_t seed, double scale = 1.0) {
  at::Tensor raw = at::empty(shape, at::kInt);
  fill_bytes(raw, seed);
  return (raw.to(at::kDouble) / 2147483648.0 * scale).to(type);
}

at::Tensor int8_weight(at::IntArrayRef shape, std::uint32_t seed) {
  at::Tensor t = at::empty(shape, at::kChar);
  fill_bytes(t, seed);
  return t;
}

at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight) {
  at::Tensor xf = x.to(at::kFloat);
  at::Tensor r = at::rsqrt(xf.pow(2).mean({-1}, true) + 1e-6);
  return xf * r * weight.to(at::kFloat);
}

at::Tensor rope_table(const DitConfig& c) {
  const std::int64_t d = c.hidden / c.heads;
  at::Tensor pos = at::arange(c.tokens, at::kDouble).unsqueeze(1);
  at::Tensor freq = at::pow(10000.0, -at::arange(0, d, 2, at::kDouble) / static_cast<double>(d)).unsqueeze(0);
  at::Tensor angle = pos * freq;
  return at::cat({at::cos(angle), at::sin(angle)}, 1).to(at::kFloat);  // [tokens, d]
}

at::Tensor apply_rope(const at::Tensor& x, const at::Tensor& table) {  // x [T, heads, d]
  const std::int64_t half = x.size(2) / 2;
  at::Tensor cos = table.narrow(1, 0, half).unsqueeze(1);
  at::Tensor sin = table.narrow(1, half, half).unsqueeze(1);
  at::Tensor a = x.narrow(2, 0, half), b = x.narrow(2, half, half);
  return at::cat({a * cos - b * sin, a * sin + b * cos}, 2);
}

const at::Tensor& weight(const LoadedModel& m, const std::string& name) {
  for (const auto& [n, t] : m.weights)
    if (n == name) return t;
  throw std::runtime_error("no weight " + name);
}

}  // namespace

std::uint64_t checkpoint_bytes(const DitConfig& c) {
  const std::uint64_t h = static_cast<std::uint64_t>(c.hidden);
  const std::uint64_t per_layer = 2 * h * 2              // norms
                                  + 3 * h * h * 2        // q, k, v
                                  + h * h + h * 4        // proj + scale
                                  + 4 * h * h + 4 * h * 4  // up + scale
                                  + 4 * h * h + (h / 128) * (4 * h / 128) * 4  // down + block scales
                                  + 2 * h * h * 2;       // adaLN
  return per_layer * static_cast<std::uint64_t>(c.layers) + h * 2;
}

std::int64_t layers_for(const DitConfig& config, std::uint64_t bytes) {
  DitConfig one = config;
  one.layers = 1;
  return std::max<std::int64_t>(1, static_cast<std::int64_t>(bytes / checkpoint_bytes(one)));
}

Status write_checkpoint(const DitConfig& c, const std::string& path) {
  const std::int64_t h = c.hidden;
  NamedTensors t;
  std::uint32_t s = c.seed * 1000;
  for (std::int64_t i = 0; i < c.layers; ++i) {
    t.emplace_back(layer(i, "norm1.weight"), uniform({h}, at::kBFloat16, ++s, 0.5) + 1);
    t.emplace_back(layer(i, "attn.q.weight"), uniform({h, h}, at::kBFloat16, ++s, 0.05));
    t.emplace_back(layer(i, "attn.k.weight"), uniform({h, h}, at::kBFloat16, ++s, 0.05));
    t.emplace_back(layer(i, "attn.v.weight"), uniform({h, h}, at::kBFloat16, ++s, 0.05));
    t.emplace_back(layer(i, "attn.proj.weight"), int8_weight({h, h}, ++s));
    t.emplace_back(layer(i, "attn.proj.weight_scale"), uniform({h, 1}, at::kFloat, ++s, 1e-4).abs());
    t.emplace_back(layer(i, "norm2.weight"), uniform({h}, at::kBFloat16, ++s, 0.5) + 1);
    t.emplace_back(layer(i, "mlp.up.weight"), int8_weight({4 * h, h}, ++s));
    t.emplace_back(layer(i, "mlp.up.weight_scale"), uniform({4 * h, 1}, at::kFloat, ++s, 1e-4).abs());
    t.emplace_back(layer(i, "mlp.down.weight"), uniform({h, 4 * h}, at::kFloat, ++s, 0.5).to(at::kFloat8_e4m3fn));
    t.emplace_back(layer(i, "mlp.down.weight_scale"), uniform({h / 128, 4 * h / 128}, at::kFloat, ++s, 0.02).abs());
    t.emplace_back(layer(i, "adaln.weight"), uniform({2 * h, h}, at::kHalf, ++s, 0.02));
  }
  t.emplace_back("final_norm.weight", uniform({h}, at::kBFloat16, ++s, 0.5) + 1);
  return write_safetensors(path, t, {{"format", "pt"}, {"model", "snapcache-demo-dit"}});
}

LoadPlan make_plan(const DitConfig& c, const std::string& checkpoint_path, c10::Device device) {
  const std::int64_t h = c.hidden, n = c.tp_size;
  LoadPlan plan;
  plan.checkpoint_files = {checkpoint_path};
  plan.component = "dit";
  plan.source_identity = "snapcache-demo-dit-loader-v1";
  plan.dtype = "bfloat16";
  plan.topology.tp_rank = c.tp_rank;
  plan.topology.tp_size = c.tp_size;
  plan.device = device;

  auto add = [&](std::string name, DType dtype, std::vector<std::int64_t> sizes) {
    plan.expected.push_back({std::move(name), dtype, std::move(sizes), std::nullopt, ""});
  };
  for (std::int64_t i = 0; i < c.layers; ++i) {
    add(layer(i, "norm1.weight"), DType::bfloat16, {h});
    add(layer(i, "attn.qkv.weight"), DType::bfloat16, {3 * h / n, h});
    add(layer(i, "attn.proj.weight"), DType::int8, {h, h / n});
    add(layer(i, "attn.proj.weight_scale"), DType::float32, {h, 1});
    add(layer(i, "norm2.weight"), DType::bfloat16, {h});
    add(layer(i, "mlp.up.weight"), DType::int8, {4 * h / n, h});
    add(layer(i, "mlp.up.weight_scale"), DType::float32, {4 * h / n, 1});
    add(layer(i, "mlp.down.weight"), DType::float8_e4m3fn, {h, 4 * h / n});
    add(layer(i, "mlp.down.weight_scale"), DType::float32, {h / 128, 4 * h / n / 128});
    add(layer(i, "adaln.weight"), DType::float16, {2 * h, h});
  }
  add("final_norm.weight", DType::bfloat16, {h});

  // A layer at a time: a cold load uploads each layer while the loader makes the next.
  plan.streaming_loader = [c](const LoadPlan& p, TensorSink& sink) -> Status {
    auto file = SafetensorsFile::open(p.checkpoint_files.at(0), c.checkpoint_fs ? c.checkpoint_fs : posix_file_system());
    if (!file) return file.status();
    auto get = [&](const std::string& name) { return (*file)->tensor(name); };
    const int r = c.tp_rank, parts = c.tp_size;
    for (std::int64_t i = 0; i < c.layers; ++i) {
      NamedTensors out;
      auto take = [&](const char* rest) -> Status {  // replicated: the file's tensor as it is
        auto t = get(layer(i, rest));
        if (!t) return t.status();
        out.emplace_back(layer(i, rest), *t);
        return Status::ok();
      };
      auto split = [&](const char* rest, ShardAxis axis) -> Status {
        auto t = get(layer(i, rest));
        if (!t) return t.status();
        auto s = shard(*t, axis, r, parts, layer(i, rest));
        if (!s) return s.status();
        out.emplace_back(layer(i, rest), *s);
        return Status::ok();
      };
      SNAPCACHE_RETURN_IF_ERROR(take("norm1.weight"));
      auto q = get(layer(i, "attn.q.weight")), k = get(layer(i, "attn.k.weight")), v = get(layer(i, "attn.v.weight"));
      if (!q || !k || !v) return Status(StatusCode::invalid_argument, "checkpoint lacks q, k or v of layer " + std::to_string(i));
      auto qkv = fuse_qkv(*q, *k, *v, r, parts, layer(i, "attn.qkv.weight"));
      if (!qkv) return qkv.status();
      out.emplace_back(layer(i, "attn.qkv.weight"), *qkv);
      SNAPCACHE_RETURN_IF_ERROR(split("attn.proj.weight", ShardAxis::columns));
      SNAPCACHE_RETURN_IF_ERROR(take("attn.proj.weight_scale"));  // per output row: replicated
      SNAPCACHE_RETURN_IF_ERROR(take("norm2.weight"));
      SNAPCACHE_RETURN_IF_ERROR(split("mlp.up.weight", ShardAxis::rows));
      SNAPCACHE_RETURN_IF_ERROR(split("mlp.up.weight_scale", ShardAxis::rows));
      SNAPCACHE_RETURN_IF_ERROR(split("mlp.down.weight", ShardAxis::columns));
      SNAPCACHE_RETURN_IF_ERROR(split("mlp.down.weight_scale", ShardAxis::columns));
      SNAPCACHE_RETURN_IF_ERROR(take("adaln.weight"));
      SNAPCACHE_RETURN_IF_ERROR(sink.put(std::move(out)));
    }
    auto fin = get("final_norm.weight");
    if (!fin) return fin.status();
    return sink.put({{"final_norm.weight", *fin}});
  };

  plan.post_load = {int8_row_scale_method(WeightLayout::column_major), fp8_block_scale_method(),
                    layout_method({"adaln.weight"}, WeightLayout::column_major)};
  plan.precision.name = "demo-w8-fp8mlp-bf16attn";
  plan.precision.rules = {{"norm1.weight", {DType::bfloat16}},     {"norm2.weight", {DType::bfloat16}},
                          {"final_norm.weight", {DType::bfloat16}}, {"attn.qkv.weight", {DType::bfloat16}},
                          {".weight_scale", {DType::float32}},      {"attn.proj.weight", {DType::int8}},
                          {"mlp.up.weight", {DType::int8}},         {"mlp.down.weight", {DType::float8_e4m3fn}},
                          {"adaln.weight", {DType::float16}}};

  const std::int64_t layers = c.layers;
  plan.refresh_hooks.push_back({"fused_norms", [layers](const NamedTensors& w, DerivedBuffers& b, c10::Device d) {
                                  // One pass over the weights (a model has thousands), then the
                                  // layers in order.
                                  std::map<std::string, at::Tensor> by_name;
                                  for (const auto& [name, t] : w)
                                    if (name.ends_with("norm1.weight")) by_name.emplace(name, t);
                                  std::vector<at::Tensor> norms;
                                  for (std::int64_t i = 0; i < layers; ++i)
                                    if (auto it = by_name.find(layer(i, "norm1.weight")); it != by_name.end())
                                      norms.push_back(it->second);
                                  return refresh_buffer(b, "fused_norms", at::stack(norms), d);
                                }});
  plan.refresh_hooks.push_back({"rope", [c](const NamedTensors&, DerivedBuffers& b, c10::Device d) {
                                  return refresh_buffer(b, "rope", rope_table(c).to(d), d);
                                }});
  return plan;
}

LoadPlan with_whole_loader(LoadPlan plan) {
  plan.ordinary_loader = [streaming = plan](const LoadPlan&) { return run_ordinary_loader(streaming); };
  return plan;
}

at::Tensor forward(const DitConfig& c, const LoadedModel& m) {
  const std::int64_t h = c.hidden, heads = c.heads / c.tp_size, d = c.hidden / c.heads;
  const c10::Device device = m.weights.front().second.device();
  at::Tensor x = uniform({c.tokens, h}, at::kBFloat16, 4242, 1.0).to(device);
  const at::Tensor& fused_norms = m.derived.at("fused_norms");
  const at::Tensor& rope = m.derived.at("rope");
  for (std::int64_t i = 0; i < c.layers; ++i) {
    at::Tensor mod = at::matmul(x.mean({0}).to(at::kHalf).unsqueeze(0), weight(m, layer(i, "adaln.weight")).t())
                         .to(at::kFloat).squeeze(0);
    at::Tensor shift = mod.narrow(0, 0, h), scale = mod.narrow(0, h, h);
    at::Tensor a = (rms_norm(x, fused_norms[i]) * (scale + 1) + shift).to(at::kBFloat16);
    at::Tensor qkv = at::matmul(a, weight(m, layer(i, "attn.qkv.weight")).t()).to(at::kFloat);
    auto parts = qkv.split(heads * d, 1);
    at::Tensor q = apply_rope(parts[0].reshape({c.tokens, heads, d}), rope);
    at::Tensor k = apply_rope(parts[1].reshape({c.tokens, heads, d}), rope);
    at::Tensor v = parts[2].reshape({c.tokens, heads, d});
    at::Tensor att = at::softmax(at::einsum("thd,shd->hts", {q, k}) / std::sqrt(static_cast<double>(d)), -1);
    at::Tensor o = at::einsum("hts,shd->thd", {att, v}).reshape({c.tokens, heads * d});
    at::Tensor proj = weight(m, layer(i, "attn.proj.weight")).to(at::kFloat) *
                      weight(m, layer(i, "attn.proj.weight_scale")).unsqueeze(1);
    x = x + at::matmul(o, proj.t()).to(at::kBFloat16);
    at::Tensor b = rms_norm(x, weight(m, layer(i, "norm2.weight")));
    at::Tensor up = weight(m, layer(i, "mlp.up.weight")).to(at::kFloat) *
                    weight(m, layer(i, "mlp.up.weight_scale")).unsqueeze(1);
    at::Tensor u = at::gelu(at::matmul(b, up.t()));
    at::Tensor block = weight(m, layer(i, "mlp.down.weight_scale"));
    at::Tensor down = weight(m, layer(i, "mlp.down.weight")).to(at::kFloat) *
                      block.repeat_interleave(128, 0).repeat_interleave(128, 1);
    x = x + at::matmul(u, down.t()).to(at::kBFloat16);
  }
  return rms_norm(x, weight(m, "final_norm.weight"));
}

bool identical(const at::Tensor& a, const at::Tensor& b) {
  if (a.scalar_type() != b.scalar_type() || a.sizes() != b.sizes() || a.strides() != b.strides()) return false;
  at::Tensor x = a.cpu().contiguous(), y = b.cpu().contiguous();
  return std::memcmp(x.data_ptr(), y.data_ptr(), static_cast<std::size_t>(x.numel()) * x.element_size()) == 0;
}

bool identical(const NamedTensors& a, const NamedTensors& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (a[i].first != b[i].first || !identical(a[i].second, b[i].second)) return false;
  return true;
}

bool identical(const LoadedModel& a, const LoadedModel& b) {
  if (!identical(a.weights, b.weights) || a.derived.size() != b.derived.size()) return false;
  for (const auto& [name, t] : a.derived)
    if (!b.derived.count(name) || !identical(t, b.derived.at(name))) return false;
  return true;
}

namespace {
// Folds what identical() compares (dtype, shape, strides, bytes) into `seed`.
std::size_t fold(std::size_t seed, std::string_view bytes) {
  return seed * 0x100000001b3ull ^ std::hash<std::string_view>{}(bytes);
}
std::size_t fold(std::size_t seed, const at::Tensor& t) {
  at::Tensor x = t.cpu().contiguous();
  seed = fold(seed, fmt::format("{} {} {}", c10::toString(t.scalar_type()), fmt::join(t.sizes(), ","),
                                fmt::join(t.strides(), ",")));
  return fold(seed, std::string_view(static_cast<const char*>(x.data_ptr()),
                                     static_cast<std::size_t>(x.numel()) * x.element_size()));
}
}  // namespace

std::string fingerprint(const LoadedModel& model, const at::Tensor& output) {
  std::size_t h = 0;
  for (const auto& [name, t] : model.weights) h = fold(fold(h, name), t);
  for (const auto& [name, t] : model.derived) h = fold(fold(h, name), t);
  return fmt::format("{:016x}", fold(h, output));
}

}  // namespace snapcache::demo
