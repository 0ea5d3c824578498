"""Residue: nothing one job leaves behind reaches the next job in the same slot (issue 18).

Every pool here has exactly one slot (default and python templates, one sandbox each), so each
pair of jobs below runs back to back in the same slot: the first plants something through one
channel, the second looks for it through the same channel and must find nothing. What is kept
per slot rather than per job (the slot's network namespace, its user namespace and uid pair;
for python, the nursery mother whose memory every job's process starts as a copy of) is exactly
what these pairs attack. docs/SECURITY.md (the nursery paragraphs) lists what is per slot.
"""

import glob
import os
import secrets
import time

import pytest

# One slot per template: every pair of jobs shares it. (The python pool is one slot already.)
POOL_EXTRA = ["--workers", "1", "--max-workers", "1"]

PY = "/usr/bin/python3"


def mark() -> str:
    return "rsd" + secrets.token_hex(10)


def ok(res) -> str:
    assert res["outcome"] == "exit" and res["exit_code"] == 0, res
    return res["stdout"].decode()


def py_pair(pool, plant: str, look: str):
    """A pair of jobs of the python template (the nursery's path): code jobs."""
    first = pool.run(code=plant, runtime="python")
    assert first["outcome"] == "exit", first
    return first, pool.run(code=look, runtime="python")


def pair_output(pool, kind, plant: str, look: str) -> str:
    """Runs `plant` then `look` (python programs) in the slot: as argv jobs of the default
    template (a fresh interpreter each) or as code jobs of the python template (the nursery);
    returns what the second printed."""
    if kind == "shell":
        ok(pool.run(argv=[PY, "-c", plant]))
        return ok(pool.run(argv=[PY, "-c", look]))
    return ok(py_pair(pool, plant, look)[1])


# --- files ------------------------------------------------------------------------------------

FILE_DIRS = ["/work", "/tmp", "/var/tmp", "/dev/shm"]


def test_files_do_not_survive_into_the_next_job(pool):
    m = mark()
    plant = " ; ".join(f"echo {m} > {d}/{m} && mkdir -p {d}/.{m}" for d in FILE_DIRS)
    ok(pool.run(shell=plant + " ; echo planted"))
    look = "for d in " + " ".join(FILE_DIRS) + "; do ls -A $d; done; grep -rl " + m + " " + " ".join(FILE_DIRS) + " 2>/dev/null; echo done"
    out = ok(pool.run(shell=look))
    assert m not in out, out
    first, second = py_pair(pool, f"import os\nfor d in {FILE_DIRS!r}: open(os.path.join(d, {m!r}), 'w').write('x')\n",
                            f"import os\nprint([(d, os.listdir(d)) for d in {FILE_DIRS!r}])\n")
    assert m not in ok(second), second


# --- processes --------------------------------------------------------------------------------

def test_processes_do_not_survive_into_the_next_job(pool):
    m = mark()
    # Daemonised, in a new session, ignoring SIGHUP and SIGTERM: the kind that outlives a shell.
    ok(pool.run(shell=f"(trap '' HUP TERM; setsid sh -c 'exec -a {m} sleep 1000' </dev/null >/dev/null 2>&1 &) ; echo started"))
    out = ok(pool.run(shell="for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline; echo; done"))
    assert m not in out and "sleep 1000" not in out, out
    first, second = py_pair(
        pool,
        "import os, subprocess\n"
        f"subprocess.Popen(['sleep', '1000'], start_new_session=True, stdout=subprocess.DEVNULL)\n"
        "print('started')\n",
        "import os\nprint([open(f'/proc/{p}/cmdline','rb').read() for p in os.listdir('/proc') if p.isdigit()])\n")
    assert b"sleep" not in second["stdout"], second


# --- SysV IPC, POSIX message queues -------------------------------------------------------------

