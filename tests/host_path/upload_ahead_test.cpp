// A streaming loader (LoadPlan::streaming_loader) on the demo model: a cold load runs post-load and
// the upload on each part while the loader makes the next, and gives what the whole path gives;
// where the parts cannot stand for the whole (a weight and its scale in two parts, a storage in two
// parts, a method that does not apply per part) the load runs the whole path instead and says why.
#include <ATen/Functions.h>

#include <chrono>
#include <condition_variable>
#include <mutex>

#include "support/demo_fixture.h"
#include "support/host_copies.h"
#include "snapcache/extend/host_storage.h"
#include "snapcache/extend/post_load.h"
#include "snapcache/extend/uploader.h"
#include "snapcache/maintenance.h"

using namespace snapcache;

namespace {

bool has_stage(const LoadReport& report, const std::string& stage) {
  return std::any_of(report.stages.begin(), report.stages.end(), [&](const StageTime& s) { return s.stage == stage; });
}

std::string stage_error(const LoadReport& report, const std::string& stage) {
  for (const auto& s : report.stages)
    if (s.stage == stage) return s.error;
  return "(no stage " + stage + ")";
}

// Copies every storage, as an upload to a device does (the host tensors may go once it returns),
// counting its calls and telling a loader that waits for them (so each part is uploaded on its
// own, whatever the threads' timing).
class PacedUploader final : public Uploader {
 public:
  std::string name() const override { return "paced"; }
  Result<Uploaded> upload(const NamedTensors& tensors, const HostStorages& storages, c10::Device) override {
    Uploaded uploaded = test::host_copies(tensors, storages);
    {
      std::lock_guard lock(mutex_);
      ++calls_;
    }
    changed_.notify_all();
    return uploaded;
  }
  int calls() {
    std::lock_guard lock(mutex_);
    return calls_;
  }
  // Until `n` uploads have ended, or a minute has passed (a part that never reaches the upload).
  // The upload runs at SCHED_IDLE, so on a machine busy with other tests it may wait for a core.
  void wait_for(int n) {
    std::unique_lock lock(mutex_);
    changed_.wait_for(lock, std::chrono::seconds(60), [&] { return calls_ >= n; });
  }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  int calls_ = 0;
};

// The demo's tensors put `per_part` at a time; with `wait`, each part uploaded before the next is put.
LoadPlan paced(const LoadPlan& demo, const std::shared_ptr<PacedUploader>& uploader, std::size_t per_part,
               bool wait = true) {
  LoadPlan plan = demo;
  plan.uploader = uploader;
  plan.streaming_loader = [demo, uploader, per_part, wait](const LoadPlan&, TensorSink& sink) -> Status {
    auto all = run_ordinary_loader(demo);
    if (!all) return all.status();
    int parts = 0;
    for (std::size_t i = 0; i < all->size(); i += per_part) {
      NamedTensors part(all->begin() + static_cast<std::ptrdiff_t>(i),
                        all->begin() + static_cast<std::ptrdiff_t>(std::min(all->size(), i + per_part)));
      SNAPCACHE_RETURN_IF_ERROR(sink.put(std::move(part)));
      if (wait) uploader->wait_for(++parts);
    }
    return Status::ok();
  };
  return plan;
}

}  // namespace

TEST_CASE("a streaming loader's cold load uploads each part while the loader runs, as the whole path would",
          "[pipeline][streaming]") {
  test::DemoFixture f;
  const auto reference = load_model(nullptr, demo::with_whole_loader(f.plan()));
  REQUIRE(reference.is_ok());
  CHECK_FALSE(has_stage(reference->report, "upload (after the loader)"));

  // The demo puts a layer at a time: two layers and the final norm.
  auto uploader = std::make_shared<PacedUploader>();
  const std::size_t per_layer = 10;
  auto store = f.store();
  auto cold = load_model(store.get(), paced(f.plan(), uploader, per_layer));
  REQUIRE(cold.is_ok());
  CHECK(cold->report.path == LoadPath::miss);
  CHECK(uploader->calls() == 3);  // one upload per part
  CHECK(has_stage(cold->report, "upload (after the loader)"));
  CHECK(has_stage(cold->report, "post-load"));
  CHECK(demo::identical(*cold, *reference));
  const PublicationReport published = cold->publication.wait();  // in the background
  INFO(published.status.to_string());
  REQUIRE(published.status.is_ok());

  // What it published is what the ordinary loader returned: the warm load gives the same weights.
  auto warm = load_model(store.get(), f.plan());
  REQUIRE(warm.is_ok());
  CHECK(warm->report.path == LoadPath::hit);
  CHECK_FALSE(has_stage(warm->report, "upload (after the loader)"));
  CHECK(demo::identical(*warm, *reference));

  // The demo's own loader, parts as the threads take them.
  auto own = load_model(nullptr, f.plan());
  REQUIRE(own.is_ok());
  INFO(own->report.table());
  CHECK(has_stage(own->report, "upload (after the loader)"));
  CHECK(demo::identical(*own, *reference));
}

