#include "support/raw_storages.h"
#include "snapcache/key.h"
#include "snapcache/manifest.h"

#include <algorithm>
#include <cstring>

namespace snapcache::test {

Key store_key(int seed, const std::string& component) {
  Key key;
  CheckpointFile f;
  f.path = "/checkpoints/model-" + std::to_string(seed) + ".safetensors";
  f.size = 1000 + static_cast<std::uint64_t>(seed);
  f.mtime_ns = 1'700'000'000'000'000'000;
  f.ctime_ns = 1'700'000'000'000'000'001;
  f.device = 2049;
  f.inode = 4242 + static_cast<std::uint64_t>(seed);
  key.checkpoint.push_back(f);
  key.source_identity = "test-loader-v1";
  key.torch = {"2.11.0+test", "", "cxx11"};
  key.dtype = "bfloat16";
  key.precision_policy = "w8a16";
  key.topology = {0, 1, 0, 1, {}};
  key.component = component;
  return key;
}

Config test_config(const std::string& dir) {
  Config c;
  c.directory = dir;
  c.capacity_bytes = 64 * kGiB;
  c.reserve_free_bytes = 0;
  return c;
}

std::vector<StorageSource> RawModel::sources() const {
  std::vector<StorageSource> out;
  for (const auto& s : storages) out.push_back({s.data(), s.size()});
  return out;
}

std::uint64_t RawModel::bytes() const {
  std::uint64_t total = 0;
  for (const auto& s : storages) total += s.size();
  return total;
}

RawModel raw_model(int seed, std::size_t mib) {
  RawModel m;
  // Filled from a counter: deterministic in every process.
  auto storage = [&](std::uint64_t bytes, int salt) {
    std::vector<std::byte> b(bytes);
    std::uint32_t x = static_cast<std::uint32_t>(seed * 7919 + salt * 104729 + 1);
    for (auto& byte : b) {
      x = x * 1664525u + 1013904223u;
      byte = static_cast<std::byte>(x >> 24);
    }
    m.storages.push_back(std::move(b));
    return static_cast<std::uint32_t>(m.storages.size() - 1);
  };
  auto tensor = [&](std::string name, DType dtype, std::vector<std::int64_t> sizes, std::vector<std::int64_t> strides,
                    std::uint32_t s, std::int64_t offset = 0) {
    m.tensors.push_back({std::move(name), dtype, std::move(sizes), std::move(strides), s, offset});
  };
  const std::int64_t hidden = 256;
  const std::int64_t rows = std::max<std::int64_t>(1, static_cast<std::int64_t>(mib) * (1 << 20) / (hidden * 2) / 4);
  const auto u = [](std::int64_t v) { return static_cast<std::uint64_t>(v); };
  std::uint32_t embed = storage(u(rows * hidden * 2), 1);
  tensor("embed.weight", DType::bfloat16, {rows, hidden}, {hidden, 1}, embed);
  tensor("lm_head.weight", DType::bfloat16, {rows, hidden}, {hidden, 1}, embed);  // tied
  std::uint32_t qkv = storage(u(3 * hidden * hidden * 2), 2);
  tensor("attn.qkv.weight", DType::bfloat16, {3 * hidden, hidden}, {hidden, 1}, qkv);
  tensor("attn.k_view", DType::bfloat16, {hidden, hidden}, {hidden, 1}, qkv, hidden * hidden);  // view, offset
  std::uint32_t proj = storage(u(hidden * 2 * hidden * 2), 3);
  tensor("attn.proj.weight_t", DType::bfloat16, {2 * hidden, hidden}, {1, 2 * hidden}, proj);  // transposed
  tensor("mlp.up.weight", DType::int8, {rows, hidden}, {hidden, 1}, storage(u(rows * hidden), 4));
  tensor("mlp.up.scale", DType::float32, {rows, 1}, {1, 1}, storage(u(rows * 4), 5));
  tensor("norm.weight", DType::bfloat16, {hidden}, {1}, storage(u(hidden * 2), 6));
  tensor("empty.bias", DType::float32, {0}, {1}, storage(0, 7));  // a zero-size storage
  return m;
}

ExpectedLayout expected_layout(const RawModel& model) {
  ExpectedLayout layout;
  for (const auto& t : model.tensors) {
    ExpectedTensor e{t.name, t.dtype, t.sizes, t.strides, ""};
    std::size_t sharing = static_cast<std::size_t>(std::count_if(
        model.tensors.begin(), model.tensors.end(), [&](const TensorRecord& o) { return o.storage == t.storage; }));
    if (sharing > 1) e.alias_group = "storage-" + std::to_string(t.storage);
    layout.push_back(std::move(e));
  }
  return layout;
}

PublishOutcome publish_raw(Store& store, const Key& key, const RawModel& model, const PublishOptions& options) {
  auto sources = model.sources();
  return store.publish(key, sources, model.tensors, options);
}

bool same_data(const Snapshot& snapshot, const RawModel& model) {
  const Manifest& m = snapshot.manifest();
  if (m.tensors.size() != model.tensors.size() || m.storages.size() != model.storages.size()) return false;
  for (std::size_t i = 0; i < m.tensors.size(); ++i) {
    const TensorRecord& a = m.tensors[i];
    const TensorRecord& b = model.tensors[i];
    if (a.name != b.name || a.dtype != b.dtype || a.sizes != b.sizes || a.strides != b.strides ||
        a.storage != b.storage || a.storage_offset != b.storage_offset)
      return false;
  }
  for (std::uint32_t s = 0; s < m.storages.size(); ++s) {
    const auto& want = model.storages[s];
    if (m.storages[s].nbytes != want.size()) return false;
    if (!want.empty() && std::memcmp(snapshot.storage_data(s), want.data(), want.size()) != 0) return false;
  }
  return true;
}

}  // namespace snapcache::test
