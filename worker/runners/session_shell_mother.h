// A session's shell mother: the warm shells of a session (session_agent.cc) cloned from one
// preloaded shell instead of each exec'ing its own. The agent's factory (a fork of the agent)
// confines itself as a warm shell would be (uid 1000, the job's filter, rlimits) and execs the
// session's shell (SessionShellCommand) with the loader preloading libsandpool_nursery.so, whose
// constructor (nursery_lib.cc) then serves here, before the shell's main: each warm shell is a
// clone of that shell which returns into its main, without the exec, the loading and the
// relocations (measured for jobs in bench/analysis.md, 2026-11-28).
//
// Conversation with the agent, over the factory's socket (Channel frames): the agent sends a
// frame with the shell's five fds (stdin, stdout, stderr, its fd 3 and its fd 4, zygote.h's
// SessionShellCommand); the mother answers a frame whose payload is a ShellFactoryReply. The
// shells are the agent's children (CLONE_PARENT): it reaps, signals and accounts them as any
// process of the session. The mother holds nothing a session's command does not hold (the same
// user, filter and limits): the session's code may kill her, after which the agent starts its
// shells itself.
#pragma once

#include <cstdint>

namespace sandpool {

struct ShellFactoryReply {
  int32_t pid;  // > 0, or -errno
};

// In the mother, with `sock` her socket to the agent: serves until the agent is gone, then
// returns -EPIPE. Returns 0 in each warm shell's process: its own session and process group,
// fds 0-4 the five it was sent (none other open), /work its directory; it goes on into the
// shell's main.
long ServeSessionShells(int sock);

}  // namespace sandpool
