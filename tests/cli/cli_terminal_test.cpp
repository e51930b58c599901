// What reaches the terminal: names in an entry (component, checkpoint path, tensor names), an
// archive's, a cache directory's own name and a donor's words, all written by someone else, are
// printed escaped by every command, so an escape sequence never reaches the terminal and a newline
// in a name never starts a line of its own (verify's "ok" lines and summary cannot be forged);
// --json gives them back exactly.
#include <sys/stat.h>

#include <algorithm>
#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "cli_fixtures.h"
#include "cli_runner.h"
#include "snapcache/key.h"
#include "snapcache/printable.h"
#include "support/catch.h"
#include "support/child_process.h"

using namespace snapcache;
using namespace snapcache::test;

namespace {

// Each a sequence a terminal acts on: colours, a bell, a window title (OSC), a C1 CSI that clears
// the screen, a right-to-left override.
const std::string kRed = "\x1b[31m";
const std::string kBell = "\x07";
const std::string kTitle = "\x1b]0;owned\x07";
const std::string kC1Clear = "\xc2\x9b" "2J";
const std::string kRightToLeft = "\xe2\x80\xae";
// A newline and the lines verify prints, to make a report look like something it is not.
const std::string kForgedLines =
    "\nok       000000000000  forged  1.0 MiB\n3 entries verified: 0 damaged; 1.0 MiB hashed in 0.01 s (1.0 MiB/s)";

// The same for a file name, which cannot hold a '/'.
const std::string kForgedFileName = kRed + "\nok       000000000000  forged";

const std::string kComponent = "dit" + kRed + "red" + kBell + kTitle + kC1Clear + kRightToLeft + kForgedLines;
const std::string kCheckpoint = "/checkpoints/" + kRed + "model" + kForgedLines + ".safetensors";
const std::string kTensor = "attn" + kRed + ".qkv.weight" + kForgedLines;
const std::string kNotUtf8Tensor = "norm\xff\xc0\xaf.weight";  // a stray byte, an overlong '/'

// The first byte of `text` a terminal would act on, described; "" when there is none. Newlines are
// the output's own; everything else must be printable UTF-8 (the C1 controls and the
// bidirectional controls are valid UTF-8 and still are not).
std::string first_raw_control(const std::string& text) {
  for (std::size_t i = 0; i < text.size();) {
    const auto c = static_cast<unsigned char>(text[i]);
    const std::string where = " at byte " + std::to_string(i);
    if (c == '\n' || (c >= 0x20 && c < 0x7f)) {
      ++i;
      continue;
    }
    if (c < 0x20 || c == 0x7f) return "control byte " + std::to_string(c) + where;
    std::size_t n = c >= 0xf0 ? 4 : c >= 0xe0 ? 3 : c >= 0xc2 ? 2 : 0;
    if (n == 0 || i + n > text.size()) return "a byte that is not UTF-8" + where;
    char32_t cp = c & (n == 2 ? 0x1f : n == 3 ? 0x0f : 0x07);
    for (std::size_t k = 1; k < n; ++k) {
      const auto b = static_cast<unsigned char>(text[i + k]);
      if ((b & 0xc0) != 0x80) return "a byte that is not UTF-8" + where;
      cp = (cp << 6) | (b & 0x3f);
    }
    if (cp >= 0x80 && cp <= 0x9f) return "a C1 control" + where;
    if ((cp >= 0x202a && cp <= 0x202e) || (cp >= 0x2066 && cp <= 0x2069) || cp == 0x200e || cp == 0x200f ||
        cp == 0x061c || cp == 0x2028 || cp == 0x2029)
      return "a bidirectional or line-separating control" + where;
    i += n;
  }
  return "";
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (start < text.size()) {
    const std::size_t end = text.find('\n', start);
    out.push_back(text.substr(start, end == std::string::npos ? std::string::npos : end - start));
    if (end == std::string::npos) break;
    start = end + 1;
  }
  return out;
}

std::size_t count_lines_starting(const std::string& text, const std::string& prefix) {
  const auto lines = lines_of(text);
  return static_cast<std::size_t>(
      std::count_if(lines.begin(), lines.end(), [&](const std::string& l) { return l.starts_with(prefix); }));
}

std::size_t count_lines_containing(const std::string& text, const std::string& part) {
  const auto lines = lines_of(text);
  return static_cast<std::size_t>(
      std::count_if(lines.begin(), lines.end(), [&](const std::string& l) { return contains(l, part); }));
}

// A run whose text output is safe on a terminal, on stdout and stderr alike.
void check_printable(const CliRun& run) {
  INFO("stdout: " << printable(run.out) << "\nstderr: " << printable(run.err));
  CHECK(first_raw_control(run.out) == "");
  CHECK(first_raw_control(run.err) == "");
}

// An entry whose component, checkpoint path and tensor names carry the sequences above.
std::string publish_hostile(Store& store, int seed) {
  Key key = store_key(seed, kComponent);
  key.checkpoint.front().path = kCheckpoint;
  RawModel model = raw_model(seed);
  for (auto& t : model.tensors) {
    if (t.name == "attn.qkv.weight") t.name = kTensor;
    if (t.name == "norm.weight") t.name = kNotUtf8Tensor;
  }
  PublishOptions options;
  options.chunk_size = 1 << 20;
  auto out = publish_raw(store, key, model, options);
  REQUIRE(out.result == PublishResult::published);
  return out.entry_id;
}

std::uint64_t offset_of_tensor(Cache& cache, const std::string& id, const std::string& tensor) {
  auto info = entry_info(*cache.store, id);
  REQUIRE(info.is_ok());
  for (const auto& t : info->manifest->tensors)
    if (t.name == tensor) return info->manifest->storages.at(t.storage).offset;
  FAIL("no tensor " << printable(tensor));
  return 0;
}

}  // namespace

