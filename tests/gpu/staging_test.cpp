// The upload engine's host half, on the CPU: the staging plan (units of whole checksum chunks,
// pending layout conversions transposed on the way, every chunk checked) run into host memory by
// an uploader that declares what the engine declares. With it, load_model leaves the demo's
// layout conversions pending exactly as it does for the CUDA engine, so these tests prove the
// deferral, the staged transposes and the byte-for-byte check without a GPU; the GPU tests run
// the same loads through the real engine.
#include <ATen/Context.h>
#include <ATen/Functions.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "support/demo_fixture.h"
#include "gpu/pinned_pool.h"
#include "gpu/staging.h"
#include "support/host_staging.h"
#include "support/page_cache.h"
#include "snapcache/extend/file_system.h"
#include "snapcache/extend/gpu_upload.h"
#include "snapcache/extend/host_storage.h"
#include "snapcache/extend/post_load.h"
#include "snapcache/extend/store_tensors.h"
#include "snapcache/extend/tier.h"
#include "snapcache/extend/uploader.h"
#include "snapcache/key.h"
#include "snapcache/maintenance.h"
#include "snapcache/manifest.h"
#include "snapcache/text.h"
#include "support/fault_injection.h"
#include "support/rotten_file.h"
#include "util/align.h"
#include "util/hash.h"

using namespace snapcache;
using test::HostSink;
using test::HostStagingUploader;
using test::drop_from_page_cache;
using test::kBufferBytes;
using test::resident_share_of;

namespace {

// Says the device ran out of memory, as the engine would, after seeing the pending conversions.
class FailingConverter final : public Uploader {
 public:
  std::string name() const override { return "failing converter"; }
  UploaderTraits traits(c10::Device) const override { return {.converts_layouts = true}; }
  Result<Uploaded> upload(const NamedTensors&, const HostStorages& host, c10::Device) override {
    for (const HostStorage& s : host.storages) pending += s.pending.has_value();
    return Status(StatusCode::no_space, "device out of memory");
  }
  int pending = 0;
};

// Hashes the bytes of every tensor it sees: a user method that reads tensors it does not name.
class ReadingMethod final : public PostLoadMethod {
 public:
  std::string name() const override { return "reading"; }
  std::vector<std::string> targets(const NamedTensors&) const override { return {}; }
  Status apply(NamedTensors& tensors) const override {
    seen.clear();
    for (const auto& [n, t] : tensors) {
      at::Tensor c = t.contiguous();
      seen[n] = util::xxh3_64(c.data_ptr(), static_cast<std::size_t>(c.numel()) * c.element_size());
    }
    return Status::ok();
  }
  mutable std::map<std::string, std::uint64_t> seen;
};

// The snapshot tier, serving its data files as read after bit rot under unchanged file identities:
// a byte of each file's last chunk reads flipped, and the checksums are the manifest's.
class RottenSnapshotTier final : public Tier {
 public:
  std::string name() const override { return "snapshot"; }
  Result<TierAnswer> serve(LoadContext& load) override {
    auto answer = inner_->serve(load);
    if (!answer || answer->outcome != TierOutcome::served) return answer;
    std::map<const StoredFile*, std::shared_ptr<const StoredFile>> rotten;  // one per file, as served
    for (HostStorage& s : answer->storages.storages) {
      if (!s.file) continue;
      auto& r = rotten[s.file->file.get()];
      if (!r) r = std::make_shared<test::RottenFile>(s.file->file, s.file->file->size() - 1);
      s.file->file = r;
    }
    ++served;
    return answer;
  }
  Kept keep(LoadContext& load, const NamedTensors& tensors) override { return inner_->keep(load, tensors); }
  std::string damaged(LoadContext& load, const std::string& entry_id, const Status& why) override {
    return inner_->damaged(load, entry_id, why);
  }
  int served = 0;

