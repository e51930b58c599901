// The donor protocol without a GPU: prepared layouts packed, sent as JSON, checked and unpacked
// (over host memory here), donor keys and their differences, and error answers.
#include <ATen/Functions.h>

#include <cstring>

#include "donor/prepared_layout.h"
#include "donor/protocol.h"
#include "snapcache/donor.h"
#include "snapcache/key.h"
#include "snapcache/manifest.h"
#include "support/catch.h"

using namespace snapcache;

namespace {

// Weights with a tied pair, a view at an offset and a transposed view; one derived buffer.
struct Model {
  NamedTensors weights;
  std::map<std::string, at::Tensor> derived;
  Model() {
    at::Tensor embed = at::arange(24, at::kFloat).reshape({6, 4});
    at::Tensor qkv = at::arange(60, at::kShort).reshape({12, 5});
    weights = {{"embed.weight", embed},
               {"lm_head.weight", embed},  // tied
               {"q.weight", qkv.narrow(0, 4, 4)},
               {"qkv_t.weight", qkv.t()},
               {"scale", at::full({3}, 0.5, at::kFloat)}};
    derived = {{"rope", at::arange(8, at::kDouble)}};
  }
};

}  // namespace

TEST_CASE("a packed layout keeps aliases, offsets and strides, and round-trips through JSON", "[donor]") {
  Model m;
  auto packing = donor::pack(m.weights, m.derived, c10::Device(c10::kCPU));
  REQUIRE(packing.is_ok());
  const donor::PreparedLayout& layout = packing->layout;
  REQUIRE(layout.storages.size() == 4);  // embed (tied), qkv (two views), scale, rope
  CHECK(layout.tensors[0].record.storage == layout.tensors[1].record.storage);
  CHECK(layout.tensors[2].record.storage == layout.tensors[3].record.storage);
  CHECK(layout.tensors[2].record.storage_offset == 20);
  CHECK(layout.tensors[3].record.strides == std::vector<std::int64_t>{1, 5});
  CHECK(layout.tensors.back().role == donor::Role::derived);
  for (const auto& s : layout.storages) CHECK(s.offset % 512 == 0);

  auto again = donor::layout_from_json(nlohmann::json::parse(donor::to_json(layout).dump()));
  REQUIRE(again.is_ok());
  CHECK(donor::to_json(*again) == donor::to_json(layout));

  // Packed into one block of host memory and unpacked over it: the same tensors, aliases kept.
  std::vector<std::byte> block(layout.bytes);
  for (std::size_t i = 0; i < packing->sources.size(); ++i)
    std::memcpy(block.data() + layout.storages[i].offset, packing->sources[i].data(), layout.storages[i].nbytes);
  REQUIRE(donor::check_bounds(*again, block.size()).is_ok());
  auto keep = std::make_shared<int>(0);
  donor::Unpacked out = donor::unpack(*again, block.data(), c10::Device(c10::kCPU), keep);
  REQUIRE(out.weights.size() == m.weights.size());
  for (std::size_t i = 0; i < m.weights.size(); ++i) {
    CAPTURE(m.weights[i].first);
    CHECK(out.weights[i].first == m.weights[i].first);
    CHECK(out.weights[i].second.strides() == m.weights[i].second.strides());
    CHECK(at::equal(out.weights[i].second, m.weights[i].second));
  }
  CHECK(out.weights[0].second.data_ptr() == out.weights[1].second.data_ptr());
  CHECK(at::equal(out.derived.at("rope"), m.derived.at("rope")));
  CHECK(keep.use_count() > 1);  // every storage holds the mapping
  out = donor::Unpacked();
  CHECK(keep.use_count() == 1);
}

TEST_CASE("a layout that reaches outside its memory is refused before anything is built", "[donor]") {
  Model m;
  auto packing = donor::pack(m.weights, m.derived, c10::Device(c10::kCPU));
  REQUIRE(packing.is_ok());
  donor::PreparedLayout layout = packing->layout;
  CHECK(!donor::check_bounds(layout, layout.bytes - 1).is_ok());  // less memory mapped than described
  donor::PreparedLayout past = layout;
  past.tensors[2].record.sizes[0] = 9;  // 9 rows from row 4 of a 12-row storage
  Status st = donor::check_bounds(past, past.bytes);
  CHECK(st.code() == StatusCode::mismatch);
  CHECK(st.message().find("q.weight") != std::string::npos);
  donor::PreparedLayout negative = layout;
  negative.tensors[0].record.strides[0] = -4;
  CHECK(!donor::check_bounds(negative, negative.bytes).is_ok());
  donor::PreparedLayout outside = layout;
  outside.storages[0].nbytes = layout.bytes + 1;
  CHECK(!donor::check_bounds(outside, outside.bytes).is_ok());
  donor::PreparedLayout wrapping = layout;  // 2^62 + 1 floats end at byte 2^64 + 4, which wraps to 4
  wrapping.tensors[0].record.sizes = {(std::int64_t{1} << 62) + 1, 1};
  wrapping.tensors[0].record.strides = {1, 1};
  st = donor::check_bounds(wrapping, wrapping.bytes);
  CHECK(st.code() == StatusCode::mismatch);
  CHECK(st.message().find("embed.weight") != std::string::npos);
  donor::PreparedLayout bad_index = layout;
  bad_index.tensors[0].record.storage = 99;
  CHECK(!donor::check_bounds(bad_index, bad_index.bytes).is_ok());
}

