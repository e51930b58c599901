// A copy of a load's host tensors for its publication (host_path/host_copy.h): the layout and ties
// it keeps, and the memory rule it refuses by.
#include <ATen/Functions.h>

#include <cstdint>

#include "support/catch.h"
#include "host_path/host_copy.h"
#include "snapcache/named_tensors.h"
#include "util/host_memory.h"

using namespace snapcache;

TEST_CASE("a copy of host tensors keeps their layout and ties, and one that would not fit in memory is refused",
          "[host_copy]") {
  // Half of the memory available is the most a copy takes: a tensor larger than all of it can
  // never be copied (it is never touched, so its pages take no memory).
  const std::uint64_t available = util::available_host_memory().value();
  const NamedTensors huge = {{"w", at::empty({static_cast<std::int64_t>(available / 2 + (64u << 20))}, at::kByte)}};
  auto copy = host_path::copy_host_tensors(huge, 2);
  REQUIRE(!copy.is_ok());
  CHECK(copy.status().code() == StatusCode::no_space);
  CHECK(copy.status().message().find("of memory available") != std::string::npos);

  // A small one: the same names, shapes, strides and ties, in memory of its own.
  const at::Tensor base = at::arange(64, at::kFloat);
  const NamedTensors tied = {{"a", base.view({8, 8})}, {"b", base.view({8, 8}).t()}, {"c", base.narrow(0, 8, 8)}};
  auto small = host_path::copy_host_tensors(tied, 2);
  REQUIRE(small.is_ok());
  CHECK(small->bytes == 64 * sizeof(float));
  REQUIRE(small->tensors.size() == 3);
  for (std::size_t i = 0; i < 3; ++i) {
    CHECK(small->tensors[i].first == tied[i].first);
    CHECK(at::equal(small->tensors[i].second, tied[i].second));
    CHECK(small->tensors[i].second.strides() == tied[i].second.strides());
    CHECK(small->tensors[i].second.storage_offset() == tied[i].second.storage_offset());
    CHECK(small->tensors[i].second.data_ptr() != tied[i].second.data_ptr());
  }
  CHECK(small->tensors[0].second.storage().is_alias_of(small->tensors[2].second.storage()));
  base.fill_(0);
  CHECK(small->tensors[2].second[0].item<float>() == 8.0f);
}
