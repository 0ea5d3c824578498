#include "worker/runners/zygote.h"

#include <cstring>

#include "common/log.h"

namespace sandpool {
namespace {

// sh/bash: report ready, then source what comes on the script pipe (fd 4, which the stub made and
// whose write end the keeper holds: stub_protocol.h, 'W'), opened anew through /proc/self/fd so
// that the shell reads it in blocks; read from the socket, a shell's `read` takes one byte per
// read(2) (a 200-byte script cost ~0.25 ms that way, and the lines joined into one variable made
// a long script quadratic: 279 KB took 1.4 s). What comes is one assignment, the job's script
// quoted into __sp_s (ZygotePayload): sourcing it reads the pipe to its end, and the shell closes
// the file it opened, so that the job, run by eval, has no descriptor but its stdio (and fd 3,
// which the script closes when the job starts). __sp_s stays set: eval reads from it while it
// runs.
// First the shell makes itself, and so the job, the OOM killer's first choice in the sandbox:
// a shell nursery's init shares the slot's mother's memory (worker/runners/nursery.h), and at
// the same setting the killer would take init, whose resident size is the mother's, and with it
// the mother (and count the kill in her cgroup). Only the job's process can raise its own
// setting (init is not dumpable, and lowering needs CAP_SYS_RESOURCE, which the host may not
// give the daemon); a job that lowers it again can at worst fail its own sandbox that way.
constexpr const char* kShellZygote =
    "{ echo 1000 > /proc/self/oom_score_adj; } 2>/dev/null\n"
    "printf R >&3\n"
    ". /proc/self/fd/4\n"
    "exec 4<&-\n"
    "eval \"$__sp_s\"\n";

// A session's warm shell (zygote.h): ready, the go (EOF on fd 3), then the script from fd 4 (a
// memfd), as above.
constexpr const char* kSessionShell =
    "printf R >&3\n"
    "read -r __sp_l <&3\n"
    "unset __sp_l\n"
    ". /proc/self/fd/4\n"
    "exec 4<&-\n"
    "eval \"$__sp_s\"\n";

// Python: the modules most snippets import are loaded, then the heap is frozen so the job's
// first collections do not walk them.
// Started as `python3 -c SCRIPT` it is a zygote as above; as `python3 -c SCRIPT mother`, the
// template's nursery mother (nursery.h), which returns from _sandpool_mother() only in each
// job's process, a clone confined by the nursery library, to carry on as a zygote.
constexpr const char* kPythonZygote = R"py(
import os, sys
def _sandpool_preload():
    # What most snippets import, and nothing slow to load: without a nursery every sandbox pays
    # for the preload while it is prepared (measured: ~60 modules cost ~65 ms of CPU).
    # datetime first: its pure-Python half is compiled, then replaced by _datetime's types, and
    # what it leaves behind (the heap's holes) is filled by the imports after it; imported
    # among the last it left ~170 KiB more of the mother's memory, which every slot holds.
    import datetime
    import errno, gc, json, types
    import re, math, collections, itertools, functools, random, string, time, io, struct, base64
    # What the job's own path uses, bound here once: with a nursery every name below is a page
    # the mother already holds, and each job's process only reads it. What a job's process
    # writes on its way to the snippet is what its copy-on-write faults cost, about 10 us a page
    # on the bench machine (bench/analysis.md): hence the C-level signal module (the signal
    # module's enum conversions touch ~35 pages), the JSON scanner without json.loads' regex
    # wrapper (~20), atexit called only when something registered (~40), and the environment
    # changed only where it differs (~30). Not `traceback` (0.4 MiB of the mother's memory, with
    # linecache and tokenize): an uncaught exception is shown as python3 -c shows it, by
    # sys.excepthook, whose default is the interpreter's display, in C (_sandpool_report).
    import _signal, atexit
    g = globals()
    g.update(errno=errno, gc=gc, json=json, types=types, _signal=_signal, atexit=atexit)
    g["_sandpool_scan"] = json.decoder.JSONDecoder().scan_once
def _sandpool_rehearse():
    # What every job does on its way (decode the job, compile, run, write, flush).
    _r = types.ModuleType("__main__")
    exec(compile(_sandpool_scan('{"code": "x = [1]\\ny = str(x)"}', 0)[0]["code"], "<string>", "exec"), _r.__dict__)
    sys.stdout.write("")
    sys.stdout.flush()
def _sandpool_report(e):
    # What python3 -c does with an exception nobody caught (pythonrun.c, _PyErr_PrintEx): the
    # job's sys.excepthook if it set one, else the interpreter's own display; and if the hook
    # itself raises, both exceptions, as the interpreter prints them. Called outside any except
    # clause, so that what the hook raises is not chained to `e`. `e` is shown from the frame
    # after the caller's (the job's, as in python3 -c); a report that cannot be written (the job
    # closed its stderr) is lost, as the interpreter loses it, and never escapes into the zygote.
    try:
        e = e.with_traceback(e.__traceback__.tb_next)
        hook = getattr(sys, "excepthook", None)
        if hook is None:
            sys.stderr.write("sys.excepthook is missing\n")
            sys.__excepthook__(type(e), e, e.__traceback__)
            return
        try:
            hook(type(e), e, e.__traceback__)
            return
        except BaseException as h:
            failed = h.with_traceback(h.__traceback__.tb_next)  # from the hook's frame on
        sys.stderr.write("Error in sys.excepthook:\n")
        sys.__excepthook__(type(failed), failed, failed.__traceback__)
        sys.stderr.write("\nOriginal exception was:\n")
        sys.__excepthook__(type(e), e, e.__traceback__)
    except BaseException:
        pass
_sandpool_env0 = None
def _sandpool_env(env):
    # The job's environment, changed only where it differs.
    if env == _sandpool_env0:
        return  # a mother's environment, unchanged since she took it: no page of os.environ written
    environ = os.environ
    for k in [k for k in environ if k not in env]:
        del environ[k]
    for k, v in env.items():
        if environ.get(k) != v:
            environ[k] = v
def _sandpool_mother():
    import _ctypes, gc
    gc.disable()
    # The library's C interface through _ctypes alone, as the ctypes package would call it (a
    # PyDLL's functions: the GIL held, a Python error checked after the call), without the
    # package's ~170 KiB of classes in the memory every job's process shares.
    class _Long(_ctypes._SimpleCData):
        _type_ = "l"
    class _Fn(_ctypes.CFuncPtr):
        _flags_ = _ctypes.FUNCFLAG_CDECL | _ctypes.FUNCFLAG_PYTHONAPI
        _restype_ = _Long
    class _Dll:
        def __init__(self, handle):
            self._handle = handle
    serve = _Fn(("sandpool_nursery_serve", _Dll(_ctypes.dlopen("/proc/self/fd/4", os.RTLD_LOCAL))))
    os.close(4)
    after_fork = _Fn(("PyOS_AfterFork_Child", _Dll(_ctypes.dlopen(None, os.RTLD_LOCAL))))
    os.write(3, b"R")
    # Copy-on-write discipline: every job's process shares this heap, and each page a job
    # writes is copied for it. The interpreter writes into code it runs until that code has
    # settled (3.11 quickens and specializes a function's bytecode in place, and fills its
    # caches), so the mother runs each job's own path first, until it has: that path then writes
    # ~160 fewer pages in a job's process (~240 faults before, ~75). No collection from here
    # on touches the mother's objects (frozen), and the job's process turns collection back on
    # for its own. The mother's own loop (the keeper's config, then a sandbox per message) is
    # the library's, in C, and writes next to nothing of this heap between two jobs.
    for _ in range(30):
        _sandpool_rehearse()
        _sandpool_env(dict(os.environ))
    # Most jobs' environment is the template's, which is hers: compared with this copy, in C, it
    # costs a job's process no walk of os.environ (whose Python methods wrote ~20 pages).
    global _sandpool_env0
    _sandpool_env0 = dict(os.environ)
    gc.collect()
    gc.freeze()
    r = serve(3)
    if r != 0:
        os._exit(0 if r == -errno.EPIPE else 2)  # the keeper is gone; else no usable config, or signals
    # The job's process, confined, in its own copy of the mother's memory.
    after_fork()
    gc.enable()
    # The dispositions a fresh python3 has (the job's confinement reset them all to the default,
    # which is what the interpreter already holds for SIGCHLD: the mother's loop set hers in C).
    _signal.signal(_signal.SIGINT, _signal.default_int_handler)
    _signal.signal(_signal.SIGPIPE, _signal.SIG_IGN)
    _signal.signal(_signal.SIGXFSZ, _signal.SIG_IGN)
def _sandpool_zygote(rehearse):
    os.set_inheritable(3, False)
    # A zygote that exec'd its own interpreter rehearses the job's path while the sandbox waits
    # (its first compile sets the compiler up: ~170 pages). A nursery job's process does not: the
    # mother settled that path, and what a rehearsal would copy here the job copies itself (~75
    # faults), while the rehearsal's own compile and run were CPU every job paid (measured without
    # it, alternated 4x: 3% more jobs/s at 8 in flight, 0.29 MiB less PSS a sandbox, p50 paced
    # +0.09 ms and back to back -0.4 ms; bench/analysis.md, 2026-11-29 midday).
    if rehearse:
        _sandpool_rehearse()
    gc.collect()
    gc.freeze()
    os.write(3, b"R")
    chunks = []
    while True:
        b = os.read(3, 65536)
        if not b:
            break
        chunks.append(b)
    job = _sandpool_scan(b"".join(chunks).decode(), 0)[0]
    env = job["env"]
    _sandpool_env(env)
    try:
        os.chdir(job["cwd"])
    except OSError as e:
        os.write(3, b"E%d cwd\n" % e.errno)
        os._exit(126)
    os.write(3, b"S")
    if job["kind"] != "code":
        argv = job["argv"]
        try:
            os.execvpe(argv[0], argv, env)  # fd 3 is close-on-exec: its closing is "started"
        except OSError as e:
            os.write(3, b"E%d exec\n" % e.errno)
            os._exit(127 if e.errno == errno.ENOENT else 126)
    os.close(3)
    sys.argv = ["-c"]
    main = types.ModuleType("__main__")
    sys.modules["__main__"] = main
    status = 0
    uncaught = None
    try:
        code = compile(job["code"], "<string>", "exec")
        exec(code, main.__dict__)
    except SystemExit as e:
        if e.code is None:
            status = 0
        elif isinstance(e.code, int):
            status = e.code & 0xff
        else:
            print(e.code, file=sys.stderr)
            status = 1
    except BaseException as e:
        uncaught = e
        status = 1
    if uncaught is not None:
        _sandpool_report(uncaught)
        uncaught = None
    # What interpreter shutdown would do for the job (non-daemon threads, atexit handlers,
    # flushing), without tearing the interpreter down: the sandbox is discarded anyway.
    try:
        if "threading" in sys.modules:
            sys.modules["threading"]._shutdown()
        if atexit._ncallbacks():
            atexit._run_exitfuncs()
    except BaseException as e:
        uncaught = e
    if uncaught is not None:
        _sandpool_report(uncaught)
    # The interpreter's last flush (pylifecycle.c, flush_std_files): a stream the job set to None
    # or closed is skipped; one that cannot be flushed makes the status 120, and stdout's error is
    # shown as an unraisable exception.
    for stream in (sys.stdout, sys.stderr):
        if stream is None or getattr(stream, "closed", False):
            continue
        try:
            stream.flush()
        except BaseException as e:
            status = 120
            if stream is sys.stdout:
                try:
                    sys.stderr.write("Exception ignored in: %r\n" % (stream,))
                    sys.__excepthook__(type(e), e.with_traceback(None), None)
                except BaseException:
                    pass
    os._exit(status)
_sandpool_preload()
if sys.argv[1:] == ["mother"]:
    _sandpool_mother()  # returns in each job's process
    _sandpool_zygote(False)
else:
    _sandpool_zygote(True)
)py";

constexpr const char* kNodeZygote = R"js(
'use strict';
// Only what every job runs is loaded before 'R'. Each sandbox starts its own node, so a module
// loaded here is CPU every job pays (17 of them, from crypto to net: +7 ms and ~280 page faults a
// start on the bench machine, ~10%), where a job that requires it pays only for itself.
const fs = require('fs');
const vm = require('vm');
fs.writeSync(3, 'R');
const chunks = [];
const buf = Buffer.alloc(65536);
for (;;) {
  let n;
  try { n = fs.readSync(3, buf, 0, buf.length, null); } catch (e) { if (e.code === 'EAGAIN') continue; throw e; }
  if (n === 0) break;
  chunks.push(Buffer.from(buf.subarray(0, n)));
}
const job = JSON.parse(Buffer.concat(chunks).toString('utf8'));
for (const k of Object.keys(process.env)) delete process.env[k];
Object.assign(process.env, job.env);
try { process.chdir(job.cwd); } catch (e) { fs.writeSync(3, 'E' + (-e.errno || 2) + ' cwd\n'); process.exit(126); }
fs.writeSync(3, 'S');
if (job.kind !== 'code') {
  const r = require('child_process').spawnSync(job.argv[0], job.argv.slice(1), { stdio: 'inherit', env: job.env });
  if (r.error) {
    const err = -r.error.errno || 2;
    fs.writeSync(3, 'E' + err + ' exec\n');
    process.exit(err === 2 ? 127 : 126);
  }
  fs.closeSync(3);
  if (r.signal) process.kill(process.pid, r.signal);
  process.exit(r.status);
}
fs.closeSync(3);
process.argv = [process.argv[0]];
vm.runInThisContext(job.code, { filename: '[eval]' });
)js";