 private:
  std::shared_ptr<Tier> inner_ = snapshot_tier();
};

struct StagingFixture : test::DemoFixture {
  StagingFixture() {
    config.hidden = 1024;  // conversions of 1 MiB and more are left pending
    config.layers = 2;
    REQUIRE(demo::write_checkpoint(config, checkpoint).is_ok());
  }
  LoadPlan plan_with(std::shared_ptr<Uploader> uploader) const {
    LoadPlan p = plan();
    p.uploader = std::move(uploader);
    return p;
  }
  // Loads `p` cold into `store`, waits for its publication, and returns the entry's one data file.
  std::filesystem::path publish(Store& store, const LoadPlan& p) const {
    auto cold = load_model(&store, p);
    REQUIRE(cold.is_ok());
    REQUIRE(cold->publication.wait().outcome() == std::string_view("published"));
    const std::vector<std::filesystem::path> files = test::data_files_under(dir / "cache");
    REQUIRE(files.size() == 1);
    return files[0];
  }
  NamedTensors reference_weights() const {
    auto m = load_model(nullptr, plan());
    REQUIRE(m.is_ok());
    return m->weights;
  }
};

void require_identical(const NamedTensors& got, const NamedTensors& want) {
  REQUIRE(got.size() == want.size());
  for (const auto& [name, w] : want) {
    const at::Tensor& g = test::tensor_named(got, name);
    INFO(name);
    REQUIRE(g.scalar_type() == w.scalar_type());
    REQUIRE(g.sizes() == w.sizes());
    REQUIRE(g.strides() == w.strides());
    REQUIRE(g.storage_offset() == w.storage_offset());
    REQUIRE(at::equal(g.contiguous().view(at::kByte), w.contiguous().view(at::kByte)));  // bit for bit
  }
}

}  // namespace

TEST_CASE("staged loads leave conversions pending and give the reference's bytes, cold and warm", "[staging]") {
  StagingFixture f;
  const NamedTensors reference = f.reference_weights();
  auto store = f.store();

  auto engine = std::make_shared<HostStagingUploader>();
  auto cold = load_model(store.get(), f.plan_with(engine));
  REQUIRE(cold.is_ok());
  REQUIRE(cold->report.path == LoadPath::miss);
  CHECK(engine->pending >= 4);  // mlp.up (int8) and adaln (fp16) of both layers: sources in memory
  require_identical(cold->weights, reference);

  engine = std::make_shared<HostStagingUploader>();
  auto warm = load_model(store.get(), f.plan_with(engine));
  REQUIRE(warm.is_ok());
  REQUIRE(warm->report.path == LoadPath::hit);
  CHECK(engine->pending >= 4);  // now transposed from the data file as it is read
  CHECK(engine->units >= 3);    // the data file spans several staging buffers
  require_identical(warm->weights, reference);
  // Every chunk of the entry passed through the check.
  CHECK(warm->report.bytes_checked == engine->bytes_checked);
  CHECK(warm->report.bytes_checked > 0);
  CHECK(warm->report.bytes_trusted == 0);
  CHECK(warm->report.integrity().find("every byte") != std::string::npos);
}

TEST_CASE("a load says how much of its entry was not in the page cache and came from the disk", "[staging][disk]") {
  StagingFixture f;
  auto store = f.store();
  const std::vector<std::filesystem::path> files{
      f.publish(*store, f.plan_with(std::make_shared<HostStagingUploader>()))};
  const std::uint64_t size = std::filesystem::file_size(files[0]);
  REQUIRE(size > (8u << 20));  // enough pages that a sample of 1024 stands for a half

  // Every page in the page cache (the publication wrote them): nothing from the disk.
  auto warm = load_model(store.get(), f.plan_with(std::make_shared<HostStagingUploader>()));
  REQUIRE(warm.is_ok());
  REQUIRE(warm->report.path == LoadPath::hit);
  CHECK(warm->report.bytes_from_disk == 0);
  CHECK(warm->report.page_cache().empty());
  CHECK(warm->report.summary().find("page cache") == std::string::npos);

  // The file's second half dropped: the report says about half came from the disk, and how long
  // the stages that read the entry took (the read-ahead of the methods' tensors, the upload).
  if (drop_from_page_cache(files[0], size / 2, 0) > 0.75) {
    WARN("SKIPPED: this file system keeps its files in memory (tmpfs)");
    return;
  }
  auto half = load_model(store.get(), f.plan_with(std::make_shared<HostStagingUploader>()));
  REQUIRE(half.is_ok());
  REQUIRE(half->report.path == LoadPath::hit);
  const double share = static_cast<double>(half->report.bytes_from_disk) / static_cast<double>(size);
  CHECK(share > 0.45);
  CHECK(share < 0.55);
  const std::string said = half->report.page_cache();
  INFO(said);
  // A CPU load records no upload (the host tensors are handed out as they are), so no stage's rate
  // is said: the read-ahead's time, and where the rest of the pages come from.
  CHECK(said.starts_with(format_size(half->report.bytes_from_disk) + " of " + format_size(size) +
                         " not in the page cache: read from the disk as the tensors handed out are first used"));
  CHECK(said.find("GB/s") == std::string::npos);
  CHECK(half->report.summary().find(said) != std::string::npos);

  // The whole file dropped, and a load that reads through its mapping (the plain copy): all of it.
  REQUIRE(drop_from_page_cache(files[0], 0, 0) < 0.25);
  auto plain = load_model(store.get(), f.plan());
  REQUIRE(plain.is_ok());
  REQUIRE(plain->report.path == LoadPath::hit);
  CHECK(plain->report.bytes_from_disk > size * 9 / 10);
  CHECK(plain->report.bytes_from_disk <= size);
}

