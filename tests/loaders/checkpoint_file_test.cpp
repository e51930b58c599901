// A load from the checkpoint: which tensors a loader hands on untouched from a SafetensorsFile's
// mapping (marked as the file's: the read-ahead reads them there, and an uploader is told), the
// checkpoint read ahead of the loader, and the engine's upload, which takes the loader's bytes from
// memory (a checkpoint has no checksums to check). Real files on this
// machine's file system, the kernel's own page tables (/proc/self/pagemap), and the engine's host
// half (support/host_staging.h) as the uploader.
#include <ATen/Functions.h>

#include <cstring>
#include <filesystem>
#include <functional>

#include "support/demo_fixture.h"
#include "gpu/staging.h"
#include "loaders/checkpoint_file.h"
#include "support/fault_injection.h"
#include "support/host_staging.h"
#include "support/page_cache.h"
#include "snapcache/extend/file_system.h"
#include "snapcache/extend/host_storage.h"
#include "snapcache/extend/store_tensors.h"
#include "snapcache/extend/tier.h"
#include "snapcache/safetensors.h"
#include "snapcache/sharding.h"
#include "util/page_map.h"

using namespace snapcache;
using test::HostStagingUploader;

namespace {

constexpr std::int64_t kPage = 4096;

// Four float tensors of 16 pages each (64 KiB apart in the file), and two more: what the tests map.
NamedTensors checkpoint_tensors() {
  NamedTensors t;
  for (const char* name : {"a", "b", "c", "d"})
    t.emplace_back(name, at::arange(16 * kPage / 4, at::kFloat).reshape({64, 256}).add(static_cast<double>(name[0])));
  t.emplace_back("small", at::arange(7, at::kFloat));
  t.emplace_back("wide", at::arange(64 * 512, at::kInt).reshape({64, 512}));
  return t;
}

// Where the file's data section begins: after the 8-byte header size and the header.
std::uint64_t data_start(const std::string& path) {
  std::uint64_t header = 0;
  FILE* f = std::fopen(path.c_str(), "rb");
  REQUIRE(f != nullptr);
  REQUIRE(std::fread(&header, 8, 1, f) == 1);
  std::fclose(f);
  return 8 + header;
}

bool same_bytes(const at::Tensor& a, const at::Tensor& b) {
  return a.scalar_type() == b.scalar_type() && a.sizes() == b.sizes() &&
         at::equal(a.contiguous().view(at::kByte), b.contiguous().view(at::kByte));
}

HostStorage& storage_of(HostStorages& host, const NamedTensors& tensors, const std::string& name) {
  for (std::size_t i = 0; i < tensors.size(); ++i)
    if (tensors[i].first == name) return host.storages.at(host.storage_of.at(i));
  FAIL("no tensor " << name);
  return host.storages.front();
}

// A checkpoint of checkpoint_tensors() and a plan whose loader opens it through a file system that
// counts (and may fail) its reads, lets the test act on the file's tensors (`then`: write one, make
// the reads fail), and hands them on; loaded through the engine's host half.
struct LoaderOverFile {
  test::TempDir dir;
  std::string path = dir / "model.safetensors";
  NamedTensors original = checkpoint_tensors();
  std::shared_ptr<FaultInjectingFileSystem> fs = std::make_shared<FaultInjectingFileSystem>();
  std::shared_ptr<HostStagingUploader> engine = std::make_shared<HostStagingUploader>();

  LoaderOverFile() { REQUIRE(write_safetensors(path, original).is_ok()); }

  Result<LoadedModel> load(std::function<void(NamedTensors&)> then) {
    LoadPlan plan;
    plan.checkpoint_files = {path};
    plan.component = "checkpoint-staging";
    plan.source_identity = "checkpoint-staging-test-v1";
    plan.dtype = "float32";
    plan.device = c10::Device(c10::kCPU);
    plan.expected = *expected_layout_of(original);
    plan.uploader = engine;
    plan.ordinary_loader = [fs = fs, then](const LoadPlan& p) -> Result<NamedTensors> {
      auto file = SafetensorsFile::open(p.checkpoint_files[0], fs);
      if (!file) return file.status();
      NamedTensors out = (*file)->tensors();
      then(out);
      return out;
    };
    return load_model(nullptr, plan);
  }
};

}  // namespace

