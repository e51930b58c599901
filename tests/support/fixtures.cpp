#include "support/fixtures.h"
#include "snapcache/extend/host_storage.h"
#include "snapcache/extend/post_load.h"
#include "snapcache/extend/store_tensors.h"
#include "snapcache/key.h"

#include <ATen/Functions.h>

#include <array>
#include <cstring>

namespace snapcache::test {

Key test_key(int seed, const std::string& component) {
  Key key = store_key(seed, component);
  key.torch = current_torch_identity();
  return key;
}

namespace {
class DoubleInPlace final : public PostLoadMethod {
 public:
  explicit DoubleInPlace(std::string tensor) : tensor_(std::move(tensor)) {}
  std::string name() const override { return "double-in-place"; }
  std::vector<std::string> targets(const NamedTensors&) const override { return {tensor_}; }
  Status apply(NamedTensors& tensors) const override {
    for (auto& [name, t] : tensors)
      if (name == tensor_) t.mul_(2);
    return Status::ok();
  }

 private:
  std::string tensor_;
};
}  // namespace

std::shared_ptr<PostLoadMethod> double_in_place(const std::string& tensor) {
  return std::make_shared<DoubleInPlace>(tensor);
}

NamedTensors odd_matrices() {
  NamedTensors t;
  const std::pair<at::ScalarType, std::array<std::int64_t, 2>> cases[] = {
      {at::kChar, {1237, 2053}}, {at::kHalf, {777, 1531}}, {at::kFloat, {513, 1029}}, {at::kDouble, {301, 999}}};
  int seed = 0;
  for (const auto& [type, shape] : cases) {
    at::Tensor m = at::randint(-100, 100, {shape[0], shape[1]}, at::TensorOptions().dtype(at::kLong)
                                                              .device(at::kCPU))
                       .add(++seed)
                       .to(type);
    t.emplace_back(c10::toString(type), m);
  }
  // Elements wider than a machine word, and random bits read as floats (NaNs with payloads,
  // negative zeros, denormals): a transpose moves them without ever reading them as numbers.
  t.emplace_back("ComplexDouble", at::randint(-100, 100, {257, 515}, at::TensorOptions().dtype(at::kLong)).to(at::kComplexDouble));
  t.emplace_back("random bits as Float",
                 at::randint(0, 256, {389, 4 * 1013}, at::TensorOptions().dtype(at::kByte)).view(at::kFloat));
  return t;
}

HostStorages pending_transposes(const NamedTensors& tensors, const HostStorages* stored) {
  HostStorages host;
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const at::Tensor& t = tensors[i].second;
    HostStorage s;
    s.nbytes = static_cast<std::uint64_t>(t.numel()) * t.element_size();
    PendingTranspose p{t, std::nullopt};
    if (stored != nullptr) {
      if (const auto& file = stored->storages.at(stored->storage_of.at(i)).file) {
        p.source_file = *file;
        p.source_file->offset += static_cast<std::uint64_t>(t.storage_offset()) * t.element_size();
      }
    }
    s.pending = p;
    s.tensors = {host.storages.size()};
    host.storage_of.push_back(static_cast<std::uint32_t>(host.storages.size()));
    host.storages.push_back(std::move(s));
  }
  return host;
}

NamedTensors model_tensors(int seed, std::size_t mib) {
  // Filled from a counter, not the global RNG: tests also check loads leave the RNG alone.
  auto fill = [&](at::Tensor t, int salt) {
    auto bytes = t.numel() * static_cast<std::int64_t>(t.element_size());
    auto* p = static_cast<std::uint8_t*>(t.data_ptr());
    std::uint32_t x = static_cast<std::uint32_t>(seed * 7919 + salt * 104729 + 1);
    for (std::int64_t i = 0; i < bytes; ++i) {
      x = x * 1664525u + 1013904223u;
      p[i] = static_cast<std::uint8_t>(x >> 24);
    }
    return t;
  };
  std::int64_t hidden = 256;
  std::int64_t rows = std::max<std::int64_t>(1, static_cast<std::int64_t>(mib) * (1 << 20) / (hidden * 2) / 4);
  NamedTensors out;
  at::Tensor embed = fill(at::empty({rows, hidden}, at::kBFloat16), 1);
  out.emplace_back("embed.weight", embed);
  out.emplace_back("lm_head.weight", embed);  // tied
  at::Tensor qkv = fill(at::empty({3 * hidden, hidden}, at::kBFloat16), 2);
  out.emplace_back("attn.qkv.weight", qkv);
  out.emplace_back("attn.k_view", qkv.narrow(0, hidden, hidden));  // view with an offset
  at::Tensor proj = fill(at::empty({hidden, 2 * hidden}, at::kBFloat16), 3);
  out.emplace_back("attn.proj.weight_t", proj.t());  // non-contiguous
  out.emplace_back("mlp.up.weight", fill(at::empty({rows, hidden}, at::kChar), 4));
  out.emplace_back("mlp.up.scale", fill(at::empty({rows, 1}, at::kFloat), 5));
  out.emplace_back("norm.weight", fill(at::empty({hidden}, at::kBFloat16), 6));
  out.emplace_back("empty.bias", at::empty({0}, at::kFloat));
  return out;
}

bool same_tensor(const at::Tensor& a, const at::Tensor& b) {
  if (a.scalar_type() != b.scalar_type() || a.sizes() != b.sizes() || a.strides() != b.strides() ||
      a.storage_offset() != b.storage_offset())
    return false;
  if (a.numel() == 0) return true;
  // Compare the bytes each tensor reaches, element by element in logical order.
  if (a.is_contiguous() && b.is_contiguous())  // also for dtypes torch cannot copy (bits, uint1..7)
    return std::memcmp(a.data_ptr(), b.data_ptr(), static_cast<std::size_t>(a.numel()) * a.element_size()) == 0;
  at::Tensor ca = a.contiguous();
  at::Tensor cb = b.contiguous();
  return std::memcmp(ca.data_ptr(), cb.data_ptr(), static_cast<std::size_t>(ca.numel()) * ca.element_size()) == 0;
}

bool same_tensors(const NamedTensors& a, const NamedTensors& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (a[i].first != b[i].first || !same_tensor(a[i].second, b[i].second)) return false;
  return true;
}


}  // namespace snapcache::test
