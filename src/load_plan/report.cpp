#include "snapcache/pipeline.h"

#include <algorithm>
#include <map>
#include <string_view>
#include <utility>
#include <vector>

#include "distributed/rank_list.h"
#include "snapcache/text.h"
#include "util/fmt.h"

namespace snapcache {

const char* to_string(LoadPath path) {
  switch (path) {
    case LoadPath::hit: return "hit";
    case LoadPath::miss: return "miss";
    case LoadPath::fallback: return "fallback";
    case LoadPath::ineligible: return "ineligible";
  }
  return "?";
}

const char* to_string(TierOutcome outcome) {
  switch (outcome) {
    case TierOutcome::served: return "served";
    case TierOutcome::missed: return "missed";
    case TierOutcome::unusable: return "unusable";
    case TierOutcome::skipped: return "skipped";
  }
  return "?";
}

std::string LoadReport::integrity() const {
  // Nothing came from a file on a miss, or on a hit attached from GPU memory (a donor).
  if (path != LoadPath::hit || (bytes_checked == 0 && bytes_trusted == 0)) return "";
  if (bytes_trusted == 0) return fmt::format("every byte ({}) checked against its checksum while staging",
                                             format_size(bytes_checked));
  if (bytes_checked == 0) return "trusted by file identity (unchanged since the entry was last checked in full)";
  return fmt::format("{} checked against their checksums while staging, {} trusted by file identity",
                     format_size(bytes_checked), format_size(bytes_trusted));
}

std::string LoadReport::page_cache() const {
  if (bytes_from_disk == 0) return "";
  // The stages that read the load's files, and their time. From the checkpoint, the loader reads
  // what it fuses or converts (a read-ahead of the file alongside it shares its time), and the
  // read-ahead for post-load, post-load and the upload read the rest; a streaming loader's parts
  // went through post-load and the upload while it ran (their stages overlap it), so what was left
  // after it is the rest. On a hit, the read-ahead and the upload: the upload's own rate would
  // count the bytes a read-ahead had just brought in as read from disk.
  const bool hit = path == LoadPath::hit;
  const bool streamed = std::any_of(stages.begin(), stages.end(),
                                    [](const StageTime& s) { return s.stage == "upload (after the loader)"; });
  // A read-ahead alongside the loader is in the loader's time; the one before post-load is not.
  const std::vector<std::string_view> reading_stages =
      hit        ? std::vector<std::string_view>{"read-ahead", "upload"}
      : streamed ? std::vector<std::string_view>{"ordinary load", "read-ahead", "upload (after the loader)"}
                 : std::vector<std::string_view>{"ordinary load", "read-ahead", "post-load", "upload"};
  double reading = 0;
  std::vector<std::string_view> read_in;
  for (const std::string_view stage : reading_stages)
    for (const auto& s : stages)
      if (s.stage == stage && s.seconds > 0) {
        reading += s.seconds;
        if (std::find(read_in.begin(), read_in.end(), stage) == read_in.end()) read_in.push_back(stage);
      }
  std::string during;
  for (std::size_t i = 0; i < read_in.size(); ++i)
    during += fmt::format("{}the {}", i == 0 ? "" : i + 1 == read_in.size() ? " and " : ", ", read_in[i]);
  if (!hit) {
    // A loader reads what it needs of the checkpoint (a TP rank, its slices), which the library does
    // not see: how much came from the disk, and so the disk's rate, is not known; the time is.
    const std::string when = reading > 0 ? fmt::format(", during {} ({:.2f} s)", during, reading) : "";
    return fmt::format("{} of the checkpoint's {} not in the page cache as the loader started: what the load read of "
                       "it came from the disk{}",
                       format_size(bytes_from_disk), format_size(file_bytes), when);
  }
  // A hit reads its entry whole. The stages' rate is the disk's (at least: they also read what was
  // in the page cache) where the disk's bytes were a good part of what they read: with a quarter
  // or more, a disk 20x slower than memory took most of their time; a few MiB over a second of
  // other work would make a rate that says nothing of the disk.
  const bool disk_bound = bytes_from_disk * 4 >= file_bytes;
  const std::string rate =
      reading <= 0  ? ""
      : disk_bound ? fmt::format(" during {} ({:.2f} s, {:.2f} GB/s)", during, reading,
                                  static_cast<double>(bytes_from_disk) / reading / 1e9)
                    : fmt::format(" during {} ({:.2f} s)", during, reading);
  return fmt::format("{} of {} not in the page cache, read from the disk{}", format_size(bytes_from_disk),
                     format_size(file_bytes), rate);
}

std::string LoadReport::summary() const {
  std::string stages_text;
  for (const auto& s : stages) {
    if (!stages_text.empty()) stages_text += ", ";
    stages_text += fmt::format("{} {:.0f} ms{}", s.stage, s.seconds * 1e3, s.error.empty() ? "" : " (failed)");
  }
  const std::string checked = integrity(), disk = page_cache();
  std::string noted;
  for (const auto& n : notes) noted += "; " + n;
  return fmt::format("{} in {:.2f} s ({}){}{}{}{}{}{}{}", to_string(path), seconds, stages_text,
                     reason.empty() ? "" : ": ", reason, checked.empty() ? "" : "; ", checked, disk.empty() ? "" : "; ",
                     disk, noted);
}

std::vector<std::string> LoadReport::table_lines() const {
  // The stage column as wide as its longest name ("publish (wait: ...)" is long), so columns align.
  std::size_t width = 14;
  for (const auto& s : stages) width = std::max(width, s.stage.size());
  // What no stage timed (the checks between stages, freeing what the load no longer holds), so
  // the lines add up to the total and a cost that hides there still shows.
  double staged = 0;
  for (const auto& s : stages) staged += s.seconds;
  const double outside = seconds - staged;
  constexpr std::string_view kOutside = "outside the stages";
  const bool show_outside = outside >= 0.5e-3;
  if (show_outside) width = std::max(width, kOutside.size());
  std::vector<std::string> out = {fmt::format("  {:<{}} {:>10} {:>12} {:>10}", "stage", width, "ms", "bytes", "GB/s")};
  for (const auto& s : stages) {
    double rate = s.seconds > 0 && s.bytes > 0 ? static_cast<double>(s.bytes) / s.seconds / 1e9 : 0.0;
    out.push_back(fmt::format("  {:<{}} {:>10.1f} {:>12} {:>10}{}", s.stage, width, s.seconds * 1e3,
                              s.bytes ? format_size(s.bytes) : "", rate > 0 ? fmt::format("{:.2f}", rate) : "",
                              s.error.empty() ? "" : "  failed: " + s.error));
  }
  if (show_outside) out.push_back(fmt::format("  {:<{}} {:>10.1f}", kOutside, width, outside * 1e3));
  out.push_back(fmt::format("  {:<{}} {:>10.1f}", "total", width, seconds * 1e3));
  for (const auto& t : tiers) out.push_back(fmt::format("  tier {:<9} {}: {}", t.tier, to_string(t.outcome), t.reason));
  if (group) {
    out.push_back(fmt::format("  group rank {} of {}: took {} ({:.1f} ms agreeing): {}", group->rank, group->size,
                              group->tier, group->agreement_seconds * 1e3, group->decision));
    // Ranks with the same answers share a line, so a large group's table stays a few lines.
    std::vector<std::pair<std::string, std::vector<int>>> answers;
    std::map<std::string, std::size_t> line_of;
    for (std::size_t r = 0; r < group->ranks.size(); ++r) {
      auto [it, added] = line_of.try_emplace(group->ranks[r], answers.size());
      if (added) answers.push_back({group->ranks[r], {}});
      answers[it->second].second.push_back(static_cast<int>(r));
    }
    for (const auto& [answer, ranks] : answers)
      out.push_back(fmt::format("    {} {}: {}", ranks.size() == 1 ? "rank" : "ranks", distributed::rank_list(ranks),
                                answer.empty() ? "(no answer)" : answer));
    if (!group->publication.empty()) out.push_back("  group publication: " + group->publication);
  }
  return out;
}

std::string LoadReport::table() const {
  std::string out;
  for (const auto& line : table_lines()) out += line + "\n";
  return out;
}

StageTimer::StageTimer(LoadReport& report, std::string stage)
    : report_(&report), stage_(std::move(stage)), started_(std::chrono::steady_clock::now()) {}

StageTimer::~StageTimer() {
  if (!recorded_) record(0, "interrupted (an early return or an exception)");
}

void StageTimer::done(std::uint64_t bytes) { record(bytes, {}); }

Status StageTimer::fail(Status status) {
  record(0, status.to_string());
  return status;
}

void StageTimer::fail(std::string error) { record(0, std::move(error)); }

void StageTimer::record(std::uint64_t bytes, std::string error) {
  if (recorded_) return;
  recorded_ = true;
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count();
  report_->stages.push_back({stage_, seconds, bytes, std::move(error)});
}

}  // namespace snapcache
