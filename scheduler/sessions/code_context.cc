#include "scheduler/sessions/code_context.h"

#include <signal.h>
#include <sys/random.h>

#include <cctype>
#include <cstring>

#include "common/clock.h"
#include "common/log.h"
#include "common/runtimes.h"

namespace sandpool {
namespace {

// The drivers. Each reads calls from stdin ("<bytes>\n<source>"), runs each in one namespace
// that persists between calls, prints the value of a final expression (as a REPL would), and
// ends each call with "\x1esandpool:<nonce>:<status>\x1e\n" on stdout and on stderr. The nonce
// comes from SANDPOOL_CONTEXT_NONCE, removed from the environment before any call runs.
constexpr const char* kPythonDriver = R"PY(
import ast, os, sys, traceback
def _sandpool_main():
    nonce = os.environ.pop("SANDPOOL_CONTEXT_NONCE", "")
    src = os.fdopen(os.dup(0), "rb")
    nul = os.open("/dev/null", os.O_RDONLY)
    os.dup2(nul, 0)
    os.close(nul)
    ns = {"__name__": "__main__", "__builtins__": __builtins__}
    while True:
        line = src.readline()
        if not line:
            return
        code = src.read(int(line)).decode("utf-8", "replace")
        status = 0
        try:
            tree = ast.parse(code, "<code>", "exec")
            last = None
            if tree.body and isinstance(tree.body[-1], ast.Expr):
                last = ast.Expression(tree.body.pop().value)
            exec(compile(tree, "<code>", "exec"), ns)
            if last is not None:
                value = eval(compile(last, "<code>", "eval"), ns)
                if value is not None:
                    print(repr(value))
        except SystemExit as e:
            status = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        except BaseException:
            traceback.print_exc()
            status = 1
        for f in (sys.stdout, sys.stderr):
            try:
                f.flush()
            except Exception:
                pass
        end = ("\x1esandpool:%s:%d\x1e\n" % (nonce, status & 255)).encode()
        os.write(1, end)
        os.write(2, end)
_sandpool_main()
)PY";

constexpr const char* kNodeDriver = R"JS(
const vm = require('vm'), fs = require('fs'), util = require('util');
const nonce = process.env.SANDPOOL_CONTEXT_NONCE || '';
delete process.env.SANDPOOL_CONTEXT_NONCE;
globalThis.require = require;
let buf = Buffer.alloc(0), busy = false;
const end = (status) => {
  const m = '\x1esandpool:' + nonce + ':' + (status & 255) + '\x1e\n';
  fs.writeSync(1, m);
  fs.writeSync(2, m);
};
const show = (v) => { if (v !== undefined) console.log(typeof v === 'string' ? v : util.inspect(v)); };
async function run(code) {
  let status = 0;
  try {
    let script;
    try {
      script = new vm.Script(code, { filename: '<code>' });
    } catch (e) {
      if (!(e instanceof SyntaxError) || !/await/.test(String(e.message))) throw e;
      script = new vm.Script('(async () => {\n' + code + '\n})()', { filename: '<code>' });
    }
    let v = script.runInThisContext();
    if (v && typeof v.then === 'function') v = await v;
    show(v);
  } catch (e) {
    console.error(e && e.stack ? e.stack : String(e));
    status = 1;
  }
  end(status);
}
async function pump() {
  if (busy) return;
  busy = true;
  for (;;) {
    const nl = buf.indexOf(10);
    if (nl < 0) break;
    const n = parseInt(buf.subarray(0, nl).toString(), 10);
    if (buf.length < nl + 1 + n) break;
    const code = buf.subarray(nl + 1, nl + 1 + n).toString('utf8');
    buf = buf.subarray(nl + 1 + n);
    await run(code);
  }
  busy = false;
}
process.on('uncaughtException', (e) => console.error(e && e.stack ? e.stack : String(e)));
process.on('unhandledRejection', (e) => console.error(e && e.stack ? e.stack : String(e)));
process.stdin.on('data', (d) => { buf = Buffer.concat([buf, d]); pump(); });
process.stdin.on('end', () => process.exit(0));
)JS";

