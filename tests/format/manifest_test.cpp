#include "format/manifest.h"
#include "format/stamp.h"
#include "support/catch.h"
#include "support/raw_storages.h"
#include "snapcache/manifest.h"

using namespace snapcache;

namespace {
Manifest sample() {
  Manifest m;
  m.key = test::store_key(7);
  m.creation = {123, "0.1.0", "host", 42};
  DataFile f;
  f.name = "data-0000.bin";
  f.size = 3 * 4096 + 100;
  f.chunk_size = 4096;
  f.chunk_hashes = {1, 2, 3, 4};
  f.identity = {1, 2, f.size, 3, 4, false};
  m.files.push_back(f);
  m.storages = {{0, 0, 4096 + 100}, {0, 8192, 4096 + 100}};  // padding [4196, 8192)
  m.tensors = {{"a", DType::float32, {32, 32}, {32, 1}, 0, 0},
               {"a.t", DType::float32, {32, 32}, {1, 32}, 0, 0},
               {"b", DType::bfloat16, {2098}, {1}, 1, 0},
               {"empty", DType::int8, {0, 5}, {5, 1}, 1, 0}};
  return m;
}
}  // namespace

TEST_CASE("a manifest round-trips through its encoding", "[format]") {
  Manifest m = sample();
  auto decoded = format::decode_manifest(format::encode_manifest(m));
  REQUIRE(decoded.is_ok());
  CHECK(decoded->key == m.key);
  CHECK(decoded->files[0].chunk_hashes == m.files[0].chunk_hashes);
  CHECK(decoded->files[0].identity == m.files[0].identity);
  CHECK(decoded->tensors.size() == 4);
  CHECK(decoded->tensors[1].strides == std::vector<std::int64_t>{1, 32});
  CHECK(decoded->creation.pid == 42);
}

TEST_CASE("every single-byte change and every truncation of a manifest is rejected", "[format]") {
  const std::string bytes = format::encode_manifest(sample());
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    std::string damaged = bytes;
    damaged[i] = static_cast<char>(damaged[i] ^ 0x5a);
    auto r = format::decode_manifest(damaged);
    INFO("byte " << i);
    REQUIRE_FALSE(r.is_ok());
  }
  for (std::size_t cut = 0; cut < bytes.size(); cut += 7) CHECK_FALSE(format::decode_manifest(bytes.substr(0, cut)).is_ok());
  CHECK(format::decode_manifest(bytes + "x").status().code() == StatusCode::damaged);
}

TEST_CASE("layout rules - bounds and alignment / overlap / names", "[format]") {
  SECTION("a tensor reaching past its storage") {
    Manifest m = sample();
    m.tensors[0].sizes = {33, 32};
    CHECK(format::validate_layout(m).message().find("'a' needs") != std::string::npos);
  }
  SECTION("a storage past the end of its file") {
    Manifest m = sample();
    m.storages[1].nbytes = 9999;
    CHECK_FALSE(format::validate_layout(m).is_ok());
  }
  SECTION("unaligned storage") {
    Manifest m = sample();
    m.storages[1].offset = 8000;
    CHECK_FALSE(format::validate_layout(m).is_ok());
  }
  SECTION("overlapping storages") {
    Manifest m = sample();
    m.storages[0].nbytes = 8193;
    CHECK(format::validate_layout(m).message().find("overlap") != std::string::npos);
  }
  SECTION("duplicate names") {
    Manifest m = sample();
    m.tensors[1].name = "a";
    CHECK(format::validate_layout(m).message().find("twice") != std::string::npos);
  }
  SECTION("unsafe data file name") {
    Manifest m = sample();
    m.files[0].name = "../../etc/passwd";
    CHECK_FALSE(format::validate_layout(m).is_ok());
  }
  SECTION("overflowing extent") {
    Manifest m = sample();
    m.tensors[0].sizes = {1ll << 62, 4};
    m.tensors[0].strides = {1ll << 62, 1};
    CHECK_FALSE(format::validate_layout(m).is_ok());
  }
  SECTION("negative stride") {
    Manifest m = sample();
    m.tensors[0].strides = {-32, 1};
    CHECK_FALSE(format::validate_layout(m).is_ok());
  }
  SECTION("a data file larger than its storages with their alignment padding") {
    // Two storages of 4196 bytes fill at most two aligned 8 KiB runs: 16384 bytes. What a file
    // holds beyond that is padding no layout needs, which an import would write in full.
    Manifest m = sample();
    auto resize = [&](std::uint64_t size) {
      m.files[0].size = size;
      m.files[0].identity.size = size;
      m.files[0].chunk_hashes.assign((size + 4095) / 4096, 0);
    };
    resize(16384);
    CHECK(format::validate_layout(m).is_ok());
    resize(16385);
    const Status st = format::validate_layout(m);
    INFO(st.to_string());
    CHECK(st.code() == StatusCode::damaged);
    CHECK(st.message().find("data file 'data-0000.bin' is 16.0 KiB (16385 bytes) but its storages with their "
                            "alignment padding fill at most 16384 bytes") != std::string::npos);
    // One 4 KiB storage in a 1.5 GiB file (the crafted archive of issue 19): refused the same way.
    m.storages = {{0, 0, 4096}};
    m.tensors = {{"w", DType::uint8, {4096}, {1}, 0, 0}};
    resize(3ull << 29);
    CHECK(format::validate_layout(m).message().find("fill at most 4096 bytes") != std::string::npos);
  }
  SECTION("chunk table does not cover the file") {
    Manifest m = sample();
    m.files[0].chunk_hashes.pop_back();
    CHECK_FALSE(format::validate_layout(m).is_ok());
  }
}

TEST_CASE("damage is mapped to the tensors that hold the bytes", "[format]") {
  Manifest m = sample();
  auto names = format::tensors_in_range(m, 0, 0, 16);
  CHECK(names == std::vector<std::string>{"a", "a.t"});
  CHECK(format::tensors_in_range(m, 0, 8192 + 10, 1) == std::vector<std::string>{"b"});
  CHECK(format::tensors_in_range(m, 0, 4196, 100).empty());  // padding
}

TEST_CASE("the verification stamp round-trips and rejects damage", "[format]") {
  format::Stamp s{99, {{1, 2, 3, 4, 5, false}, {6, 7, 8, 9, 10, false}}};
  std::string bytes = format::encode_stamp(s);
  auto d = format::decode_stamp(bytes);
  REQUIRE(d.is_ok());
  CHECK(d->identities == s.identities);
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    std::string bad = bytes;
    bad[i] = static_cast<char>(bad[i] ^ 1);
    CHECK_FALSE(format::decode_stamp(bad).is_ok());
  }
}