namespace {

// The share of a tensor's pages in the page cache when the method runs, asked of the kernel for
// every page: a method that names the tensors whose names end with `suffix` (or, not promising to
// read only its targets, may read anything) and reads nothing itself.
class ResidencyMethod final : public PostLoadMethod {
 public:
  explicit ResidencyMethod(bool reads_only_targets, std::string suffix = "attn.qkv.weight")
      : reads_only_targets_(reads_only_targets), suffix_(std::move(suffix)) {}
  std::string name() const override { return "residency"; }
  std::vector<std::string> targets(const NamedTensors& tensors) const override {
    std::vector<std::string> names;
    for (const auto& [n, t] : tensors)
      if (n.ends_with(suffix_)) names.push_back(n);
    return names;
  }
  MethodProperties properties() const override {
    MethodProperties p;
    p.writes = PostLoadWrites::new_storages_only;
    p.reads_only_targets = reads_only_targets_;
    return p;
  }
  Status apply(NamedTensors& tensors) const override {
    const auto page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
    const auto wanted = targets(tensors);
    least = 1;
    for (const auto& [n, t] : tensors) {
      if (std::find(wanted.begin(), wanted.end(), n) == wanted.end()) continue;
      const auto begin = reinterpret_cast<std::uintptr_t>(t.data_ptr()) / page * page;
      const auto end = reinterpret_cast<std::uintptr_t>(t.data_ptr()) + t.numel() * t.element_size();
      std::vector<unsigned char> in_core((end - begin + page - 1) / page);
      if (::mincore(reinterpret_cast<void*>(begin), end - begin, in_core.data()) != 0)
        return Status::from_errno(errno, "mincore");
      const auto resident = std::count_if(in_core.begin(), in_core.end(), [](unsigned char c) { return c & 1; });
      least = std::min(least, static_cast<double>(resident) / static_cast<double>(in_core.size()));
      bytes += static_cast<std::uint64_t>(t.numel() * t.element_size());
    }
    return Status::ok();
  }
  mutable double least = 0;
  mutable std::uint64_t bytes = 0;

 private:
  bool reads_only_targets_;
  std::string suffix_;
};

std::uint64_t read_ahead_bytes(const LoadReport& report) {
  for (const StageTime& s : report.stages)
    if (s.stage == "read-ahead") return s.bytes;
  return 0;
}

}  // namespace

TEST_CASE("with the entry off the page cache the tensors the post-load methods read are read ahead", "[staging][disk]") {
  StagingFixture f;
  auto store = f.store();
  auto residency = std::make_shared<ResidencyMethod>(true);
  LoadPlan p = f.plan_with(std::make_shared<HostStagingUploader>());
  p.post_load.push_back(residency);
  const std::vector<std::filesystem::path> files{f.publish(*store, p)};
  const std::uint64_t size = std::filesystem::file_size(files[0]);

  // In the page cache: nothing read ahead.
  auto warm = load_model(store.get(), p);
  REQUIRE(warm.is_ok());
  REQUIRE(warm->report.path == LoadPath::hit);
  CHECK(read_ahead_bytes(warm->report) == 0);
  CHECK(residency->least == 1.0);

  // Dropped: the method finds every page of its targets in the page cache, read ahead, and only
  // its targets (the demo's methods name the rest but for the norms and the fused QKV weights).
  if (drop_from_page_cache(files[0], 0, 0) > 0.25) {
    WARN("SKIPPED: this file system keeps its files in memory (tmpfs)");
    return;
  }
  residency->bytes = 0;
  auto dropped = load_model(store.get(), p);
  REQUIRE(dropped.is_ok());
  REQUIRE(dropped->report.path == LoadPath::hit);
  CHECK(dropped->report.bytes_from_disk > size * 9 / 10);
  CHECK(residency->least == 1.0);
  const std::uint64_t ahead = read_ahead_bytes(dropped->report);
  CHECK(ahead >= residency->bytes);
  CHECK(ahead < size);
  CHECK(dropped->report.table().find("read-ahead") != std::string::npos);

  // A method that may read any tensor: the whole entry is read ahead.
  LoadPlan any = f.plan_with(std::make_shared<HostStagingUploader>());
  auto reads_any = std::make_shared<ResidencyMethod>(false);
  any.post_load.push_back(reads_any);
  REQUIRE(drop_from_page_cache(files[0], 0, 0) < 0.25);
  auto all = load_model(store.get(), any);
  REQUIRE(all.is_ok());
  REQUIRE(all->report.path == LoadPath::hit);
  CHECK(reads_any->least == 1.0);
  CHECK(read_ahead_bytes(all->report) > size * 9 / 10);
}

