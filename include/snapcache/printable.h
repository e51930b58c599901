// Text that came from outside (a cache entry's names, an archive, a peer's answer, a file name)
// made safe to print on a terminal. The `snapcache` command, the default log sink and the demo
// print such text only through this.
#pragma once

#include <string>
#include <string_view>

#include "snapcache/export.h"

namespace snapcache {

// `text` as one line that a terminal shows as it reads and that says exactly what the bytes were:
// a backslash is written "\\"; newline, carriage return and tab "\n", "\r", "\t"; every other C0
// control byte and DEL "\x1b"-style; bytes that are not UTF-8 (a stray continuation byte, an
// overlong or truncated sequence, a surrogate) "\xff"-style, each byte on its own; the C1 controls
// U+0080..U+009F (a terminal may take U+009B for CSI), the bidirectional overrides, embeddings,
// isolates and marks (U+061C, U+200E, U+200F, U+202A..U+202E, U+2066..U+2069: they reorder what
// follows on the line) and the line and paragraph separators U+2028, U+2029 "\u202e"-style.
// Everything else, printable UTF-8 included, is kept.
SNAPCACHE_API std::string printable(std::string_view text);

}  // namespace snapcache