TEST_CASE("cli text output escapes the names of an entry and --json keeps them exact", "[cli][terminal]") {
  Cache cache;
  const std::string hostile = publish_hostile(*cache.store, 40);
  const std::string plain = cache.publish(41);
  // A stray file in entries/ with such a name, for gc to report.
  const std::string stray = cache.path() + "/entries/notes" + kForgedFileName + ".txt";
  write_bytes(stray, "hello");
  set_age(stray, 2 * 86400);

  for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{
           {"ls"}, {"inspect", hostile}, {"verify"}, {"why", hostile}, {"stats"}, {"config"},
           {"evict", "--all", "--dry-run"}, {"gc", "--dry-run"}}) {
    auto run = run_cli(with_dir(cache, args));
    INFO(args.front());
    CHECK(run.exit_code == 0);
    check_printable(run);
    if (args.front() == "ls" || args.front() == "inspect" || args.front() == "verify" || args.front() == "why" ||
        args.front() == "evict") {
      CHECK(contains(run.out, "dit\\x1b[31mred\\x07\\x1b]0;owned\\x07\\u009b2J\\u202e\\nok       000000000000"));
    }
  }
  auto inspected = run_cli(with_dir(cache, {"inspect", hostile}));
  CHECK(contains(inspected.out, "/checkpoints/\\x1b[31mmodel\\nok "));
  CHECK(contains(inspected.out, "attn\\x1b[31m.qkv.weight\\nok "));
  CHECK(contains(inspected.out, "norm\\xff\\xc0\\xaf.weight"));
  auto collected = run_cli(with_dir(cache, {"gc", "--dry-run"}));
  CHECK(contains(collected.out, "notes\\x1b[31m\\nok "));

  // The JSON of ls and inspect holds the exact names, and is itself plain ASCII.
  auto ls = run_cli(with_dir(cache, {"ls", "--json"}));
  check_printable(ls);
  CHECK(std::all_of(ls.out.begin(), ls.out.end(), [](char c) { return static_cast<unsigned char>(c) < 0x80; }));
  bool listed = false;
  const auto listing = ls.json();
  for (const auto& e : listing["entries"]) {
    if (e["id"] != hostile) continue;
    listed = true;
    CHECK(e["component"] == kComponent);
    CHECK(e["checkpoint"][0] == kCheckpoint);
  }
  CHECK(listed);
  auto detail = run_cli(with_dir(cache, {"inspect", hostile, "--json"}));
  check_printable(detail);
  std::vector<std::string> names;
  const auto inspection = detail.json();
  for (const auto& t : inspection["tensors"]) names.push_back(t["name"].get<std::string>());
  CHECK(std::find(names.begin(), names.end(), kTensor) != names.end());
  CHECK(std::find(names.begin(), names.end(), kNotUtf8Tensor) == names.end());  // bad bytes replaced there
  CHECK(inspection["key"]["component"] == kComponent);
  CHECK(plain != hostile);
}