TEST_CASE("with the checkpoint off the page cache a cold load reads ahead what the post-load methods read",
          "[staging][disk][checkpoint]") {
  StagingFixture f;
  // The norms the loader hands on as the checkpoint's mapping holds them (so marked as the file's).
  auto residency = std::make_shared<ResidencyMethod>(true, "norm2.weight");
  LoadPlan p = demo::with_whole_loader(f.plan_with(std::make_shared<HostStagingUploader>()));
  p.post_load.push_back(residency);
  const std::uint64_t size = std::filesystem::file_size(f.checkpoint);

  // Just written, in the page cache: nothing read ahead.
  auto cached = load_model(nullptr, p);
  REQUIRE(cached.is_ok());
  CHECK(read_ahead_bytes(cached->report) == 0);
  CHECK(residency->least == 1.0);

  if (drop_from_page_cache(f.checkpoint, 0, 0) > 0.25) {
    WARN("SKIPPED: this file system keeps its files in memory (tmpfs)");
    return;
  }
  residency->bytes = 0;
  auto dropped = load_model(nullptr, p);
  REQUIRE(dropped.is_ok());
  CHECK(dropped->report.bytes_from_disk > size * 9 / 10);  // asked before the loader read anything
  CHECK(residency->least == 1.0);
  const std::uint64_t ahead = read_ahead_bytes(dropped->report);
  CHECK(ahead >= residency->bytes);
  CHECK(residency->bytes > 0);
  CHECK(ahead < size / 4);  // the norms' pages, not the checkpoint
}

TEST_CASE("a load through the plain copy is trusted by identity, and says so", "[staging]") {
  StagingFixture f;
  auto store = f.store();
  LoadPlan p = f.plan();
  REQUIRE(load_model(store.get(), p).is_ok());
  auto warm = load_model(store.get(), p);
  REQUIRE(warm.is_ok());
  REQUIRE(warm->report.path == LoadPath::hit);
  CHECK(warm->report.bytes_checked == 0);
  CHECK(warm->report.bytes_trusted > 0);
  CHECK(warm->report.integrity().find("trusted by file identity") != std::string::npos);
  CHECK(warm->report.summary().find("trusted by file identity") != std::string::npos);
}

TEST_CASE("a method that reads tensors it does not name sees the converted bytes", "[staging]") {
  StagingFixture f;
  auto reading = std::make_shared<ReadingMethod>();
  LoadPlan p = f.plan();
  p.post_load.push_back(reading);
  REQUIRE(load_model(nullptr, p).is_ok());
  const auto want = reading->seen;

  auto engine = std::make_shared<HostStagingUploader>();
  LoadPlan staged = f.plan_with(engine);
  staged.post_load.push_back(reading);
  REQUIRE(load_model(nullptr, staged).is_ok());
  CHECK(engine->pending == 0);  // written for the method, so nothing was left to the uploader
  CHECK(reading->seen == want);
}

