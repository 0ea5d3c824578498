// A session's file operations (PROTOCOL.md section 15, "Files"), done by the session's agent
// inside the session's sandbox: every path is the session's own view, and every check is the
// kernel's, made as the session's job user (fsuid 1000) unless the request says `as_root`.
// Regular files only are read or written (never a FIFO, socket or device: nothing blocks and
// nothing is endless); the sizes a call may move are bounded (kMaxFileData).
//
// Runs in the agent (init of the session sandbox: sandbox_init.h's rules for init).
#pragma once

#include <string_view>

#include "worker/ipc/session_messages.h"

namespace sandpool {

inline constexpr size_t kMaxFileData = 16u << 20;

// Decodes the client's request map (its `op` and that operation's fields) and does it. The reply's
// `error` is a protocol error code (not_found, permission, ...) or empty, `value` the result map.
AgentReplyMsg RunFileOperation(std::string_view request);

}  // namespace sandpool