void AppendJsonStringArray(std::string& out, const std::vector<std::string>& items) {
  out += '[';
  for (size_t i = 0; i < items.size(); ++i) {
    if (i) out += ',';
    AppendJsonString(out, items[i]);
  }
  out += ']';
}

}  // namespace

const RuntimeInfo* TemplateRuntime(const std::string& name) {
  if (name.empty() || name == "none") return nullptr;
  return FindRuntime(name);
}

std::vector<std::string> ZygoteCommand(const RuntimeInfo& r) {
  if (r.name == "sh") return {r.interpreter, "-c", kShellZygote, "sh"};
  if (r.name == "bash") return {r.interpreter, "--norc", "--noprofile", "-c", kShellZygote, "bash"};
  if (r.name == "python") return {r.interpreter, "-c", kPythonZygote};
  return {r.interpreter, "-e", kNodeZygote};
}

bool IsShellZygoteArgv(int argc, char* const* argv) {
  return argc >= 3 && std::strcmp(argv[argc - 2], kShellZygote) == 0;
}

std::vector<std::string> SessionShellCommand() {
  return {FindRuntime("sh")->interpreter, "-c", kSessionShell, "sh"};
}

bool IsSessionShellArgv(int argc, char* const* argv) {
  return argc >= 3 && std::strcmp(argv[argc - 2], kSessionShell) == 0;
}

