#include "gpu/staging.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <optional>

#include "util/align.h"
#include "util/fmt.h"
#include "snapcache/extend/host_storage.h"

namespace snapcache::gpu {
namespace {

using util::align_up;
using util::div_up;

using Plan = StagingPlan;

// Needs of a file without checksums closer than this are read as one run: reading the bytes
// between them costs less than another unit.
constexpr std::uint64_t kUnreadGap = 64ull << 10;

// The rows of a transpose need that begin in [begin, end): [first, last).
std::pair<std::uint64_t, std::uint64_t> rows_begun_in(const Plan::Need& n, std::uint64_t begin, std::uint64_t end) {
  const std::uint64_t rb = n.row_bytes();
  const std::uint64_t first = begin > n.begin ? div_up(begin - n.begin, rb) : 0;
  const std::uint64_t last = end > n.begin ? std::min(n.rows, div_up(end - n.begin, rb)) : 0;
  return {first, std::max(first, last)};
}

// Units of `unit_bytes` over [begin, end) of a source, each with the needs it serves; units that
// serve none are kept only when `keep_all` (their chunks are still checked). The needs are swept in
// the order they begin, so a unit looks only at those that may overlap it: a TP 8 rank's file has
// about a thousand units and four thousand needs, and testing every pair took 5 ms of each load.
void add_units(Plan& plan, std::uint32_t source, std::vector<std::uint32_t> needs, std::uint64_t begin,
               std::uint64_t end, std::uint64_t unit_bytes, bool keep_all) {
  std::stable_sort(needs.begin(), needs.end(),
                   [&](std::uint32_t a, std::uint32_t b) { return plan.needs[a].begin < plan.needs[b].begin; });
  std::vector<std::uint32_t> open;  // begun before the unit's end, not ended before its beginning
  std::size_t next = 0;
  for (std::uint64_t ub = begin; ub < end; ub += unit_bytes) {
    Plan::Unit unit{source, ub, std::min(end, ub + unit_bytes), 0, {}};
    unit.read_end = unit.end;
    for (; next < needs.size() && plan.needs[needs[next]].begin < unit.end; ++next) open.push_back(needs[next]);
    // Units go up the source: a need that ends before this one begins serves no later one either.
    std::erase_if(open, [&](std::uint32_t i) { return plan.needs[i].end <= unit.begin; });
    for (std::uint32_t i : open) {
      const Plan::Need& n = plan.needs[i];
      if (n.transpose()) {
        auto [first, last] = rows_begun_in(n, unit.begin, unit.end);
        if (first == last) continue;
        unit.read_end = std::max(unit.read_end, n.begin + last * n.row_bytes());
      }
      unit.needs.push_back(i);
    }
    std::sort(unit.needs.begin(), unit.needs.end());  // in the order of the storages, as planned
    if (keep_all || !unit.needs.empty()) plan.units.push_back(std::move(unit));
  }
}

}  // namespace

Result<StagingPlan> plan_staging(const HostStorages& host, std::uint64_t buffer_bytes, bool check_files, BufferFit fit) {
  Plan plan;
  std::map<const StoredFile*, std::uint32_t> file_sources;
  std::vector<std::vector<std::uint32_t>> needs_of;  // per source
  auto file_source = [&](const StoredBytes& f) {
    auto [it, added] = file_sources.emplace(f.file.get(), static_cast<std::uint32_t>(plan.sources.size()));
    if (added) {
      // A file without checksums (a checkpoint's, loaders/checkpoint_file.h) has nothing to check.
      const bool checked = check_files && f.file->chunk_bytes() != 0;
      plan.sources.push_back({f.file.get(), checked, nullptr, checked ? f.file->size() : 0});
      needs_of.emplace_back();
    }
    return it->second;
  };
  auto memory_source = [&](const std::byte* p, std::uint64_t bytes) {
    plan.sources.push_back({nullptr, false, p, bytes});
    needs_of.emplace_back();
    return static_cast<std::uint32_t>(plan.sources.size() - 1);
  };
  auto add_need = [&](std::uint32_t source, Plan::Need need) {
    needs_of[source].push_back(static_cast<std::uint32_t>(plan.needs.size()));
    plan.needs.push_back(need);
  };

  for (const HostStorage& s : host.storages) {
    for (const auto* f : {s.file ? &*s.file : nullptr, s.pending && s.pending->source_file ? &*s.pending->source_file : nullptr})
      if (f != nullptr && f->file == nullptr)
        return Status(StatusCode::invalid_argument, "a storage's stored bytes name no file");
    const std::uint64_t dst = plan.destination_bytes;
    plan.storage_offsets.push_back(dst);
    plan.destination_bytes = align_up(dst + s.nbytes, kDestinationAlignment);
    if (s.nbytes == 0) continue;
    if (s.pending) {
      const PendingTranspose& p = *s.pending;
      SNAPCACHE_RETURN_IF_ERROR(p.check(s.nbytes));
      Plan::Need need{0, s.nbytes, dst, p.rows(), p.cols(), p.element_size()};
      std::uint32_t source = 0;
      if (p.source_file) {
        source = file_source(*p.source_file);
        need.begin = p.source_file->offset;
        need.end += need.begin;
      } else {
        source = memory_source(static_cast<const std::byte*>(p.source.data_ptr()), s.nbytes);
      }
      add_need(source, need);
    } else if (s.file) {
      add_need(file_source(*s.file), {s.file->offset, s.file->offset + s.nbytes, dst, 0, 0, 0});
    } else {
      add_need(memory_source(s.data, s.nbytes), {0, s.nbytes, dst, 0, 0, 0});
    }
  }

  // Per source: the longest matrix row a transpose reads, and the bytes its needs span; then the
  // smallest buffer that holds a unit of that source.
  struct Extent {
    std::uint64_t tail = 0, begin = UINT64_MAX, end = 0;
  };
  std::vector<Extent> extents(plan.sources.size());
  std::uint64_t needed = 1;
  for (std::uint32_t i = 0; i < plan.sources.size(); ++i) {
    Extent& e = extents[i];
    for (std::uint32_t n : needs_of[i]) {
      const Plan::Need& need = plan.needs[n];
      if (need.transpose()) e.tail = std::max(e.tail, need.row_bytes());
      e.begin = std::min(e.begin, need.begin);
      e.end = std::max(e.end, need.end);
    }
    const Plan::Source& src = plan.sources[i];
    const std::uint64_t unit = src.memory != nullptr ? 0 : src.checked ? src.file->chunk_bytes() : 4096;
    needed = std::max({needed, 2 * e.tail, e.tail + unit});
  }
  if (fit == BufferFit::grow && buffer_bytes < needed) buffer_bytes = align_up(needed, kBufferGranule);
  plan.buffer_bytes = buffer_bytes;

  for (std::uint32_t i = 0; i < plan.sources.size(); ++i) {
    Plan::Source& src = plan.sources[i];
    const auto [tail, begin, end] = extents[i];
    if (tail > buffer_bytes / 2)
      return Status(StatusCode::unsupported,
                    fmt::format("a matrix row of {} bytes does not fit a {}-byte staging buffer twice", tail,
                                buffer_bytes));
    if (src.memory != nullptr) {
      // One need per memory source: transposes go by whole rows, copies by whole buffers.
      const Plan::Need& need = plan.needs[needs_of[i].front()];
      const std::uint64_t unit = need.transpose() ? buffer_bytes / tail * tail : buffer_bytes;
      add_units(plan, i, needs_of[i], 0, src.size, unit, false);
      continue;
    }
    if (src.checked) {
      const std::uint64_t chunk = src.file->chunk_bytes();
      const std::uint64_t unit = chunk == 0 ? 0 : (buffer_bytes - tail) / chunk * chunk;
      if (unit == 0)
        return Status(StatusCode::unsupported,
                      fmt::format("a checksum chunk of {} bytes does not fit a {}-byte staging buffer", chunk,
                                  buffer_bytes - tail));
      if (end > src.size)
        return Status(StatusCode::invalid_argument,
                      fmt::format("a storage reaches past the end of {}", src.file->name()));
      add_units(plan, i, needs_of[i], 0, src.size, unit, true);  // every chunk, so every byte is checked
      plan.bytes_checked += src.size;
    } else {
      src.size = end;
      if ((buffer_bytes - tail) / 4096 == 0)
        return Status(StatusCode::unsupported, fmt::format("a {}-byte staging buffer is too small", buffer_bytes));
      // Only what the needs cover is read: units are cut over each run of needs no more than
      // kUnreadGap apart. A checkpoint's file holds whole tensors of which a TP rank needs a share;
      // units cut over the whole span would each read a buffer's worth for a need of any size.
      std::vector<std::uint32_t> by_begin = needs_of[i];
      std::sort(by_begin.begin(), by_begin.end(),
                [&](std::uint32_t a, std::uint32_t b) { return plan.needs[a].begin < plan.needs[b].begin; });
      for (std::size_t first = 0; first < by_begin.size();) {
        std::uint64_t run_end = plan.needs[by_begin[first]].end;
        std::size_t last = first + 1;
        for (; last < by_begin.size() && plan.needs[by_begin[last]].begin <= run_end + kUnreadGap; ++last)
          run_end = std::max(run_end, plan.needs[by_begin[last]].end);
        const std::uint64_t run_begin = plan.needs[by_begin[first]].begin / 4096 * 4096;
        add_units(plan, i, {by_begin.begin() + first, by_begin.begin() + last}, run_begin, run_end,
                  (buffer_bytes - tail) / 4096 * 4096, false);
        first = last;
      }
    }
  }
  return plan;
}

bool converts(const StagingPlan& plan, const StagingPlan::Unit& unit) {
  return std::any_of(unit.needs.begin(), unit.needs.end(), [&](std::uint32_t i) { return plan.needs[i].transpose(); });
}

bool converts(const StagingPlan& plan) {
  return std::any_of(plan.needs.begin(), plan.needs.end(), [](const Plan::Need& n) { return n.transpose(); });
}

namespace {

// Checks the chunks of a checked file's unit, whose bytes start at `staged` (the unit's first
// byte). Units are whole chunks (plan_staging).
Status check_chunks(const Plan& plan, const Plan::Unit& unit, const std::byte* staged) {
  const Plan::Source& src = plan.sources[unit.source];
  return src.checked ? src.file->check(unit.begin, unit.end, staged) : Status::ok();
}

// Serves each need of a unit from `staged`, the unit's first byte (its buffer, or where it lies in
// a mapping); a memory source's bytes are copied there first, need by need.
Status serve_needs(const Plan& plan, const Plan::Unit& unit, std::byte* buffer, const std::byte* staged,
                   StagingSink& sink) {
  const Plan::Source& src = plan.sources[unit.source];
  for (std::uint32_t i : unit.needs) {
    const Plan::Need& n = plan.needs[i];
    if (n.transpose()) {
      auto [first, last] = rows_begun_in(n, unit.begin, unit.end);
      const std::uint64_t at = n.begin + first * n.row_bytes();  // in the source
      const std::uint64_t rows = last - first;
      const std::byte* from = staged + (at - unit.begin);
      // A memory source's unit is whole rows of its one need (plan_staging): they fit the buffer.
      if (src.memory != nullptr) from = static_cast<std::byte*>(std::memcpy(buffer, src.memory + at, rows * n.row_bytes()));
      SNAPCACHE_RETURN_IF_ERROR(
          sink.transpose(n.dst + first * n.element_size, n.rows * n.element_size, from, rows, n.cols, n.element_size));
    } else {
      const std::uint64_t begin = std::max(n.begin, unit.begin), end = std::min(n.end, unit.end);
      const std::byte* from = staged + (begin - unit.begin);
      if (src.memory != nullptr)
        from = static_cast<std::byte*>(std::memcpy(buffer + (begin - unit.begin), src.memory + begin, end - begin));
      SNAPCACHE_RETURN_IF_ERROR(sink.copy(n.dst + (begin - n.begin), from, end - begin));
    }
  }
  return Status::ok();
}

}  // namespace

bool readable_uncached(const StagingPlan& plan, const StagingPlan::Unit& unit) {
  const Plan::Source& src = plan.sources[unit.source];
  return src.memory == nullptr && src.checked && unit.begin % kUncachedAlignment == 0 &&
         align_up(unit.end - unit.begin, kUncachedAlignment) <= plan.buffer_bytes;
}

namespace {

// Reads a checked file's unit around the page cache where `how` asks and the unit is mostly not
// there; false when it was not (not asked, in the page cache, or refused), and nothing to read.
Result<bool> read_uncached_where_not_cached(const Plan& plan, const Plan::Unit& unit, std::byte* read, FileRead how) {
  if (how != FileRead::uncached_where_not_cached || !readable_uncached(plan, unit)) return false;
  const StoredFile& file = *plan.sources[unit.source].file;
  const std::optional<double> resident = file.resident_share(unit.begin, unit.end);
  if (!resident || *resident >= kUncachedBelow) return false;
  Status st = file.read_checked_uncached(read, unit.begin, unit.end);
  // Refused: a file system without O_DIRECT (the file logs why, once) or a buffer off the alignment.
  if (st.code() == StatusCode::unsupported) return false;
  if (!st) return st;
  return true;
}

}  // namespace

Status stage_unit(const StagingPlan& plan, const StagingPlan::Unit& unit, std::byte* read, StagingSink& sink,
                  FileRead how, bool* read_uncached) {
  const Plan::Source& src = plan.sources[unit.source];
  if (read_uncached != nullptr) *read_uncached = false;
  if (src.memory == nullptr) {
    // The unit's chunks, each checked on the way (unless trusted); then the tail of the last
    // matrix row begun here, which the next unit checks (plan_staging).
    const std::uint64_t checked_end = src.checked ? unit.end : unit.begin;
    auto uncached = read_uncached_where_not_cached(plan, unit, read, how);
    if (!uncached) return uncached.status();
    if (read_uncached != nullptr) *read_uncached = *uncached;
    if (src.checked && !*uncached) SNAPCACHE_RETURN_IF_ERROR(src.file->read_checked(read, unit.begin, unit.end));
    if (unit.read_end > checked_end)
      SNAPCACHE_RETURN_IF_ERROR(
          src.file->read(read + (checked_end - unit.begin), checked_end, unit.read_end - checked_end));
  }
  return serve_needs(plan, unit, read, read, sink);
}

bool servable_in_place(const StagingPlan& plan, const StagingPlan::Unit& unit) {
  const Plan::Source& src = plan.sources[unit.source];
  constexpr std::uint64_t kPage = 4096;
  return src.memory == nullptr && unit.read_end == unit.end && unit.begin % kPage == 0 &&
         (unit.end % kPage == 0 || unit.end == src.size);
}

std::vector<bool> choose_direct_units(const StagingPlan& plan, double share) {
  std::vector<bool> direct(plan.units.size(), false);
  share = std::clamp(share, 0.0, 1.0);
  double owed = 0;
  for (std::size_t i = 0; share > 0 && i < plan.units.size(); ++i) {
    if (!servable_in_place(plan, plan.units[i])) continue;
    owed += share;
    if (owed + 1e-9 < 1) continue;
    owed -= 1;
    direct[i] = true;
  }
  return direct;
}

std::pair<std::uint64_t, std::uint64_t> pages_of(const StagingPlan::Unit& unit, std::uint64_t page) {
  return {unit.begin / page * page, align_up(unit.read_end, page)};
}

Status stage_unit_in_place(const StagingPlan& plan, const StagingPlan::Unit& unit, const std::byte* mapped,
                           StagingSink& sink) {
  if (!servable_in_place(plan, unit))
    return Status(StatusCode::invalid_argument, "a unit that reads past its pages cannot be served in place");
  const std::byte* staged = mapped + unit.begin;
  // The sink's copies start first, so the bus works while the chunks are hashed.
  SNAPCACHE_RETURN_IF_ERROR(serve_needs(plan, unit, nullptr, staged, sink));
  return check_chunks(plan, unit, staged);
}

}  // namespace snapcache::gpu
