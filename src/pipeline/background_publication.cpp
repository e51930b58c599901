#include "pipeline/background_publication.h"

#include <map>
#include <mutex>
#include <string>

#include "snapcache/extend/snapshot.h"
#include "snapcache/key.h"
#include "snapcache/log.h"
#include "torch/exceptions.h"
#include "util/fmt.h"

namespace snapcache {
namespace pipeline {
namespace {

// The running and finished publications by key id. Destroyed at exit, after waiting for them: a
// publication thread must not outlive the statics it uses.
class Registry {
 public:
  static Registry& instance() {
    static Registry registry;
    return registry;
  }
  ~Registry() { wait_all(); }

  void add(const std::string& id, std::shared_future<PublishOutcome> outcome) {
    std::lock_guard lock(mutex_);
    running_[id] = std::move(outcome);
  }
  std::shared_future<PublishOutcome> find(const std::string& id) {
    std::lock_guard lock(mutex_);
    auto it = running_.find(id);
    return it == running_.end() ? std::shared_future<PublishOutcome>{} : it->second;
  }
  void wait_all() {
    std::map<std::string, std::shared_future<PublishOutcome>> all;
    {
      std::lock_guard lock(mutex_);
      all.swap(running_);
    }
    std::size_t pending = 0;
    for (const auto& [_, f] : all) pending += f.wait_for(std::chrono::seconds(0)) != std::future_status::ready;
    if (pending > 0) log(LogLevel::info, fmt::format("waiting for {} background publication(s) to finish", pending));
    for (const auto& [_, f] : all) f.wait();
  }

 private:
  std::mutex mutex_;
  std::map<std::string, std::shared_future<PublishOutcome>> running_;
};

}  // namespace

Publication publish_in_background(std::shared_ptr<Store> store, const Key& key, NamedTensors tensors) {
  Registry& registry = Registry::instance();  // constructed before the thread starts, so destroyed after it ends
  struct Job {
    std::shared_ptr<Store> store;
    Key key;
    NamedTensors tensors;
  };
  // The shared state of std::async keeps its callable until the last future goes; the job is moved
  // out when it runs, so the host tensors and the store are released as soon as it ends.
  auto job = std::make_unique<Job>(Job{std::move(store), key, std::move(tensors)});
  std::shared_future<PublishOutcome> outcome =
      std::async(std::launch::async, [job = std::move(job)]() mutable {
        const std::unique_ptr<Job> mine = std::move(job);
        try {
          return publish_tensors(*mine->store, mine->key, mine->tensors);
        } catch (...) {
          PublishOutcome failed;
          failed.result = PublishResult::failed;
          failed.status = status_of_current_exception().with_context("background publication");
          return failed;
        }
      }).share();
  registry.add(key_id(key), outcome);
  return Publication(outcome);
}

void wait_for_publication_of(const Key& key) {
  if (auto f = Registry::instance().find(key_id(key)); f.valid()) f.wait();
}

std::string record_publication(const PublishOutcome& p, StageTimer& stage) {
  switch (p.result) {
    case PublishResult::published: stage.done(p.bytes); return {};
    case PublishResult::already_present: stage.done(); return {};
    case PublishResult::skipped: stage.done(); break;
    case PublishResult::failed: stage.fail(p.status.to_string()); break;
  }
  return "not published: " + p.status.to_string();
}

}  // namespace pipeline

bool Publication::pending() const {
  return outcome_.valid() && outcome_.wait_for(std::chrono::seconds(0)) != std::future_status::ready;
}

PublishOutcome Publication::wait() const {
  if (!outcome_.valid()) {
    PublishOutcome none;
    none.result = PublishResult::skipped;
    none.status = Status(StatusCode::not_found, "no publication was started");
    return none;
  }
  return outcome_.get();
}

void wait_for_publications() { pipeline::Registry::instance().wait_all(); }

}  // namespace snapcache
