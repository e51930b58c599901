// The directory that holds donor sockets must be private to the user: anyone who can create a
// file there could stand in for a donor, and anyone who can read it could attach to one.
#pragma once

#include <string>

#include "snapcache/status.h"

namespace snapcache::ipc {

// The default socket directory: $SNAPCACHE_DONOR_DIR, else $XDG_RUNTIME_DIR/snapcache, else
// /tmp/snapcache-<uid>.
std::string default_socket_dir();

// Checks that `dir` is a directory (not a symlink to one), owned by the effective user, with no
// permission bits for group or others; with `create`, makes it 0700 first when it is missing (its
// parent must exist). The error says which rule failed and how to fix it (permission_denied for
// a directory that is not private, not_found for a missing one).
Status require_private_dir(const std::string& dir, bool create);

}  // namespace snapcache::ipc
