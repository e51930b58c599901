// Text from outside made printable (snapcache/printable.h), and the default log sink, which prints
// every message as one such line.
#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "snapcache/log.h"
#include "snapcache/printable.h"
#include "support/captured_stderr.h"
#include "support/catch.h"
#include "support/temp_dir.h"

using namespace snapcache;

TEST_CASE("printable escapes what a terminal acts on and keeps the rest", "[printable]") {
  CHECK(printable("model-00001.safetensors") == "model-00001.safetensors");
  CHECK(printable("") == "");
  // C0 controls and DEL; the three common ones by name; a backslash doubled, so "\x1b" as typed
  // and ESC read differently.
  CHECK(printable("\x1b[31mred\x07") == "\\x1b[31mred\\x07");
  CHECK(printable("a\nb\rc\td") == "a\\nb\\rc\\td");
  CHECK(printable(std::string("nul\0end", 7)) == "nul\\x00end");
  CHECK(printable("del\x7f") == "del\\x7f");
  CHECK(printable("C:\\x1b") == "C:\\\\x1b");
  // Printable UTF-8 stays: accents, CJK, an emoji.
  const std::string utf8 = "caf\xc3\xa9 \xe6\x97\xa5\xe6\x9c\xac \xf0\x9f\x98\x80";
  CHECK(printable(utf8) == utf8);
  // C1 controls (U+009B is CSI to some terminals), bidirectional controls, line separators.
  CHECK(printable("\xc2\x9b" "2J") == "\\u009b2J");
  CHECK(printable("\xc2\x80\xc2\x9f") == "\\u0080\\u009f");
  CHECK(printable("abc\xe2\x80\xae" "fdp.exe") == "abc\\u202efdp.exe");
  CHECK(printable("\xe2\x80\xaa\xe2\x81\xa6\xe2\x81\xa9\xe2\x80\x8e\xd8\x9c") == "\\u202a\\u2066\\u2069\\u200e\\u061c");
  CHECK(printable("a\xe2\x80\xa8" "b\xe2\x80\xa9") == "a\\u2028b\\u2029");
  // Bytes that are not UTF-8, each on its own: stray continuation, truncated sequence, overlong
  // '/', a surrogate, beyond U+10FFFF, a lead byte that never starts a sequence.
  CHECK(printable("\xff") == "\\xff");
  CHECK(printable("a\x80z") == "a\\x80z");
  CHECK(printable("\xe6\x97") == "\\xe6\\x97");
  CHECK(printable("\xc0\xaf") == "\\xc0\\xaf");
  CHECK(printable("\xed\xa0\x80") == "\\xed\\xa0\\x80");
  CHECK(printable("\xf4\x90\x80\x80") == "\\xf4\\x90\\x80\\x80");
  CHECK(printable("\xf8\x88\x80\x80\x80") == "\\xf8\\x88\\x80\\x80\\x80");
  // A truncated sequence before a valid one loses nothing of the valid one.
  CHECK(printable("\xe6\xc3\xa9") == "\\xe6\xc3\xa9");
}

namespace {

// `cp` as UTF-8.
std::string utf8(char32_t cp) {
  std::string out;
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return out;
}

}  // namespace

TEST_CASE("printable escapes invisible and format characters, so a name never prints like another", "[printable]") {
  // Each between "di" and "t" shows as "dit" (or as "dit" with a blank) on a terminal: format
  // characters (Cf), default-ignorable code points, and spaces other than U+0020.
  const std::vector<std::pair<char32_t, std::string>> hidden = {
      {0x200B, "\\u200b"},      // zero width space (Cf)
      {0x00AD, "\\u00ad"},      // soft hyphen (Cf)
      {0xFEFF, "\\ufeff"},      // byte-order mark, zero width no-break space (Cf)
      {0x2060, "\\u2060"},      // word joiner (Cf)
      {0x034F, "\\u034f"},      // combining grapheme joiner (default-ignorable, Mn)
      {0x200D, "\\u200d"},      // zero width joiner (Cf)
      {0x180E, "\\u180e"},      // Mongolian vowel separator (Cf)
      {0x2064, "\\u2064"},      // invisible plus (Cf)
      {0x2065, "\\u2065"},      // unassigned, and default-ignorable
      {0x115F, "\\u115f"},      // Hangul choseong filler (default-ignorable, Lo)
      {0x1160, "\\u1160"},      // Hangul jungseong filler
      {0x3164, "\\u3164"},      // Hangul filler
      {0xFFA0, "\\uffa0"},      // halfwidth Hangul filler
      {0x17B4, "\\u17b4"},      // Khmer vowel inherent aq (default-ignorable, Mn)
      {0xFE0F, "\\ufe0f"},      // variation selector 16 (default-ignorable, Mn)
      {0x0600, "\\u0600"},      // Arabic number sign (Cf)
      {0xFFF9, "\\ufff9"},      // interlinear annotation anchor (Cf)
      {0x00A0, "\\u00a0"},      // no-break space (Zs): prints as a space
      {0x3000, "\\u3000"},      // ideographic space (Zs)
      {0x2800, "\\u2800"},      // Braille pattern blank: a blank glyph
      {0x1D173, "\\U0001d173"},  // musical symbol begin beam (Cf)
      {0xE0001, "\\U000e0001"},  // language tag (Cf)
      {0xE0041, "\\U000e0041"},  // tag latin capital letter A (Cf)
      {0xE0100, "\\U000e0100"},  // variation selector 17 (default-ignorable, Mn)
      {0xE0FFF, "\\U000e0fff"},  // unassigned, and default-ignorable
  };
  std::set<std::string> printed = {printable("dit")};
  for (const auto& [cp, escaped] : hidden) {
    INFO("U+" << std::hex << static_cast<std::uint32_t>(cp));
    CHECK(printable("di" + utf8(cp) + "t") == "di" + escaped + "t");
    printed.insert(printable("di" + utf8(cp) + "t"));
  }
  CHECK(printed.size() == hidden.size() + 1);  // no two print alike
  // Visible text stays as it is: letters of any script, a combining accent (it shows), CJK,
  // Hangul, an emoji, private use (a glyph of some font), the last code point.
  for (char32_t cp : std::initializer_list<char32_t>{0x00E9, 0x0301, 0x05D0, 0x0627, 0x0915, 0x4E2D, 0xD55C, 0x1F600, 0xE000, 0x10FFFD}) {
    INFO("U+" << std::hex << static_cast<std::uint32_t>(cp));
    CHECK(printable("a" + utf8(cp)) == "a" + utf8(cp));
  }
}

