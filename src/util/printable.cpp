#include "snapcache/printable.h"

#include <cstdint>

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

// Code points that are valid UTF-8 and still must not reach a terminal as they are.
bool hidden_control(char32_t cp) {
  return (cp >= 0x80 && cp <= 0x9F)                      // C1 controls
         || cp == 0x061C || cp == 0x200E || cp == 0x200F  // bidirectional marks
         || (cp >= 0x202A && cp <= 0x202E)                // embeddings and overrides
         || (cp >= 0x2066 && cp <= 0x2069)                // isolates
         || cp == 0x2028 || cp == 0x2029;                 // line and paragraph separators
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
    } else if (hidden_control(d.code_point)) {
      out += fmt::format("\\u{:04x}", static_cast<std::uint32_t>(d.code_point));
      i += d.length;
    } else {
      out.append(text.substr(i, d.length));
      i += d.length;
    }
  }
  return out;
}

}  // namespace snapcache
