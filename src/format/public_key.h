// The text of an archive signer's public key, an Ed25519 key of 32 bytes: "ed25519:" and 64 hex
// digits. The settings (trusted_archive_keys), `snapcache keygen`, an archive's signer and an
// entry's origin all spell a key this one way, so the key a person copies from one is the key
// another compares. No cryptography here (libsodium is the archive layer's: src/archive/signing.h).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "snapcache/status.h"

namespace snapcache::format {

inline constexpr std::size_t kPublicKeyBytes = 32;
using PublicKey = std::array<std::uint8_t, kPublicKeyBytes>;
inline constexpr std::string_view kPublicKeyPrefix = "ed25519:";

// "ed25519:" and 64 lowercase hex digits.
std::string public_key_text(const PublicKey& key);
// The same text, its hex digits in either case; anything else is invalid_argument saying what a
// key looks like.
Result<PublicKey> parse_public_key(std::string_view text);

// `hex` (an even number of hex digits, either case) as bytes into `out`, which holds exactly
// hex.size() / 2 bytes; false when it is not that.
bool parse_hex(std::string_view hex, std::uint8_t* out, std::size_t out_size);
std::string hex_text(const std::uint8_t* bytes, std::size_t size);

}  // namespace snapcache::format