TEST_CASE("when the engine fails, pending conversions are written and the plain copy uploads", "[staging]") {
  StagingFixture f;
  const NamedTensors reference = f.reference_weights();
  auto failing = std::make_shared<FailingConverter>();
  auto m = load_model(nullptr, f.plan_with(failing));
  REQUIRE(m.is_ok());
  CHECK(failing->pending >= 4);
  const auto& stages = m->report.stages;
  // The engine's stage failed with its error; the plain copy then hands a CPU load's tensors out as
  // they are, which records no stage.
  CHECK(std::any_of(stages.begin(), stages.end(), [](const StageTime& s) { return s.stage == "upload" && !s.error.empty(); }));
  CHECK_FALSE(std::any_of(stages.begin(), stages.end(), [](const StageTime& s) { return s.stage == "upload (fallback)"; }));
  CHECK(m->report.reason.find("device out of memory") != std::string::npos);
  require_identical(m->weights, reference);
}

TEST_CASE("bytes that differ from their checksums while staging: quarantined, loaded from the checkpoint, rebuilt",
          "[staging]") {
  StagingFixture f;
  const NamedTensors reference = f.reference_weights();
  auto store = f.store();
  auto rotten = std::make_shared<RottenSnapshotTier>();
  auto engine = std::make_shared<HostStagingUploader>();
  LoadPlan p = f.plan_with(engine);
  p.tiers = {rotten, ordinary_tier()};
  auto cold = load_model(store.get(), p);
  REQUIRE(cold.is_ok());
  REQUIRE(cold->report.path == LoadPath::miss);
  const std::string first_entry = cold->report.entry_id;

  auto loaded = load_model(store.get(), p);
  REQUIRE(loaded.is_ok());
  CHECK(rotten->served == 1);  // the damaged entry was served once, then quarantined
  CHECK(loaded->report.path == LoadPath::fallback);
  CHECK(loaded->report.reason.find("failed its checksums while staging") != std::string::npos);
  CHECK(loaded->report.reason.find("was quarantined") != std::string::npos);
  require_identical(loaded->weights, reference);
  // The retry published a new entry: the next load hits it (and finds it damaged again, because
  // this tier rots every entry it serves; a real disk would not).
  wait_for_publications();
  auto entries = list_entries(*store);
  REQUIRE(entries.is_ok());
  CHECK(entries->size() == 1);
}

namespace {

// Runs a plan into host memory; the bytes of storage `i` start at plan.storage_offsets[i].
std::vector<std::byte> run_into_host(const gpu::StagingPlan& plan, std::uint64_t buffer_bytes) {
  std::vector<std::byte> out(plan.destination_bytes), read(buffer_bytes);
  HostSink sink(out.data());
  for (const auto& unit : plan.units) REQUIRE(gpu::stage_unit(plan, unit, read.data(), sink).is_ok());
  return out;
}

void require_transposed(const std::vector<std::byte>& out, const gpu::StagingPlan& plan, const NamedTensors& tensors) {
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    INFO(tensors[i].first);
    at::Tensor want = tensors[i].second.t().contiguous();
    REQUIRE(std::memcmp(out.data() + plan.storage_offsets[i], want.data_ptr(),
                        static_cast<std::size_t>(want.numel()) * want.element_size()) == 0);
  }
}

// Matrices published as one entry and looked up again: their storages as the snapshot tier serves
// them, each naming where it lies in the data file.
struct PublishedMatrices {
  test::TempDir dir;
  std::shared_ptr<Store> store;
  LookupOutcome hit;
  NamedTensors mapped;
  HostStorages served;
  explicit PublishedMatrices(const NamedTensors& matrices, int key_seed,
                             std::shared_ptr<FileSystem> fs = posix_file_system())
      : store(*Store::open(test::test_config(dir / "cache"), std::move(fs))) {
    const Key key = test::test_key(key_seed);
    REQUIRE(publish_tensors(*store, key, matrices).result == PublishResult::published);
    hit = store->lookup(key);
    REQUIRE(hit.result == LookupResult::hit);
    mapped = tensors_of(hit.snapshot);
    auto storages = snapshot_storages(hit.snapshot, mapped);
    REQUIRE(storages.is_ok());
    served = std::move(*storages);
  }
  const DataFile& file() const { return hit.snapshot->manifest().files.at(0); }
};

}  // namespace

