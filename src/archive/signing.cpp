// Key files are the user's files, not the cache's: they are read and written here with POSIX
// calls, outside the FileSystem seam (tools/check_layers.py lists this file), since a key file is
// created with mode 0600 and O_EXCL, which the seam's modes do not say.
#include "archive/signing.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "util/fmt.h"

#include "format/public_key.h"

namespace snapcache::archive {
namespace {

// libsodium before its first use, in any thread; it fails only without a source of randomness.
Status crypto_ready() {
  static const int started = sodium_init();
  if (started < 0) return Status(StatusCode::io_error, "libsodium could not start (no source of randomness)");
  return Status::ok();
}

// The private key file: comments (`#`), then the seed of the key pair in hex. The public key is
// derived from the seed on reading; the comment that names it is for people.
constexpr std::string_view kSecretPrefix = "ed25519-secret:";
constexpr std::size_t kSeedBytes = crypto_sign_SEEDBYTES;
// A key file is a few lines; a larger file is not one.
constexpr std::size_t kMaxKeyFileBytes = 4096;

static_assert(crypto_sign_PUBLICKEYBYTES == format::kPublicKeyBytes);
static_assert(crypto_sign_SECRETKEYBYTES == 64);
static_assert(crypto_sign_BYTES == kSignatureBytes);
static_assert(crypto_generichash_BYTES == kDigestBytes);

std::string key_file_text(const std::uint8_t* seed, const PublicKey& public_key) {
  return fmt::format(
      "# snapcache archive signing key (Ed25519). Keep it secret: every node that trusts its public key\n"
      "# imports what it signs as yours (snapcache export --sign FILE).\n"
      "# public key: {}\n"
      "{}{}\n",
      format::public_key_text(public_key), kSecretPrefix, format::hex_text(seed, kSeedBytes));
}

Status write_new_file(const std::string& path, const std::string& text, mode_t mode) {
  // O_EXCL refuses any existing name, a dangling link included: nothing is overwritten or followed.
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, mode);
  if (fd < 0) {
    if (errno == EEXIST)
      return Status(StatusCode::invalid_argument, path + " exists; a key file is never overwritten (choose another name)");
    return Status::from_errno(errno, "create " + path);
  }
  std::size_t done = 0;
  Status st;
  while (st && done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) st = Status::from_errno(errno, "write " + path);
    else done += static_cast<std::size_t>(n);
  }
  if (st && ::fsync(fd) != 0) st = Status::from_errno(errno, "write " + path);
  if (::close(fd) != 0 && st) st = Status::from_errno(errno, "write " + path);
  if (!st) (void)::unlink(path.c_str());
  return st;
}

}  // namespace

Result<SigningKey> SigningKey::generate() {
  SNAPCACHE_RETURN_IF_ERROR(crypto_ready());
  SigningKey key;
  crypto_sign_keypair(key.public_.data(), key.secret_.data());
  return key;
}

