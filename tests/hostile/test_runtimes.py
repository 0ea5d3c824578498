"""Warm runtimes (templates with a zygote: sh for `default`, python, node): code jobs and argv/env
passed through the zygotes get exactly the isolation of a plain exec, and hostile input cannot
inject into the script or JSON the keeper sends them."""

import json

import msgpack
import pytest

from hostile_support import CANARIES, CPU_TIME_MS, OUTPUT, host_delivers_int80, new_id

BASE_ENV = {"HOME": "/work", "PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8"}

NASTY = ["it's", "a\"b", "$(touch /work/pwned)", "`touch /work/pwned`", "back\\slash", "new\nline",
         "tab\tx", "; touch /work/pwned #", "${HOME}", "-c", "--", "*", "", " lead", "trail ", "'\"'\"'",
         "\u00e9\u4e2d", "\r", "}\n]}"]


def code_job(pool, runtime, code, **fields):
    return pool.run(code=code, runtime=runtime, **fields)


PY_ENV_FDS = ("import os, json\n"
              "fds = {}\n"
              "for x in os.listdir('/proc/self/fd'):\n"
              "    try: fds[int(x)] = os.readlink('/proc/self/fd/' + x)\n"
              "    except OSError: pass\n"
              "print(json.dumps({'env': dict(os.environ), 'fds': fds,"
              " 'uid': os.getuid(), 'cwd': os.getcwd(), 'procenv': open('/proc/self/environ','rb').read().decode()}))\n")

NODE_ENV_FDS = ("const fs = require('fs');\n"
                "const fds = {}; for (const x of fs.readdirSync('/proc/self/fd')) { try { fds[x] = fs.readlinkSync('/proc/self/fd/' + x); } catch (e) {} }\n"
                "console.log(JSON.stringify({env: process.env, fds,"
                " uid: process.getuid(), cwd: process.cwd(), procenv: fs.readFileSync('/proc/self/environ', 'latin1')}));\n")


@pytest.mark.parametrize("runtime,code", [("python", PY_ENV_FDS), ("node", NODE_ENV_FDS)])
def test_code_job_env_fds_identity(pool, runtime, code):
    res = code_job(pool, runtime, code, env={"FOO": "bar"})
    assert res["outcome"] == "exit" and res["exit_code"] == 0, res
    info = json.loads(res["stdout"])
    assert info["env"] == dict(BASE_ENV, FOO="bar"), info
    assert info["uid"] == 1000 and info["cwd"] == "/work"
    # fds 0-2 are the job's pipes; anything above is the runtime's own (node's epoll, eventfds,
    # its own pipes; python's listing fd), never a socket: the zygote's channel to the keeper is
    # a unix socket and must be closed before the job's code runs
    fds = {int(k): v for k, v in info["fds"].items()}
    assert all(fds[fd].startswith("pipe:[") for fd in (0, 1, 2)), fds
    assert not [v for fd, v in fds.items() if fd > 2 and v.startswith("socket:")], fds
    for c in CANARIES:
        assert c not in info["procenv"]


@pytest.mark.parametrize("runtime", ["python", "node"])
def test_code_job_cannot_reach_the_zygote_channel(pool, runtime):
    code = {"python": "import os\ntry:\n    os.write(3, b'E1 exec\\n'); print('WROTE')\nexcept OSError as e: print('closed', e.errno)\n",
            "node": "try { require('fs').writeSync(3, 'E1 exec\\n'); console.log('WROTE'); } catch (e) { console.log('closed', e.code); }"}[runtime]
    res = code_job(pool, runtime, code)
    assert res["outcome"] == "exit", res
    assert b"WROTE" not in res["stdout"], res


def test_python_code_job_sees_no_zygote_residue(pool):
    res = code_job(pool, "python", "import sys, gc\n"
                   "print(sys.argv, __name__, [k for k in globals() if not k.startswith('__')], gc.get_freeze_count() >= 0)\n"
                   "raise ValueError('boom')")
    assert res["outcome"] == "exit" and res["exit_code"] == 1, res
    assert res["stdout"] == b"['-c'] __main__ ['sys', 'gc'] True\n", res
    assert b"ValueError: boom" in res["stderr"] and b"_sandpool_zygote" not in res["stderr"], res


