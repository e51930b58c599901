// What the upload engine stages, and how, without CUDA: the destination layout (one arena, each
// storage at an aligned offset), the units of work (ranges of a source that fit one staging
// buffer: a stored file read in whole checksum chunks (StoredFile, through its FileSystem), or
// host memory), and what each unit does with its bytes (checks its chunks, copies storages, hands
// the raw rows of pending layout conversions to the sink, which transposes them where it writes:
// on the GPU for the engine). The engine runs the units on CUDA streams; the tests run them into
// host memory.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "snapcache/extend/host_storage.h"
#include "snapcache/extend/stored_file.h"
#include "snapcache/status.h"

namespace snapcache::gpu {

// Where staged bytes go. Copies of one sink complete in order; wait() returns when all are done,
// so the staging buffers they read may be refilled.
class StagingSink {
 public:
  virtual ~StagingSink() = default;
  virtual Status copy(std::uint64_t dst_offset, const std::byte* src, std::uint64_t bytes) = 0;
  // `src` holds `rows` whole rows of a row-major matrix of `cols` elements of `element_size`
  // bytes; their transpose goes to the destination as `cols` rows of `rows` elements, destination
  // rows `dst_pitch` bytes apart (so consecutive calls fill column blocks of one transposed
  // matrix). Only moves bytes: the result is bit-identical to a host transpose.
  virtual Status transpose(std::uint64_t dst_offset, std::uint64_t dst_pitch, const std::byte* src,
                           std::uint64_t rows, std::uint64_t cols, std::uint64_t element_size) = 0;
  virtual Status wait() = 0;
};

struct StagingPlan {
  // A source of bytes: a stored file (checked chunk by chunk when `checked`), or host memory. The
  // host storages the plan was made from keep the files alive.
  struct Source {
    const StoredFile* file = nullptr;
    bool checked = false;
    const std::byte* memory = nullptr;
    std::uint64_t size = 0;
  };
  // Bytes [begin, end) of a source go to the destination at `dst`: copied as they are, or, when
  // `cols` is set, as the transpose of the row-major [rows, cols] matrix of `element_size`-byte
  // elements that starts at `begin`.
  struct Need {
    std::uint64_t begin = 0;
    std::uint64_t end = 0;
    std::uint64_t dst = 0;
    std::uint64_t rows = 0;
    std::uint64_t cols = 0;
    std::uint64_t element_size = 0;
    bool transpose() const { return cols != 0; }
    std::uint64_t row_bytes() const { return cols * element_size; }
  };
  // One buffer's work: read [begin, end) of a source (and, for transposes, up to the end of the
  // last row begun in it), check the chunks, then serve each need that overlaps it.
  struct Unit {
    std::uint32_t source = 0;
    std::uint64_t begin = 0;
    std::uint64_t end = 0;
    std::uint64_t read_end = 0;  // >= end: the tail of the last matrix row begun here
    std::vector<std::uint32_t> needs;
  };

  std::vector<Source> sources;
  std::vector<Need> needs;
  std::vector<Unit> units;
  std::vector<std::uint64_t> storage_offsets;  // in the destination, per host storage
  std::uint64_t destination_bytes = 0;
  std::uint64_t buffer_bytes = 0;   // the staging buffer the units were cut for
  std::uint64_t bytes_checked = 0;  // the sizes of the stored files checked chunk by chunk
};

// Destination offsets are multiples of this, as cudaMalloc's allocations are.
inline constexpr std::uint64_t kDestinationAlignment = 512;

// Staging buffers are mapped in huge pages (gpu/pinned_pool.h): a buffer that grows to fit grows to
// a multiple of this.
inline constexpr std::uint64_t kBufferGranule = 2ull << 20;

// What a plan does with a buffer too small for a load: refuse, or take the smallest that fits.
enum class BufferFit { exact, grow };

// The plan for staging buffers of `buffer_bytes`; with `check_files`, every chunk of each stored
// file a storage names is read and checked. A buffer must hold a file's checksum chunk plus the
// tail of the longest matrix row a transpose reads past it, and every such row twice. When it does
// not: with BufferFit::exact, fails (unsupported); with BufferFit::grow, the plan is cut for the
// smallest buffer that does, a whole number of kBufferGranule (StagingPlan::buffer_bytes).
Result<StagingPlan> plan_staging(const HostStorages& host, std::uint64_t buffer_bytes, bool check_files = true,
                                 BufferFit fit = BufferFit::exact);

// Whether a unit transposes (so its sink needs room for a unit's rows where it transposes).
bool converts(const StagingPlan& plan, const StagingPlan::Unit& unit);
bool converts(const StagingPlan& plan);

// How a unit of a checked stored file is read: through the page cache, or around it
// (StoredFile::read_checked_uncached) when less than kUncachedBelow of the unit is in the page
// cache now (O_DIRECT takes every byte from the disk, cached or not).
enum class FileRead { page_cache, uncached_where_not_cached };
inline constexpr double kUncachedBelow = 0.5;

// Whether a unit can be read around the page cache into a staging buffer of the plan's size,
// aligned to kUncachedAlignment: a checked file's unit that starts on the alignment and whose
// rounded-up length fits the buffer.
bool readable_uncached(const StagingPlan& plan, const StagingPlan::Unit& unit);

// Runs one unit with one staging buffer of the plan's `buffer_bytes`, which receives the source
// bytes and must stay untouched until the sink's copies of them complete. Returns damaged, naming
// the file and chunk, when a chunk's checksum differs from its manifest's. With
// FileRead::uncached_where_not_cached and a buffer aligned to kUncachedAlignment, a unit
// readable_uncached and mostly not in the page cache is read around it, and `read_uncached` (when
// given) says so; where the file refuses that (a file system without O_DIRECT), the unit is read
// through the page cache.
Status stage_unit(const StagingPlan& plan, const StagingPlan::Unit& unit, std::byte* read, StagingSink& sink,
                  FileRead how = FileRead::page_cache, bool* read_uncached = nullptr);

// The bytes of a file's unit served where they lie, in a mapping of the file (the engine's direct
// path: the page cache registered with the driver, no host copy). Only units that read nothing
// past their end, whose bounds are on pages (or at the end of what is read of the file), so that
// the pages of two such units never overlap: each unit's pages are registered alone.
bool servable_in_place(const StagingPlan& plan, const StagingPlan::Unit& unit);
// Which units take the direct path: `share` (0 to 1) of those servable in place, spread evenly
// through the plan, so that workers taking units in order run both paths at once.
std::vector<bool> choose_direct_units(const StagingPlan& plan, double share);
// The pages a unit served in place spans in its file: [begin, end), `page`-aligned.
std::pair<std::uint64_t, std::uint64_t> pages_of(const StagingPlan::Unit& unit, std::uint64_t page);

// Runs a unit whose source is mapped at `mapped` (the file's byte 0): hands the sink pointers into
// the mapping, then checks every chunk there. The sink may still be reading when this returns
// damaged; the caller fails the upload, so those bytes are never handed out.
Status stage_unit_in_place(const StagingPlan& plan, const StagingPlan::Unit& unit, const std::byte* mapped,
                           StagingSink& sink);

}  // namespace snapcache::gpu