TEST_CASE("the kernel says which pages of a private file mapping this process wrote", "[checkpoint]") {
  test::TempDir dir;
  const std::string path = dir / "pages.bin";
  REQUIRE(write_safetensors(path, checkpoint_tensors()).is_ok());
  auto fs = posix_file_system();
  auto fd = fs->open(path, OpenMode::read);
  REQUIRE(fd.is_ok());
  const std::uint64_t size = std::filesystem::file_size(path);
  auto mapping = fs->map(fd->get(), size, MapMode::copy_on_write_private);
  REQUIRE(mapping.is_ok());
  const std::optional<util::PageMap> pages = util::PageMap::open();
  REQUIRE(pages.has_value());  // Linux with /proc: the machines snapcache runs on
  std::byte* base = mapping->data();

  CHECK(pages->copied_on_write(base, size) == false);  // never touched
  volatile std::byte sink{};
  for (std::uint64_t at = 0; at < size; at += kPage) sink = base[at];  // read: the page cache's pages
  (void)sink;
  CHECK(pages->copied_on_write(base, size) == false);

  base[5 * kPage + 100] = std::byte{1};  // one byte written: page 5 is now this process's copy
  CHECK(pages->copied_on_write(base, size) == true);
  CHECK(pages->copied_on_write(base + 5 * kPage, 1) == true);
  CHECK(pages->copied_on_write(base + 4 * kPage, kPage) == false);          // the page before
  CHECK(pages->copied_on_write(base + 6 * kPage, size - 6 * kPage) == false);  // every page after
  CHECK(pages->copied_on_write(base + 4 * kPage + 10, kPage) == true);      // ends in page 5
  CHECK(pages->copied_on_write(base + 6 * kPage - 1, 2) == true);           // the last byte of page 5
  CHECK(pages->copied_on_write(base, 0) == false);
}

TEST_CASE("only storages that lie untouched in a checkpoint's mapping are marked, where they lie in the file",
          "[checkpoint]") {
  test::TempDir dir;
  const std::string path = dir / "model.safetensors";
  const NamedTensors written = checkpoint_tensors();
  REQUIRE(write_safetensors(path, written).is_ok());
  auto file = SafetensorsFile::open(path);
  REQUIRE(file.is_ok());
  const std::uint64_t start = data_start(path);

  NamedTensors t;
  t.emplace_back("a", *(*file)->tensor("a"));                                  // as the file hands it out
  t.emplace_back("b", *shard(*(*file)->tensor("b"), ShardAxis::rows, 1, 2, "b"));  // a share of rows: a view
  at::Tensor c = *(*file)->tensor("c");
  c.narrow(0, 10, 10).add_(1);  // rows in its middle written: those pages are copied on write
  t.emplace_back("c", c);
  t.emplace_back("d", (*file)->tensor("d")->clone());                          // a copy in the heap
  t.emplace_back("wide", *shard(*(*file)->tensor("wide"), ShardAxis::columns, 0, 2, "wide"));  // copied
  auto host = describe_host_storages(t);
  REQUIRE(host.is_ok());
  const std::uint64_t marked = loaders::mark_checkpoint_storages(*host);

  const SafetensorsEntry* a = (*file)->find("a");
  const SafetensorsEntry* b = (*file)->find("b");
  HostStorage& sa = storage_of(*host, t, "a");
  HostStorage& sb = storage_of(*host, t, "b");
  REQUIRE(sa.file.has_value());
  CHECK(sa.file->offset == start + a->begin);
  REQUIRE(sb.file.has_value());
  CHECK(sb.file->offset == start + b->begin + (b->end - b->begin) / 2);  // rank 1 of 2: the second half
  CHECK_FALSE(storage_of(*host, t, "c").file.has_value());
  CHECK_FALSE(storage_of(*host, t, "d").file.has_value());
  CHECK_FALSE(storage_of(*host, t, "wide").file.has_value());
  CHECK(marked == sa.nbytes + sb.nbytes);

  // What the file holds there is the tensors' bytes, read through the FileSystem it was opened with.
  for (const char* name : {"a", "b"}) {
    HostStorage& s = storage_of(*host, t, name);
    at::Tensor read = at::empty({static_cast<std::int64_t>(s.nbytes)}, at::kByte);
    REQUIRE(s.file->file->read(static_cast<std::byte*>(read.data_ptr()), s.file->offset, s.nbytes).is_ok());
    CHECK(std::memcmp(read.data_ptr(), s.data, s.nbytes) == 0);
    CHECK(s.file->file->chunk_bytes() == 0);  // nothing of ours to check it against
  }
  CHECK(sa.file->file->name() == path);

  // A second file's tensors are found in their own mapping.
  const std::string other = dir / "other.safetensors";
  REQUIRE(write_safetensors(other, {{"x", at::ones({kPage}, at::kFloat)}}).is_ok());
  auto second = SafetensorsFile::open(other);
  REQUIRE(second.is_ok());
  auto host2 = describe_host_storages({{"x", *(*second)->tensor("x")}, {"a", t[0].second}});
  REQUIRE(host2.is_ok());
  CHECK(loaders::mark_checkpoint_storages(*host2) == 4 * kPage + sa.nbytes);  // x: 4,096 floats
  CHECK(host2->storages[0].file->file->name() == other);
  CHECK(host2->storages[1].file->file->name() == path);
}