SYSV_PLANT = """
import ctypes, ctypes.util, os
libc = ctypes.CDLL(ctypes.util.find_library('c'), use_errno=True)
IPC_CREAT = 0o1000
key = 0x5eed
assert libc.shmget(key, 4096, IPC_CREAT | 0o666) >= 0, ctypes.get_errno()
assert libc.msgget(key, IPC_CREAT | 0o666) >= 0, ctypes.get_errno()
assert libc.semget(key, 1, IPC_CREAT | 0o666) >= 0, ctypes.get_errno()
rt = ctypes.CDLL(ctypes.util.find_library('rt'), use_errno=True)
rt.mq_open.restype = ctypes.c_int
q = rt.mq_open(b'/MQNAME', os.O_CREAT | os.O_RDWR, 0o666, None)
assert q >= 0, ctypes.get_errno()
print(open('/proc/sysvipc/shm').read().count('\\n') - 1, 'shm')
"""

SYSV_LOOK = """
import ctypes, ctypes.util, os
for f in ('shm', 'msg', 'sem'):
    rows = open('/proc/sysvipc/' + f).read().splitlines()[1:]
    print(f, len(rows), rows)
libc = ctypes.CDLL(ctypes.util.find_library('c'), use_errno=True)
print('shmget', libc.shmget(0x5eed, 4096, 0), 'msgget', libc.msgget(0x5eed, 0), 'semget', libc.semget(0x5eed, 1, 0))
rt = ctypes.CDLL(ctypes.util.find_library('rt'), use_errno=True)
rt.mq_open.restype = ctypes.c_int
print('mq_open', rt.mq_open(b'/MQNAME', os.O_RDWR, 0, None), ctypes.get_errno())
"""


@pytest.mark.parametrize("kind", ["shell", "python"])
def test_sysv_ipc_and_posix_queues_do_not_survive(pool, kind):
    m = mark()
    out = pair_output(pool, kind, SYSV_PLANT.replace("MQNAME", m), SYSV_LOOK.replace("MQNAME", m))
    assert "shm 0 []" in out and "msg 0 []" in out and "sem 0 []" in out, out
    assert "shmget -1 msgget -1 semget -1" in out, out
    assert "mq_open -1 2" in out, out  # ENOENT


# --- abstract unix sockets, listening sockets (the slot's network namespace is per slot) -----

NET_PLANT = """
import os, socket, subprocess, sys
a = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
a.bind(b'\\0NAME')
a.listen()
t = socket.socket()
t.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
t.bind(('127.0.0.1', 47311))
t.listen()
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
u.bind(('127.0.0.1', 47312))
# A daemonised holder too, so that only the sandbox's teardown can close them.
if os.fork() == 0:
    os.setsid()
    import time
    time.sleep(1000)
print('listening')
"""

NET_LOOK = """
import socket
print('unix', [l for l in open('/proc/net/unix').read().splitlines() if 'NAME' in l])
print('tcp', [l.split()[1] for l in open('/proc/net/tcp').read().splitlines()[1:]])
print('udp', [l.split()[1] for l in open('/proc/net/udp').read().splitlines()[1:]])
c = socket.socket()
print('connect', c.connect_ex(('127.0.0.1', 47311)))
a = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
print('abstract connect', a.connect_ex(b'\\0NAME'))
"""


@pytest.mark.parametrize("kind", ["shell", "python"])
def test_sockets_do_not_survive_in_the_slots_network_namespace(pool, kind):
    m = mark()
    out = pair_output(pool, kind, NET_PLANT.replace("NAME", m), NET_LOOK.replace("NAME", m))
    assert "unix []" in out and "tcp []" in out and "udp []" in out, out
    assert "connect 111" in out and "abstract connect 111" in out, out  # ECONNREFUSED


# --- hostname ---------------------------------------------------------------------------------

def test_hostname_cannot_be_changed_for_the_next_job(pool):
    before = ok(pool.run(shell="hostname")).strip()
    res = pool.run(argv=[PY, "-c", "import socket\ntry:\n    socket.sethostname('rsdpwned')\nexcept OSError as e: print('refused', e.errno)\n"])
    assert "refused" in ok(res), res
    assert ok(pool.run(shell="hostname")).strip() == before
    assert ok(pool.run(code="import socket; print(socket.gethostname())", runtime="python")).strip() != "rsdpwned"