TEST_CASE("cli ls prints invisible characters in names escaped, so no two components print alike", "[cli][terminal]") {
  // Each shows as "dit" when printed raw: a zero width space, a soft hyphen, a byte-order mark, a
  // word joiner, a combining grapheme joiner; then a no-break space, which shows as a space.
  const std::vector<std::pair<std::string, std::string>> names = {
      {"di\xe2\x80\x8bt", "di\\u200bt"}, {"di\xc2\xadt", "di\\u00adt"}, {"di\xef\xbb\xbft", "di\\ufefft"},
      {"di\xe2\x81\xa0t", "di\\u2060t"}, {"di\xcd\x8ft", "di\\u034ft"}, {"d\xc2\xa0it", "d\\u00a0it"}};
  Cache cache;
  cache.publish(70);  // "dit" itself
  int seed = 71;
  for (const auto& [name, escaped] : names) {
    PublishOptions options;
    options.chunk_size = 1 << 20;
    REQUIRE(publish_raw(*cache.store, store_key(seed, name), raw_model(seed), options).result == PublishResult::published);
    ++seed;
  }
  for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{{"ls"}, {"stats"}}) {
    auto run = run_cli(with_dir(cache, args));
    INFO(args.front() << ": " << printable(run.out) << printable(run.err));
    CHECK(run.exit_code == 0);
    check_printable(run);
    for (const auto& [name, escaped] : names) {
      CHECK(contains(run.out, escaped));
      CHECK_FALSE(contains(run.out, name));
    }
  }
  // --json keeps each name exact.
  auto json = run_cli(with_dir(cache, {"ls", "--json"}));
  std::set<std::string> listed;
  const auto listing = json.json();  // a range-for over a temporary's member would read a destroyed object
  for (const auto& e : listing["entries"]) listed.insert(e["component"].get<std::string>());
  for (const auto& [name, escaped] : names) CHECK(listed.count(name) == 1);
}

TEST_CASE("cli verify prints one line per entry and one summary whatever the names hold", "[cli][terminal]") {
  Cache cache;
  const std::string hostile = publish_hostile(*cache.store, 42);
  cache.publish(43);

  auto sound = run_cli(with_dir(cache, {"verify"}));
  INFO(printable(sound.out));
  CHECK(sound.exit_code == 0);
  check_printable(sound);
  CHECK(lines_of(sound.out).size() == 3);
  CHECK(count_lines_starting(sound.out, "ok ") == 2);
  CHECK(count_lines_starting(sound.out, "ok       000000000000") == 0);
  CHECK(count_lines_starting(sound.out, "2 entries verified: 0 damaged") == 1);
  CHECK(count_lines_starting(sound.out, "3 entries verified") == 0);

  // Damage in the storage of the tensor whose name holds the forged lines: the damaged chunk's line
  // names it, escaped, on that one line.
  const std::uint64_t offset = offset_of_tensor(cache, hostile, kTensor) + 100;
  flip_byte(cache.data_path(hostile), offset);
  auto damaged = run_cli(with_dir(cache, {"verify"}));
  INFO(printable(damaged.out));
  CHECK(damaged.exit_code == 1);
  check_printable(damaged);
  CHECK(count_lines_starting(damaged.out, "ok ") == 1);
  CHECK(count_lines_starting(damaged.out, "DAMAGED  " + hostile.substr(0, 12)) == 1);
  CHECK(count_lines_starting(damaged.out, "2 entries verified: 1 damaged") == 1);
  CHECK(count_lines_starting(damaged.out, "3 entries verified") == 0);
  CHECK(count_lines_containing(damaged.out, "attn\\x1b[31m.qkv.weight\\nok ") == 1);
  // DAMAGED, its one damaged chunk, the summary and the hint to repair; and the sound entry.
  CHECK(lines_of(damaged.out).size() == 5);

  auto json = run_cli(with_dir(cache, {"verify", "--json"}));
  bool named = false;
  const auto report = json.json();
  for (const auto& e : report["entries"])
    for (const auto& d : e["damaged_chunks"])
      for (const auto& t : d["tensors"]) named |= t == kTensor;
  CHECK(named);
}

