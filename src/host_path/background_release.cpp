#include "host_path/background_release.h"

#include <future>
#include <mutex>
#include <system_error>
#include <utility>
#include <vector>

namespace snapcache::host_path {
namespace {

// The releases not known to have ended. Destroyed at exit, after waiting for them: a release
// thread must not outlive the statics the destructors it runs may use.
class Releases {
 public:
  static Releases& instance() {
    static Releases releases;
    return releases;
  }
  ~Releases() { wait_all(); }

  void add(std::future<void> release) {
    std::lock_guard lock(mutex_);
    // A server loads many times: those that ended are forgotten, so the list stays short.
    std::erase_if(running_, [](const std::future<void>& f) {
      return f.wait_for(std::chrono::seconds(0)) == std::future_status::ready;
    });
    running_.push_back(std::move(release));
  }
  void wait_all() {
    std::vector<std::future<void>> all;
    {
      std::lock_guard lock(mutex_);
      all.swap(running_);
    }
    for (auto& f : all) f.wait();
  }

 private:
  std::mutex mutex_;
  std::vector<std::future<void>> running_;
};

}  // namespace

void release_in_background(std::shared_ptr<void> held) {
  Releases& releases = Releases::instance();  // constructed before the thread starts, so destroyed after it ends
  // The thread takes the only reference and drops it; the future's shared state then holds nothing.
  try {
    releases.add(std::async(std::launch::async, [mine = std::move(held)]() mutable { mine.reset(); }));
  } catch (const std::system_error&) {  // no thread to be had: the caller drops it, as it would have
  }
}

void wait_for_releases() { Releases::instance().wait_all(); }

}  // namespace snapcache::host_path