@pytest.mark.parametrize("runtime,code,outcome", [
    ("python", "while True: pass", "cpu_limit"),
    ("node", "for(;;){}", "cpu_limit"),
    ("python", "b = b'x' * (1 << 30)", "memory_limit"),
    ("node", "const a = []; for(;;) a.push(Buffer.alloc(1 << 20, 1));", "memory_limit"),
    ("python", "import subprocess\nps = []\nwhile True: ps.append(subprocess.Popen(['sleep', '100']))", "pids_limit"),
    ("python", "import sys\nwhile True: sys.stdout.write('x' * 65536)", "output_limit"),
    ("node", "const x = 'x'.repeat(65536); (function f() { process.stdout.write(x, f); })();", "output_limit"),
])
def test_code_job_limits(pool, runtime, code, outcome):
    res = code_job(pool, runtime, code, timeout_ms=15000)
    assert res["outcome"] == outcome, res
    if outcome == "output_limit":
        assert len(res["stdout"]) == OUTPUT
    if outcome == "cpu_limit":
        assert res["cpu_time_us"] <= CPU_TIME_MS * 1000 + 1_500_000, res


@pytest.mark.parametrize("runtime", ["python", "node"])
def test_code_job_timeout_and_daemonised_child(pool, runtime):
    code = {"python": "import subprocess, time\nsubprocess.Popen(['setsid', 'sleep', '1000'])\ntime.sleep(1000)",
            "node": "require('child_process').spawn('setsid', ['sleep', '1000'], {detached: true, stdio: 'ignore'}); setInterval(() => {}, 1000);"}[runtime]
    res = code_job(pool, runtime, code, timeout_ms=1500)
    assert res["outcome"] == "timeout" and res["timed_out"], res
    pool.assert_no_leftovers(timeout=5)


@pytest.mark.parametrize("runtime", ["python", "node"])
def test_code_job_sees_daemon_secrets_nowhere(pool, runtime):
    code = {"python": "import glob\nfor p in glob.glob('/proc/[0-9]*/cmdline') + glob.glob('/proc/[0-9]*/environ'):\n"
                      "    try: print(p, open(p, 'rb').read())\n    except OSError as e: print(p, e.errno)\n",
            "node": "const fs = require('fs');\nfor (const d of fs.readdirSync('/proc').filter(x => /^[0-9]+$/.test(x)))\n"
                    "  for (const f of ['cmdline', 'environ']) { try { console.log(d, f, fs.readFileSync(`/proc/${d}/${f}`, 'latin1')); } catch (e) { console.log(d, f, e.code); } }"}[runtime]
    res = code_job(pool, runtime, code)
    assert res["outcome"] == "exit", res
    for c in CANARIES:
        assert c.encode() not in res["stdout"], res["stdout"][:3000]
    assert b"--redis" not in res["stdout"], res["stdout"][:3000]


# --- hostile input through the shell zygote ---------------------------------------------------

def test_argv_is_passed_verbatim(pool):
    res = pool.run(argv=["/usr/bin/printf", "[%s]\\n"] + NASTY)
    assert res["outcome"] == "exit", res
    assert res["stdout"].decode() == "".join(f"[{a}]\n" for a in NASTY), res
    res = pool.run(shell="ls -A /work")
    assert res["stdout"] == b"", "an argv word was executed"


def test_env_values_are_passed_verbatim(pool):
    env = {f"V{i}": v for i, v in enumerate(NASTY)}
    res = pool.run(argv=["/usr/bin/python3", "-c", "import os, json; print(json.dumps({k: v for k, v in os.environ.items() if k.startswith('V')}))"],
                   env=env)
    assert res["outcome"] == "exit", res
    assert json.loads(res["stdout"]) == env, res
    res = pool.run(shell="ls -A /work")
    assert res["stdout"] == b"", "an env value was executed"


def test_cwd_is_passed_verbatim(pool):
    for cwd in ["/work/$(touch pwned)", "/work/it's", "/work/new\nline"]:
        res = pool.run(shell="pwd", cwd=cwd)
        # the directory does not exist: a clean exec failure, and nothing executed
        assert res["outcome"] == "error" and res["error"]["code"] == "exec_failed", (cwd, res)
    res = pool.run(shell="ls -A /work")
    assert res["stdout"] == b"", res


def test_shell_line_without_trailing_newline_and_with_odd_endings(pool):
    for line, out in [("echo a", b"a\n"), ("echo b\n", b"b\n"), ("echo c \\", b"c\n"), ("echo d; exit 4", b"d\n"),
                      ("printf 'e'", b"e")]:
        res = pool.run(shell=line)
        assert res["stdout"] == out, (line, res)
    res = pool.run(shell="exit 4")
    assert res["exit_code"] == 4


