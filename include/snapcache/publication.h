// A cold load's publication, running in the background. The load call returns when the weights
// are on the device; the snapshot is written, hashed and published atomically on another thread
// meanwhile, from host tensors no one writes (the load waits for it before a post-load method
// that may write in place, and before handing out host tensors that are the published ones).
// A process that exits waits for its publications (the library does so at exit); one that dies
// mid-publication leaves no entry, only a temporary directory that gc removes.
#pragma once

#include <future>

#include "snapcache/export.h"
#include "snapcache/store.h"

namespace snapcache {

class SNAPCACHE_API Publication {
 public:
  Publication() = default;  // none was started
  explicit Publication(std::shared_future<PublishOutcome> outcome) : outcome_(std::move(outcome)) {}

  bool started() const { return outcome_.valid(); }
  bool pending() const;  // started and not finished
  // Blocks until it finished and returns the outcome; without one, `skipped`.
  PublishOutcome wait() const;

 private:
  std::shared_future<PublishOutcome> outcome_;
};

// Blocks until every background publication this process started has finished.
SNAPCACHE_API void wait_for_publications();

}  // namespace snapcache
