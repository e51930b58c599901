// The post-load method seam, for people who write methods (the built-in methods and the precision
// policy a plan lists are in snapcache/pipeline.h). Post-load methods: the quantizer layout steps
// that run on CPU tensors after the weights exist (cold: from the ordinary loader; warm: from the
// snapshot) and before upload. Because they run on both paths over identical inputs, cold and
// warm loads give bit-identical results.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "snapcache/export.h"
#include "snapcache/pipeline.h"

namespace snapcache {

// What a method does to the bytes of the tensors it transforms. The upload engine may send bytes
// no method wrote straight from the file they came from, so a method that changes bytes in place
// must say so; the default assumes it may.
enum class PostLoadWrites {
  new_storages_only,  // results are views of their inputs or live in storages the method allocated
  may_write_in_place,  // it may change the bytes of its targets' existing storages
};

// What a method is, as the load relies on it. Every rule that depends on a method (may the engine
// send its targets from the file, may pending conversions stay pending while it runs, may a GPU
// donor vouch for its output, can it run at all) reads these, and only these.
struct MethodProperties {
  PostLoadWrites writes = PostLoadWrites::may_write_in_place;
  // It reads the bytes of the tensors it names in targets() and no others, so conversions of
  // other tensors may stay pending while it runs. Otherwise every pending conversion is written
  // before it runs.
  bool reads_only_targets = false;
  // Shipped with snapcache: its output changes only with snapcache's version, so its name and
  // version say everything its output depends on (a GPU donor serves other methods only when told
  // to trust them, DonorOptions::accept_custom_methods).
  bool built_in = false;
  // Applied to consecutive parts of a load, it gives what it gives applied to the whole, tensor for
  // tensor and in the same order, whenever its targets in the parts add up to its targets in the
  // whole (the built-in methods: a weight and its scale in one part). With new_storages_only, a
  // cold load from a streaming loader (LoadPlan::streaming_loader) runs it on each part as the
  // part comes; the load checks that the targets add up, and runs it on the whole otherwise.
  bool applies_per_part = false;
  // Why it cannot run as configured, or "" when it can ("128x128 blocks only; asked for 64x64"):
  // apply() fails with this, and a donor refuses the plan up front with it.
  std::string unsupported;
};

class SNAPCACHE_API PostLoadMethod {
 public:
  virtual ~PostLoadMethod() = default;
  virtual std::string name() const = 0;
  // The tensors this method will transform: its declaration, reported before it runs.
  virtual std::vector<std::string> targets(const NamedTensors& tensors) const = 0;
  // Replaces each target by its converted form. Errors name the tensor.
  virtual Status apply(NamedTensors& tensors) const = 0;
  // The defaults assume the least: it may write in place and read anything.
  virtual MethodProperties properties() const { return {}; }
  // Changes whenever the method's output bytes for the same input change. Weights prepared by one
  // version are never lent (GPU retention tier) to a consumer that runs another.
  virtual std::string version() const { return {}; }
};

}  // namespace snapcache
