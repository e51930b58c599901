// The GPU retention tier. A donor is a long-lived process that keeps a model's prepared weights
// (post-load methods applied, derived buffers built) on one GPU and lends them to restarted
// servers, which map the same device memory over CUDA IPC instead of loading anything:
//
//   donor:     load_model(plan) -> Donor::start(device) -> serve(plan, model) -> run() until a signal
//   consumer:  plan.tiers = {donor_tier(), snapshot_tier(), ordinary_tier()} -> load_model(plan)
//
// The contract (docs/gpu-retention.md): Linux, inference only. Consumers get device tensors that
// map the donor's memory and must not write to them (CUDA cannot map memory read-only); tensors
// that must be written are named in DonorTierOptions::copy_on_attach and come back as private
// copies. One donor per GPU, several components (keys) per donor, one consumer per key at a time
// unless the donor allows more. A consumer that exits, however it exits, detaches; the donor sees
// its socket close.
//
// Trust: the socket lives in a directory private to the user (0700, owned by the user, not a
// symlink), and each side checks that its peer runs as the same user before it reads anything.
// Messages carry descriptors and layout, never weight bytes.
#pragma once

#include <c10/core/Device.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "snapcache/export.h"
#include "snapcache/extend/tier.h"
#include "snapcache/key.h"
#include "snapcache/pipeline.h"

namespace snapcache {

// What prepared weights on a GPU are keyed by: what the disk key carries (checkpoint, component,
// loader source, Torch, dtype, precision policy, topology, options), how the weights were processed
// after loading, and the physical GPU. Both peers check it; a mismatch names the fields.
struct DonorKey {
  Key disk;
  std::string weight_processing;  // the post-load methods with their versions, in order
  std::string gpu_uuid;           // "GPU-8f1c…": the physical device, whatever CUDA_VISIBLE_DEVICES says
  bool operator==(const DonorKey&) const = default;
};
// The donor key of a plan loaded onto plan.device. `store` may be null (identities from stat).
SNAPCACHE_API Result<DonorKey> donor_key_for_plan(Store* store, const LoadPlan& plan);
// The same around a disk key the load already took (key_for_plan), so both name one checkpoint.
SNAPCACHE_API Result<DonorKey> donor_key_for_plan(const Key& disk_key, const LoadPlan& plan);
SNAPCACHE_API std::string donor_key_id(const DonorKey& key);  // 32 hex digits
SNAPCACHE_API std::vector<KeyDifference> diff_donor_keys(const DonorKey& wanted, const DonorKey& found);

struct DonorOptions {
  // Where sockets live; empty: $SNAPCACHE_DONOR_DIR, else $XDG_RUNTIME_DIR/snapcache, else
  // /tmp/snapcache-<uid>. Created 0700 when missing; refused when not private to the user.
  std::string socket_dir;
  // Consumers one key may have at once. Above 1 they share the weights, read-only.
  int max_consumers_per_key = 1;
  // How long shutdown waits for attached consumers to detach.
  std::chrono::milliseconds shutdown_timeout{std::chrono::seconds(30)};
  // Serve weights processed by post-load methods other than the built-in ones (int8 row scales,
  // FP8 128x128 block scales, FP16/INT8 layouts). Off: such plans are refused, since the donor
  // cannot vouch for what the method's output depends on.
  bool accept_custom_methods = false;
};

// How a donor ended.
struct DonorShutdown {
  std::size_t consumers_at_stop = 0;  // attached when the stop was asked for
  bool timed_out = false;             // some were still attached after shutdown_timeout
  // Components whose served bytes changed between the start of serving and the shutdown: a
  // consumer wrote to weights it shares.
  std::vector<std::string> changed;
  double fingerprint_seconds = 0;  // the shutdown's fingerprint pass
  SNAPCACHE_API std::string summary() const;
};

class SNAPCACHE_API Donor {
 public:
  // Takes the socket of `device`'s GPU: refused, with the reason, when the socket directory is not
  // private to the user or another donor serves that GPU (a socket left by a donor that died is
  // replaced).
  static Result<std::unique_ptr<Donor>> start(c10::Device device, DonorOptions options = {});
  ~Donor();
  Donor(const Donor&) = delete;
  Donor& operator=(const Donor&) = delete;

  // Serves `model` (loaded by `plan` onto this donor's device) under the plan's donor key: the
  // weights and derived buffers are copied into shareable device memory (one device-to-device
  // pass; `model` may be dropped afterwards) and fingerprinted. Refused before anything is served:
  // tensors on another device, post-load methods the tier does not support (unknown methods, FP8
  // block sizes other than 128x128), a component that is already served.
  // `store` is the one the plan loads with (null: checkpoint identities from stat), so the key
  // matches the consumers' keys.
  Status serve(Store* store, const LoadPlan& plan, const LoadedModel& model);

  // Answers consumers until request_stop(); then stops accepting, waits up to shutdown_timeout
  // for the attached consumers to detach, compares fingerprints and frees the device memory.
  Result<DonorShutdown> run();
  // Safe to call from a signal handler or any thread.
  void request_stop();

  const std::string& socket_path() const;
  std::uint64_t bytes() const;  // device memory served, all components

 private:
  struct Impl;
  explicit Donor(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

struct DonorTierOptions {
  std::string socket_dir;  // empty: as DonorOptions::socket_dir
  // Tensors this consumer will write: mapped, then copied into memory of its own.
  std::vector<std::string> copy_on_attach;
  // The complete layout the consumer expects after post-load (dtypes, shapes, strides, alias
  // groups), e.g. that of a model it binds into. Absent: the names, dtypes, element counts and
  // alias groups are checked against plan.expected (post-load may reshape or restride).
  std::optional<ExpectedLayout> expected_prepared;
  // The names of the derived buffers the consumer expects; empty: whatever the donor built.
  std::vector<std::string> expected_derived;
  // No fallback: a missing donor, a refused peer or a mismatch fails the load (tests that must
  // prove the fast path ran) instead of passing to the next tier.
  bool required = false;
  std::chrono::milliseconds timeout{std::chrono::seconds(10)};  // for each answer of the donor
};
// The tier to put in front of the snapshot tier: attaches the donor of plan.device's GPU.
SNAPCACHE_API std::shared_ptr<Tier> donor_tier(DonorTierOptions options = {});

struct DonorComponentInfo {
  std::string component;
  std::string key_id;  // donor_key_id
  DonorKey key;
  std::uint64_t bytes = 0;
  std::size_t tensors = 0;
  std::size_t consumers = 0;
  std::string fingerprint;  // XXH3-64 of the served bytes when serving began, 16 hex digits
};
struct DonorInfo {
  std::string socket;
  int pid = 0;
  std::string gpu_uuid;
  std::uint64_t bytes = 0;
  std::vector<DonorComponentInfo> components;
  std::string error;  // set when this socket did not answer (a stale socket, another user's)
};
// Every donor socket in the directory, asked for its components (those that do not answer are
// listed with the reason).
SNAPCACHE_API Result<std::vector<DonorInfo>> list_donors(const std::string& socket_dir = {});

}  // namespace snapcache
