#include "snapcache/printable.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <iterator>

#include "util/fmt.h"

namespace snapcache {
namespace {

// The code point of the UTF-8 sequence at text[i] and its length, or length 0 when the bytes
// there are not one (truncated, overlong, a surrogate, beyond U+10FFFF).
struct Decoded {
  char32_t code_point = 0;
  std::size_t length = 0;
};

Decoded decode_utf8(std::string_view text, std::size_t i) {
  const auto byte = [&](std::size_t k) { return static_cast<unsigned char>(text[k]); };
  const unsigned char lead = byte(i);
  std::size_t length = 0;
  char32_t cp = 0;
  char32_t smallest = 0;  // below it the sequence is overlong
  if (lead >= 0xC2 && lead <= 0xDF) {
    length = 2;
    cp = lead & 0x1Fu;
    smallest = 0x80;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    length = 3;
    cp = lead & 0x0Fu;
    smallest = 0x800;
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    length = 4;
    cp = lead & 0x07u;
    smallest = 0x10000;
  } else {
    return {};
  }
  if (i + length > text.size()) return {};
  for (std::size_t k = 1; k < length; ++k) {
    if ((byte(i + k) & 0xC0u) != 0x80u) return {};
    cp = (cp << 6) | (byte(i + k) & 0x3Fu);
  }
  if (cp < smallest || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return {};
  return {cp, length};
}

struct CodePoints {
  char32_t first;
  char32_t last;
};

// Code points that are valid UTF-8 and still must not reach a terminal as they are: what a terminal
// acts on, or shows as nothing or as a blank, so that a name holding one would print like a name
// without it (or with a space). From the Unicode Character Database 15.0 (UnicodeData.txt and
// DerivedCoreProperties.txt, as Debian's unicode-data package has them): general categories Cc
// (beyond ASCII: C1), Cf, Zl, Zp and Zs (but U+0020), and the property
// Default_Ignorable_Code_Point (which takes in unassigned code points of its blocks, so a later
// Unicode's additions there are escaped already); and U+2800, which every font draws blank.
// Sorted, not overlapping. tests/util/printable_test.cpp checks the table against that data.
constexpr std::array<CodePoints, 29> kHidden = {{
    {0x0080, 0x00A0},    // C1 controls (U+009B is CSI to some terminals); no-break space
    {0x00AD, 0x00AD},    // soft hyphen
    {0x034F, 0x034F},    // combining grapheme joiner
    {0x0600, 0x0605},    // Arabic number signs and marks
    {0x061C, 0x061C},    // Arabic letter mark (bidirectional)
    {0x06DD, 0x06DD},    // Arabic end of ayah
    {0x070F, 0x070F},    // Syriac abbreviation mark
    {0x0890, 0x0891},    // Arabic pound and piastre marks above
    {0x08E2, 0x08E2},    // Arabic disputed end of ayah
    {0x115F, 0x1160},    // Hangul choseong and jungseong fillers
    {0x1680, 0x1680},    // Ogham space mark
    {0x17B4, 0x17B5},    // Khmer inherent vowels
    {0x180B, 0x180F},    // Mongolian variation selectors and vowel separator
    {0x2000, 0x200F},    // spaces; zero width space, non-joiner, joiner; left-to-right and right-to-left marks
    {0x2028, 0x202F},    // line and paragraph separators; bidirectional embeddings and overrides; narrow no-break space
    {0x205F, 0x206F},    // medium mathematical space; word joiner, invisible operators, isolates, deprecated format
    {0x2800, 0x2800},    // Braille pattern blank
    {0x3000, 0x3000},    // ideographic space
    {0x3164, 0x3164},    // Hangul filler
    {0xFE00, 0xFE0F},    // variation selectors 1-16
    {0xFEFF, 0xFEFF},    // zero width no-break space: the byte-order mark
    {0xFFA0, 0xFFA0},    // halfwidth Hangul filler
    {0xFFF0, 0xFFFB},    // unassigned ignorables; interlinear annotation characters
    {0x110BD, 0x110BD},  // Kaithi number sign
    {0x110CD, 0x110CD},  // Kaithi number sign above
    {0x13430, 0x1343F},  // Egyptian hieroglyph format controls
    {0x1BCA0, 0x1BCA3},  // shorthand format controls
    {0x1D173, 0x1D17A},  // musical symbol beam, tie, slur and phrase controls
    {0xE0000, 0xE0FFF},  // tags (language tag, tag characters); variation selectors 17-256; unassigned ignorables
}};

bool hidden(char32_t cp) {
  // The last range that starts at or before cp.
  auto after = std::upper_bound(kHidden.begin(), kHidden.end(), cp,
                                [](char32_t c, const CodePoints& r) { return c < r.first; });
  return after != kHidden.begin() && cp <= std::prev(after)->last;
}

}  // namespace

std::string printable(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size();) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c < 0x80) {
      switch (c) {
        case '\\': out += "\\\\"; break;
        case '\n': out += "\\n"; break;
        case '\r': out += "\\r"; break;
        case '\t': out += "\\t"; break;
        default:
          if (c < 0x20 || c == 0x7F) out += fmt::format("\\x{:02x}", c);
          else out += static_cast<char>(c);
      }
      ++i;
      continue;
    }
    const Decoded d = decode_utf8(text, i);
    if (d.length == 0) {
      out += fmt::format("\\x{:02x}", c);
      ++i;
    } else if (hidden(d.code_point)) {
      // "\u" takes four digits, as in JSON and C: U+E0041 as "\ue0041" would read as U+E004 and "1".
      const auto cp = static_cast<std::uint32_t>(d.code_point);
      out += cp <= 0xFFFF ? fmt::format("\\u{:04x}", cp) : fmt::format("\\U{:08x}", cp);
      i += d.length;
    } else {
      out.append(text.substr(i, d.length));
      i += d.length;
    }
  }
  return out;
}

}  // namespace snapcache
