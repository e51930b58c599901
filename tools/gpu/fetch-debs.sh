#!/usr/bin/env bash
# Run here (a machine with Debian's registry): downloads the header packages the GPU machine lacks
# into .deps/debs/, an ignored folder to name in the device tool's `carry`.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
mkdir -p "$root/.deps/debs"
cd "$root/.deps/debs"
apt-get download libxxhash-dev libxxhash0 libsodium-dev libsodium23 catch2 nlohmann-json3-dev libcli11-dev libfmt-dev libfmt9 unicode-data >/dev/null
ls -1 "$root/.deps/debs"
