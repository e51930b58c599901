// Background publications of this process, by key: started by the snapshot tier for a cold load,
// waited for by a later lookup of the same key (so a load right after a cold one hits), and by the
// process at exit.
#pragma once

#include <memory>

#include "snapcache/extend/store_tensors.h"
#include "snapcache/key.h"
#include "snapcache/pipeline.h"

namespace snapcache::tiers {

// publish_tensors(*store, key, tensors, options) on its own thread; the tensors must not change until
// it ends, unless `options` holds their fingerprint (PublishOptions::expected_chunk_hashes).
Publication publish_in_background(std::shared_ptr<Store> store, const Key& key, NamedTensors tensors,
                                  PublishOptions options = {});

// Waits for this process's publication of `key`, if one is running.
void wait_for_publication_of(const Key& key);

// Records a finished publication in `stage` and returns the note for the report's reason ("" when
// it was published or already present): the one reading of an outcome, blocking or not.
std::string record_publication(const PublicationReport& report, StageTimer& stage);

}  // namespace snapcache::tiers
