// Raw storages for testing the store without libtorch: byte buffers and the TensorRecords laid
// over them, published and looked up through Store directly.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "snapcache/config.h"
#include "snapcache/extend/store_access.h"
#include "snapcache/key.h"
#include "snapcache/manifest.h"

namespace snapcache::test {

// A key as a loader would build it; `seed` varies the checkpoint path so keys differ. The torch
// identity is a fixed one (the torch front end's tests use their process's, see fixtures.h).
Key store_key(int seed, const std::string& component = "dit");

// A cache in `dir` with room for the tests: 64 GiB capacity, no disk reserve.
Config test_config(const std::string& dir);
// The soak's cache (store_helper soak): room for about three 1 MiB models, so publications evict.
inline constexpr std::uint64_t kSoakCapacity = 3500ull << 10;

// A small model-like set of storages, about `mib` MiB: a bf16 embedding with a tied alias
// (lm_head.weight, same storage), an attention weight with a view at an offset, a transposed
// (non-contiguous) weight, an int8 weight with (N, 1) fp32 scales, a norm, and a zero-size storage.
struct RawModel {
  std::vector<std::vector<std::byte>> storages;
  std::vector<TensorRecord> tensors;

  std::vector<StorageSource> sources() const;
  std::uint64_t bytes() const;
};
RawModel raw_model(int seed, std::size_t mib = 1);

// What `model` looks like, to check a warm load against (names, dtypes, shapes, strides, aliases).
ExpectedLayout expected_layout(const RawModel& model);

PublishOutcome publish_raw(Store& store, const Key& key, const RawModel& model, const PublishOptions& options = {});

// The snapshot has the model's tensors (names, dtypes, shapes, strides, offsets, storage sharing)
// and every storage's bytes, byte for byte.
bool same_data(const Snapshot& snapshot, const RawModel& model);

}  // namespace snapcache::test
