// Entries by last use, so that making room reads the least recently used entries instead of every
// entry's lease (a cache of a million entries took 3 minutes to evict one):
//
//   <dir>/lru/<s / 1000>/<s>/<id>     one empty file per entry, s its last use in Unix seconds
//
// A hit does not move its record: it only dates the entry's lease, as ever (the lease's mtime is
// the truth). The order is corrected lazily, where it is read: making room lists the oldest
// second's records, reads each entry's lease, moves the record of one used later to that later
// second and takes the rest, least recently used first. A record moves forward at most once per
// use, so evicting k entries reads about the entries of the seconds they were last used in.
//
// Like index/, it is best effort and untrusted: names are checked, never a record's bytes; nothing
// is created through a link. A record of an entry that is gone is dropped where it is read. An
// entry without a record (published by an older snapcache, a record lost in a crash) is found when
// the records run out before the room is made: then every entry is read, as before, and each one
// seen gets a record again; a cache with no lru/ at all gets its records that way, once.
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <unordered_set>
#include <vector>

#include "snapcache/extend/file_system.h"
#include "snapcache/extend/store_access.h"

namespace snapcache::store {

inline constexpr const char* kUseOrderDir = "lru";

// What gc checks lru/ against (garbage.cpp): a directory name as the store writes it (decimal, no
// sign, no leading zero), and whether `second` (when not empty) belongs in `thousand`.
std::optional<std::int64_t> use_order_number(const std::string& name);
bool is_use_order_directory(const std::string& thousand, const std::string& second);

// Records entry `id` as used at `unix_ns` (a publication). Best effort.
void record_use(FileSystem& fs, const std::string& cache_directory, const std::string& id, std::int64_t unix_ns);

// The entries, least recently used first, as making room takes them.
class UseOrder {
 public:
  explicit UseOrder(Store& store);

  struct Next {
    std::string id;
    std::string record;  // its record's path; empty for an entry found without one
  };
  // The next entry, or nullopt when none is left. I/O errors make the order end early, never fail.
  std::optional<Next> next();
  // Drops the record of an entry just removed.
  void forget(const Next& entry);

 private:
  struct Candidate {
    std::string id, record;
    std::int64_t last_use;
    bool operator<(const Candidate& other) const { return last_use > other.last_use; }  // a min-heap
  };
  bool next_second();
  bool next_thousand();
  void read_second();
  void read_every_entry();
  std::int64_t last_use(const std::string& id, bool& gone);

  Store& store_;
  FileSystem& fs_;
  std::string root_;
  std::int64_t now_;
  bool listed_thousands_ = false, read_everything_ = false;
  std::set<std::int64_t> thousands_, seconds_;  // not yet read: all thousands; the seconds of thousand_
  std::int64_t thousand_ = -1, second_ = -1;
  std::vector<Candidate> ready_;  // of the second just read, a heap
  std::unordered_set<std::string> given_;
};

}  // namespace snapcache::store
