// The donor protocol: one request and one answer per connection, as JSON, over a Unix socket
// (src/ipc/unix_socket.h). An attach answer carries the memory descriptors; the consumer keeps the
// connection open for as long as it maps the memory, so its closing (exit, crash, or the last
// tensor going away) is the detach.
//
//   attach  {"op":"attach","key":K}
//        -> {"ok":true,"component":C,"key":K,"fingerprint":F,"allocations":[bytes...],"layout":L} + descriptors
//        |  {"ok":false,"code":"mismatch|busy|not_found|...","reason":"..."}
//   status  {"op":"status"}
//        -> {"ok":true,"pid":P,"gpu_uuid":U,"components":[{"component","key_id","key","bytes","tensors","consumers","fingerprint"}...]}
//
// K is a donor key: {"disk": hex of encode_key, "weight_processing": "...", "gpu_uuid": "..."}.
// L is the prepared layout: storages (offset and size in the mapping) and tensors over them.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "snapcache/donor.h"
#include "snapcache/manifest.h"

namespace snapcache::donor {

// Where a tensor goes in the consumer: a weight, or a derived buffer (built by a refresh hook).
enum class Role { weight, derived };

struct PreparedTensor {
  TensorRecord record;  // storage indexes PreparedLayout::storages
  Role role = Role::weight;
};

struct PreparedStorage {
  std::uint64_t offset = 0;  // in the mapping
  std::uint64_t nbytes = 0;
};

struct PreparedLayout {
  std::vector<PreparedStorage> storages;
  std::vector<PreparedTensor> tensors;
  std::uint64_t bytes = 0;  // the mapping's used extent
};

nlohmann::json to_json(const DonorKey& key);
Result<DonorKey> donor_key_from_json(const nlohmann::json& j);
nlohmann::json to_json(const PreparedLayout& layout);
Result<PreparedLayout> layout_from_json(const nlohmann::json& j);

// An error answer, and its Status again on the consumer's side.
nlohmann::json error_answer(const Status& status);
Status status_of_answer(const nlohmann::json& answer);

// The socket of a GPU's donor in the socket directory: "GPU-….sock". One donor per GPU.
std::string socket_name(const std::string& gpu_uuid);

// Parses a message body; a body that is not a JSON object is invalid_argument.
Result<nlohmann::json> parse_message(const std::string& body);

}  // namespace snapcache::donor