Result<SigningKey> SigningKey::from_file(const std::string& path) {
  SNAPCACHE_RETURN_IF_ERROR(crypto_ready());
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return Status::from_errno(errno, "read the signing key " + path);
  struct stat st {};
  std::string text(kMaxKeyFileBytes + 1, '\0');
  std::size_t got = 0;
  Status status;
  if (::fstat(fd, &st) != 0) {
    status = Status::from_errno(errno, "read the signing key " + path);
  } else if (!S_ISREG(st.st_mode)) {
    status = Status(StatusCode::invalid_argument, path + " is not a regular file, so not a signing key");
  } else if ((st.st_mode & 077) != 0) {
    status = Status(StatusCode::permission_denied,
                    fmt::format("the signing key {} may be read or written by others (mode {:04o}): a private key "
                                "must be its owner's alone (run chmod 600 {})",
                                path, st.st_mode & 07777, path));
  } else if (st.st_uid != ::geteuid() && st.st_uid != 0) {
    status = Status(StatusCode::permission_denied,
                    fmt::format("the signing key {} is owned by uid {}, not by this user (uid {}): a private key must "
                                "be its owner's alone",
                                path, st.st_uid, ::geteuid()));
  } else {
    while (status && got < text.size()) {
      const ssize_t n = ::read(fd, text.data() + got, text.size() - got);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) status = Status::from_errno(errno, "read the signing key " + path);
      else if (n == 0) break;
      else got += static_cast<std::size_t>(n);
    }
  }
  ::close(fd);
  SNAPCACHE_RETURN_IF_ERROR(status);
  text.resize(got);
  auto not_a_key = [&] {
    sodium_memzero(text.data(), text.size());
    return Status(StatusCode::invalid_argument,
                  fmt::format("{} is not a signing key `snapcache keygen` wrote (a line \"{}\" and {} hex digits)", path,
                              kSecretPrefix, 2 * kSeedBytes));
  };
  if (got > kMaxKeyFileBytes) return not_a_key();
  std::uint8_t seed[kSeedBytes];
  bool found = false;
  std::string_view rest = text;
  while (!rest.empty()) {
    const std::size_t nl = rest.find('\n');
    std::string_view line = rest.substr(0, nl);
    rest = nl == std::string_view::npos ? std::string_view() : rest.substr(nl + 1);
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.remove_suffix(1);
    if (line.empty() || line.front() == '#') continue;
    if (found || !line.starts_with(kSecretPrefix) ||
        !format::parse_hex(line.substr(kSecretPrefix.size()), seed, kSeedBytes))
      return not_a_key();
    found = true;
  }
  if (!found) return not_a_key();
  SigningKey key;
  crypto_sign_seed_keypair(key.public_.data(), key.secret_.data(), seed);
  sodium_memzero(seed, sizeof seed);
  sodium_memzero(text.data(), text.size());
  return key;
}

Status SigningKey::write_files(const std::string& path) const {
  // The seed is the first half of libsodium's secret key.
  std::string text = key_file_text(secret_.data(), public_);
  Status st = write_new_file(path, text, 0600);
  sodium_memzero(text.data(), text.size());
  SNAPCACHE_RETURN_IF_ERROR(st);
  const std::string pub = path + ".pub";
  if (Status written = write_new_file(pub, format::public_key_text(public_) + "\n", 0644); !written) {
    (void)::unlink(path.c_str());  // half a key pair is none
    return written;
  }
  return Status::ok();
}

SigningKey::SigningKey(SigningKey&& other) noexcept : secret_(other.secret_), public_(other.public_) {
  sodium_memzero(other.secret_.data(), other.secret_.size());
}

SigningKey::~SigningKey() { sodium_memzero(secret_.data(), secret_.size()); }

Signature SigningKey::sign(std::string_view message) const {
  Signature signature{};
  crypto_sign_detached(signature.data(), nullptr, reinterpret_cast<const unsigned char*>(message.data()),
                       message.size(), secret_.data());
  return signature;
}

bool signature_holds(const PublicKey& key, std::string_view message, const Signature& signature) {
  if (!crypto_ready()) return false;
  return crypto_sign_verify_detached(signature.data(), reinterpret_cast<const unsigned char*>(message.data()),
                                     message.size(), key.data()) == 0;
}

DigestStream::DigestStream() {
  (void)crypto_ready();  // BLAKE2b needs no randomness; libsodium only picks its implementation here
  crypto_generichash_init(&state_, nullptr, 0, kDigestBytes);
}

void DigestStream::update(const void* data, std::size_t size) {
  crypto_generichash_update(&state_, static_cast<const unsigned char*>(data), size);
}

Digest DigestStream::finish() {
  Digest out{};
  crypto_generichash_final(&state_, out.data(), out.size());
  return out;
}

Digest digest_of(std::string_view bytes) {
  DigestStream stream;
  stream.update(bytes.data(), bytes.size());
  return stream.finish();
}

Nonce random_nonce() {
  (void)crypto_ready();
  Nonce nonce{};
  randombytes_buf(nonce.data(), nonce.size());
  return nonce;
}

}  // namespace snapcache::archive
