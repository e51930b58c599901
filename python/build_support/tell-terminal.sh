#!/bin/sh
# Says one line to the person who started the build. pip shows a build backend's output only with
# -v, so a plain `pip install .` would be a silent wait of minutes: this writes to the terminal the
# build was started from, when there is one, as well as to the build's log (stdout).
#   tell-terminal.sh [--since EPOCH_SECONDS] MESSAGE    (--since appends " in N s")
if [ "$1" = --since ]; then
  message="$3 in $(( $(date +%s) - $2 )) s"
else
  message="$1"
fi
printf '%s\n' "$message"
# Already on the terminal when stdout is one (CMake run by hand, pip -v); otherwise the terminal
# itself, if this process has one (none in CI: then nothing more, and no error).
# pip's spinner holds the terminal's current line: the message goes on lines of its own.
if [ ! -t 1 ]; then
  { printf '\n%s\n' "$message" > /dev/tty; } 2>/dev/null || true
fi
