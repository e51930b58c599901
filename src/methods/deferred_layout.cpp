#include "methods/deferred_layout.h"

#include <ATen/Functions.h>
#include <sys/mman.h>

#include <algorithm>
#include <cerrno>

#include "methods/named.h"
#include "util/fmt.h"
#include "util/parallel.h"
#include "util/transpose.h"
#include "snapcache/extend/host_storage.h"

namespace snapcache::methods {
namespace {

thread_local DeferredLayouts* current_layouts = nullptr;

std::size_t page_rounded(std::uint64_t bytes) {
  const auto page = static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
  return static_cast<std::size_t>((bytes + page - 1) / page * page);
}

// Placeholders are carved from reservations this large (address space only: no page exists, none
// is charged), so a load maps once per GiB instead of once per conversion: a TP 8 rank defers
// 1,146 of them, and a mapping each took about 3 ms of its post-load, and as many unmaps later.
constexpr std::size_t kReservationBytes = std::size_t{1} << 30;

}  // namespace

// Reserved, unreadable address space that placeholders are carved from, page-aligned, in order.
// Every placeholder's storage holds its reservation, which is unmapped when the last one goes (with
// the pages of those that were materialized).
class DeferredLayouts::Reservation {
 public:
  static std::shared_ptr<Reservation> make(std::size_t length) {
    void* p = ::mmap(nullptr, length, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) return nullptr;
    return std::shared_ptr<Reservation>(new Reservation(static_cast<char*>(p), length));
  }
  ~Reservation() { ::munmap(base_, length_); }
  Reservation(const Reservation&) = delete;
  Reservation& operator=(const Reservation&) = delete;

  // The next `length` bytes (a multiple of the page size), or nullptr when they do not fit.
  void* take(std::size_t length) {
    if (length > length_ - used_) return nullptr;
    void* p = base_ + used_;
    used_ += length;
    return p;
  }

 private:
  Reservation(char* base, std::size_t length) : base_(base), length_(length) {}
  char* base_;
  std::size_t length_;
  std::size_t used_ = 0;
};

DeferredLayouts::DeferredLayouts() = default;
DeferredLayouts::~DeferredLayouts() = default;

DeferredLayouts::Scope::Scope(DeferredLayouts& layouts) : previous_(current_layouts) { current_layouts = &layouts; }
DeferredLayouts::Scope::~Scope() { current_layouts = previous_; }
DeferredLayouts* DeferredLayouts::current() { return current_layouts; }

std::optional<at::Tensor> DeferredLayouts::defer_transpose(const at::Tensor& source, at::IntArrayRef sizes,
                                                           at::IntArrayRef strides) {
  const auto bytes = static_cast<std::uint64_t>(source.numel()) * source.element_size();
  // However small: written here, a conversion reads its source where the tier mapped it (on a warm
  // load a page fault on the snapshot's mapping, and its fault-around, per tensor) into fresh
  // memory, where the engine reads it with the file's other bytes and its device transposes cost a
  // kernel launch. A TP 8 rank's 382 FP8 scale grids are 288 bytes each.
  if (bytes == 0 || !PendingTranspose{source, std::nullopt}.check(bytes)) return std::nullopt;
  // Reserved, not backed: no page exists until the bytes are written, and a read before then
  // faults instead of returning zeros.
  const std::size_t length = page_rounded(bytes);
  void* p = reservation_ ? reservation_->take(length) : nullptr;
  if (p == nullptr) {
    reservation_ = Reservation::make(std::max(length, kReservationBytes));
    if (!reservation_) return std::nullopt;  // written at once instead
    p = reservation_->take(length);
  }
  at::Tensor placeholder = at::from_blob(p, sizes, strides, [held = reservation_](void*) {}, source.options());
  pending_.emplace(placeholder.storage().unsafeGetStorageImpl(), Pending{source, placeholder});
  return placeholder;
}

Status DeferredLayouts::materialize(const c10::StorageImpl* storage) {
  auto it = pending_.find(storage);
  if (it == pending_.end()) return Status::ok();
  const Pending& p = it->second;
  void* data = p.placeholder.data_ptr();
  const auto bytes = static_cast<std::uint64_t>(p.placeholder.numel()) * p.placeholder.element_size();
  if (::mprotect(data, page_rounded(bytes), PROT_READ | PROT_WRITE) != 0)
    return Status::from_errno(errno, "making a layout conversion's host memory writable");
  const std::size_t threads = std::clamp<std::size_t>(bytes >> 22, 1, util::worker_count());
  util::transpose(p.source.data_ptr(), data, static_cast<std::size_t>(p.source.size(0)),
                  static_cast<std::size_t>(p.source.size(1)), p.source.element_size(), threads);
  pending_.erase(it);
  return Status::ok();
}

Status DeferredLayouts::materialize(const NamedTensors& tensors, const std::vector<std::string>& names) {
  if (pending_.empty()) return Status::ok();
  const auto wanted = name_set(names);
  for (const auto& [name, t] : tensors) {
    if (!t.defined() || !t.has_storage()) continue;
    const c10::StorageImpl* storage = t.storage().unsafeGetStorageImpl();
    // The storage first: most tensors have nothing pending, and a pointer hashes faster than a name.
    if (pending_.count(storage) == 0 || (!names.empty() && wanted.count(name) == 0)) continue;
    SNAPCACHE_RETURN_IF_ERROR(materialize(storage));
  }
  return Status::ok();
}

std::optional<PendingTranspose> DeferredLayouts::pending(const c10::StorageImpl* storage,
                                                         const StoredOf& stored_of) const {
  auto it = pending_.find(storage);
  if (it == pending_.end()) return std::nullopt;
  const at::Tensor& s = it->second.source;
  PendingTranspose out{s, std::nullopt};
  if (const StoredBytes* stored = stored_of(s.storage().unsafeGetStorageImpl())) {
    out.source_file = *stored;
    out.source_file->offset += static_cast<std::uint64_t>(s.storage_offset()) * out.element_size();
  }
  return out;
}

}  // namespace snapcache::methods
