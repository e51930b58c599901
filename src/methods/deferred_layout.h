// Layout conversions the upload engine writes on the way to the device. In a new process every
// byte of fresh host memory costs a page fault, so a post-load method that writes a converted
// copy of a 10 GiB model pays for 10 GiB of new pages before the upload starts. While a load
// defers conversions, the layout kernels return tensors over a reserved, unreadable placeholder
// and record what the bytes will be (the transpose of a source matrix); an uploader that converts
// layouts transposes the source straight into its pinned staging buffers instead. Anything else
// that needs the bytes on the host gets them written first (materialize), so the result is always
// the one the kernels would have written.
#pragma once

#include <ATen/core/Tensor.h>

#include <functional>
#include <memory>
#include <optional>
#include <unordered_map>

#include "snapcache/extend/host_storage.h"
#include "snapcache/extend/post_load.h"

namespace snapcache::methods {

class DeferredLayouts {
 public:
  DeferredLayouts();
  ~DeferredLayouts();
  DeferredLayouts(const DeferredLayouts&) = delete;
  DeferredLayouts& operator=(const DeferredLayouts&) = delete;

  // While a Scope lives, the layout kernels on this thread defer into `layouts`.
  class Scope {
   public:
    explicit Scope(DeferredLayouts& layouts);
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    DeferredLayouts* previous_;
  };

  // The layouts of this thread's scope, or nullptr (the kernels then write at once).
  static DeferredLayouts* current();

  // A tensor whose bytes will be the transpose of `source` (row-major, contiguous, [rows, cols], on
  // the CPU) as a contiguous [cols, rows] matrix, seen through `sizes` and `strides` (which must
  // cover exactly those bytes); or nullopt when it is empty or no placeholder could be reserved
  // (the kernels then write it at once).
  std::optional<at::Tensor> defer_transpose(const at::Tensor& source, at::IntArrayRef sizes, at::IntArrayRef strides);

  // Writes the bytes of the tensors' pending storages among `names` (all of them when `names` is
  // empty), so code that reads them sees the converted bytes.
  Status materialize(const NamedTensors& tensors, const std::vector<std::string>& names = {});

  // Where a served storage's bytes also lie (HostStorage::file), or nullptr.
  using StoredOf = std::function<const StoredBytes*(const c10::StorageImpl*)>;
  // The pending conversion of a storage, with where its source lies when `stored_of` knows.
  std::optional<PendingTranspose> pending(const c10::StorageImpl* storage, const StoredOf& stored_of) const;
  bool empty() const { return pending_.empty(); }

 private:
  struct Pending {
    at::Tensor source;  // keeps the source bytes alive and readable
    at::Tensor placeholder;
  };
  class Reservation;
  Status materialize(const c10::StorageImpl* storage);
  std::unordered_map<const c10::StorageImpl*, Pending> pending_;
  std::shared_ptr<Reservation> reservation_;  // the one placeholders are carved from now
};

}  // namespace snapcache::methods
