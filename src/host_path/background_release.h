// Host memory a load is done with, freed on a thread of its own. Freeing the tensors a loader made
// costs as much as some stages: the demo's 5.3 GiB of fused QKV took 227-383 ms on the GPU machine
// (docs/performance.md), which a load without a cache paid after its upload, before returning.
// The process waits for these threads as it waits for its publications (wait_for_publications, and
// at exit), so a tensor made in Python is let go while the interpreter still runs.
#pragma once

#include <memory>

namespace snapcache::host_path {

// Drops `held` (its last owner, say a make_shared of what the load holds) on a thread of its own,
// and returns at once. Nothing in it may hold a lock or a lease someone may wait for after the
// load returns: it goes a little later than the caller sees.
void release_in_background(std::shared_ptr<void> held);

// Blocks until everything handed to release_in_background so far has been dropped.
void wait_for_releases();

}  // namespace snapcache::host_path
