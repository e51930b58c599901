// Text that came from outside (a cache entry's names, an archive, a peer's answer, a file name)
// made safe to print on a terminal. The `snapcache` command, the default log sink and the demo
// print such text only through this.
#pragma once

#include <string>
#include <string_view>

#include "snapcache/export.h"

namespace snapcache {

// `text` as one line that a terminal shows as it reads and that says exactly what the bytes were,
// so that two names that differ never print alike: a backslash is written "\\"; newline, carriage
// return and tab "\n", "\r", "\t"; every other C0 control byte and DEL "\x1b"-style; bytes that
// are not UTF-8 (a stray continuation byte, an overlong or truncated sequence, a surrogate)
// "\xff"-style, each byte on its own; and "\u202e"-style ("\U000e0041" above U+FFFF) every code
// point a terminal acts on or shows as nothing or as a blank: the C1 controls U+0080..U+009F (a
// terminal may take U+009B for CSI), the format characters (general category Cf: the
// bidirectional controls, which reorder what follows on the line, zero-width spaces and joiners,
// the byte-order mark, the soft hyphen, tag characters, ...), the other default-ignorable code
// points (U+034F, the Hangul fillers, variation selectors, ...), the line and paragraph separators
// and every space but U+0020 (U+00A0, U+3000, ...; and U+2800, a blank Braille pattern): Unicode
// 15.0's, as listed in src/util/printable.cpp. Everything else, printable UTF-8 of any script
// included, is kept.
SNAPCACHE_API std::string printable(std::string_view text);

}  // namespace snapcache