std::string Nonce() {
  unsigned char raw[16];
  size_t got = 0;
  while (got < sizeof raw) {
    ssize_t n = ::getrandom(raw + got, sizeof raw - got, 0);
    if (n > 0) got += static_cast<size_t>(n);
  }
  static const char kHex[] = "0123456789abcdef";
  std::string s;
  for (unsigned char c : raw) {
    s += kHex[c >> 4];
    s += kHex[c & 15];
  }
  return s;
}

}  // namespace

struct CodeContext::CallState {
  std::string op_id;
  JobSpec spec;
  uint32_t attempt = 1;
  Session::CommandDone done;
  uint64_t seq = 0;
  ProcessIo::Output out;  // the call's output, up to spec.max_output_bytes per stream
  int64_t started_us = 0;
  bool sent = false;
};

CodeContext::CodeContext(Session& session, std::string name, std::string runtime)
    : session_(session), name_(std::move(name)), runtime_(std::move(runtime)) {
  timeout_ev_ = evtimer_new(session_.base(), &CodeContext::OnTimeout, this);
}

CodeContext::~CodeContext() {
  KillInterpreter();
  // Anything still here is answered (the session is going).
  state_ = State::kGone;
  if (current_) EndCall(KillReason::kNone, true);
  while (!queue_.empty()) {
    current_ = std::move(queue_.front());
    queue_.pop_front();
    EndCall(KillReason::kNone, true);
  }
  event_free(timeout_ev_);
}

const char* CodeContext::DriverSource(const std::string& runtime) {
  return runtime == "node" ? kNodeDriver : kPythonDriver;
}

int CodeContext::TakeOutput(const std::string& marker, std::string* held, std::string_view data, std::string* out) {
  std::string& b = *held;
  b.append(data);
  for (;;) {
    size_t p = b.find(marker);
    if (p == std::string::npos) break;
    size_t i = p + marker.size(), j = i;
    while (j < b.size() && j - i < 4 && std::isdigit(static_cast<unsigned char>(b[j]))) ++j;
    if (j + 2 <= b.size() || j - i >= 4) {
      if (j > i && j - i < 4 && b[j] == '\x1e' && b[j + 1] == '\n') {
        out->append(b, 0, p);
        int status = std::atoi(b.substr(i, j - i).c_str());
        b.clear();  // the driver writes nothing after a marker until the next call
        return status;
      }
      // Looked like a marker but is not one: pass its first byte on and look again.
      out->append(b, 0, p + 1);
      b.erase(0, p + 1);
      continue;
    }
    // A marker may be arriving: wait for the rest.
    out->append(b, 0, p);
    b.erase(0, p);
    return -1;
  }
  // Hold back the longest tail that could be the start of a marker.
  size_t keep = 0;
  for (size_t k = std::min(b.size(), marker.size() - 1); k > 0; --k) {
    if (b.compare(b.size() - k, k, marker, 0, k) == 0) {
      keep = k;
      break;
    }
  }
  out->append(b, 0, b.size() - keep);
  b.erase(0, b.size() - keep);
  return -1;
}

void CodeContext::Call(const std::string& op_id, const JobSpec& command, uint32_t attempt, Session::CommandDone done) {
  auto c = std::make_unique<CallState>();
  c->op_id = op_id;
  c->spec = command;
  c->attempt = attempt;
  c->done = std::move(done);
  queue_.push_back(std::move(c));
  Next();
}

bool CodeContext::Cancel(const std::string& op_id) {
  if (current_ && current_->op_id == op_id) {
    KillInterpreter();
    EndCall(KillReason::kCancel, false);
    Next();
    return true;
  }
  for (auto it = queue_.begin(); it != queue_.end(); ++it) {
    if ((*it)->op_id != op_id) continue;
    std::unique_ptr<CallState> waiting = std::move(*it);
    queue_.erase(it);
    std::swap(current_, waiting);
    EndCall(KillReason::kCancel, false);
    std::swap(current_, waiting);
    return true;
  }
  return false;
}

void CodeContext::Calls(std::vector<std::string>* op_ids) const {
  if (current_) op_ids->push_back(current_->op_id);
  for (const auto& c : queue_) op_ids->push_back(c->op_id);
}

