// shard() and fuse_qkv() on a real safetensors file: a share of rows stays in the file's mapping,
// in a storage of exactly its bytes (so a snapshot stores the share, not the whole tensor), and
// outlives the file object; a share of columns, and a tensor autograd tracks, are copied.
#include <ATen/Functions.h>

#include <cstring>

#include "snapcache/extend/host_storage.h"
#include "snapcache/safetensors.h"
#include "snapcache/sharding.h"
#include "support/catch.h"
#include "support/temp_dir.h"

using namespace snapcache;

namespace {

std::uint64_t bytes_of(const at::Tensor& t) { return static_cast<std::uint64_t>(t.numel()) * t.element_size(); }

bool lies_within(const at::Tensor& part, const at::Tensor& whole) {
  const auto* p = static_cast<const std::byte*>(part.data_ptr());
  const auto* w = static_cast<const std::byte*>(whole.data_ptr());
  return p >= w && p + bytes_of(part) <= w + bytes_of(whole);
}

}  // namespace

TEST_CASE("a share of rows stays in the file's mapping, in a storage of its own bytes, and a share of columns is copied",
          "[safetensors][sharding]") {
  test::TempDir dir;
  const at::Tensor w = at::arange(8 * 6, at::kFloat).reshape({8, 6});
  REQUIRE(write_safetensors(dir / "w.safetensors", {{"w", w}}).is_ok());
  auto file = SafetensorsFile::open(dir / "w.safetensors");
  REQUIRE(file.is_ok());
  at::Tensor full = *(*file)->tensor("w");

  auto rows = shard(full, ShardAxis::rows, 2, 4, "w");
  auto cols = shard(full, ShardAxis::columns, 1, 3, "w");
  auto whole = shard(full, ShardAxis::columns, 0, 1, "w");
  REQUIRE(rows.is_ok());
  REQUIRE(cols.is_ok());
  REQUIRE(whole.is_ok());
  CHECK(at::equal(*rows, w.narrow(0, 4, 2)));
  CHECK(at::equal(*cols, w.narrow(1, 2, 2)));
  CHECK(at::equal(*whole, w));

  // Rows: the file's bytes where they lie, in a storage that covers them and nothing more.
  CHECK(rows->data_ptr() == full.narrow(0, 4, 2).data_ptr());
  CHECK(rows->storage().nbytes() == bytes_of(*rows));
  CHECK(rows->storage_offset() == 0);
  CHECK(whole->data_ptr() == full.data_ptr());
  // Columns: a compact copy elsewhere.
  CHECK_FALSE(lies_within(*cols, full));
  CHECK(cols->storage().nbytes() == bytes_of(*cols));

  // What a snapshot of the loader's output stores: the shares, not the tensor around them.
  auto host = describe_host_storages({{"rows", *rows}, {"cols", *cols}});
  REQUIRE(host.is_ok());
  CHECK(host->total_bytes() == bytes_of(*rows) + bytes_of(*cols));

  // The share keeps the mapping alive after the file and its tensor are gone.
  full = at::Tensor();
  file->reset();
  CHECK(at::equal(*rows, w.narrow(0, 4, 2)));
}

TEST_CASE("fuse_qkv writes this rank's q, k and v rows once, into a new tensor", "[safetensors][sharding]") {
  test::TempDir dir;
  const at::Tensor q = at::arange(4 * 3, at::kBFloat16).reshape({4, 3});
  const at::Tensor k = at::add(q, 100), v = at::add(q, 200);
  REQUIRE(write_safetensors(dir / "qkv.safetensors", {{"q", q}, {"k", k}, {"v", v}}).is_ok());
  auto file = SafetensorsFile::open(dir / "qkv.safetensors");
  REQUIRE(file.is_ok());
  auto fused = fuse_qkv(*(*file)->tensor("q"), *(*file)->tensor("k"), *(*file)->tensor("v"), 1, 2, "qkv");
  REQUIRE(fused.is_ok());
  CHECK(at::equal(*fused, at::cat({q.narrow(0, 2, 2), k.narrow(0, 2, 2), v.narrow(0, 2, 2)}, 0)));
  CHECK(fused->storage().nbytes() == bytes_of(*fused));
  CHECK_FALSE(lies_within(*fused, *(*file)->tensor("q")));

  auto mixed = fuse_qkv(q, k.to(at::kFloat), v, 0, 2, "qkv");
  REQUIRE_FALSE(mixed.is_ok());
  CHECK(mixed.status().message().find("different dtypes") != std::string::npos);
}

TEST_CASE("a shard of a tensor autograd tracks is a copy, as it was", "[sharding]") {
  const at::Tensor full = at::ones({4, 2}, at::kFloat).requires_grad_(true);
  auto rows = shard(full, ShardAxis::rows, 0, 2, "w");
  REQUIRE(rows.is_ok());
  CHECK(rows->data_ptr() != full.data_ptr());
  CHECK(rows->requires_grad());
  auto bad = shard(full, ShardAxis::rows, 0, 3, "w");
  REQUIRE_FALSE(bad.is_ok());
  CHECK(bad.status().message().find("w: dimension 0 (4) does not divide into 3 shards") != std::string::npos);
}
