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

// Builds a plan: sources and needs from the storages, the buffer size they need, then the units
// of each source.
class PlanBuilder {
 public:
  // The storage's place in the destination and what it needs from its source: a stored file with
  // checksums, or its memory.
  Status add(const HostStorage& s) {
    for (const auto* f : {s.file ? &*s.file : nullptr, s.pending && s.pending->source_file ? &*s.pending->source_file : nullptr})
      if (f != nullptr && f->file == nullptr)
        return Status(StatusCode::invalid_argument, "a storage's stored bytes name no file");
    const std::uint64_t dst = plan_.destination_bytes;
    plan_.storage_offsets.push_back(dst);
    plan_.destination_bytes = align_up(dst + s.nbytes, kDestinationAlignment);
    if (s.nbytes == 0) return Status::ok();
    if (s.pending) {
      const PendingTranspose& p = *s.pending;
      SNAPCACHE_RETURN_IF_ERROR(p.check(s.nbytes));
      Plan::Need need{0, s.nbytes, dst, p.rows(), p.cols(), p.element_size()};
      if (!checked(p.source_file))
        return add_need(memory_source(static_cast<const std::byte*>(p.source.data_ptr()), s.nbytes), need);
      need.begin = p.source_file->offset;
      need.end += need.begin;
      return add_need(file_source(*p.source_file), need);
    }
    if (checked(s.file)) return add_need(file_source(*s.file), {s.file->offset, s.file->offset + s.nbytes, dst, 0, 0, 0});
    return add_need(memory_source(s.data, s.nbytes), {0, s.nbytes, dst, 0, 0, 0});
  }

  // The buffer size: `buffer_bytes`, or with BufferFit::grow the smallest that holds a unit of
  // every source (its chunk, or a page, plus the longest matrix row a transpose reads past it, and
  // that row twice).
  void fit_buffer(std::uint64_t buffer_bytes, BufferFit fit) {
    extents_.assign(plan_.sources.size(), {});
    std::uint64_t needed = 1;
    for (std::uint32_t i = 0; i < plan_.sources.size(); ++i) {
      Extent& e = extents_[i];
      for (std::uint32_t n : needs_of_[i]) {
        const Plan::Need& need = plan_.needs[n];
        if (need.transpose()) e.tail = std::max(e.tail, need.row_bytes());
        e.end = std::max(e.end, need.end);
      }
      const Plan::Source& src = plan_.sources[i];
      const std::uint64_t unit = src.memory != nullptr ? 0 : src.file->chunk_bytes();
      needed = std::max({needed, 2 * e.tail, e.tail + unit});
    }
    if (fit == BufferFit::grow && buffer_bytes < needed) buffer_bytes = align_up(needed, kBufferGranule);
    plan_.buffer_bytes = buffer_bytes;
  }

  // Each source's units, cut for the plan's buffer.
  Result<Plan> cut_units() && {
    for (std::uint32_t i = 0; i < plan_.sources.size(); ++i) {
      const std::uint64_t tail = extents_[i].tail;
      if (tail > plan_.buffer_bytes / 2)
        return Status(StatusCode::unsupported,
                      fmt::format("a matrix row of {} bytes does not fit a {}-byte staging buffer twice", tail,
                                  plan_.buffer_bytes));
      const Plan::Source& src = plan_.sources[i];
      SNAPCACHE_RETURN_IF_ERROR(src.memory != nullptr ? cut_memory(i) : cut_file(i));
    }
    return std::move(plan_);
  }

 private:
  struct Extent {
    std::uint64_t tail = 0;  // the longest matrix row a transpose reads
    std::uint64_t end = 0;   // the end of the last byte needed
  };

  // Whether the bytes lie in a file the engine reads and checks (one with checksums).
  static bool checked(const std::optional<StoredBytes>& f) { return f && f->file->chunk_bytes() != 0; }

  std::uint32_t file_source(const StoredBytes& f) {
    auto [it, added] = file_sources_.emplace(f.file.get(), static_cast<std::uint32_t>(plan_.sources.size()));
    if (added) {
      plan_.sources.push_back({f.file.get(), nullptr, f.file->size()});
      needs_of_.emplace_back();
    }
    return it->second;
  }
  std::uint32_t memory_source(const std::byte* p, std::uint64_t bytes) {
    plan_.sources.push_back({nullptr, p, bytes});
    needs_of_.emplace_back();
    return static_cast<std::uint32_t>(plan_.sources.size() - 1);
  }
  Status add_need(std::uint32_t source, Plan::Need need) {
    needs_of_[source].push_back(static_cast<std::uint32_t>(plan_.needs.size()));
    plan_.needs.push_back(need);
    return Status::ok();
  }

