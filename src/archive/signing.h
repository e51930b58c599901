// Who made an archive, provably: Ed25519 signatures (libsodium's crypto_sign) over what determines
// every byte a load of its entries gets, and the key files `snapcache keygen` writes and `snapcache
// export --sign` reads. What is signed is the archive grammar's (archive_format.h); this file only
// holds the keys and the primitives.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include <sodium.h>

#include "format/public_key.h"
#include "snapcache/status.h"

namespace snapcache::archive {

using format::PublicKey;
inline constexpr std::size_t kSignatureBytes = 64;
using Signature = std::array<std::uint8_t, kSignatureBytes>;
inline constexpr std::size_t kDigestBytes = 32;
using Digest = std::array<std::uint8_t, kDigestBytes>;
inline constexpr std::size_t kNonceBytes = 16;
using Nonce = std::array<std::uint8_t, kNonceBytes>;

// An archive's private key in memory, wiped when it goes.
class SigningKey {
 public:
  static Result<SigningKey> generate();
  // Reads a key file `snapcache keygen` wrote. Refused when others may read or write it (as ssh
  // refuses such a private key) or another user owns it, with the chmod that fixes it.
  static Result<SigningKey> from_file(const std::string& path);
  // Writes the key file (created, mode 0600; an existing file, a link included, is never
  // overwritten) and beside it `path`.pub, holding the public key's text.
  Status write_files(const std::string& path) const;

  SigningKey(SigningKey&& other) noexcept;
  SigningKey& operator=(SigningKey&&) = delete;
  SigningKey(const SigningKey&) = delete;
  ~SigningKey();

  const PublicKey& public_key() const { return public_; }
  Signature sign(std::string_view message) const;

 private:
  SigningKey() = default;
  std::array<std::uint8_t, 64> secret_{};  // libsodium's secret key: the seed, then the public key
  PublicKey public_{};
};

// Whether `signature` is `key`'s over `message`.
bool signature_holds(const PublicKey& key, std::string_view message, const Signature& signature);

// BLAKE2b-256 (libsodium's crypto_generichash): what a signature binds the bytes by. The chunk
// checksums (XXH3-64) find damage fast but are no proof against someone who makes bytes to match
// them; this digest is.
class DigestStream {
 public:
  DigestStream();
  void update(const void* data, std::size_t size);
  Digest finish();

 private:
  crypto_generichash_state state_{};
};
Digest digest_of(std::string_view bytes);

// 16 random bytes (libsodium's randombytes): what makes an archive's signatures its own.
Nonce random_nonce();

}  // namespace snapcache::archive