TEST_CASE("a cold load uploads the loader's bytes exactly, from its memory, not from the checkpoint file",
          "[staging][checkpoint]") {
  for (int tp : {1, 2}) {
    for (bool streamed : {false, true}) {
      INFO("tp " << tp << (streamed ? ", streamed" : ", loader run whole"));
      test::DemoFixture f;
      f.config = test::small_dit_config(tp - 1, tp);
      f.config.hidden = 1024;  // large enough for several staging units
      REQUIRE(demo::write_checkpoint(f.config, f.checkpoint).is_ok());
      const LoadedModel reference = f.reference();  // without a cache: the loader's tensors, on the CPU

      auto engine = std::make_shared<HostStagingUploader>();
      LoadPlan plan = streamed ? f.plan() : demo::with_whole_loader(f.plan());
      plan.uploader = engine;
      auto store = f.store();
      auto cold = load_model(store.get(), plan);
      REQUIRE(cold.is_ok());
      CHECK(cold->report.path == LoadPath::miss);
      CHECK(cold->publication.wait().outcome() == std::string_view("published"));
      for (const auto& [name, want] : reference.weights) {
        INFO(name);
        CHECK(same_bytes(test::tensor_named(cold->weights, name), want));
      }
      // Marked as the file's (the norms, the scales, the shares of rows and the conversions'
      // sources as the file holds them), and read from the loader's memory: the engine reads only
      // files it checks.
      CHECK(engine->bytes_wanted_from_files > 0);
      CHECK(engine->bytes_read_from_files == 0);
    }
  }
}

TEST_CASE("what the loader wrote into the checkpoint's mapping is uploaded as it wrote it", "[staging][checkpoint]") {
  LoaderOverFile f;
  // The loader scales "b" in place (against the docs' advice: clone first).
  auto loaded = f.load([](NamedTensors& out) {
    for (auto& [name, t] : out)
      if (name == "b") t.mul_(3);
  });
  REQUIRE(loaded.is_ok());
  for (const auto& [name, t] : f.original) {
    INFO(name);
    CHECK(same_bytes(test::tensor_named(loaded->weights, name), name == std::string("b") ? t.mul(3) : t));
  }
  // "d", "small" and "wide" are marked as the file's; "b" is not, nor are its neighbours "a" and "c",
  // which share a page with it (the data section starts off a page boundary). The engine reads
  // them all from memory.
  const std::uint64_t untouched = 16 * kPage + 7 * 4 + 64 * 512 * 4;
  CHECK(f.engine->bytes_wanted_from_files == untouched);
  CHECK(f.engine->bytes_read_from_files == 0);
}

namespace {

const StageTime* stage_named(const LoadReport& report, std::string_view name) {
  for (const StageTime& s : report.stages)
    if (s.stage == name) return &s;
  return nullptr;
}

constexpr std::string_view kWithLoader = "checkpoint read-ahead (with the loader)";

// Tensors of their own, with the same strides: a CPU load's weights lie in the checkpoint's
// mapping, and no page cache drop takes a mapped page.
NamedTensors owned_copy(const NamedTensors& tensors) {
  NamedTensors out;
  for (const auto& [name, t] : tensors) out.emplace_back(name, t.clone());
  return out;
}

// Loads `plan` without a cache and keeps its weights' own copies, waiting until nothing of the load
// holds the checkpoint's mapping (what a load onto a device holds is let go on a thread of its own).
LoadedModel loaded_and_let_go(const LoadPlan& plan) {
  auto loaded = load_model(nullptr, plan);
  REQUIRE(loaded.is_ok());
  loaded->weights = owned_copy(loaded->weights);
  wait_for_publications();
  return std::move(*loaded);
}

// The demo's plan, its loader run whole, as a load onto a device, whose upload reads every byte:
// the engine's host half stands for the engine, and the device is named, never touched (no
// refresh hooks).
LoadPlan onto_device(const test::DemoFixture& f) {
  LoadPlan plan = demo::with_whole_loader(f.plan());
  plan.device = c10::Device(c10::kCUDA, 0);
  plan.uploader = std::make_shared<HostStagingUploader>();
  plan.refresh_hooks.clear();
  return plan;
}

}  // namespace

