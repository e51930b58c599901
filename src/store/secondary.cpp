#include "store/secondary.h"

#include <unistd.h>

#include "util/fmt.h"

#include "snapcache/extend/file_system.h"
#include "snapcache/maintenance.h"
#include "snapcache/text.h"
#include "store/entry_stream.h"
#include "store/layout.h"
#include "store/ownership.h"

namespace snapcache::store {
namespace {

using Kind = SecondaryAnswer::Kind;

// The secondary store's trust rule (docs/scale-out.md): checksums prove an entry whole, not who
// wrote it, so everything on the way from the store's directory to an entry's bytes (the
// directory, entries/, entries/<id>/ and the entry's files) must be writable only by users this
// process trusts: itself, root, and the owner of the store's directory, whom the operator chose by
// naming it (a team's read-only share belongs to someone else). The way to the directory itself is
// the operator's, as for the cache directory.
OwnershipRule secondary_rule(std::uint32_t store_owner) {
  return {{{static_cast<std::uint32_t>(::geteuid()), "this user"}, {0, "root"}, {store_owner, "the store's owner"}},
          "another user could plant an entry there, and a load would serve its weights as the key's",
          "another user could plant an entry there; a secondary store is used only when no one but this user, root "
          "and the store's owner can write the way to its entries (have it owned by one of them)"};
}

// What is below the store's directory, opened by directory descriptor and never through a link.
struct Opened {
  SecondaryAnswer refusal;  // kind absent or unusable when `fd` is not valid
  UniqueFd fd;
};

// The directory `name` in `parent` (`path` names it in messages), checked by `rule`.
Opened open_checked(FileSystem& fs, int parent, const std::string& name, const std::string& path,
                    const std::string& where, const OwnershipRule& rule) {
  auto st = fs.stat_at(parent, name);
  if (!st) {
    if (st.status().code() == StatusCode::not_found) return {{Kind::absent, where + " has no entry for it either"}, {}};
    return {{Kind::unusable, fmt::format("{} cannot be read: {}", where, st.status().message())}, {}};
  }
  if (st->is_symlink)
    return {{Kind::unusable, fmt::format("{}: {} is a symbolic link; no link below a secondary store's directory is "
                                         "followed", where, path)}, {}};
  if (!st->is_directory) return {{Kind::unusable, fmt::format("{}: {} is not a directory", where, path)}, {}};
  auto fd = fs.open_directory_at(parent, name);
  if (!fd) return {{Kind::unusable, fmt::format("{} cannot be read: {}", where, fd.status().message())}, {}};
  auto held = fs.fstat(fd->get());  // the directory opened, whatever the name says by now
  if (!held) return {{Kind::unusable, fmt::format("{} cannot be read: {}", where, held.status().message())}, {}};
  if (Status trusted = check_writers(*held, where + ": " + path, path, rule); !trusted)
    return {{Kind::unusable, trusted.message()}, {}};
  return {{}, std::move(*fd)};
}

}  // namespace

SecondaryAnswer copy_from_secondary(Store& store, const std::string& id) {
  const std::string& dir = store.config().secondary_directory;
  FileSystem& fs = store.fs();
  const std::string where = "the secondary store " + dir;
  // The directory itself is the user's to name (it may be a link, a mount point); below it
  // everything is opened by descriptor, and nothing is followed.
  auto top = fs.stat(dir, Follow::yes);
  if (!top) return {Kind::unusable, fmt::format("{} cannot be read: {}", where, top.status().message())};
  if (!top->is_directory) return {Kind::unusable, where + " is not a directory"};
  auto root = fs.open_directory(dir);
  if (!root) return {Kind::unusable, fmt::format("{} cannot be read: {}", where, root.status().message())};
  auto root_id = fs.fstat(root->get());
  if (!root_id) return {Kind::unusable, fmt::format("{} cannot be read: {}", where, root_id.status().message())};
  const OwnershipRule rule = secondary_rule(root_id->owner);
  if (Status st = check_writers(*root_id, where, dir, rule); !st) return {Kind::unusable, st.message()};

  const std::string entries_path = dir + "/" + kEntriesDir;
  Opened entries = open_checked(fs, root->get(), kEntriesDir, entries_path, where, rule);
  if (!entries.fd.valid()) return entries.refusal;
  const std::string path = entries_path + "/" + id;
  Opened entry = open_checked(fs, entries.fd.get(), id, path, where, rule);
  if (!entry.fd.valid()) return entry.refusal;
  // Every file of the entry, by the same rule; the entry check below then opens them by name
  // without following a link. Only the users just trusted can change these directories, so the
  // names still lead to the files checked here.
  auto names = fs.list_directory_at(entry.fd.get());
  if (!names) return {Kind::unusable, fmt::format("{} cannot be read: {}", where, names.status().message())};
  for (const DirEntry& e : *names) {
    auto st = fs.stat_at(entry.fd.get(), e.name);
    if (!st) continue;  // gone meanwhile: the entry check says what that means
    if (Status ok = check_writers(*st, where + ": " + path + "/" + e.name, path + "/" + e.name, rule); !ok)
      return {Kind::unusable, ok.message()};
  }

  // No lease: a read-only store is not ours to lock, and every byte is proven while copied.
  auto reader = EntryReader::open(fs, path, id, ReaderLease::none);
  if (!reader) {
    const Status& st = reader.status();
    if (st.code() == StatusCode::not_found) return {Kind::absent, where + " has no entry for it either"};
    return {Kind::unusable, fmt::format("{}: entry {} {}: {}", where, short_id(id),
                                        is_entry_damage(st.code()) ? "is damaged" : "cannot be read", st.message())};
  }
  // What this cache knows of the entry: where it copied it from. The secondary store's own record
  // (if any) is its writers' word, and is not carried over.
  auto begun = EntryWriter::begin(store, reader->manifest(), {.kind = EntryOriginKind::secondary, .source = dir}, id);
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