# --- environment ------------------------------------------------------------------------------

def test_environment_does_not_survive(pool):
    m = mark()
    ok(pool.run(shell="echo $RSD_SECRET; export RSD_OTHER=$RSD_SECRET", env={"RSD_SECRET": m}))
    out = ok(pool.run(shell="env; set; cat /proc/self/environ | tr '\\0' '\\n'"))
    assert m not in out, out
    first, second = py_pair(pool, f"import os\nos.environ['RSD_OTHER'] = {m!r}\nos.putenv('RSD_P', {m!r})\n",
                            "import os\nprint(dict(os.environ), open('/proc/self/environ','rb').read())\n")
    assert m not in ok(second), second
    first = pool.run(code="print(1)", runtime="python", env={"RSD_SECRET": m})
    assert first["outcome"] == "exit", first
    assert m not in ok(pool.run(code="import os; print(dict(os.environ))", runtime="python"))


# --- memory contents ------------------------------------------------------------------------------

MEM_PLANT = """
import gc, sys
m = b'MARK'
keep = [bytearray(m * 4096) for _ in range(64)]   # ~3 MiB of the marker in the heap
sys.modules['rsd_planted'] = keep                  # and reachable from the interpreter's state
globals()['rsd_global'] = m.decode() * 10
print('planted')
"""

MEM_LOOK = """
m = bytes.fromhex('HEX')   # not the marker's own bytes in this program's text
found = 0
with open('/proc/self/maps') as maps, open('/proc/self/mem', 'rb', 0) as mem:
    for line in maps:
        lo, hi = (int(x, 16) for x in line.split()[0].split('-'))
        if 'r' not in line.split()[1] or '[vvar' in line or '[vsyscall' in line:
            continue
        try:
            mem.seek(lo)
            chunk = mem.read(hi - lo)
        except (OSError, ValueError, OverflowError):
            continue
        found += chunk.count(m)
import sys
print('found', found, 'rsd_planted' in sys.modules)
"""


def test_memory_of_a_job_does_not_reach_the_next_one(pool):
    """The python template's jobs are copies of one warm mother: what a job writes into memory
    it shares copy-on-write with the mother must stay its own copy."""
    m = mark()
    look = MEM_LOOK.replace("HEX", m.encode().hex())
    first, second = py_pair(pool, MEM_PLANT.replace("MARK", m), look)
    out = ok(second)
    # The look's own decoded marker (and a copy or two of it) only; the plant wrote 262,144.
    assert int(out.split()[1]) <= 4 and "False" in out, out
    # The same through a shell job's interpreter (a fresh exec).
    ok(pool.run(argv=[PY, "-c", MEM_PLANT.replace("MARK", m)]))
    out = ok(pool.run(argv=[PY, "-c", look]))
    assert int(out.split()[1]) <= 4, out


# --- cgroup figures and kernel memory charged to the slot ------------------------------------------

HEAVY = """
import os, time
b = bytearray(80 << 20)                  # 80 MiB touched (the pool allows 128)
for i in range(0, len(b), 4096): b[i] = 1
for i in range(1000): open('/tmp/f%d' % i, 'w').write('x' * 2048)   # tmpfs pages and inodes
for i in range(30000): os.path.exists('/usr/rsd-%d-' % i + 'MARK')  # negative dentries
for _ in range(20):
    if os.fork() == 0:
        time.sleep(0.2)
        os._exit(0)
for _ in range(20): os.wait()
t = time.process_time()
while time.process_time() - t < 0.5: pass
print('heavy')
"""