TEST_CASE("a checkpoint off the page cache is read ahead while a loader that reads it whole runs",
          "[checkpoint][disk]") {
  test::DemoFixture f;
  f.config = test::small_dit_config(0, 1);
  f.config.hidden = 1024;
  f.config.layers = 4;
  REQUIRE(demo::write_checkpoint(f.config, f.checkpoint).is_ok());
  const NamedTensors reference = owned_copy(f.reference().weights);
  const std::uint64_t size = std::filesystem::file_size(f.checkpoint);
  const LoadPlan plan = onto_device(f);

  // In the page cache (just written): nothing to read ahead.
  CHECK(stage_named(loaded_and_let_go(plan).report, kWithLoader) == nullptr);

  if (test::drop_from_page_cache(f.checkpoint, 0, 0) > 0.25) {
    WARN("SKIPPED: this file system keeps its files in memory (tmpfs)");
    return;
  }
  const LoadedModel dropped = loaded_and_let_go(plan);
  const StageTime* ahead = stage_named(dropped.report, kWithLoader);
  REQUIRE(ahead != nullptr);
  CHECK(ahead->bytes > 0);
  CHECK(ahead->bytes <= size);
  CHECK(ahead->error.empty());
  CHECK(dropped.report.bytes_from_disk > size * 9 / 10);
  CHECK(demo::identical(reference, dropped.weights));
  // Its time is the loader's: the report's disk line does not count it again.
  CHECK(dropped.report.page_cache().find("read-ahead (with") == std::string::npos);

  // Not asked for, a CPU load (which hands out what the loader returned) or a TP rank (which reads
  // its slices): the loader's faults read what it needs.
  LoadPlan without = plan;
  without.tiers = {ordinary_tier({.read_ahead = false})};
  test::DemoFixture rank;  // rank 1 of 2
  for (const auto& [what, p] : std::vector<std::pair<std::string, LoadPlan>>{
           {"not asked for", without}, {"a CPU load", demo::with_whole_loader(f.plan())}, {"a TP rank", onto_device(rank)}}) {
    INFO(what);
    const std::string& path = what == "a TP rank" ? rank.checkpoint : f.checkpoint;
    REQUIRE(test::drop_from_page_cache(path, 0, 0) < 0.25);
    const LoadedModel loaded = loaded_and_let_go(p);
    CHECK(loaded.report.bytes_from_disk > std::filesystem::file_size(path) * 9 / 10);
    CHECK(stage_named(loaded.report, kWithLoader) == nullptr);
  }
}

TEST_CASE("a read-ahead of the checkpoint that cannot read stops quietly and the load goes on", "[checkpoint][disk]") {
  test::DemoFixture f;
  f.config = test::small_dit_config(0, 1);
  REQUIRE(demo::write_checkpoint(f.config, f.checkpoint).is_ok());
  const NamedTensors reference = owned_copy(f.reference().weights);
  if (test::drop_from_page_cache(f.checkpoint, 0, 0) > 0.25) {
    WARN("SKIPPED: this file system keeps its files in memory (tmpfs)");
    return;
  }
  // The store's file system, which the read-ahead reads through, fails every read; the loader
  // reads the checkpoint through its own.
  auto fs = std::make_shared<FaultInjectingFileSystem>();
  auto store = f.store(fs);
  fs->inject({.op = FsOp::pread, .sys_errno = EIO, .skip = 0, .times = -1, .path_contains = ""});
  auto loaded = load_model(store.get(), onto_device(f));
  fs->clear_faults();
  REQUIRE(loaded.is_ok());
  CHECK(fs->faults_fired() > 0);
  const StageTime* ahead = stage_named(loaded->report, kWithLoader);
  REQUIRE(ahead != nullptr);
  CHECK(ahead->bytes == 0);
  CHECK(demo::identical(reference, loaded->weights));
  (void)loaded->publication.wait();
}
