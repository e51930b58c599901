// The second process of the store's and ipc's multi-process tests; no torch. Usage:
//   store_helper publish DIR SEED MIB [DATA_SEED]
//                                        publish raw_model(SEED, MIB) (or, forged, raw_model(DATA_SEED,
//                                        MIB) under SEED's key); print "ready" first, then
//                                        "result <outcome>"
//   store_helper load DIR SEED           look up store_key(SEED), compare with raw_model(SEED, m)
//                                        for the m it was published with; exit 0 on an exact hit
//   store_helper hold DIR SEED           the same, then hold the snapshot (and so the lease); print
//                                        "holding"; on each SIGUSR1 compare the held tensors again and
//                                        print "still hit" or "still wrong-data"; wait to be killed
//   store_helper rank-publish DIR RANK MIB CAPACITY RESERVE GO WRITE_MS
//                                        one rank of a TP-8 group: publish raw_model(600+RANK, MIB)
//                                        under store_key(600) at tp_rank RANK, into a cache of
//                                        CAPACITY bytes keeping RESERVE bytes of disk free, on a
//                                        disk whose every write takes WRITE_MS; print "ready",
//                                        start once the file GO exists, then print
//                                        "result <outcome> <entry id> <evicted ids,|-> <status>"
//   store_helper evict DIR SEED          print "ready", then evict every entry
//   store_helper verify DIR SEED         print "ready", then verify every entry (damage: exit 5)
//   store_helper soak DIR SECONDS WORKER  publish, load, hold-and-evict, verify, evict and gc at
//                                        random on a small cache (kSoakCapacity) for SECONDS;
//                                        prints "result ok OPS" or "result <broken invariant>"
//   store_helper ipc-serve DIR NAME [UID] listen at DIR/NAME (as UID, when given); print "listening",
//                                        then send every message back with its descriptors, one
//                                        connection at a time, until killed
//   store_helper ipc-answer DIR NAME BODY listen at DIR/NAME as ipc-serve does, but answer every
//                                        message with BODY (a peer that says what it likes)
//   store_helper ipc-connect PATH [UID]  connect to the socket PATH (as UID, when given); print
//                                        "result <status code> <message>"; exit 0 when connected
//   store_helper default-store WORKDIR   in WORKDIR, open the store a loader opens with the settings of
//                                        this environment (Config::from_environment, no --dir); print
//                                        "default <Config::default_directory()>", "directory <...>",
//                                        "config_file <...>", "unavailable <reason>" and "lookup
//                                        <result> <reason>" of a key
#include <grp.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include <dirent.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <random>
#include <thread>

#include "ipc/unix_socket.h"
#include "snapcache/archive.h"
#include "snapcache/extend/file_system.h"
#include "snapcache/key.h"
#include "snapcache/log.h"
#include "snapcache/maintenance.h"
#include "support/raw_storages.h"
#include "support/fault_injection.h"

using namespace snapcache;