TEST_CASE("a packed tensor on another device, or sparse, is refused by name", "[donor]") {
  NamedTensors weights = {{"w", at::ones({2, 2})}};
  auto st = donor::pack(weights, {}, c10::Device(c10::kCUDA, 0));
  REQUIRE(!st.is_ok());
  CHECK(st.status().message().find("'w'") != std::string::npos);
}

TEST_CASE("donor keys round-trip and their differences are named", "[donor]") {
  DonorKey key;
  key.disk.component = "dit";
  key.disk.dtype = "bfloat16";
  key.disk.checkpoint = {{"/m/model.safetensors", 10, 1, 2, 3, 4, ""}};
  key.disk.options = {{"attention", "sdpa"}};
  key.weight_processing = "fp8-block-scale(128x128)@0.1.0";
  key.gpu_uuid = "GPU-0000";
  auto again = donor::donor_key_from_json(nlohmann::json::parse(donor::to_json(key).dump()));
  REQUIRE(again.is_ok());
  CHECK(*again == key);
  CHECK(donor_key_id(*again) == donor_key_id(key));

  DonorKey other = key;
  other.weight_processing = "int8-row-scale@0.1.0";
  other.gpu_uuid = "GPU-1111";
  other.disk.dtype = "float16";
  const auto differences = diff_donor_keys(key, other);
  std::string fields;
  for (const auto& d : differences) fields += d.field + " ";
  CHECK(fields == "dtype weight_processing gpu_uuid ");
  // In words, each by its field's rule: the donor's value, then the one asked for.
  const std::string diffs = describe_differences(differences, 8);
  CHECK(diffs.find("weight processing int8-row-scale@0.1.0 -> ") != std::string::npos);
  CHECK(diffs.find("GPU GPU-1111 -> ") != std::string::npos);
  CHECK(diffs.find("dtype float16 -> ") != std::string::npos);
  CHECK(donor_key_id(other) != donor_key_id(key));

  // A checkpoint keyed by content travels as its identity: the donor compares what it serves with
  // that (donor.cpp keeps its component keys so), whatever path the consumer's copy has.
  DonorKey by_content = key;
  by_content.disk.checkpoint[0].content_digest = std::string(32, 'd');
  auto sent = donor::donor_key_from_json(nlohmann::json::parse(donor::to_json(by_content).dump()));
  REQUIRE(sent.is_ok());
  CHECK(sent->disk == key_identity(by_content.disk));
  CHECK(sent->disk.checkpoint[0].path.empty());
  CHECK(donor_key_id(*sent) == donor_key_id(by_content));

  CHECK(!donor::donor_key_from_json(nlohmann::json{{"disk", "zz"}}).is_ok());
  CHECK(!donor::donor_key_from_json(nlohmann::json{{"disk", "00"}, {"weight_processing", ""}, {"gpu_uuid", ""}}).is_ok());
}

TEST_CASE("answers carry typed refusals, and malformed messages are refused", "[donor]") {
  const Status busy(StatusCode::busy, "component 'dit' is attached by 1 consumer(s)");
  Status back = donor::status_of_answer(donor::error_answer(busy));
  CHECK(back.code() == StatusCode::busy);
  CHECK(back.message().find("attached by 1 consumer") != std::string::npos);
  CHECK(donor::status_of_answer(nlohmann::json{{"ok", true}}).is_ok());
  CHECK(donor::status_of_answer(nlohmann::json{{"nothing", 1}}).code() == StatusCode::invalid_argument);
  CHECK(!donor::parse_message("[1, 2]").is_ok());
  CHECK(!donor::parse_message("{not json").is_ok());
  CHECK(donor::parse_message(R"({"op":"status"})").is_ok());
  CHECK(!donor::layout_from_json(nlohmann::json{{"bytes", 1}}).is_ok());
}

TEST_CASE("the expected-layout rules compare element counts when post-load may reshape", "[donor]") {
  std::vector<TensorRecord> served = {{"w", DType::int8, {4, 8}, {1, 4}, 0, 0}, {"w_scale", DType::float32, {4}, {1}, 1, 0}};
  ExpectedLayout declared = {{"w", DType::int8, {4, 8}, std::vector<std::int64_t>{8, 1}, ""},
                             {"w_scale", DType::float32, {4, 1}, std::nullopt, ""}};
  CHECK(!check_expected_layout(served, declared, "the donor").is_ok());  // exact: (4) != (4, 1), strides differ
  CHECK(check_expected_layout(served, declared, "the donor", ShapeCheck::element_counts_only).is_ok());
  declared[1].sizes = {5, 1};
  Status st = check_expected_layout(served, declared, "the donor", ShapeCheck::element_counts_only);
  CHECK(st.code() == StatusCode::mismatch);
  CHECK(st.message().find("in the donor") != std::string::npos);
}