TEST_CASE("staged transposes of odd shapes equal t().contiguous(), from memory and from a data file", "[staging]") {
  const NamedTensors matrices = test::odd_matrices();

  SECTION("from memory, a few rows per unit") {
    const std::uint64_t buffer = 64 << 10;
    auto plan = gpu::plan_staging(test::pending_transposes(matrices), buffer);
    REQUIRE(plan.is_ok());
    CHECK(plan->units.size() > 100);
    CHECK(plan->bytes_checked == 0);
    require_transposed(run_into_host(*plan, buffer), *plan, matrices);
  }

  SECTION("from a published data file, checked chunk by chunk") {
    PublishedMatrices published(matrices, 7);
    const Manifest& m = published.hit.snapshot->manifest();
    REQUIRE(m.files.size() == 1);
    REQUIRE(m.files[0].size > m.files[0].chunk_size);  // rows straddle checksum chunks
    const NamedTensors& mapped = published.mapped;
    HostStorages& served = published.served;
    const std::uint64_t buffer = 16 << 20;
    auto plan = gpu::plan_staging(test::pending_transposes(mapped, &served), buffer);
    REQUIRE(plan.is_ok());
    CHECK(plan->units.size() >= 2);
    CHECK(plan->bytes_checked == m.files[0].size);
    require_transposed(run_into_host(*plan, buffer), *plan, matrices);

    // A byte of the file that differs from what its checksum says fails the unit, naming the chunk.
    auto rotten = std::make_shared<test::RottenFile>(served.storages[0].file->file, m.files[0].chunk_size + 5);
    for (HostStorage& s : served.storages) s.file->file = rotten;
    auto bad = gpu::plan_staging(test::pending_transposes(mapped, &served), buffer);
    REQUIRE(bad.is_ok());
    std::vector<std::byte> out(bad->destination_bytes), read(buffer);
    HostSink sink(out.data());
    Status failed = Status::ok();
    for (const auto& unit : bad->units)
      if (Status st = gpu::stage_unit(*bad, unit, read.data(), sink); !st) failed = st;
    CHECK(failed.code() == StatusCode::damaged);
    // The store's words for a damaged chunk (store::check_chunk): the file, the chunk, its bytes
    // and the tensors in it.
    INFO(failed.message());
    CHECK(failed.message().find("data-0000.bin chunk 1 (bytes ") != std::string::npos);
    CHECK(failed.message().find("failed its checksum (tensors ") != std::string::npos);
  }

  SECTION("a pending conversion whose source is not a contiguous matrix is refused, with the reason") {
    // The source tensor says its shape: a transposed view would be read as the wrong matrix.
    HostStorages host = test::pending_transposes(matrices);
    const at::Tensor& first = matrices.front().second;
    host.storages.front().pending->source = first.t();
    auto plan = gpu::plan_staging(host, 64 << 10);
    CHECK(plan.status().code() == StatusCode::invalid_argument);
    CHECK(plan.status().message().find("not a contiguous two-dimensional CPU tensor") != std::string::npos);
  }

  SECTION("a matrix row too long for the buffer is refused, not split") {
    auto plan = gpu::plan_staging(test::pending_transposes(matrices), 4 << 10);
    CHECK(plan.status().code() == StatusCode::unsupported);
  }

  SECTION("a buffer too small for a checksum chunk and a row's tail grows to fit when asked") {
    // The engine asks for buffers that grow: a buffer of exactly one chunk leaves no room for the
    // rows a transpose reads past it, which refused the load (and the per-storage copy took 17x as
    // long on the GPU machine).
    PublishedMatrices published(matrices, 9);
    const std::uint64_t chunk = published.file().chunk_size;
    const HostStorages pending = test::pending_transposes(published.mapped, &published.served);
    CHECK(gpu::plan_staging(pending, chunk).status().code() == StatusCode::unsupported);
    auto grown = gpu::plan_staging(pending, chunk, gpu::BufferFit::grow);
    REQUIRE(grown.is_ok());
    CHECK(grown->buffer_bytes > chunk);
    CHECK(grown->buffer_bytes % gpu::kBufferGranule == 0);
    CHECK(grown->buffer_bytes - chunk <= gpu::kBufferGranule);  // a chunk and the tail, no more
    CHECK(grown->bytes_checked == published.file().size);
    require_transposed(run_into_host(*grown, grown->buffer_bytes), *grown, matrices);
    // A buffer that fits is taken as it is.
    auto as_asked = gpu::plan_staging(pending, 16 << 20, gpu::BufferFit::grow);
    REQUIRE(as_asked.is_ok());
    CHECK(as_asked->buffer_bytes == (16u << 20));
  }
}

