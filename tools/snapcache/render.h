// How keys, entries and their parts read, as text and as the stable JSON of --json.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "output.h"
#include "snapcache/key.h"
#include "snapcache/maintenance.h"
#include "snapcache/store.h"

namespace snapcache::cli {

// "/models/llama-70b/model-00001-of-00008.safetensors", or "/models/llama-70b (8 files)".
std::string checkpoint_text(const Key& key);
// "tp 0/8 pp 0/1", with extra fields: "tp 0/8 pp 0/1 ep=2".
std::string topology_text(const Topology& topology);
std::string torch_text(const TorchIdentity& torch);
// "ok", "damaged", "unfinished", "ok, leased by pid 12 (python3)".
std::string state_text(const EntryInfo& entry);
// Where the entry came from, in a word for `ls`: "here", "signed 3b6a41c29d0e" (the signer's first
// 12 hex digits), "unproven", "secondary", "-" (not recorded).
std::string origin_text(const EntryInfo& entry);
// {"kind", "signer", "source", "recorded_unix_ns", "words"}: EntryOrigin, described.
json origin_json(const EntryInfo& entry);
// "dit, /models/x (8 files), tp 0/8 pp 0/1": enough to tell entries apart in a list.
std::string describe_entry(const EntryInfo& entry);

json key_json(const Key& key);
// The key as `inspect` shows it: one row per field, named as key diffs name them
// ("torch.version", "topology.tp_rank", "options.adapter").
std::vector<std::pair<std::string, std::string>> key_rows(const Key& key);
json holders_json(const std::vector<int>& pids);
// The fields `ls --json` gives for each entry (inspect adds more).
json entry_summary_json(const EntryInfo& entry);
json differences_json(const std::vector<KeyDifference>& diffs);
// {"id", "differences"}, or null without a nearest entry (an entry of the same component and
// checkpoint: without one, the key's first load).
json nearest_json(const std::optional<NearestEntry>& nearest);

}  // namespace snapcache::cli
