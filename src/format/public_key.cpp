#include "format/public_key.h"

#include "util/fmt.h"

namespace snapcache::format {
namespace {

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

bool parse_hex(std::string_view hex, std::uint8_t* out, std::size_t out_size) {
  if (hex.size() != 2 * out_size) return false;
  for (std::size_t i = 0; i < out_size; ++i) {
    const int high = hex_value(hex[2 * i]);
    const int low = hex_value(hex[2 * i + 1]);
    if (high < 0 || low < 0) return false;
    out[i] = static_cast<std::uint8_t>(high * 16 + low);
  }
  return true;
}

std::string hex_text(const std::uint8_t* bytes, std::size_t size) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(2 * size);
  for (std::size_t i = 0; i < size; ++i) {
    out += kDigits[bytes[i] >> 4];
    out += kDigits[bytes[i] & 0xf];
  }
  return out;
}

std::string public_key_text(const PublicKey& key) {
  return std::string(kPublicKeyPrefix) + hex_text(key.data(), key.size());
}

Result<PublicKey> parse_public_key(std::string_view text) {
  PublicKey key{};
  if (!text.starts_with(kPublicKeyPrefix) || !parse_hex(text.substr(kPublicKeyPrefix.size()), key.data(), key.size()))
    return Status(StatusCode::invalid_argument,
                  fmt::format("'{}' is not a public key: a key is written \"{}\" and {} hex digits, as `snapcache "
                              "keygen` prints it",
                              text, kPublicKeyPrefix, 2 * kPublicKeyBytes));
  return key;
}

}  // namespace snapcache::format