TEST_CASE("a stored file reads whole chunks checking each piece as it arrives, and names a chunk changed on disk",
          "[staging]") {
  const NamedTensors matrices = test::odd_matrices();
  PublishedMatrices published(matrices, 10);
  const DataFile& record = published.file();
  const std::shared_ptr<const StoredFile>& file = published.served.storages.at(0).file->file;
  const std::uint64_t chunk = record.chunk_size;
  // Several chunks, the last one short, each read in several pieces.
  REQUIRE(record.size > chunk);
  REQUIRE(record.size % chunk != 0);
  REQUIRE(chunk > (1u << 20));
  std::vector<std::byte> plain(record.size), fused(record.size);
  REQUIRE(file->read(plain.data(), 0, record.size).is_ok());
  REQUIRE(file->read_checked(fused.data(), 0, record.size).is_ok());
  CHECK((plain == fused));  // not decomposed: Catch cannot print bytes
  std::vector<std::byte> tail(record.size - chunk);
  REQUIRE(file->read_checked(tail.data(), chunk, record.size).is_ok());
  CHECK(std::memcmp(tail.data(), plain.data() + chunk, tail.size()) == 0);

  // Only whole chunks.
  CHECK(file->read_checked(fused.data(), 1, record.size).code() == StatusCode::invalid_argument);
  CHECK(file->read_checked(fused.data(), 0, chunk + 1).code() == StatusCode::invalid_argument);
  CHECK(file->read_checked(fused.data(), 0, record.size + 1).code() == StatusCode::invalid_argument);

  // A byte changed on disk under the same file identity (bit rot): the chunk that holds it fails,
  // named with its tensors, read in pieces or whole; the chunk before it still reads clean.
  test::flip_byte(file->name(), chunk + 5);
  const Status damaged = file->read_checked(fused.data(), 0, record.size);
  CHECK(damaged.code() == StatusCode::damaged);
  INFO(damaged.message());
  CHECK(damaged.message().find("data-0000.bin chunk 1 (bytes ") != std::string::npos);
  CHECK(damaged.message().find("failed its checksum (tensors ") != std::string::npos);
  REQUIRE(file->read(plain.data(), 0, record.size).is_ok());
  CHECK(file->check(0, record.size, plain.data()).code() == StatusCode::damaged);
  CHECK(file->read_checked(fused.data(), 0, chunk).is_ok());
}

namespace {

// A buffer aligned as the engine's pinned buffers are (huge pages), with room for a read around
// the page cache to reach past the end of the file.
struct AlignedBuffer {
  explicit AlignedBuffer(std::uint64_t bytes)
      : data(static_cast<std::byte*>(std::aligned_alloc(kUncachedAlignment, util::align_up(bytes, kUncachedAlignment)))) {
    REQUIRE(data != nullptr);
  }
  ~AlignedBuffer() { std::free(data); }
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;
  std::byte* data;
};

// Where a publication writes, so that a slow disk slows it and not the records a load keeps (a
// miss's, the counters).
std::string publications(const Store& store) { return store.config().directory + "/tmp/"; }

}  // namespace

TEST_CASE("a cold load returns while its snapshot is published in the background", "[staging][publication]") {
  StagingFixture f;
  const NamedTensors reference = f.reference_weights();
  auto slow = std::make_shared<FaultInjectingFileSystem>();
  auto store = f.store(slow);
  slow->slow_writes(std::chrono::milliseconds(20), publications(*store));  // publication takes a while

  // Held until the cold load has returned: on a busy machine (CI under the sanitizers, two cores)
  // the delayed publication could otherwise end before the load's own work does.
  slow->hold_writes();
  auto cold = load_model(store.get(), f.plan_with(std::make_shared<HostStagingUploader>()));
  REQUIRE(cold.is_ok());
  REQUIRE(cold->report.path == LoadPath::miss);
  CHECK(cold->publication.pending());     // returned before the publication ended
  CHECK_FALSE(cold->report.publish.has_value());
  slow->release_writes();
  require_identical(cold->weights, reference);
  const PublicationReport published = cold->publication.wait();
  CHECK(published.outcome() == std::string_view("published"));
  CHECK(slow->calls(FsOp::pwrite) > 0);

  auto warm = load_model(store.get(), f.plan_with(std::make_shared<HostStagingUploader>()));
  REQUIRE(warm.is_ok());
  CHECK(warm->report.path == LoadPath::hit);
  CHECK(warm->report.entry_id == published.entry_id);
  require_identical(warm->weights, reference);
}

