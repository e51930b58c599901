#include "store/entry_stream.h"

#include <algorithm>
#include <array>
#include <vector>

#include "util/fmt.h"

#include "format/manifest.h"
#include "snapcache/extend/file_system.h"
#include "snapcache/key.h"
#include "snapcache/manifest.h"
#include "snapcache/text.h"
#include "store/chunk_hashing.h"
#include "store/entry_check.h"
#include "store/layout.h"
#include "util/file_io.h"

namespace snapcache::store {

std::uint64_t stream_bytes(const Manifest& manifest) {
  std::uint64_t total = 0;
  for (const auto& s : manifest.storages) total += s.nbytes;
  return total;
}

namespace {

Status check_stream_chunks(const Manifest& m) {
  for (const auto& f : m.files)
    if (f.chunk_size > kMaxStreamChunk)
      return Status(StatusCode::unsupported, fmt::format("data file {} has chunks of {}, more than the {} a stream holds",
                                                         f.name, format_size(f.chunk_size), format_size(kMaxStreamChunk)));
  return Status::ok();
}

}  // namespace

// --- reading out ---------------------------------------------------------------------------------

Result<EntryReader> EntryReader::open(FileSystem& fs, const std::string& entry_path, const std::string& id,
                                      ReaderLease lease) {
  EntryReader reader;
  reader.fs_ = &fs;
  reader.id_ = id;
  if (lease == ReaderLease::shared) {
    auto held = take_reader_lease(fs, entry_path, id);
    if (!held) return held.status();
    reader.lease_ = std::move(*held);
  }
  EntryCheck check = check_entry(fs, entry_path, id);
  if (!check.status) return check.status;
  reader.manifest_ = std::move(*check.manifest);
  reader.data_files_ = std::move(check.data_files);
  SNAPCACHE_RETURN_IF_ERROR(check_stream_chunks(reader.manifest_));
  return reader;
}

Status EntryReader::read(const Sink& sink) const {
  const Manifest& m = manifest_;
  const std::vector<std::uint32_t> order = format::storages_in_file_order(m);
  std::vector<char> buf;
  std::size_t next = 0;  // into order
  for (std::uint32_t f = 0; f < m.files.size(); ++f) {
    const DataFile& df = m.files[f];
    for (std::uint64_t c = 0; c < df.chunk_hashes.size(); ++c) {
      const auto [begin, size] = chunk_range(df, c);
      const std::uint64_t end = begin + size;
      buf.resize(size);
      SNAPCACHE_RETURN_IF_ERROR(read_all(*fs_, data_files_[f].get(), buf.data(), size, begin).with_context(df.name));
      SNAPCACHE_RETURN_IF_ERROR(check_chunk(m, f, c, util::xxh3_64(buf.data(), size)));
      // The storages with bytes in this chunk, in order; one that goes on past it is resumed by
      // the next chunk.
      while (next < order.size()) {
        const StorageRecord& s = m.storages[order[next]];
        if (s.file != f || s.offset >= end) break;
        const std::uint64_t from = std::max(s.offset, begin);
        const std::uint64_t to = std::min(s.offset + s.nbytes, end);
        if (to > from) SNAPCACHE_RETURN_IF_ERROR(sink(order[next], buf.data() + (from - begin), to - from));
        if (s.offset + s.nbytes > end) break;
        ++next;
      }
    }
    // Empty storages at the very end of a file lie in no chunk.
    while (next < order.size() && m.storages[order[next]].file == f && m.storages[order[next]].nbytes == 0) ++next;
  }
  return Status::ok();
}

// --- writing in ----------------------------------------------------------------------------------

EntryWriter::Begun EntryWriter::begin(Store& store, Manifest manifest, EntryOrigin origin, const std::string& id) {
  std::unique_ptr<EntryWriter> writer(new EntryWriter(store, std::move(manifest), std::move(origin)));
  EntryCommit& commit = writer->commit_;
  const Manifest& m = writer->manifest_;
  auto refuse = [&](StatusCode code, std::string why) -> Begun {
    return {nullptr, commit.finish(PublishResult::failed, Status(code, std::move(why)))};
  };
  if (!id.empty() && key_id(m.key) != id)
    return refuse(StatusCode::mismatch,
                  fmt::format("the entry's key hashes to {}, not to its id {}", key_id(m.key), id));
  if (Status st = format::validate_layout(m); !st) return refuse(StatusCode::damaged, "invalid manifest: " + st.message());
  for (std::uint32_t i = 0; i < m.files.size(); ++i)
    if (m.files[i].name != data_file_name(i))
      return refuse(StatusCode::damaged, fmt::format("data file {} is named '{}', not '{}'", i, m.files[i].name,
                                                     data_file_name(i)));
  if (Status st = check_stream_chunks(m); !st) return refuse(st.code(), st.message());
  auto pending = commit.begin(m);
  if (!pending) return {nullptr, commit.outcome()};
  writer->pending_.emplace(std::move(*pending));
  for (std::size_t f = 0; f < m.files.size(); ++f) writer->files_.push_back(writer->pending_->take_data_file(f));
  writer->hasher_ = std::make_unique<util::Hasher64>();
  return {std::move(writer), {}};
}

EntryWriter::EntryWriter(Store& store, Manifest manifest, EntryOrigin origin)
    : store_(store), manifest_(std::move(manifest)), commit_(store_, manifest_.key, std::move(origin)),
      order_(format::storages_in_file_order(manifest_)), stream_bytes_(store::stream_bytes(manifest_)) {}

EntryWriter::~EntryWriter() = default;  // an uncommitted pending entry removes itself

Status EntryWriter::write_bytes(const void* data, std::uint64_t size) {
  const DataFile& df = manifest_.files[file_];
  const auto* p = static_cast<const char*>(data);
  while (size > 0) {
    const auto [chunk_begin, chunk_size] = chunk_range(df, chunk_);
    const std::uint64_t n = std::min(size, chunk_begin + chunk_size - pos_);
    hasher_->update(p, n);
    SNAPCACHE_RETURN_IF_ERROR(write_all(store_.fs(), files_[file_].get(), p, n, pos_).with_context(df.name));
    pos_ += n;
    p += n;
    size -= n;
    if (pos_ == chunk_begin + chunk_size) {
      if (Status st = check_chunk(manifest_, file_, chunk_, hasher_->digest()); !st) {
        // Name the storages with bytes in the chunk: the damage is in one of them, whichever
        // storage's bytes were arriving when the chunk ended.
        std::vector<std::string> storages;
        for (std::uint32_t i = 0; i < manifest_.storages.size(); ++i) {
          const StorageRecord& s = manifest_.storages[i];
          if (s.file == file_ && s.nbytes > 0 && s.offset < chunk_begin + chunk_size && chunk_begin < s.offset + s.nbytes)
            storages.push_back(std::to_string(i));
        }
        return Status(st.code(), fmt::format("entry {}, {} {}: {}", short_id(commit_.outcome().entry_id),
                                             storages.size() == 1 ? "storage" : "storages", fmt::join(storages, ", "),
                                             st.message()));
      }
      ++chunk_;
      hasher_ = std::make_unique<util::Hasher64>();
    }
  }
  return Status::ok();
}

Status EntryWriter::pad_to(std::uint64_t offset) {
  static const std::array<char, 64 * 1024> zeros{};
  while (pos_ < offset) SNAPCACHE_RETURN_IF_ERROR(write_bytes(zeros.data(), std::min<std::uint64_t>(offset - pos_, zeros.size())));
  return Status::ok();
}

Status EntryWriter::next_file() {
  SNAPCACHE_RETURN_IF_ERROR(pad_to(manifest_.files[file_].size));
  ++file_;
  pos_ = 0;
  chunk_ = 0;
  return Status::ok();
}

Status EntryWriter::write(const void* data, std::size_t size) {
  if (!error_) return error_;
  const auto* p = static_cast<const char*>(data);
  Status st;
  while (st && size > 0) {
    if (next_storage_ == order_.size()) {
      st = Status(StatusCode::damaged, fmt::format("the stream holds more than the entry's {} bytes", stream_bytes_));
      break;
    }
    const StorageRecord& s = manifest_.storages[order_[next_storage_]];
    while (st && file_ < s.file) st = next_file();
    if (st) st = pad_to(s.offset);
    if (!st) break;
    const std::uint64_t n = std::min<std::uint64_t>(size, s.offset + s.nbytes - pos_);
    st = write_bytes(p, n);
    if (!st) break;
    p += n;
    size -= n;
    received_ += n;
    if (pos_ == s.offset + s.nbytes) ++next_storage_;
  }
  // Empty storages take no bytes: step over them now, so finish() sees the stream whole.
  while (st && next_storage_ < order_.size() && manifest_.storages[order_[next_storage_]].nbytes == 0) ++next_storage_;
  if (!st) error_ = st;
  return st;
}

PublishOutcome EntryWriter::abandon(Status why) {
  PublishOutcome out = commit_.finish(PublishResult::failed, std::move(why));
  pending_.reset();  // removes tmp/<id>.<suffix>
  files_.clear();
  return out;
}

PublishOutcome EntryWriter::finish() {
  if (!error_) return abandon(error_);
  if (received_ != stream_bytes_)
    return abandon(Status(StatusCode::damaged, fmt::format("the stream ended after {} of the entry's {} bytes",
                                                           received_, stream_bytes_)));
  Status st;
  while (st && file_ < manifest_.files.size()) st = next_file();
  for (std::uint32_t f = 0; st && f < files_.size(); ++f) st = seal_data_file(store_.fs(), files_[f].get(), manifest_.files[f]);
  if (!st) return abandon(st);
  commit_.commit(*pending_, manifest_);
  pending_.reset();
  files_.clear();
  return commit_.outcome();
}

}  // namespace snapcache::store