std::string ShellQuote(const std::string& s) {
  std::string out = "'";
  for (char c : s) {
    if (c == '\'') out += "'\\''";
    else out += c;
  }
  out += '\'';
  return out;
}

std::string ZygotePayload(const RuntimeInfo& r, const RunMsg& run) {
  if (r.shell) {
    std::string script = "cd -- " + ShellQuote(run.cwd) + " 2>/dev/null || { printf 'E2 cwd\\n' >&3; exit 126; }\n";
    script += "unset OLDPWD\n";  // cd set it; sh -c would not have it
    for (const std::string& e : run.env) script += "export " + ShellQuote(e) + "\n";
    if (run.kind == "argv") {
      // Like execve with a PATH search: only an executable file counts (not a builtin, a
      // function or a directory), and the shell's PWD is not passed on.
      const std::string& prog = run.argv[0];
      std::string words;
      for (const std::string& a : run.argv) words += " " + ShellQuote(a);
      bool own_pwd = false;
      for (const std::string& e : run.env) own_pwd |= e.rfind("PWD=", 0) == 0;
      // execve's errors, as execvp reports them: a file that exists but cannot be executed (a
      // directory, no x bit) is EACCES and 126; one that is nowhere is ENOENT and 127.
      const std::string q = ShellQuote(prog);
      if (prog.find('/') != std::string::npos) {
        script += "if [ -f " + q + " ] && [ -x " + q + " ]; then :; elif [ -e " + q +
                  " ]; then printf 'E13 exec\\n' >&3; exit 126; else printf 'E2 exec\\n' >&3; exit 127; fi\n";
      } else {
        script += "__sp_p=; __sp_e=2; __sp_ifs=$IFS; IFS=:; for __sp_d in ${PATH:-/usr/bin:/bin}; do "
                  "if [ -f \"${__sp_d:-.}/\"" + q + " ] && [ -x \"${__sp_d:-.}/\"" + q +
                  " ]; then __sp_p=x; break; elif [ -e \"${__sp_d:-.}/\"" + q + " ]; then __sp_e=13; fi; done; "
                  "IFS=$__sp_ifs\n"
                  "if [ -z \"$__sp_p\" ]; then printf 'E%s exec\\n' \"$__sp_e\" >&3; "
                  "if [ \"$__sp_e\" = 2 ]; then exit 127; fi; exit 126; fi\n";
      }
      if (!own_pwd) script += "unset PWD\n";
      script += "printf S >&3; exec 3>&-; exec" + words + "\n";
    } else {
      // shell line, or code for this shell's own runtime
      script += "printf S >&3; exec 3>&-\n";
      script += run.code;
      script += "\n";
    }
    // Sourced from a file (kShellZygote, kSessionShell), which is read to its end and closed
    // before eval runs the script.
    return "__sp_s=" + ShellQuote(script) + "\n";
  }
  std::string json = "{\"kind\":";
  AppendJsonString(json, run.kind);
  json += ",\"code\":";
  AppendJsonString(json, run.code);
  json += ",\"argv\":";
  AppendJsonStringArray(json, run.argv);
  json += ",\"cwd\":";
  AppendJsonString(json, run.cwd);
  json += ",\"env\":{";
  for (size_t i = 0; i < run.env.size(); ++i) {
    size_t eq = run.env[i].find('=');
    if (i) json += ',';
    AppendJsonString(json, run.env[i].substr(0, eq));
    json += ':';
    AppendJsonString(json, eq == std::string::npos ? "" : run.env[i].substr(eq + 1));
  }
  json += "}}";
  return json;
}

}  // namespace sandpool