void CodeContext::Restart() {
  KillInterpreter();
  if (current_) {
    EndCall(KillReason::kCancel, false);
    Next();
  }
}

void CodeContext::KillInterpreter() {
  if (state_ == State::kGone) return;
  if (pid_ > 0) session_.Signal(pid_, SIGKILL, nullptr);
  pid_ = 0;
  ++generation_;  // whatever the old interpreter still says is ignored
  state_ = State::kNone;
  held_[0].clear();
  held_[1].clear();
  status_[0] = status_[1] = -1;
  if (io_) {
    // Its callbacks may be running now: it goes from the loop.
    std::shared_ptr<ProcessIo> old(std::move(io_));
    old->GiveUp();
    session_.Defer([old] {});
  }
}

void CodeContext::StartInterpreter() {
  state_ = State::kStarting;
  uint64_t gen = ++generation_;
  marker_ = "\x1esandpool:" + Nonce() + ":";
  const RuntimeInfo* rt = FindRuntime(runtime_);
  AgentExecMsg m;
  if (runtime_ == "python") m.argv = {rt->interpreter, "-u", "-c", DriverSource(runtime_)};
  else m.argv = {rt->interpreter, "-e", DriverSource(runtime_)};
  m.env = session_.CommandEnv(JobSpec{});
  m.env.push_back("SANDPOOL_CONTEXT_NONCE=" + marker_.substr(10, 32));
  m.cwd = "/work";
  m.stdin_pipe = true;
  session_.StartProcess(
      std::move(m),
      [this, gen](const AgentStartedMsg* s, std::vector<UniqueFd> fds) {
        if (gen != generation_) {
          if (s != nullptr && s->error == 0) session_.Signal(s->pid, SIGKILL, nullptr);
          return;
        }
        if (s == nullptr) {
          state_ = State::kGone;
          Next();
          return;
        }
        if (s->error != 0) {
          state_ = State::kNone;
          if (current_) {
            JobResult r;
            r.id = current_->op_id;
            r.attempt = current_->attempt;
            r.worker = session_.worker();
            r.outcome = Outcome::kError;
            r.error = JobError{ErrorCode::kExecFailed, "the " + runtime_ + " interpreter could not start: " + s->stage +
                                                           ": " + std::strerror(s->error)};
            auto done = std::move(current_->done);
            current_.reset();
            done(std::move(r), 0);
          }
          Next();
          return;
        }
        pid_ = s->pid;
        io_ = std::make_unique<ProcessIo>();
        ProcessIo::Hooks hooks;
        hooks.on_output = [this, gen](std::string_view stream, std::string_view data) {
          if (gen == generation_) OnOutput(stream == "stdout" ? 0 : 1, data);
        };
        io_->Start(session_.base(), std::move(fds[0]), std::move(fds[1]), std::move(fds[2]), {}, 0, true, true,
                   std::move(hooks));
        state_ = State::kReady;
        Next();
      },
      [this, gen](const AgentExitedMsg* e) {
        if (gen != generation_) return;
        // The interpreter ended under a call (os._exit, a crash, the OOM killer) or the session did.
        pid_ = 0;
        bool gone = e == nullptr;
        if (current_ && current_->sent) {
          KillInterpreter();
          if (gone) {
            EndCall(KillReason::kNone, true);
          } else {
            JobResult r;
            r.id = current_->op_id;
            r.attempt = current_->attempt;
            r.worker = session_.worker();
            ExitedMsg x;
            x.have_status = true;
            x.started = true;
            x.wait_status = e->wait_status;
            x.exec_time_us = static_cast<uint64_t>(MonotonicUs() - current_->started_us);
            FillOutcome(x, KillReason::kNone, &r);
            FoldOutput(std::move(current_->out), &r);
            uint64_t seq = current_->seq++;
            auto done = std::move(current_->done);
            current_.reset();
            evtimer_del(timeout_ev_);
            done(std::move(r), seq);
          }
        } else {
          KillInterpreter();
        }
        if (gone) state_ = State::kGone;
        Next();
      });
}

