// What the upload engine stages, and how, without CUDA: the destination layout (one arena, each
// storage at an aligned offset), the units of work (ranges of a source that fit one staging
// buffer: a stored file read in whole checksum chunks (StoredFile, through its FileSystem), or
// host memory), and what each unit does with its bytes (checks its chunks, copies storages, hands
// the raw rows of pending layout conversions to the sink, which transposes them where it writes:
// on the GPU for the engine). The engine runs the units on CUDA streams; the tests run them into
// host memory.
#pragma once

#include <cstdint>
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
  // A source of bytes: a stored file, checked chunk by chunk, or host memory. The host storages the
  // plan was made from keep the files alive.
  struct Source {
    const StoredFile* file = nullptr;
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
  std::uint64_t bytes_checked = 0;  // the sizes of the stored files (each checked chunk by chunk)
};

// Destination offsets are multiples of this, as cudaMalloc's allocations are.
inline constexpr std::uint64_t kDestinationAlignment = 512;

// Staging buffers are mapped in huge pages (gpu/pinned_pool.h): a buffer that grows to fit grows to
// a multiple of this.
inline constexpr std::uint64_t kBufferGranule = 2ull << 20;

// What a plan does with a buffer too small for a load: refuse, or take the smallest that fits.
enum class BufferFit { exact, grow };

// The plan for staging buffers of `buffer_bytes`: every chunk of each stored file with checksums
// that a storage names is read and checked (StoredFile::chunk_bytes() not 0); a storage in a file
// without checksums (a checkpoint's) is read from memory, since there is nothing to check (reading
// such a file instead measured no faster). A buffer must hold a file's checksum chunk plus the
// tail of the longest matrix row a transpose reads past it, and every such row twice. When it does
// not: with BufferFit::exact, fails (unsupported); with BufferFit::grow, the plan is cut for the
// smallest buffer that does, a whole number of kBufferGranule (StagingPlan::buffer_bytes).
Result<StagingPlan> plan_staging(const HostStorages& host, std::uint64_t buffer_bytes, BufferFit fit = BufferFit::exact);

// Whether a unit transposes (so its sink needs room for a unit's rows where it transposes).
bool converts(const StagingPlan& plan, const StagingPlan::Unit& unit);
bool converts(const StagingPlan& plan);

// Runs one unit with one staging buffer of the plan's `buffer_bytes`, which receives the source
// bytes and must stay untouched until the sink's copies of them complete. Returns damaged, naming
// the file and chunk, when a chunk's checksum differs from its manifest's.
Status stage_unit(const StagingPlan& plan, const StagingPlan::Unit& unit, std::byte* read, StagingSink& sink);

}  // namespace snapcache::gpu