def test_shell_job_cannot_read_other_jobs_or_the_protocol(pool):
    res = pool.run(shell="set | grep -c . >/dev/null; echo \"$0\"; (printf 'E1 exec\\n' >&3) 2>/dev/null && echo WROTE3; echo end")
    assert b"WROTE3" not in res["stdout"] and res["stdout"].endswith(b"end\n"), res


@pytest.mark.parametrize("argv0", ["cd", "exit", "eval", "set"]
                         + ["definitely-not-a-program"])
def test_argv0_that_is_not_a_program_is_an_exec_failure(pool, argv0):
    res = pool.run(argv=[argv0, "5"])
    assert res["outcome"] == "error" and res["error"]["code"] == "exec_failed" and res["exit_code"] == 127, res


def test_code_job_with_bash_runtime(pool):
    res = pool.run(code="echo ${BASH_VERSION:+bash}; exit 3", runtime="bash")
    assert res["stdout"] == b"bash\n" and res["exit_code"] == 3, res


@pytest.mark.parametrize("template", ["default", "python", "node"])
def test_non_utf8_argv_is_verbatim_or_rejected(pool, template):
    """PROTOCOL.md strings are UTF-8. A job that sends other bytes must either be rejected
    (bad_field) or get exactly its bytes, in every template (not a re-encoded copy)."""
    job_id = new_id("utf")
    body = msgpack.packb({"v": 1, "id": job_id, "argv": [b"/usr/bin/printf", b"[%s]", b"a\xffb"], "template": template.encode()},
                         use_bin_type=False)
    res = pool.run_raw(job_id, body)
    if res["outcome"] == "error":
        assert res["error"]["code"] == "bad_field", res
    else:
        assert res["outcome"] == "exit" and res["stdout"] == b"[a\xffb]", res


@pytest.mark.parametrize("template", ["python", "node"])
def test_warm_template_has_no_residue_between_jobs(pool, template):
    """One warm slot per template here, so both jobs run in the same slot, one after the other."""
    plant = {"python": "import json, os, subprocess\njson.PWNED = 1\nos.environ['PWNED'] = '1'\n"
                       "open('/tmp/res', 'w').write('x'); open('/work/res', 'w').write('x')\n"
                       "subprocess.Popen(['sleep', '1000'], start_new_session=True)\n",
             "node": "globalThis.PWNED = 1; process.env.PWNED = '1'; const fs = require('fs');\n"
                     "fs.writeFileSync('/tmp/res', 'x'); fs.writeFileSync('/work/res', 'x');\n"
                     "require('child_process').spawn('sleep', ['1000'], {detached: true, stdio: 'ignore'}).unref();\n"}[template]
    check = {"python": "import json, os\nprint(hasattr(json, 'PWNED'), 'PWNED' in os.environ, os.listdir('/tmp'), os.listdir('/work'),\n"
                       "      sorted(open(f'/proc/{p}/comm').read().strip() for p in os.listdir('/proc') if p.isdigit()))\n",
             "node": "const fs = require('fs');\nconsole.log(typeof globalThis.PWNED, 'PWNED' in process.env, fs.readdirSync('/tmp'), fs.readdirSync('/work'),\n"
                     "  fs.readdirSync('/proc').filter(p => /^[0-9]+$/.test(p)).map(p => { try { return fs.readFileSync(`/proc/${p}/comm`, 'utf8').trim(); } catch (e) { return '?'; } }).sort().join(','));\n"}[template]
    first = code_job(pool, template, plant)
    assert first["outcome"] == "exit" and first["exit_code"] == 0, first
    second = code_job(pool, template, check)
    assert second["outcome"] == "exit", second
    out = second["stdout"].decode()
    assert "sleep" not in out, out
    if template == "python":
        assert out.startswith("False False [] [] "), out
    else:
        assert out.startswith("undefined false [] [] "), out


@pytest.mark.parametrize("template", ["python", "node"])
def test_shell_job_in_a_warm_template_mirrors_signals_and_seccomp(pool, cc, template):
    from test_syscalls import INT80
    res = pool.run(shell="kill -SEGV $$", template=template)
    assert res["outcome"] == "signal" and res["signal"] == 11, res
    if host_delivers_int80(cc(INT80)):
        res = pool.run(shell="cat > /work/x && chmod +x /work/x && exec /work/x </dev/null", stdin=cc(INT80), template=template)
        assert res["outcome"] == "seccomp" and res["signal"] == 31, res
    res = pool.run(argv=["/usr/bin/sh", "-c", "exit 7"], template=template)
    assert res["outcome"] == "exit" and res["exit_code"] == 7, res