void CodeContext::Next() {
  if (state_ == State::kGone) {
    if (current_) EndCall(KillReason::kNone, true);
    while (!queue_.empty()) {
      current_ = std::move(queue_.front());
      queue_.pop_front();
      EndCall(KillReason::kNone, true);
    }
    return;
  }
  if (!current_) {
    if (queue_.empty()) return;
    current_ = std::move(queue_.front());
    queue_.pop_front();
  }
  if (current_->sent) return;
  if (state_ == State::kNone) {
    StartInterpreter();
    return;
  }
  if (state_ != State::kReady) return;
  CallState& c = *current_;
  c.sent = true;
  c.started_us = MonotonicUs();
  session_.Publish(session_.OpChannel(c.op_id), EncodeStartedEvent(c.seq++, session_.worker(), c.attempt));
  const std::string& code = *c.spec.code;
  io_->WriteStdin(std::to_string(code.size()) + "\n");
  io_->WriteStdin(code);
  struct timeval tv = TimevalMs(c.spec.timeout_ms);
  evtimer_add(timeout_ev_, &tv);
}

void CodeContext::OnOutput(int stream, std::string_view data) {
  if (!current_ || !current_->sent || status_[stream] >= 0) return;  // not a call's output
  CallState& c = *current_;
  std::string chunk;
  int status = TakeOutput(marker_, &held_[stream], data, &chunk);
  if (!chunk.empty()) {
    uint64_t room = c.spec.max_output_bytes > c.out.data[stream].size() ? c.spec.max_output_bytes - c.out.data[stream].size() : 0;
    size_t keep = static_cast<size_t>(std::min<uint64_t>(room, chunk.size()));
    c.out.data[stream].append(chunk, 0, keep);
    if (keep > 0) {
      session_.Publish(session_.OpChannel(c.op_id),
                       EncodeOutputEvent(c.seq++, stream == 0 ? "stdout" : "stderr", std::string_view(chunk).substr(0, keep)));
    }
    if (keep < chunk.size()) {
      c.out.truncated[stream] = true;
      c.out.dropped[stream] += chunk.size() - keep;
      KillInterpreter();
      EndCall(KillReason::kOutputLimit, false);
      Next();
      return;
    }
  }
  if (status >= 0) {
    status_[stream] = status;
    if (status_[0] >= 0 && status_[1] >= 0) {
      int code = status_[0];
      status_[0] = status_[1] = -1;
      JobResult r;
      r.exit_code = code;
      r.outcome = Outcome::kExit;
      evtimer_del(timeout_ev_);
      CallState& done_call = *current_;
      r.id = done_call.op_id;
      r.attempt = done_call.attempt;
      r.worker = session_.worker();
      r.exec_time_us = static_cast<uint64_t>(MonotonicUs() - done_call.started_us);
      FoldOutput(std::move(done_call.out), &r);
      uint64_t seq = done_call.seq++;
      auto done = std::move(done_call.done);
      current_.reset();
      done(std::move(r), seq);
      Next();
    }
  }
}

void CodeContext::OnTimeout(evutil_socket_t, short, void* arg) {
  auto* self = static_cast<CodeContext*>(arg);
  if (!self->current_) return;
  self->KillInterpreter();
  self->EndCall(KillReason::kTimeout, false);
  self->Next();
}

// Ends the current call without its marker: killed (why), or the session went.
void CodeContext::EndCall(KillReason kill, bool session_gone) {
  if (!current_) return;
  evtimer_del(timeout_ev_);
  std::unique_ptr<CallState> c = std::move(current_);
  JobResult r;
  r.id = c->op_id;
  r.attempt = c->attempt;
  r.worker = session_.worker();
  FoldOutput(std::move(c->out), &r);
  if (c->sent) r.exec_time_us = static_cast<uint64_t>(MonotonicUs() - c->started_us);
  if (session_gone) {
    r.outcome = Outcome::kError;
    r.error = JobError{ErrorCode::kSessionStopped, "the session stopped before the code ended"};
  } else {
    ExitedMsg x;
    x.have_status = false;
    x.started = c->sent;
    FillOutcome(x, kill, &r);
  }
  uint64_t seq = c->seq++;
  c->done(std::move(r), seq);
}

}  // namespace sandpool