TEST_CASE("a load right after a cold one in the same process waits for its publication and hits",
          "[staging][publication]") {
  StagingFixture f;
  auto slow = std::make_shared<FaultInjectingFileSystem>();
  auto store = f.store(slow);
  slow->slow_writes(std::chrono::milliseconds(20), publications(*store));
  // Held until the cold load has returned: on a machine with many cores the whole publication
  // could otherwise end first.
  slow->hold_writes();
  auto cold = load_model(store.get(), f.plan_with(std::make_shared<HostStagingUploader>()));
  REQUIRE(cold.is_ok());
  REQUIRE(cold->publication.pending());
  slow->release_writes();
  auto next = load_model(store.get(), f.plan_with(std::make_shared<HostStagingUploader>()));
  REQUIRE(next.is_ok());
  CHECK(next->report.path == LoadPath::hit);
  CHECK_FALSE(cold->publication.pending());
}

TEST_CASE("bytes being published never change: an in-place method writes what the publication copied",
          "[staging][publication]") {
  StagingFixture f;
  auto plan_with_method = [&](std::shared_ptr<Uploader> uploader) {
    LoadPlan p = f.plan_with(std::move(uploader));
    p.post_load.push_back(test::double_in_place("final_norm.weight"));
    return p;
  };
  auto reference = load_model(nullptr, plan_with_method(nullptr));
  REQUIRE(reference.is_ok());
  auto slow = std::make_shared<FaultInjectingFileSystem>();
  // Slow enough that, without the wait, the doubling would land before final_norm.weight (the
  // last storage) is written, and the entry would hold doubled weights, doubled again when served.
  auto store = f.store(slow);
  slow->slow_writes(std::chrono::milliseconds(20), publications(*store));
  auto cold = load_model(store.get(), plan_with_method(std::make_shared<HostStagingUploader>()));
  REQUIRE(cold.is_ok());
  // A CPU load whose method writes in place publishes a copy: the method did not wait for it.
  const auto& stages = cold->report.stages;
  CHECK(std::none_of(stages.begin(), stages.end(),
                     [](const StageTime& s) { return s.stage.starts_with("publish (wait:"); }));
  CHECK(cold->publication.wait().outcome() == std::string_view("published"));
  require_identical(cold->weights, reference->weights);
  auto warm = load_model(store.get(), plan_with_method(std::make_shared<HostStagingUploader>()));
  REQUIRE(warm.is_ok());
  REQUIRE(warm->report.path == LoadPath::hit);
  require_identical(warm->weights, reference->weights);
}

TEST_CASE("without a CUDA device the engine copies plainly on the CPU and its CUDA calls fail with the reason",
          "[staging]") {
  const NamedTensors host = test::odd_matrices();
  auto storages = describe_host_storages(host);
  REQUIRE(storages.is_ok());
  auto engine = staged_uploader();
  // On the CPU the engine is the plain copy.
  auto on_cpu = engine->upload(host, *storages, c10::Device(c10::kCPU));
  REQUIRE(on_cpu.is_ok());
  REQUIRE(on_cpu->tensors.size() == host.size());
  for (std::size_t i = 0; i < host.size(); ++i) CHECK(demo::identical(on_cpu->tensors[i].second, host[i].second));
  // Pending conversions are the engine's to write only on a CUDA device.
  auto pending = engine->upload(host, test::pending_transposes(host), c10::Device(c10::kCPU));
  REQUIRE_FALSE(pending.is_ok());
  CHECK(pending.status().code() == StatusCode::invalid_argument);

  if (at::hasCUDA()) return;  // the GPU tests run the engine on the device
  // No device: the device allocation fails, and pinning fails, each with CUDA's reason.
  auto on_cuda = engine->upload(host, *storages, c10::Device(c10::kCUDA, 0));
  REQUIRE_FALSE(on_cuda.is_ok());
  CHECK(on_cuda.status().message().find("device allocation of") != std::string::npos);
  auto buffer = gpu::PinnedPool::shared(2 << 20, 1 << 20)->take();
  REQUIRE_FALSE(buffer.is_ok());
  CHECK(buffer.status().code() == StatusCode::no_space);
  CHECK(buffer.status().message().find("pinning a 1048576-byte staging buffer failed") != std::string::npos);
}