// The table in printable.cpp is Unicode 15.0's: every code point of general category Cc, Cf, Zs
// (but U+0020), Zl or Zp, or with the property Default_Ignorable_Code_Point, is escaped, and
// nothing else but U+2800 (a blank glyph). Checked against the Unicode Character Database as
// Debian's unicode-data package installs it (tools/setup.sh): a newer Unicode that adds such code
// points fails here, and the table is brought up to date.
TEST_CASE("printable escapes exactly the characters Unicode's data says are controls, format, space or ignorable",
          "[printable]") {
  // SNAPCACHE_UNICODE_DATA: where the package was unpacked instead (the GPU machine: tools/gpu/).
  const char* unpacked = std::getenv("SNAPCACHE_UNICODE_DATA");
  const std::string ucd = unpacked != nullptr ? std::string(unpacked) + "/" : "/usr/share/unicode/";
  std::ifstream data(ucd + "UnicodeData.txt");
  std::ifstream derived(ucd + "DerivedCoreProperties.txt");
  INFO("the Unicode Character Database: Debian's unicode-data package, which tools/setup.sh installs");
  REQUIRE(data.good());
  REQUIRE(derived.good());
  std::vector<std::string> category(0x110000, "Cn");
  std::string line, first_of_range;
  while (std::getline(data, line)) {  // "0041;LATIN CAPITAL LETTER A;Lu;..."; ranges as <..., First> and <..., Last>
    std::stringstream fields(line);
    std::string code, name, cat;
    std::getline(fields, code, ';');
    std::getline(fields, name, ';');
    std::getline(fields, cat, ';');
    const auto cp = static_cast<char32_t>(std::stoul(code, nullptr, 16));
    if (name.ends_with("First>")) {
      first_of_range = code;
      continue;
    }
    const char32_t from = name.ends_with("Last>") ? static_cast<char32_t>(std::stoul(first_of_range, nullptr, 16)) : cp;
    for (char32_t c = from; c <= cp; ++c) category[c] = cat;
  }
  std::vector<bool> ignorable(0x110000, false);
  std::size_t ignorable_count = 0;
  while (std::getline(derived, line)) {  // "E0000..E0FFF  ; Default_Ignorable_Code_Point # ..."
    if (line.find("; Default_Ignorable_Code_Point") == std::string::npos || line.starts_with("#")) continue;
    const std::string range = line.substr(0, line.find(' '));
    const auto dots = range.find("..");
    const auto from = static_cast<char32_t>(std::stoul(range.substr(0, dots), nullptr, 16));
    const auto to = dots == std::string::npos ? from : static_cast<char32_t>(std::stoul(range.substr(dots + 2), nullptr, 16));
    for (char32_t c = from; c <= to; ++c) ignorable[c] = true, ++ignorable_count;
  }
  REQUIRE(category[0x200B] == "Cf");
  REQUIRE(ignorable_count > 4000);  // the file was read

  std::size_t escaped = 0;
  std::vector<std::string> wrong;
  for (char32_t cp = 0; cp < 0x110000; ++cp) {
    if (cp >= 0xD800 && cp <= 0xDFFF) continue;  // surrogates: not UTF-8 at all
    const std::string& cat = category[cp];
    const bool hide = cat == "Cc" || cat == "Cf" || cat == "Zl" || cat == "Zp" || (cat == "Zs" && cp != 0x20) ||
                      ignorable[cp] || cp == 0x2800;
    const std::string text = utf8(cp);
    const bool escapes = printable(text) != text;
    escaped += escapes;
    // A backslash is escaped too, as itself: no control of the terminal's.
    if (escapes != (hide || cp == '\\') && wrong.size() < 20) {
      std::ostringstream at;
      at << "U+" << std::hex << static_cast<std::uint32_t>(cp) << " (" << cat << (ignorable[cp] ? ", ignorable" : "")
         << ") is " << (escapes ? "escaped" : "printed as it is");
      wrong.push_back(at.str());
    }
  }
  INFO([&] {
    std::string all;
    for (const auto& w : wrong) all += w + "\n";
    return all;
  }());
  CHECK(wrong.empty());
  CHECK(escaped > 4000);
}

TEST_CASE("the default log sink writes each message as one escaped line on stderr", "[printable][log]") {
  test::CapturedStderr captured;
  const LogLevel before = log_level();
  set_log_level(LogLevel::info);
  log(LogLevel::warn, "entry 0123 is damaged (tensor 'w\x1b]0;owned\x07\nsnapcache[info] load dit: hit'); removing it");
  log_to_stderr(LogLevel::info, "second\r\x1b[2K");
  set_log_level(before);
  CHECK(captured.text() ==
        "snapcache[warn] entry 0123 is damaged (tensor 'w\\x1b]0;owned\\x07\\nsnapcache[info] load dit: hit'); "
        "removing it\n"
        "snapcache[info] second\\r\\x1b[2K\n");
}