TEST_CASE("cli export and import print an archive's names escaped", "[cli][terminal][archive]") {
  Cache source;
  const std::string id = publish_hostile(*source.store, 44);
  const std::string archive = source.dir / "hostile.snapcache";
  auto exported = run_cli(with_dir(source, {"export", id, "-o", archive}));
  CHECK(exported.exit_code == 0);
  check_printable(exported);
  CHECK(contains(exported.out, "dit\\x1b[31m"));

  // Unsigned, taken as such (the names are what is tested): the warning that says so is a line too.
  Cache target;
  auto imported = run_cli(with_dir(target, {"import", archive, "--trust-unsigned"}));
  INFO(printable(imported.out) << printable(imported.err));
  CHECK(imported.exit_code == 0);
  check_printable(imported);
  CHECK(count_lines_starting(imported.out, "imported ") == 1);
  // The checkpoint path is not on this machine: the warning quotes it, escaped.
  CHECK(count_lines_containing(imported.out, "1 imported, 0 already present") == 1);
  CHECK(lines_of(imported.out).size() == 1 + 1 + count_lines_containing(imported.out, "warning:"));

  Cache again;
  auto json = run_cli(with_dir(again, {"import", archive, "--json", "--trust-unsigned"}));
  CHECK(json.exit_code == 0);
  check_printable(json);
  REQUIRE(json.json()["entries"].size() == 1);
  CHECK(json.json()["entries"][0]["component"] == kComponent);
}

TEST_CASE("cli error lines, a cache directory's own name and ambiguous candidates are escaped",
          "[cli][terminal]") {
  TempDir dir;
  const std::string path = dir / ("cache" + kForgedFileName);
  auto store = Store::open(test_config(path));
  REQUIRE(store.is_ok());
  // Seventeen ids over sixteen first digits: two must share one.
  std::map<char, int> first_digits;
  char shared = 0;
  for (int seed = 50; seed < 67 && !shared; ++seed) {
    const std::string id = publish_hostile(**store, seed);
    if (++first_digits[id[0]] == 2) shared = id[0];
  }
  REQUIRE(shared != 0);

  for (const std::vector<std::string>& args :
       std::vector<std::vector<std::string>>{{"stats"}, {"config"}, {"ls"}}) {
    auto run = run_cli({args.front(), "--dir", path});
    INFO(args.front());
    CHECK(run.exit_code == 0);
    check_printable(run);
  }
  auto config = run_cli({"config", "--dir", path});
  CHECK(contains(config.out, "cache\\x1b[31m\\nok "));

  // What the user typed, quoted back.
  auto bad_id = run_cli({"inspect", kRed + "zz", "--dir", path});
  CHECK(bad_id.exit_code == 2);
  check_printable(bad_id);
  CHECK(contains(bad_id.err, "snapcache: '\\x1b[31mzz' is not an entry id"));

  // The candidates of an ambiguous prefix: one line each under the error, whatever they are named.
  auto ambiguous = run_cli({"inspect", std::string(1, shared), "--dir", path});
  INFO(printable(ambiguous.err));
  CHECK(ambiguous.exit_code == 3);
  check_printable(ambiguous);
  CHECK(lines_of(ambiguous.err).size() == 3);
  CHECK(count_lines_starting(ambiguous.err, "snapcache: ") == 1);
  CHECK(count_lines_starting(ambiguous.err, "  " + std::string(1, shared)) == 2);

  // A directory that is not there, named by the user.
  auto missing = run_cli({"ls", "--dir", path + "/gone" + kTitle});
  CHECK(missing.exit_code == 3);
  check_printable(missing);
}

TEST_CASE("cli donors prints a donor's refusal escaped and --json keeps its words", "[cli][terminal][donors]") {
  TempDir dir;
  const std::string sockets = dir / "sockets";
  REQUIRE(::mkdir(sockets.c_str(), 0700) == 0);
  const std::string reason = "busy" + kRed + kBell + kTitle + kC1Clear + "\nGPU-0000  4242  dit  0/1  1.0 GiB";
  const std::string answer = nlohmann::json({{"ok", false}, {"code", "busy"}, {"reason", reason}}).dump();
  ChildProcess donor(kStoreHelper, {"ipc-answer", sockets, "GPU-refusing.sock", answer});
  REQUIRE(donor.wait_for_line("listening"));

  auto text = run_cli({"donors", "--socket-dir", sockets});
  INFO(printable(text.out) << printable(text.err));
  CHECK(text.exit_code == 0);
  check_printable(text);
  CHECK(contains(text.out, "not answering: the donor refused: busy\\x1b[31m\\x07"));
  CHECK(lines_of(text.out).size() == 2);  // the header and the one socket

  auto json = run_cli({"donors", "--socket-dir", sockets, "--json"});
  CHECK(json.exit_code == 0);
  check_printable(json);
  REQUIRE(json.json().size() == 1);
  CHECK(json.json()[0]["error"] == "the donor refused: " + reason);
}
