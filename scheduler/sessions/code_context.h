// A code context of a session (PROTOCOL.md section 15, `code`): one interpreter (python or
// node) that lives as long as the session runs, so that a variable or import from one call is
// there in the next. Calls run one at a time, in order.
//
// How: the interpreter runs a small driver (code_context.cc) as the session's user, started like
// any process of the session. Each call's source goes to the driver's stdin as "<bytes>\n<source>";
// the driver runs it in its persistent namespace (like a REPL, the value of a final expression is
// printed), then writes an end marker carrying the call's status (0, or 1 if it raised) to both
// stdout and stderr. Output before a marker is the call's, streamed live as the job events of
// the call's op id. The marker holds a random nonce the driver took out of its environment, so
// output that merely looks like a marker is passed on as output.
//
// A call that times out, is cancelled or passes its output cap kills the interpreter (the only
// way to stop code that does not return): the context's state is gone, and the next call starts
// a new one. ContextRestart does the same on request.
//
// Ownership: the Session owns its contexts; a context's callbacks run on the loop thread.
#pragma once

#include <event2/event.h>

#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "scheduler/jobs/process_io.h"
#include "scheduler/sessions/session.h"

namespace sandpool {

class CodeContext {
 public:
  CodeContext(Session& session, std::string name, std::string runtime);
  ~CodeContext();
  CodeContext(const CodeContext&) = delete;
  CodeContext& operator=(const CodeContext&) = delete;

  // Queues a call; `done` gets its job result (exit code 0, or 1 if the code raised).
  void Call(const std::string& op_id, const JobSpec& command, uint32_t attempt, Session::CommandDone done);
  // A cancel: a running call is killed (with the interpreter), a queued one ends cancelled.
  bool Cancel(const std::string& op_id);
  void Calls(std::vector<std::string>* op_ids) const;
  // Kills the interpreter; the next call starts a new one.
  void Restart();

  // The driver's source for a runtime ("python" or "node"), and where a marker's parts are.
  static const char* DriverSource(const std::string& runtime);
  // Splits live output into what belongs to the current call (appended to `out`) and, once the
  // end marker (whose prefix is `marker`) is found, the call's status; bytes that may be the
  // start of a marker wait in `held`. Returns the status, or -1 while no marker was seen.
  static int TakeOutput(const std::string& marker, std::string* held, std::string_view data, std::string* out);

 private:
  struct CallState;

  void StartInterpreter();
  void Next();
  void OnOutput(int stream, std::string_view data);
  void EndCall(KillReason kill, bool session_gone);
  void KillInterpreter();
  static void OnTimeout(evutil_socket_t, short, void* arg);

  Session& session_;
  std::string name_, runtime_;
  enum class State { kNone, kStarting, kReady, kGone } state_ = State::kNone;
  uint64_t generation_ = 0;  // of the interpreter: callbacks of a killed one are ignored
  int64_t pid_ = 0;
  std::unique_ptr<ProcessIo> io_;
  std::string marker_;       // "\x1esandpool:<nonce>:"
  std::string held_[2];
  int status_[2] = {-1, -1};
  std::unique_ptr<CallState> current_;
  std::deque<std::unique_ptr<CallState>> queue_;
  struct event* timeout_ev_ = nullptr;
};

}  // namespace sandpool
