// c10d's TCPStore, reached within a deadline. torch's constructor retries a refused connection
// past its timeout (logging every failure with a C++ stack trace on stderr), and once connected
// to a program that accepts and never answers it waits for that answer for ever. So a client
// first connects on its own, retrying until the deadline, and hands the address to torch only once
// something accepts; and torch's constructor runs on a thread of its own, which the caller waits
// for until the deadline (and a quarter of a second) and, when it never returns, leaves behind
// blocked on its socket: the only way out of a read torch gives no timeout.
#pragma once

#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <chrono>
#include <string>
#include <vector>

#include "snapcache/status.h"

namespace snapcache::distributed {

using Deadline = std::chrono::steady_clock::time_point;

// The time left until `deadline`, at least 1 ms (c10d reads 0 as "no timeout").
std::chrono::milliseconds time_left(Deadline deadline);

// Whether every key is set in `store` by `deadline`, asked with check() (which answers at once),
// more slowly the longer it waits. c10d's own wait() logs two warnings when it times out and
// leaves the connection out of step (the server still owes it an answer). Throws what the store
// throws (it cannot be reached).
bool keys_set_by(c10d::Store& store, const std::vector<std::string>& keys, Deadline deadline);

// The store at host:port (options.isServer: this process serves it), by `deadline`. Errors, each one line for the caller to say how long it waited:
// nothing accepted a connection (io_error, naming the last errno); the peer accepted but did not
// answer as a c10d store (io_error); the port is taken (busy: a server whose port another process
// holds); or torch's own error, without its stack trace.
Result<c10::intrusive_ptr<c10d::TCPStore>> open_tcp_store(const std::string& host, c10d::TCPStoreOptions options,
                                                          Deadline deadline);

}  // namespace snapcache::distributed
