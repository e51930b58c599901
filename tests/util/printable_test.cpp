// Text from outside made printable (snapcache/printable.h), and the default log sink, which prints
// every message as one such line.
#include <fcntl.h>
#include <unistd.h>

#include <cstdio>

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
  CHECK(printable("\xc2\x80\xc2\x9f\xc2\xa0") == "\\u0080\\u009f\xc2\xa0");  // U+00A0 is printable
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
