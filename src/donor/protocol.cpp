#include "donor/protocol.h"

#include "snapcache/dtype.h"
#include "snapcache/key.h"
#include "util/fmt.h"

namespace snapcache::donor {
namespace {

std::string to_hex(std::string_view bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char c : bytes) {
    out += kDigits[c >> 4];
    out += kDigits[c & 15];
  }
  return out;
}

Result<std::string> from_hex(std::string_view hex) {
  auto digit = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  if (hex.size() % 2 != 0) return Status(StatusCode::invalid_argument, "odd-length hex string");
  std::string out(hex.size() / 2, '\0');
  for (std::size_t i = 0; i < out.size(); ++i) {
    const int hi = digit(hex[2 * i]), lo = digit(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) return Status(StatusCode::invalid_argument, "not a hex string");
    out[i] = static_cast<char>(hi * 16 + lo);
  }
  return out;
}

const char* role_name(Role r) { return r == Role::weight ? "weight" : "derived"; }

// nlohmann throws on a missing field or a wrong type: the whole decoding is one guarded call.
template <typename F>
auto decoded(const char* what, F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const std::exception& e) {
    return Status(StatusCode::invalid_argument, fmt::format("malformed {} from the peer: {}", what, e.what()));
  }
}

}  // namespace

nlohmann::json to_json(const DonorKey& key) {
  return {{"disk", to_hex(encode_key(key.disk))}, {"weight_processing", key.weight_processing}, {"gpu_uuid", key.gpu_uuid}};
}

Result<DonorKey> donor_key_from_json(const nlohmann::json& j) {
  return decoded("donor key", [&]() -> Result<DonorKey> {
    auto bytes = from_hex(j.at("disk").get<std::string>());
    if (!bytes) return bytes.status();
    auto disk = decode_key(*bytes);
    if (!disk) return disk.status();
    return DonorKey{std::move(*disk), j.at("weight_processing").get<std::string>(), j.at("gpu_uuid").get<std::string>()};
  });
}

nlohmann::json to_json(const PreparedLayout& layout) {
  nlohmann::json storages = nlohmann::json::array(), tensors = nlohmann::json::array();
  for (const auto& s : layout.storages) storages.push_back({s.offset, s.nbytes});
  for (const auto& t : layout.tensors)
    tensors.push_back({{"name", t.record.name},
                       {"dtype", dtype_name(t.record.dtype)},
                       {"sizes", t.record.sizes},
                       {"strides", t.record.strides},
                       {"storage", t.record.storage},
                       {"storage_offset", t.record.storage_offset},
                       {"role", role_name(t.role)}});
  return {{"storages", storages}, {"tensors", tensors}, {"bytes", layout.bytes}};
}

Result<PreparedLayout> layout_from_json(const nlohmann::json& j) {
  return decoded("layout", [&]() -> Result<PreparedLayout> {
    PreparedLayout layout;
    layout.bytes = j.at("bytes").get<std::uint64_t>();
    for (const auto& s : j.at("storages")) layout.storages.push_back({s.at(0).get<std::uint64_t>(), s.at(1).get<std::uint64_t>()});
    for (const auto& t : j.at("tensors")) {
      PreparedTensor p;
      p.record.name = t.at("name").get<std::string>();
      auto dtype = dtype_from_name(t.at("dtype").get<std::string>());
      if (!dtype) return Status(StatusCode::invalid_argument, fmt::format("tensor '{}': unknown dtype", p.record.name));
      p.record.dtype = *dtype;
      p.record.sizes = t.at("sizes").get<std::vector<std::int64_t>>();
      p.record.strides = t.at("strides").get<std::vector<std::int64_t>>();
      p.record.storage = t.at("storage").get<std::uint32_t>();
      p.record.storage_offset = t.at("storage_offset").get<std::int64_t>();
      const std::string role = t.at("role").get<std::string>();
      if (role != "weight" && role != "derived")
        return Status(StatusCode::invalid_argument, fmt::format("tensor '{}': unknown role '{}'", p.record.name, role));
      p.role = role == "weight" ? Role::weight : Role::derived;
      layout.tensors.push_back(std::move(p));
    }
    return layout;
  });
}

nlohmann::json error_answer(const Status& status) {
  return {{"ok", false}, {"code", to_string(status.code())}, {"reason", status.message()}};
}

Status status_of_answer(const nlohmann::json& answer) {
  return decoded("answer", [&]() -> Status {
    if (answer.at("ok").get<bool>()) return Status::ok();
    const std::string code = answer.at("code").get<std::string>();
    StatusCode c = StatusCode::io_error;
    for (auto candidate : {StatusCode::not_found, StatusCode::mismatch, StatusCode::busy, StatusCode::unsupported,
                           StatusCode::permission_denied, StatusCode::no_space, StatusCode::invalid_argument})
      if (code == to_string(candidate)) c = candidate;
    return Status(c, "the donor refused: " + answer.at("reason").get<std::string>());
  });
}

std::string socket_name(const std::string& gpu_uuid) { return gpu_uuid + ".sock"; }

Result<nlohmann::json> parse_message(const std::string& body) {
  auto j = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return Status(StatusCode::invalid_argument, "a message that is not a JSON object");
  return j;
}

}  // namespace snapcache::donor