  // One need per memory source: transposes go by whole rows, copies by whole buffers.
  Status cut_memory(std::uint32_t i) {
    const Plan::Need& need = plan_.needs[needs_of_[i].front()];
    const std::uint64_t tail = extents_[i].tail;
    const std::uint64_t unit = need.transpose() ? plan_.buffer_bytes / tail * tail : plan_.buffer_bytes;
    add_units(plan_, i, needs_of_[i], 0, plan_.sources[i].size, unit, false);
    return Status::ok();
  }

  // Every chunk of the file, whether a storage needs it or not, so every byte is checked.
  Status cut_file(std::uint32_t i) {
    const Plan::Source& src = plan_.sources[i];
    const std::uint64_t room = plan_.buffer_bytes - extents_[i].tail;
    const std::uint64_t chunk = src.file->chunk_bytes();
    const std::uint64_t unit = room / chunk * chunk;
    if (unit == 0)
      return Status(StatusCode::unsupported,
                    fmt::format("a checksum chunk of {} bytes does not fit a {}-byte staging buffer", chunk, room));
    if (extents_[i].end > src.size)
      return Status(StatusCode::invalid_argument, fmt::format("a storage reaches past the end of {}", src.file->name()));
    add_units(plan_, i, needs_of_[i], 0, src.size, unit, true);
    plan_.bytes_checked += src.size;
    return Status::ok();
  }

  Plan plan_;
  std::map<const StoredFile*, std::uint32_t> file_sources_;
  std::vector<std::vector<std::uint32_t>> needs_of_;  // per source
  std::vector<Extent> extents_;                      // per source
};

}  // namespace

Result<StagingPlan> plan_staging(const HostStorages& host, std::uint64_t buffer_bytes, BufferFit fit) {
  PlanBuilder builder;
  for (const HostStorage& s : host.storages) SNAPCACHE_RETURN_IF_ERROR(builder.add(s));
  builder.fit_buffer(buffer_bytes, fit);
  return std::move(builder).cut_units();
}

bool converts(const StagingPlan& plan, const StagingPlan::Unit& unit) {
  return std::any_of(unit.needs.begin(), unit.needs.end(), [&](std::uint32_t i) { return plan.needs[i].transpose(); });
}

bool converts(const StagingPlan& plan) {
  return std::any_of(plan.needs.begin(), plan.needs.end(), [](const Plan::Need& n) { return n.transpose(); });
}

namespace {

// Serves each need of a unit from `buffer`, which holds the unit's bytes from its first; a memory
// source's bytes are copied there first, need by need.
Status serve_needs(const Plan& plan, const Plan::Unit& unit, std::byte* buffer, StagingSink& sink) {
  const Plan::Source& src = plan.sources[unit.source];
  for (std::uint32_t i : unit.needs) {
    const Plan::Need& n = plan.needs[i];
    if (n.transpose()) {
      auto [first, last] = rows_begun_in(n, unit.begin, unit.end);
      const std::uint64_t at = n.begin + first * n.row_bytes();  // in the source
      const std::uint64_t rows = last - first;
      const std::byte* from = buffer + (at - unit.begin);
      // A memory source's unit is whole rows of its one need (plan_staging): they fit the buffer.
      if (src.memory != nullptr) from = static_cast<std::byte*>(std::memcpy(buffer, src.memory + at, rows * n.row_bytes()));
      SNAPCACHE_RETURN_IF_ERROR(
          sink.transpose(n.dst + first * n.element_size, n.rows * n.element_size, from, rows, n.cols, n.element_size));
    } else {
      const std::uint64_t begin = std::max(n.begin, unit.begin), end = std::min(n.end, unit.end);
      const std::byte* from = buffer + (begin - unit.begin);
      if (src.memory != nullptr)
        from = static_cast<std::byte*>(std::memcpy(buffer + (begin - unit.begin), src.memory + begin, end - begin));
      SNAPCACHE_RETURN_IF_ERROR(sink.copy(n.dst + (begin - n.begin), from, end - begin));
    }
  }
  return Status::ok();
}

}  // namespace

Status stage_unit(const StagingPlan& plan, const StagingPlan::Unit& unit, std::byte* read, StagingSink& sink) {
  const Plan::Source& src = plan.sources[unit.source];
  if (src.memory == nullptr) {
    // The unit's chunks, each checked on the way; then the tail of the last matrix row begun here,
    // which the next unit checks (plan_staging).
    SNAPCACHE_RETURN_IF_ERROR(src.file->read_checked(read, unit.begin, unit.end));
    if (unit.read_end > unit.end)
      SNAPCACHE_RETURN_IF_ERROR(src.file->read(read + (unit.end - unit.begin), unit.end, unit.read_end - unit.end));
  }
  return serve_needs(plan, unit, read, sink);
}

}  // namespace snapcache::gpu
