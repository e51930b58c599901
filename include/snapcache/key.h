// What a snapshot is keyed by. Any field that differs gives a different entry, and because each
// entry stores its full key, a miss can say which fields differ from the nearest entry.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

#include "snapcache/export.h"
#include "snapcache/status.h"

namespace snapcache {

class FileSystem;  // snapcache/extend/file_system.h

// How a person is told that a field differs (KeyDifference::words). Raw values mean nothing to
// read for some fields (a digest, nanoseconds since 1970), so each field says how it is put.
enum class Says {
  values,   // "torch 2.11.0 -> 2.14.0": the entry's value, then the one asked for
  bytes,    // "size 1.0 GiB -> 1.2 GiB"
  time,     // "modified 3m after the version the entry was made from" (a file's time)
  changed,  // "loader source changed": a digest or an identity, whose values are no news to a person
};

// One field of a key's records: the name it has wherever a key is shown (key diffs, `snapcache
// inspect`, --json, Python attributes), its member, and how a difference in it is said to a
// person (`noun`, what a person calls it, the name when null; `says`). Each record lists its
// fields once, in the order of the canonical encoding (src/format/key_codec.h), as `fields()`;
// the encoding, its decoding, key diffs and their words, the command's renderings and the Python
// bindings all walk that list, so a new field is one member and one line here (and the encoding
// version, kKeyEncodingVersion below).
template <class Record, class T>
struct Field {
  const char* name;
  T Record::*member;
  const char* noun = nullptr;
  Says says = Says::values;
  constexpr const char* spoken() const { return noun != nullptr ? noun : name; }
};
// Spelled out: clang before 17 deduces no template arguments for an aggregate by itself.
template <class Record, class T>
Field(const char*, T Record::*) -> Field<Record, T>;
template <class Record, class T>
Field(const char*, T Record::*, const char*) -> Field<Record, T>;
template <class Record, class T>
Field(const char*, T Record::*, const char*, Says) -> Field<Record, T>;

// A record with a field list.
template <class T>
concept FieldRecord = requires { std::remove_const_t<T>::fields(); };

// Calls f(name, value) for each field of `record` in order (value: a reference into `record`).
template <class Record, class F>
void for_each_field(Record& record, F&& f) {
  using Plain = std::remove_const_t<Record>;
  std::apply([&](auto... field) { (f(field.name, record.*(field.member)), ...); }, Plain::fields());
}

// The same over two records of one type: f(field, a's value, b's value), with the whole Field
// (its name, and how a difference in it is said).
template <class Record, class F>
void for_each_field(const Record& a, const Record& b, F&& f) {
  std::apply([&](auto... field) { (f(field, a.*(field.member), b.*(field.member)), ...); }, Record::fields());
}

// A checkpoint file as this process sees it: where it is, its stat identity and, optionally, the
// digest of its bytes. What of this identifies the file in a key is checkpoint_identity().
struct CheckpointFile {
  std::string path;
  std::uint64_t size = 0;
  std::int64_t mtime_ns = 0;
  std::int64_t ctime_ns = 0;
  std::uint64_t device = 0;
  std::uint64_t inode = 0;
  std::string content_digest;  // optional: XXH3-128 hex of the bytes (see DigestMemo)
  // With a digest the file is keyed by its bytes alone: a copy elsewhere (another path, another
  // node) is the same checkpoint.
  bool keyed_by_content() const { return !content_digest.empty(); }
  bool operator==(const CheckpointFile&) const = default;
  static constexpr auto fields() {
    return std::tuple{Field{"path", &CheckpointFile::path},
                      Field{"size", &CheckpointFile::size, "size", Says::bytes},
                      Field{"mtime_ns", &CheckpointFile::mtime_ns, "modified", Says::time},
                      Field{"ctime_ns", &CheckpointFile::ctime_ns, "changed (ctime)", Says::time},
                      Field{"device", &CheckpointFile::device, "device"},
                      Field{"inode", &CheckpointFile::inode, "inode"},
                      Field{"content_digest", &CheckpointFile::content_digest, "content", Says::changed}};
  }
};

// What identifies a checkpoint file in a key: the one rule behind the entry id (encode_key), the
// comparison a lookup makes, and key diffs. A file keyed by content is its size and digest (path,
// times, device and inode cleared: they say where the bytes lie, not what they are); any other
// file is its stat identity (path, size, mtime, ctime, device, inode).
SNAPCACHE_API CheckpointFile checkpoint_identity(const CheckpointFile& file);

struct Topology {
  int tp_rank = 0;
  int tp_size = 1;
  int pp_rank = 0;
  int pp_size = 1;
  std::map<std::string, std::string> extra;  // room for more (expert parallel, ...)
  bool operator==(const Topology&) const = default;
  static constexpr auto fields() {
    return std::tuple{Field{"tp_rank", &Topology::tp_rank, "TP rank"}, Field{"tp_size", &Topology::tp_size, "TP size"},
                      Field{"pp_rank", &Topology::pp_rank, "PP rank"}, Field{"pp_size", &Topology::pp_size, "PP size"},
                      Field{"extra", &Topology::extra, "topology"}};
  }
};

struct TorchIdentity {
  std::string version;       // "2.11.0+cu130"
  std::string cuda_version;  // "13.0", or "" for a CPU build
  std::string cxx_abi;       // "cxx11" or "pre-cxx11"
  bool operator==(const TorchIdentity&) const = default;
  static constexpr auto fields() {
    return std::tuple{Field{"version", &TorchIdentity::version, "torch"},
                      Field{"cuda_version", &TorchIdentity::cuda_version, "torch's CUDA"},
                      Field{"cxx_abi", &TorchIdentity::cxx_abi, "torch's C++ ABI"}};
  }
};

// The version of Key's encoding (encode_key): bumped with any change to Key::fields() or to a
// field's type, so a key file of another version reads as "not readable by this snapcache" instead
// of as garbage. A new key field is then a member, a line in fields() and this number (here), its
// value (src/load_plan/plan_key.cpp) and its stub (python/snapcache/_core.pyi): three files.
inline constexpr std::uint8_t kKeyEncodingVersion = 1;

struct Key {
  std::vector<CheckpointFile> checkpoint;
  std::string source_identity;   // digest or version of the code that prepares the weights
  TorchIdentity torch;
  std::string dtype;             // load dtype, e.g. "bfloat16"
  std::string precision_policy;  // mixed-precision policy, e.g. "w8a16;scales=fp32"
  Topology topology;
  std::string component;         // "dit", "h3_encoder", ...
  std::map<std::string, std::string> options;
  bool operator==(const Key&) const = default;
  static constexpr auto fields() {
    return std::tuple{Field{"checkpoint", &Key::checkpoint, "checkpoint"},
                      Field{"source_identity", &Key::source_identity, "loader source", Says::changed},
                      Field{"torch", &Key::torch},
                      Field{"dtype", &Key::dtype},
                      Field{"precision_policy", &Key::precision_policy, "precision policy"},
                      Field{"topology", &Key::topology},
                      Field{"component", &Key::component},
                      Field{"options", &Key::options, "option"}};
  }
};

// The key with each checkpoint file reduced to checkpoint_identity(): what an entry stores and is
// found by. Two keys name the same entry exactly when their identities are equal.
SNAPCACHE_API Key key_identity(Key key);

// The entry id: XXH3-128 of the canonical encoding, as 32 hex digits.
SNAPCACHE_API std::string key_id(const Key& key);

// Canonical, versioned byte encoding of a key's identity (key_identity; includes the format
// version, snapcache/manifest.h), and its inverse, which gives back key_identity(key): a file keyed
// by content comes back without its path. The grammar is Key::fields() walked in order (src/format/key_codec.h).
SNAPCACHE_API std::string encode_key(const Key& key);
SNAPCACHE_API Result<Key> decode_key(std::string_view bytes);

// A key file holds encode_key(key) and nothing else. Write one for a load that missed and
// `snapcache why FILE` names the fields that differ from the nearest entry.
SNAPCACHE_API Status write_key_file(FileSystem& fs, const std::string& path, const Key& key);
SNAPCACHE_API Result<Key> read_key_file(FileSystem& fs, const std::string& path);

// One field that differs between two keys: "torch.version: 2.11.0 != 2.10.0".
struct KeyDifference {
  std::string field;
  std::string wanted;  // in the key asked for
  std::string found;   // in the entry
  // What changed, in words a person reads, by the field's rule (Field::says): "torch 2.10.0 ->
  // 2.11.0", "loader source changed", "checkpoint model-00002.safetensors modified 3m after the
  // version the entry was made from", "checkpoint file model-00003.safetensors is new". Empty
  // where no rule says more than the values (describe_differences then shows those). A long value
  // (a config's list of 36 layer types) is shown around where it changed, "..." for the rest;
  // `wanted` and `found` keep it whole.
  std::string words;
};
// Compares identities (key_identity): a file keyed by content differs only in size or digest
// ("checkpoint[0].content_digest 1f2e... != 9a8b..."), never in where it lies. Files keyed by
// their place are matched by path, so a file added to or dropped from the checkpoint is named as
// such ("checkpoint[/ckpt/model-00003.safetensors]": wanted "present", found "(absent)").
SNAPCACHE_API std::vector<KeyDifference> diff_keys(const Key& wanted, const Key& found);
// "torch 2.10.0 -> 2.11.0, dtype float16 -> bfloat16 (and 2 more; `snapcache why` lists each)":
// the first `max` differences' words (or "field wanted != found" for one without).
SNAPCACHE_API std::string describe_differences(const std::vector<KeyDifference>& diffs, std::size_t max = 4);
// Whether two keys name the same checkpoint as a person does: the same files at the same places
// (or, keyed by content, the same bytes), whatever changed in them since. A modified checkpoint
// is still the same checkpoint; another directory is another.
SNAPCACHE_API bool same_checkpoint(const Key& a, const Key& b);

// Describes checkpoint files by identity (stat only, no reading).
SNAPCACHE_API Result<std::vector<CheckpointFile>> describe_checkpoint(FileSystem& fs,
                                                        const std::vector<std::string>& paths);

// A digest of the code that prepares weights: XXH3-128 over each file's path and bytes, plus
// snapcache's format version. Use it as Key::source_identity.
SNAPCACHE_API Result<std::string> digest_source_files(FileSystem& fs, const std::vector<std::string>& paths);

// Remembers (file identity -> content digest) in a small file, so unchanged checkpoint files are
// never read again and changed ones are hashed again.
class SNAPCACHE_API DigestMemo {
 public:
  DigestMemo(std::shared_ptr<FileSystem> fs, std::string memo_path);
  // Fills content_digest of each file, reading only files the memo does not know. A file that is
  // no longer the one described (another identity now) is mismatch: its bytes are not hashed.
  Status fill_digests(std::vector<CheckpointFile>& files);
  // The digest remembered for the file's identity, reading nothing of the file.
  std::optional<std::string> recorded(const CheckpointFile& file) const;
  std::uint64_t bytes_hashed() const { return bytes_hashed_; }

 private:
  std::shared_ptr<FileSystem> fs_;
  std::string path_;
  std::uint64_t bytes_hashed_ = 0;
};

}  // namespace snapcache