TEST_CASE("parts that cannot stand for the whole: the load runs the whole path and says why", "[pipeline][streaming]") {
  test::DemoFixture f;
  const auto reference = load_model(nullptr, demo::with_whole_loader(f.plan()));
  REQUIRE(reference.is_ok());
  auto uploader = std::make_shared<PacedUploader>();

  SECTION("a weight and its scale in two parts") {
    auto loaded = load_model(nullptr, paced(f.plan(), uploader, 1));
    REQUIRE(loaded.is_ok());
    CHECK(uploader->calls() > 21);  // a part at a time, then the whole once
    CHECK(stage_error(loaded->report, "upload while loading").find("a weight and its scale in two parts") !=
          std::string::npos);
    CHECK_FALSE(has_stage(loaded->report, "upload (after the loader)"));
    CHECK(demo::identical(*loaded, *reference));
  }

  SECTION("a storage in two parts") {
    LoadPlan plan = paced(f.plan(), uploader, 10);
    // The last part's norm shares the storage of the first layer's.
    plan.streaming_loader = [inner = plan.streaming_loader](const LoadPlan& p, TensorSink& sink) -> Status {
      class Tying final : public TensorSink {
       public:
        explicit Tying(TensorSink& to) : to_(to) {}
        Status put(NamedTensors part) override {
          for (auto& [name, t] : part) {
            if (name == "blocks.0.norm1.weight") first_ = t;
            if (name == "final_norm.weight" && first_.defined()) t = first_;
          }
          return to_.put(std::move(part));
        }

       private:
        TensorSink& to_;
        at::Tensor first_;
      } tying(sink);
      return inner(p, tying);
    };
    for (auto& e : plan.expected)
      if (e.name == "blocks.0.norm1.weight" || e.name == "final_norm.weight") e.alias_group = "norms";
    auto loaded = load_model(nullptr, plan);
    REQUIRE(loaded.is_ok());
    CHECK(stage_error(loaded->report, "upload while loading").find("shares its storage with a tensor of an earlier part") !=
          std::string::npos);
    const at::Tensor& first = test::tensor_named(loaded->weights, "blocks.0.norm1.weight");
    const at::Tensor& last = test::tensor_named(loaded->weights, "final_norm.weight");
    CHECK(first.storage().unsafeGetStorageImpl() == last.storage().unsafeGetStorageImpl());  // still tied
  }

  SECTION("a method that does not say it applies per part") {
    class Halving final : public PostLoadMethod {
     public:
      std::string name() const override { return "halving"; }
      std::vector<std::string> targets(const NamedTensors&) const override { return {"final_norm.weight"}; }
      MethodProperties properties() const override {
        MethodProperties p;
        p.writes = PostLoadWrites::new_storages_only;
        return p;
      }
      Status apply(NamedTensors& tensors) const override {
        for (auto& [name, t] : tensors)
          if (name == "final_norm.weight") t = t.div(2);
        return Status::ok();
      }
    };
    LoadPlan plan = paced(f.plan(), uploader, 10, /*wait=*/false);
    plan.post_load.push_back(std::make_shared<Halving>());
    auto loaded = load_model(nullptr, plan);
    REQUIRE(loaded.is_ok());
    CHECK(uploader->calls() == 1);  // the whole, once
    CHECK_FALSE(has_stage(loaded->report, "upload while loading"));
    CHECK(at::equal(test::tensor_named(loaded->weights, "final_norm.weight"),
                    test::tensor_named(reference->weights, "final_norm.weight").div(2)));
  }
}

TEST_CASE("a streaming loader that fails after some parts fails the load, and nothing is published",
          "[pipeline][streaming]") {
  test::DemoFixture f;
  LoadPlan plan = f.plan();
  plan.streaming_loader = [inner = plan.streaming_loader](const LoadPlan& p, TensorSink& sink) -> Status {
    class Failing final : public TensorSink {
     public:
      explicit Failing(TensorSink& to) : to_(to) {}
      Status put(NamedTensors part) override {
        if (++parts_ == 2) return Status(StatusCode::io_error, "the disk went away after a layer");
        return to_.put(std::move(part));
      }

     private:
      TensorSink& to_;
      int parts_ = 0;
    } failing(sink);
    return inner(p, failing);
  };
  auto store = f.store();
  auto loaded = load_model(store.get(), plan);
  REQUIRE_FALSE(loaded.is_ok());
  CHECK(loaded.status().message().find("the disk went away after a layer") != std::string::npos);
  wait_for_publications();
  CHECK(list_entries(*store).value().empty());
}
