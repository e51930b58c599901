#include "tiers/background_publication.h"

#include <sys/resource.h>
#include <unistd.h>

#include <map>
#include <mutex>
#include <string>

#include "snapcache/extend/store_tensors.h"
#include "snapcache/extend/store_access.h"
#include "snapcache/extend/tier.h"
#include "snapcache/key.h"
#include "snapcache/log.h"
#include "host_path/background_release.h"
#include "torch/exceptions.h"
#include "util/fmt.h"

namespace snapcache {
namespace tiers {
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

  void add(const std::string& id, std::shared_future<PublicationReport> outcome) {
    std::lock_guard lock(mutex_);
    running_[id] = std::move(outcome);
  }
  std::shared_future<PublicationReport> find(const std::string& id) {
    std::lock_guard lock(mutex_);
    auto it = running_.find(id);
    return it == running_.end() ? std::shared_future<PublicationReport>{} : it->second;
  }
  void wait_all() {
    std::map<std::string, std::shared_future<PublicationReport>> all;
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
  std::map<std::string, std::shared_future<PublicationReport>> running_;
};

}  // namespace

Publication publish_in_background(std::shared_ptr<Store> store, const Key& key, NamedTensors tensors,
                                  PublishOptions options) {
  Registry& registry = Registry::instance();  // constructed before the thread starts, so destroyed after it ends
  struct Job {
    std::shared_ptr<Store> store;
    Key key;
    NamedTensors tensors;
    PublishOptions options;
  };
  // The shared state of std::async keeps its callable until the last future goes; the job is moved
  // out when it runs, so the host tensors and the store are released as soon as it ends.
  auto job = std::make_unique<Job>(Job{std::move(store), key, std::move(tensors), std::move(options)});
  std::shared_future<PublicationReport> report =
      std::async(std::launch::async, [job = std::move(job)]() mutable {
        const std::unique_ptr<Job> mine = std::move(job);
        // The load and what the caller does next come first (vLLM post-processes the tensors on
        // every core, and an OpenMP team waits for its slowest thread): the publication and the
        // workers it starts (threads inherit it) run at the lowest nice value, so they take little
        // from a busy core. Not SCHED_IDLE, which could starve a publication holding the cache's
        // publication lock while another process waits for it.
        (void)::setpriority(PRIO_PROCESS, static_cast<id_t>(::gettid()), 19);
        try {
          return publication_report(publish_tensors(*mine->store, mine->key, mine->tensors, mine->options));
        } catch (...) {
          PublicationReport failed;
          failed.status = status_of_current_exception().with_context("background publication");
          return failed;
        }
      }).share();
  registry.add(key_id(key), report);
  return Publication(report);
}

void wait_for_publication_of(const Key& key) {
  if (auto f = Registry::instance().find(key_id(key)); f.valid()) f.wait();
}

std::string record_publication(const PublicationReport& p, StageTimer& stage) {
  if (p.status) {
    stage.done(p.written ? p.bytes : 0);
    return {};
  }
  if (p.skipped)
    stage.done();
  else
    stage.fail(p.status.to_string());
  return "not published: " + p.status.to_string();
}

}  // namespace tiers

bool Publication::pending() const {
  return report_.valid() && report_.wait_for(std::chrono::seconds(0)) != std::future_status::ready;
}

PublicationReport Publication::wait() const {
  if (!report_.valid()) {
    PublicationReport none;
    none.skipped = true;
    none.status = Status(StatusCode::not_found, "no publication was started");
    return none;
  }
  return report_.get();
}

const char* PublicationReport::outcome() const {
  if (status) return written ? "published" : "already_present";
  return skipped ? "skipped" : "failed";
}

PublicationReport publication_report(const PublishOutcome& outcome) {
  PublicationReport report;
  report.status = outcome.status;
  report.written = outcome.result == PublishResult::published;
  report.skipped = outcome.result == PublishResult::skipped;
  // ok exactly when the entry is in the cache, whatever status the store left beside its result.
  if (report.written || outcome.result == PublishResult::already_present)
    report.status = Status::ok();
  else if (report.status)
    report.status = Status(StatusCode::io_error, std::string("not published: ") + to_string(outcome.result));
  report.entry_id = outcome.entry_id;
  report.bytes = outcome.bytes;
  report.seconds = outcome.seconds;
  report.evictions = describe_evictions(outcome.evicted);
  for (const EvictedEntry& e : outcome.evicted) report.evicted.push_back(e.id);
  return report;
}

void wait_for_publications() {
  tiers::Registry::instance().wait_all();
  host_path::wait_for_releases();
}

}  // namespace snapcache
