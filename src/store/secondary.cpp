#include "store/secondary.h"

#include "util/fmt.h"

#include "snapcache/maintenance.h"
#include "snapcache/text.h"
#include "store/entry_stream.h"
#include "store/layout.h"

namespace snapcache::store {

SecondaryAnswer copy_from_secondary(Store& store, const std::string& id) {
  using Kind = SecondaryAnswer::Kind;
  const std::string& dir = store.config().secondary_directory;
  FileSystem& fs = store.fs();
  const std::string where = "the secondary store " + dir;
  // The directory itself is the user's to name (it may be a link, a mount point).
  auto top = fs.stat(dir, Follow::yes);
  if (!top) return {Kind::unusable, fmt::format("{} cannot be read: {}", where, top.status().message())};
  if (!top->is_directory) return {Kind::unusable, where + " is not a directory"};
  const std::string path = dir + "/" + kEntriesDir + "/" + id;
  auto found = fs.stat(path, Follow::no);
  if (!found) {
    if (found.status().code() == StatusCode::not_found) return {Kind::absent, where + " has no entry for it either"};
    return {Kind::unusable, fmt::format("{} cannot be read: {}", where, found.status().message())};
  }
  // No lease: a read-only store is not ours to lock, and every byte is proven while copied.
  auto reader = EntryReader::open(fs, path, id, ReaderLease::none);
  if (!reader) {
    const Status& st = reader.status();
    if (st.code() == StatusCode::not_found) return {Kind::absent, where + " has no entry for it either"};
    return {Kind::unusable, fmt::format("{}: entry {} {}: {}", where, short_id(id),
                                        is_entry_damage(st.code()) ? "is damaged" : "cannot be read", st.message())};
  }
  auto begun = EntryWriter::begin(store, reader->manifest(), id);
  if (!begun.writer) {
    if (begun.outcome.result == PublishResult::already_present)  // another process copied it first
      return {Kind::copied, fmt::format("copied from {} by another process", where)};
    return {Kind::unusable, fmt::format("{} has entry {} but it could not be copied here: {}", where, short_id(id),
                                        begun.outcome.status.message())};
  }
  Status read = reader->read([&](std::uint32_t, const void* data, std::size_t size) {
    return begun.writer->write(data, size);
  });
  PublishOutcome out = read ? begun.writer->finish() : begun.writer->abandon(read);
  if (out.result == PublishResult::published || out.result == PublishResult::already_present)
    return {Kind::copied, fmt::format("copied from {} ({}, every chunk proven)", where, format_size(out.bytes))};
  return {Kind::unusable, fmt::format("{}: entry {} {}: {}", where, short_id(id),
                                      is_entry_damage(out.status.code()) ? "is damaged" : "could not be copied here",
                                      out.status.message())};
}

}  // namespace snapcache::store