@pytest.mark.parametrize("kind", ["shell", "python"])
def test_cgroup_figures_start_from_zero(pool, kind):
    m = mark()
    heavy = HEAVY.replace("MARK", m)
    fields = {"timeout_ms": 20000}
    if kind == "shell":
        first = pool.run(argv=[PY, "-c", heavy], **fields)
        second = pool.run(shell="true")
    else:
        first = pool.run(code=heavy, runtime="python", **fields)
        second = pool.run(code="pass", runtime="python")
    assert first["outcome"] == "exit", first
    assert first["peak_memory_bytes"] > 70 << 20, first
    assert first["cpu_time_us"] > 400_000, first
    assert second["outcome"] == "exit", second
    assert second["peak_memory_bytes"] < 32 << 20, second["peak_memory_bytes"]
    assert second["cpu_time_us"] < first["cpu_time_us"] // 4, (second["cpu_time_us"], first["cpu_time_us"])


# A slot's sandbox cgroup is reused by its next sandbox when the last job left (next to) nothing
# charged to it, and replaced when it left more (worker/sandbox/cgroup.h, Recycle). The pairs above
# prove the figures start from zero either way; this proves both paths were taken, from the host's
# side: the names of the sandbox cgroups in the instance's slots.

LIGHT = "import os\nb = bytearray(40 << 20)\nprint(len(b))\n"              # freed at exit: nothing left
LEAVES = "import os\nfor i in range(40000): os.path.exists('/usr/rsd-%d-MARK' % i)\n"  # ~8 MiB of dentries


def sandbox_cgroups(pool) -> frozenset:
    """Every sandbox cgroup of the pool's instance now (slot-N/sb-M), once two looks 0.3 s apart
    agree (the keeper recycles or replaces a cgroup just after the job's result is sent)."""
    roots = [p for p in glob.glob("/sys/fs/cgroup/memory/**/sandpool-" + pool.daemon.consumer, recursive=True)]
    roots += glob.glob("/sys/fs/cgroup/**/sandpool-" + pool.daemon.consumer, recursive=True) if not roots else []
    assert roots, "no instance cgroup for " + pool.daemon.consumer

    def look():
        return frozenset(os.path.relpath(d, roots[0]) for d in glob.glob(roots[0] + "/slot-*/sb-*"))
    last, deadline = look(), time.monotonic() + 20
    while time.monotonic() < deadline:
        time.sleep(0.3)
        now = look()
        if now == last:
            return now
        last = now
    raise AssertionError("the sandbox cgroups did not settle: %s" % sorted(last))


@pytest.mark.parametrize("kind", ["shell", "python"])
def test_a_slots_cgroup_is_reused_only_after_a_job_that_left_next_to_nothing(pool, kind):
    def run(code):
        res = pool.run(argv=[PY, "-c", code]) if kind == "shell" else pool.run(code=code, runtime="python")
        ok(res)
    run(LIGHT)
    before = sandbox_cgroups(pool)
    run(LIGHT)
    assert sandbox_cgroups(pool) == before, "a job that left nothing: its cgroup is the next sandbox's"
    run(LEAVES.replace("MARK", mark()))
    after = sandbox_cgroups(pool)
    assert len(after) == len(before) and after != before, (sorted(before), sorted(after))


# --- open descriptors ----------------------------------------------------------------------------

def test_open_descriptors_do_not_survive(pool):
    plant = ("import os\n"
             "fds = [os.open('/work/x%d' % i, os.O_CREAT | os.O_RDWR) for i in range(20)]\n"
             "r, w = os.pipe()\n"
             "for fd in fds + [r, w]: os.set_inheritable(fd, True)\n"
             "print(len(fds))\n")
    look = "import os\nprint(sorted(int(f) for f in os.listdir('/proc/self/fd')))\n"
    ok(pool.run(argv=[PY, "-c", plant]))
    # listdir itself holds one fd open while it lists
    assert ok(pool.run(argv=[PY, "-c", look])).strip() == "[0, 1, 2, 3]"
    first, second = py_pair(pool, plant, look)
    assert ok(second).strip() == "[0, 1, 2, 3]", second
    assert ok(pool.run(shell="ls /proc/self/fd | sort -n | tr '\\n' ' '")).split() == ["0", "1", "2", "3"]