namespace {

std::size_t open_descriptors() {
  std::size_t n = 0;
  if (DIR* d = ::opendir("/proc/self/fd")) {
    while (::readdir(d) != nullptr) ++n;
    ::closedir(d);
  }
  return n;
}

std::size_t mappings_under(const std::string& dir) {
  std::ifstream maps("/proc/self/maps");
  std::size_t n = 0;
  for (std::string line; std::getline(maps, line);) n += line.find(dir) != std::string::npos;
  return n;
}

// One soak worker: every operation checks what it can see; the first broken invariant ends it.
int soak(Store& store, const std::string& dir, int seconds, int worker) {
  const std::size_t fds_before = open_descriptors();
  std::mt19937 rng(static_cast<unsigned>(worker) * 7919u + 17u);
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  std::uint64_t ops = 0;
  auto fail = [](const std::string& what) {
    std::printf("result %s\n", what.c_str());
    return 1;
  };
  while (std::chrono::steady_clock::now() < until) {
    const int seed = 900 + static_cast<int>(rng() % 6);
    const Key key = test::store_key(seed);
    switch (rng() % 6) {
      case 0: {
        auto out = test::publish_raw(store, key, test::raw_model(seed, 1));
        if (out.result == PublishResult::failed) return fail("publication failed: " + out.status.to_string());
        break;
      }
      case 1: {
        auto found = store.lookup(key);
        if (found.result == LookupResult::damaged) return fail("false damage: " + found.reason);
        if (found.result == LookupResult::hit && !test::same_data(*found.snapshot, test::raw_model(seed, 1)))
          return fail("wrong data for seed " + std::to_string(seed));
        break;
      }
      case 2: {  // a leased entry is never evicted
        auto held = store.lookup(key);
        if (held.result != LookupResult::hit) break;
        EvictRequest all;
        all.all = true;
        auto out = evict(store, all);
        if (out && std::find(out->evicted.begin(), out->evicted.end(), held.entry_id) != out->evicted.end())
          return fail("evicted the leased entry " + held.entry_id);
        if (!test::same_data(*held.snapshot, test::raw_model(seed, 1))) return fail("held entry changed");
        break;
      }
      case 3: {
        auto entries = list_entries(store);
        if (!entries) break;
        for (const auto& e : *entries) {
          if (e.state == EntryState::unfinished) continue;
          VerifyReport r = verify_entry(store, e.id);
          if (!r.status.is_ok() && is_entry_damage(r.status.code()) && r.status.code() != StatusCode::not_found)
            return fail("false damage from verify: " + r.status.to_string());
        }
        break;
      }
      case 4: {
        EvictRequest some;
        some.to_size = test::kSoakCapacity / 2;
        (void)evict(store, some);
        break;
      }
      case 5: {
        GarbageOptions options;
        options.grace_seconds = 0;
        (void)collect_garbage(store, options);
        break;
      }
    }
    ++ops;
  }
  if (open_descriptors() != fds_before)
    return fail("leaked descriptors: " + std::to_string(open_descriptors()) + " vs " + std::to_string(fds_before));
  if (mappings_under(dir) != 0) return fail("leaked mappings of the cache");
  std::printf("result ok %llu\n", static_cast<unsigned long long>(ops));
  return 0;
}

volatile sig_atomic_t g_recheck = 0;
void ask_for_recheck(int) { g_recheck = 1; }

// The key of rank `rank` in a TP-8 group: ranks of one model differ in tp_rank only.
Key rank_key(int rank) {
  Key key = test::store_key(600);
  key.topology.tp_rank = rank;
  key.topology.tp_size = 8;
  return key;
}

int rank_publish(Store& store, int rank, std::size_t mib, const std::string& go) {
  test::RawModel model = test::raw_model(600 + rank, mib);
  std::printf("ready\n");
  std::fflush(stdout);
  // All ranks start together: the one moment that shows whether room is counted twice.
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  struct stat st {};
  while (::stat(go.c_str(), &st) != 0) {
    if (std::chrono::steady_clock::now() > give_up) return 2;
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  PublishOptions options;
  options.chunk_size = 1 << 20;
  auto out = test::publish_raw(store, rank_key(rank), model, options);
  std::string evicted;
  for (const auto& e : out.evicted) evicted += (evicted.empty() ? "" : ",") + e.id;
  std::printf("result %s %s %s %s\n", to_string(out.result), out.entry_id.c_str(), evicted.empty() ? "-" : evicted.c_str(),
              out.status.to_string().c_str());
  return out.result == PublishResult::failed ? 1 : 0;
}

// From here on, run as another user, so that the tests (as root) meet a peer of another uid. The group
// becomes the same number: 65534 is both nobody and nogroup.
bool become_user(const char* uid_text) {
  const auto id = static_cast<uid_t>(std::atoi(uid_text));
  return ::setgroups(0, nullptr) == 0 && ::setgid(static_cast<gid_t>(id)) == 0 && ::setuid(id) == 0;
}

// Sends every message back, or `answer` when one is given.
int ipc_serve(const std::string& dir, const std::string& name, const char* answer = nullptr) {
  auto listener = ipc::Listener::listen_at(dir, name);
  if (!listener) {
    std::printf("error %s\n", listener.status().to_string().c_str());
    return 3;
  }
  std::printf("listening\n");
  std::fflush(stdout);
  ::alarm(300);  // never outlive a test run that forgot us
  const ipc::Timeout wait(std::chrono::minutes(5));
  for (;;) {
    auto connection = listener->accept(wait);
    if (!connection) continue;  // a peer of another user, refused
    for (;;) {
      auto message = connection->receive(wait);
      if (!message) break;
      std::vector<int> fds;
      for (const auto& fd : message->fds) fds.push_back(fd.get());
      if (answer != nullptr) fds.clear();
      if (!connection->send(answer != nullptr ? std::string(answer) : message->body, fds)) break;
    }
  }
}

int ipc_connect(const std::string& path) {
  auto connection = ipc::connect_to(path, ipc::Timeout(std::chrono::seconds(5)));
  std::printf("result %s %s\n", to_string(connection.status().code()), connection.status().message().c_str());
  return connection ? 0 : 1;
}

// The ipc commands, or -1 for none of them.
int ipc_command(int argc, char** argv) {
  const std::string cmd = argc > 1 ? argv[1] : "";
  if (cmd == "ipc-answer" && argc == 5) return ipc_serve(argv[2], argv[3], argv[4]);
  const int uid_arg = cmd == "ipc-serve" ? 4 : 3;
  if ((cmd != "ipc-serve" && cmd != "ipc-connect") || argc < uid_arg) return -1;
  if (argc > uid_arg && !become_user(argv[uid_arg])) {
    std::printf("error cannot become uid %s\n", argv[uid_arg]);
    return 2;
  }
  return cmd == "ipc-serve" ? ipc_serve(argv[2], argv[3]) : ipc_connect(argv[2]);
}

}  // namespace

namespace {

// What a loader gets from this process's environment alone (HOME, XDG_CACHE_HOME, SNAPCACHE_DIR, ...),
// run in WORKDIR so that nothing the settings name relative to it goes unseen.
int default_store(const char* workdir) {
  if (::chdir(workdir) != 0) return 3;
  const Result<Config> config = Config::from_environment();
  std::printf("default %s\n", Config::default_directory().c_str());
  if (config) std::printf("directory %s\nconfig_file %s\n", config->directory.c_str(), config->config_file.c_str());
  const std::shared_ptr<Store> store = Store::open_for_loading(config);
  std::printf("unavailable %s\n", store->unavailable_reason().c_str());
  auto found = store->lookup(test::store_key(1));
  std::printf("lookup %s %s\n", to_string(found.result), found.reason.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  set_log_level(LogLevel::error);
  if (const int rc = ipc_command(argc, argv); rc >= 0) return rc;
  if (argc == 3 && std::string(argv[1]) == "default-store") return default_store(argv[2]);
  if (argc < 4) {
    std::fprintf(stderr, "usage: %s publish|load|hold DIR SEED [MIB]\n", argv[0]);
    return 2;
  }
  const std::string cmd = argv[1];
  Config config = test::test_config(argv[2]);
  // load-secondary DIR SEED SECONDARY: a load with a secondary store (docs/scale-out.md).
  if (cmd == "load-secondary" && argc > 4) config.secondary_directory = argv[4];
  if (cmd == "soak") config.capacity_bytes = test::kSoakCapacity;
  std::shared_ptr<FileSystem> fs = posix_file_system();
  if (cmd == "rank-publish") {
    if (argc < 9) return 2;
    config.capacity_bytes = std::strtoull(argv[5], nullptr, 10);
    config.reserve_free_bytes = std::strtoull(argv[6], nullptr, 10);
    auto slow = std::make_shared<FaultInjectingFileSystem>();
    slow->slow_writes(std::chrono::milliseconds(std::atoi(argv[8])));
    fs = slow;
  }
  auto store = Store::open(config, fs);
  if (!store) {
    std::printf("error %s\n", store.status().to_string().c_str());
    return 3;
  }
  if (cmd == "soak") return soak(**store, argv[2], std::atoi(argv[3]), argc > 4 ? std::atoi(argv[4]) : 0);
  if (cmd == "rank-publish")
    return rank_publish(**store, std::atoi(argv[3]), static_cast<std::size_t>(std::atoi(argv[4])), argv[7]);
  const int seed = std::atoi(argv[3]);
  const std::size_t mib = argc > 4 ? static_cast<std::size_t>(std::atoi(argv[4])) : 1;
  if (cmd == "publish") {
    test::RawModel model = test::raw_model(argc > 5 ? std::atoi(argv[5]) : seed, mib);
    std::printf("ready\n");
    std::fflush(stdout);
    PublishOptions options;
    options.chunk_size = 1 << 20;
    auto out = test::publish_raw(**store, test::store_key(seed), model, options);
    std::printf("result %s %s\n", to_string(out.result), out.status.to_string().c_str());
    return out.result == PublishResult::published || out.result == PublishResult::already_present ? 0 : 1;
  }
  // export DIR SEED FILE: the entry of SEED into an archive; import DIR SEED FILE: an archive into
  // the cache (the importer the kill trials kill; SEED unused).
  if ((cmd == "export" || cmd == "import") && argc > 4) {
    if (cmd == "export") {
      const int fd = ::open(argv[4], O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
      if (fd < 0) return 3;
      auto out = export_entries(**store, {key_id(test::store_key(seed))}, fd_sink(fd));
      ::close(fd);
      return out.is_ok() ? 0 : 1;
    }
    const int fd = ::open(argv[4], O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 3;
    std::printf("ready\n");
    std::fflush(stdout);
    // The archive is the helper's own unsigned export: what is tested here is the import's crash
    // safety, not who made the archive.
    ImportSummary summary = import_archive(**store, fd_source(fd), {.trust_unsigned = true});
    ::close(fd);
    std::printf("result %s\n", summary.status.to_string().c_str());
    return summary.status.is_ok() && !summary.entries.empty() && summary.entries[0].result == ImportResult::imported ? 0 : 1;
  }
  if (cmd == "evict" || cmd == "verify") {
    std::printf("ready\n");
    std::fflush(stdout);
    if (cmd == "evict") {
      EvictRequest all;
      all.all = true;
      return evict(**store, all).is_ok() ? 0 : 1;
    }
    auto entries = list_entries(**store);
    if (!entries) return 1;
    for (const auto& e : *entries)
      if (e.state != EntryState::unfinished && !verify_entry(**store, e.id).status.is_ok()) return 5;
    return 0;
  }
  if (cmd == "load" || cmd == "hold" || cmd == "load-secondary") {
    auto found = (*store)->lookup(test::store_key(seed));
    std::printf("reason %s\n", found.reason.c_str());
    if (found.result != LookupResult::hit) {
      std::printf("result %s %s\n", to_string(found.result), found.reason.c_str());
      return 1;
    }
    // Compare with the size the entry was published with: the entry knows its sizes.
    bool exact = false;
    for (std::size_t m : {1, 2, 4, 8, 16, 32, 64}) exact |= test::same_data(*found.snapshot, test::raw_model(seed, m));
    std::printf("result %s\n", exact ? "hit" : "wrong-data");
    std::fflush(stdout);
    if (!exact) return 4;
    if (cmd == "hold") {
      ::signal(SIGUSR1, ask_for_recheck);
      // Blocked but while waiting, so a request that comes between two checks is not lost.
      sigset_t usr1, waiting;
      sigemptyset(&usr1);
      sigaddset(&usr1, SIGUSR1);
      ::sigprocmask(SIG_BLOCK, &usr1, &waiting);
      std::printf("holding\n");
      std::fflush(stdout);
      ::alarm(300);  // never outlive a test run that forgot us
      for (;;) {
        while (!g_recheck) ::sigsuspend(&waiting);
        g_recheck = 0;
        bool same = false;
        for (std::size_t m : {1, 2, 4, 8, 16, 32, 64}) same |= test::same_data(*found.snapshot, test::raw_model(seed, m));
        std::printf("still %s\n", same ? "hit" : "wrong-data");
        std::fflush(stdout);
      }
    }
    return 0;
  }
  return 2;
}
