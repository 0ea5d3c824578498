"""Resource attacks (hostile-tests.md cases 1-7 and 22, and more): every limit is enforced by the
kernel, measured by the keeper and reported as its own outcome; nothing outlives the job."""

import os
import time

import pytest

from hostile_support import CPU_TIME_MS, MEMORY, OUTPUT

MARGIN = 8.0  # seconds of slack over any deadline: a shared 2-core machine


def daemon_rss_kb(pool) -> int:
    with open(f"/proc/{pool.daemon.proc.pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


# --- case 1: fork bombs -----------------------------------------------------------------------

def test_shell_fork_bomb_reports_pids_limit(pool):
    res, dt = pool.run_timed(argv=["/usr/bin/bash", "-c", ":(){ :|:& };:; sleep 2; echo survived"],
                             timeout_ms=15000)
    assert res["outcome"] == "pids_limit", res
    assert not res["timed_out"]
    assert dt < 2 + MARGIN


C_FORK_BOMB = r"""
#include <stdio.h>
#include <unistd.h>
#include <errno.h>
#include <string.h>
int main(void) {
  pid_t top = getpid();
  for (;;) {
    if (fork() < 0) {
      if (getpid() == top) { printf("fork: %s\n", strerror(errno)); fflush(stdout); return 3; }
      pause();
    }
  }
}
"""


def test_c_fork_bomb_reports_pids_limit(pool, cc):
    res = pool.binary(cc(C_FORK_BOMB), timeout_ms=15000)
    assert res["outcome"] == "pids_limit", res
    assert res["exit_code"] == 3, res
    assert b"fork: Resource temporarily unavailable" in res["stdout"], res


# --- case 2: thread bombs ---------------------------------------------------------------------

def test_python_thread_bomb_reports_pids_limit(pool):
    res = pool.python(
        "import threading, time, sys\n"
        "n = 0\n"
        "try:\n"
        "    while True:\n"
        "        threading.Thread(target=time.sleep, args=(100,), daemon=True).start(); n += 1\n"
        "except RuntimeError as e:\n"
        "    print('stopped at', n, e, flush=True); sys.exit(4)\n",
        timeout_ms=15000)
    assert res["outcome"] == "pids_limit", res
    assert res["exit_code"] == 4 and b"can't start new thread" in res["stdout"], res
    n = int(res["stdout"].split()[2])
    assert n < 64, res


C_THREAD_BOMB = r"""
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
static void* spin(void* a) { for (;;) pause(); return a; }
int main(void) {
  int n = 0;
  for (;;) {
    pthread_t t;
    int e = pthread_create(&t, NULL, spin, NULL);
    if (e) { printf("threads=%d err=%s\n", n, strerror(e)); fflush(stdout); return 5; }
    n++;
  }
}
"""


def test_c_thread_bomb_reports_pids_limit(pool, cc):
    res = pool.binary(cc(C_THREAD_BOMB, ["-pthread"]), timeout_ms=15000)
    assert res["outcome"] == "pids_limit", res
    assert res["exit_code"] == 5 and b"Resource temporarily unavailable" in res["stdout"], res


# --- case 3: memory bombs ---------------------------------------------------------------------

def test_single_process_memory_bomb_is_oom_killed(pool):
    rss0 = daemon_rss_kb(pool)
    res = pool.python("b = b'x' * (1 << 30)\nprint('allocated')\n", timeout_ms=15000)
    assert res["outcome"] == "memory_limit", res
    assert res["signal"] == 9, res
    assert b"allocated" not in res["stdout"]
    assert res["peak_memory_bytes"] <= MEMORY + (8 << 20), res
    assert daemon_rss_kb(pool) - rss0 < 64 * 1024


C_MANY_HOGS = r"""
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/wait.h>
int main(void) {
  for (int i = 0; i < 50; i++) {
    pid_t p = fork();
    if (p == 0) {
      volatile char* m = malloc(100 << 20);
      if (m) for (long j = 0; j < (100 << 20); j += 4096) m[j] = 1;
      sleep(2);
      _exit(0);
    }
  }
  int st, oom = 0;
  while (wait(&st) > 0) if (WIFSIGNALED(st)) oom++;
  return oom ? 7 : 0;
}
"""


def test_fifty_processes_of_100mb_hit_the_memory_limit(pool, cc):
    res = pool.binary(cc(C_MANY_HOGS), timeout_ms=15000)
    assert res["outcome"] == "memory_limit", res
    assert not res["timed_out"], res
    assert res["peak_memory_bytes"] <= MEMORY + (8 << 20), res


# --- case 4: disk fill ------------------------------------------------------------------------

@pytest.mark.parametrize("where", ["/work", "/tmp", "/var/tmp", "/dev/shm"])
def test_dd_fill_is_capped_with_enospc_and_disk_status(pool, where):
    res = pool.run(shell=f"dd if=/dev/zero of={where}/fill bs=1M count=200", timeout_ms=15000)
    assert b"No space left on device" in res["stderr"], res
    assert res["outcome"] == "disk_limit", res
    assert res["exit_code"] == 1


def test_fallocate_beyond_the_cap_fails_with_enospc(pool):
    res = pool.run(shell="fallocate -l 100M /work/big; echo rc=$?; ls -la /work", timeout_ms=15000)
    assert b"No space left on device" in res["stderr"], res
    assert b"rc=1" in res["stdout"], res
    assert b"big" not in res["stdout"] or b" 104857600 " not in res["stdout"], res


def test_a_million_small_files_hit_the_inode_cap(pool):
    res = pool.python(
        "import os, sys, errno\n"
        "n = 0\n"
        "try:\n"
        "    while n < 1000000:\n"
        "        os.close(os.open(f'/tmp/f{n}', os.O_CREAT | os.O_WRONLY)); n += 1\n"
        "except OSError as e:\n"
        "    print('created', n, errno.errorcode[e.errno], flush=True); sys.exit(1)\n",
        timeout_ms=20000)
    assert b"ENOSPC" in res["stdout"], res
    assert int(res["stdout"].split()[1]) < 1000000
    assert res["outcome"] == "disk_limit", res


def test_disk_fill_does_not_affect_a_concurrent_job(pool):
    hog = pool.submit_until(b"full", shell="dd if=/dev/zero of=/work/fill bs=1M count=200 2>/dev/null; echo full; sleep 2; exit 1",
                            timeout_ms=30000)
    ok = pool.submit(shell="dd if=/dev/zero of=/work/f bs=1M count=8 2>&1 && dd if=/dev/zero of=/tmp/f bs=1M count=8 2>&1 && echo written",
                     timeout_ms=15000)
    out = pool.wait([hog, ok])
    assert out[hog]["outcome"] == "disk_limit", out[hog]
    assert out[ok]["outcome"] == "exit" and out[ok]["exit_code"] == 0, out[ok]
    assert out[ok]["stdout"].endswith(b"written\n")


def test_file_size_rlimit_reports_disk_limit(pool):
    # RLIMIT_FSIZE (256 MiB default) is above the tmpfs size here, so ulimit it lower ourselves:
    # SIGXFSZ kills the writer and the outcome names the disk.
    res = pool.run(argv=["/usr/bin/bash", "-c", "ulimit -f 1024; exec dd if=/dev/zero of=/work/f bs=1M count=4"],
                   timeout_ms=15000)
    assert res["signal"] == 25 and res["outcome"] == "disk_limit", res


# --- case 5: output floods --------------------------------------------------------------------

@pytest.mark.parametrize("cmd,stream", [
    ("yes", "stdout"),
    ("cat /dev/zero", "stdout"),
    ("head -c 104857600 /dev/zero | tr '\\0' 'a'", "stdout"),  # one 100 MB line, no newline
    ("cat /dev/urandom", "stdout"),
    ("yes >&2", "stderr"),
])
def test_output_flood_is_capped(pool, cmd, stream):
    rss0 = daemon_rss_kb(pool)
    res, dt = pool.run_timed(shell=cmd, timeout_ms=15000)
    assert res["outcome"] == "output_limit", res
    assert len(res[stream]) == OUTPUT, len(res[stream])
    assert res[f"{stream}_truncated"] is True
    assert res["killed"] is True
    assert res["exec_time_us"] < 5_000_000, res["exec_time_us"]
    assert dt < 5 + MARGIN
    assert daemon_rss_kb(pool) - rss0 < 64 * 1024, "daemon memory grew with the flood"


def test_binary_output_is_kept_byte_exact(pool):
    res = pool.python("import sys; sys.stdout.buffer.write(bytes(range(256)) * 4)")
    assert res["outcome"] == "exit" and res["stdout"] == bytes(range(256)) * 4, res


def test_job_asking_for_more_output_than_the_server_max_is_clamped(pool):
    res = pool.run(shell="head -c 3000000 /dev/zero", max_output_bytes=10**12, timeout_ms=15000)
    assert res["outcome"] == "output_limit", {k: v for k, v in res.items() if k != "stdout"}
    assert len(res["stdout"]) == 1 << 20


def test_zero_output_limit(pool):
    res = pool.run(shell="echo x", max_output_bytes=0)
    assert res["outcome"] == "output_limit" and res["stdout"] == b"", res


# --- case 6: CPU ------------------------------------------------------------------------------

def test_cpu_spin_hits_cpu_time_limit(pool):
    res, dt = pool.run_timed(shell="while :; do :; done", timeout_ms=15000)
    assert res["outcome"] == "cpu_limit", res
    assert res["killed"] is True and not res["timed_out"]
    assert CPU_TIME_MS * 1000 * 0.9 <= res["cpu_time_us"] <= CPU_TIME_MS * 1000 + 1_500_000, res
    assert dt < CPU_TIME_MS / 1000 + MARGIN


C_SPIN_THREADS = r"""
#include <pthread.h>
static void* spin(void* a) { volatile unsigned long x = 0; for (;;) x++; return a; }
int main(void) {
  pthread_t t[8];
  for (int i = 0; i < 8; i++) pthread_create(&t[i], 0, spin, 0);
  spin(0);
}
"""


def test_many_spinning_threads_hold_the_quota_and_neighbours_keep_running(pool, cc):
    hog = pool.submit_until(b"spinning", shell="cat > /work/x && chmod +x /work/x && echo spinning && exec /work/x </dev/null",
                            stdin=cc(C_SPIN_THREADS, ["-pthread"]), timeout_ms=30000)
    t0 = time.monotonic()
    neighbour = pool.run(shell="echo neighbour")
    latency = time.monotonic() - t0
    assert neighbour["outcome"] == "exit" and neighbour["stdout"] == b"neighbour\n"
    assert latency < 5, latency
    res = pool.wait([hog])[hog]
    assert res["outcome"] == "cpu_limit", res
    # 1 CPU of quota: the sandbox cannot use more CPU time than wall time (plus slack).
    assert res["cpu_time_us"] <= res["exec_time_us"] * 1.2 + 300_000, res


def test_cpu_spin_in_a_background_child_is_still_limited(pool):
    res = pool.run(shell="(while :; do :; done) & wait", timeout_ms=15000)
    assert res["outcome"] == "cpu_limit", res


# --- case 7: wall timeout ---------------------------------------------------------------------

@pytest.mark.parametrize("cmd", [
    "sleep 1000",
    "trap '' TERM INT HUP; sleep 1000",
    "kill -STOP $$",                                # the main process stops itself
    "sleep 1000 & sleep 1000 & wait",
])
def test_wall_timeout(pool, cmd):
    res, dt = pool.run_timed(shell=cmd, timeout_ms=1500)
    assert res["outcome"] == "timeout", res
    assert res["timed_out"] is True and res["killed"] is True
    assert 1.4 <= res["exec_time_us"] / 1e6 < 1.5 + 3, res["exec_time_us"]
    assert dt < 1.5 + MARGIN


# --- case 8: daemonising ----------------------------------------------------------------------

@pytest.mark.parametrize("cmd", [
    "setsid sleep 1000 >/dev/null 2>&1 < /dev/null &",
    "( ( sleep 1000 & ) & ) ; echo double",
    "nohup sleep 1000 >/dev/null 2>&1 &",
    "setsid sh -c 'trap \"\" TERM HUP INT; kill -STOP $$' &",   # stopped and signal-ignoring
    "sleep 1000 &",                                          # child keeps stdout open
])
def test_daemonised_children_die_with_the_job(pool, cmd):
    res, dt = pool.run_timed(shell=cmd + "\nexit 0", timeout_ms=10000)
    assert res["outcome"] == "exit" and res["exit_code"] == 0, res
    assert not res["timed_out"]
    assert dt < MARGIN, dt   # the job ends with its main process, not at the timeout
    pool.assert_no_leftovers(timeout=5)


def test_child_holding_stdout_after_main_exits(pool):
    res, dt = pool.run_timed(shell="(sleep 3; echo late) & echo main", timeout_ms=10000)
    assert res["outcome"] == "exit" and res["stdout"] == b"main\n", res
    assert dt < 3, dt


def test_job_closing_stdout_early_keeps_running_until_it_exits(pool):
    res = pool.run(shell="echo before; exec >&- 2>&-; sleep 1; exit 3", timeout_ms=10000)
    assert res["outcome"] == "exit" and res["exit_code"] == 3, res
    assert res["stdout"] == b"before\n"
    assert res["exec_time_us"] >= 900_000


def test_job_closing_stdout_and_hanging_times_out(pool):
    res = pool.run(shell="exec >&- 2>&- </dev/null; sleep 1000", timeout_ms=1500)
    assert res["outcome"] == "timeout", res


# --- case 22: other exhaustion ----------------------------------------------------------------

def test_fd_exhaustion_stops_at_rlimit(pool):
    res = pool.python(
        "import os, resource\n"
        "fds = []\n"
        "try:\n"
        "    while len(fds) < 1000000: fds.append(os.open('/dev/null', os.O_RDONLY))\n"
        "except OSError as e: print('fds', len(fds), e.errno)\n"
        "try:\n"
        "    resource.setrlimit(resource.RLIMIT_NOFILE, (1 << 20, 1 << 20)); print('raised')\n"
        "except (ValueError, OSError) as e: print('refused', e)\n")
    assert res["outcome"] == "exit", res
    words = res["stdout"].split()
    assert words[0] == b"fds" and int(words[1]) <= 1024 and words[2] == b"24", res  # EMFILE
    assert b"refused" in res["stdout"] and b"raised" not in res["stdout"], res


def test_mlock_is_capped_by_rlimit(pool):
    res = pool.python(
        "import ctypes, mmap\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "m = mmap.mmap(-1, 64 << 20)\n"
        "buf = ctypes.c_char.from_buffer(m)\n"
        "r = libc.mlock(ctypes.addressof(buf), 64 << 20)\n"
        "print('mlock', r, ctypes.get_errno())\n"
        "r = libc.mlockall(3)\n"
        "print('mlockall', r, ctypes.get_errno())\n")
    assert res["outcome"] == "exit", res
    lines = res["stdout"].decode().splitlines()
    assert lines[0].split()[1] == "-1" and lines[0].split()[2] in ("1", "11", "12"), res  # EPERM/EAGAIN/ENOMEM
    assert lines[1].split()[1] == "-1", res


C_RECURSE = r"""
#include <stdio.h>
static int f(volatile int n) { volatile char pad[256]; pad[0] = (char)n; return f(n + 1) + pad[0]; }
int main(void) { printf("%d\n", f(0)); }
"""


def test_deep_c_recursion_dies_of_sigsegv_without_a_core_file(pool, cc):
    res = pool.binary(cc(C_RECURSE))
    assert res["outcome"] == "signal" and res["signal"] == 11, res
    res = pool.run(shell="cat > /work/x && chmod +x /work/x && cd /work && ./x </dev/null; echo rc=$?; ls -A /work /tmp",
                   stdin=cc(C_RECURSE))
    assert res["stdout"] == b"rc=139\n/tmp:\n\n/work:\nx\n", res


def test_deep_python_recursion_is_stopped_by_the_memory_limit(pool):
    # CPython 3.11 keeps Python frames on the heap: unbounded recursion is a memory bomb.
    res = pool.python("import sys; sys.setrecursionlimit(10**9)\ndef f(n): return f(n+1)+1\nf(0)",
                      timeout_ms=15000)
    assert res["outcome"] in ("memory_limit", "signal"), res
    if res["outcome"] == "signal":
        assert res["signal"] == 11, res


C_SEGV = r"""
#include <signal.h>
#include <sys/resource.h>
#include <stdio.h>
int main(void) {
  struct rlimit rl = {RLIM_INFINITY, RLIM_INFINITY};
  printf("raise core rlimit: %d\n", setrlimit(RLIMIT_CORE, &rl)); fflush(stdout);
  raise(SIGSEGV);
}
"""


def test_core_dump_is_not_written(pool, cc):
    res = pool.run(shell="cat > /work/x && chmod +x /work/x && cd /work && ./x </dev/null; echo rc=$?; ls -A /work /tmp",
                   stdin=cc(C_SEGV), timeout_ms=15000)
    assert b"raise core rlimit: -1" in res["stdout"], res
    assert b"rc=139" in res["stdout"], res
    assert b"core" not in res["stdout"].replace(b"raise core", b""), res


def test_main_process_segfault_is_reported_as_signal(pool, cc):
    res = pool.binary(cc(C_SEGV))
    assert res["outcome"] == "signal" and res["signal"] == 11, res


# --- beyond the list --------------------------------------------------------------------------

def test_zombie_storm(pool):
    res = pool.python(
        "import os, time\n"
        "n = 0\n"
        "try:\n"
        "    while n < 10000:\n"
        "        if os.fork() == 0: os._exit(0)\n"
        "        n += 1\n"
        "except OSError as e: print('fork refused', e.errno)\n"
        "print('zombies', n)\n", timeout_ms=15000)
    assert res["outcome"] in ("pids_limit",), res
    assert b"fork refused 11" in res["stdout"], res


def test_fifo_storm(pool):
    res = pool.python(
        "import os\n"
        "n = 0\n"
        "try:\n"
        "    while n < 100000: os.mkfifo(f'/tmp/p{n}'); n += 1\n"
        "except OSError as e: print('stopped', n, e.errno)\n"
        "fds = [os.open(f'/tmp/p{i}', os.O_RDONLY | os.O_NONBLOCK) for i in range(500)]\n"
        "print('opened', len(fds))\n", timeout_ms=15000)
    # /tmp is out of inodes when the job ends: disk_limit, with the job's own exit code 0.
    assert res["outcome"] == "disk_limit" and res["exit_code"] == 0, res
    lines = res["stdout"].split(b"\n")
    assert lines[0].startswith(b"stopped ") and lines[0].endswith(b" 28"), res   # ENOSPC (inodes)
    assert lines[1] == b"opened 500", res


def test_stdin_not_read_does_not_block_the_daemon(pool):
    big = pool.submit_until(b"up", shell="echo up; sleep 3; exit 0", stdin=b"x" * (8 << 20), timeout_ms=30000)
    t0 = time.monotonic()
    res = pool.run(shell="echo fast")
    assert res["stdout"] == b"fast\n" and time.monotonic() - t0 < 5
    out = pool.wait([big])[big]
    assert out["outcome"] == "exit" and out["exit_code"] == 0, out


def test_large_stdin_arrives_intact(pool):
    data = os.urandom(4 << 20)
    res = pool.run(shell="sha256sum", stdin=data, timeout_ms=15000)
    import hashlib
    assert res["stdout"].split()[0].decode() == hashlib.sha256(data).hexdigest(), res


def test_cancel_kills_the_whole_tree(pool):
    job = pool.submit_until(b"up", shell="setsid sleep 1000 & trap '' TERM; sleep 1000 & echo up; wait", timeout_ms=30000)
    r = pool.r
    pipe = r.pipeline(transaction=True)
    pipe.hset(f"sandpool:job:{job}", "cancel", 1)
    pipe.expire(f"sandpool:job:{job}", 86400)
    pipe.publish("sandpool:cancel", job)
    pipe.execute()
    res = pool.wait([job], 10)[job]
    assert res["outcome"] == "cancelled" and res["error"]["code"] == "cancelled", res
    pool.assert_no_leftovers(timeout=5)


def test_concurrent_hostile_jobs_do_not_starve_the_pool(pool, cc):
    ids = [pool.submit(argv=["/usr/bin/bash", "-c", ":(){ :|:& };:; sleep 2"], timeout_ms=10000),
           pool.submit(shell="yes", timeout_ms=10000)]
    res = pool.run(shell="echo ok", wait=20)
    assert res["stdout"] == b"ok\n"
    out = pool.wait(ids, 30)
    assert out[ids[0]]["outcome"] == "pids_limit", out[ids[0]]
    assert out[ids[1]]["outcome"] == "output_limit"


C_MEMFD_BOMB = r"""
#define _GNU_SOURCE
#include <sys/mman.h>
#include <unistd.h>
#include <stdio.h>
static char buf[1 << 16];
int main(void) {
  int fd = memfd_create("x", 0);
  for (;;) if (write(fd, buf, sizeof buf) < 0) { perror("write"); return 6; }
}
"""


def test_memfd_memory_bomb_kills_no_host_process(pool, cc):
    """Memory held in a memfd (or tmpfs) is charged to the sandbox but is in no process's RSS: the
    OOM killer must still pick a sandbox process, never a host process of the pool."""
    log0 = len(pool.daemon.log_tail(10**7))
    res = pool.binary(cc(C_MEMFD_BOMB), timeout_ms=10000)
    log = pool.daemon.log_tail(10**7)[log0:]
    assert "keeper lost" not in log, log
    assert res["outcome"] == "memory_limit", res


C_KERNEL_BUFFERS = r"""
#define _GNU_SOURCE
#include <fcntl.h>
#include <unistd.h>
#include <stdio.h>
#include <errno.h>
#include <string.h>
#include <sys/socket.h>
static char buf[1 << 16];
int main(int argc, char** argv) {
  long total = 0; int n = 0, sock = argv[1][0] == 's';
  for (;;) {
    int p[2];
    if (sock) {
      if (socketpair(AF_UNIX, SOCK_STREAM, 0, p) < 0) break;
      int sz = 1 << 30; setsockopt(p[0], SOL_SOCKET, SO_SNDBUF, &sz, sizeof sz);
      fcntl(p[0], F_SETFL, O_NONBLOCK);
    } else {
      if (pipe2(p, O_NONBLOCK) < 0) break;
      fcntl(p[1], F_SETPIPE_SZ, 1 << 20);
    }
    for (;;) { ssize_t w = write(sock ? p[0] : p[1], buf, sizeof buf); if (w <= 0) break; total += w; }
    n++;
  }
  printf("pairs=%d total=%ld MiB err=%s\n", n, total >> 20, strerror(errno)); fflush(stdout);
  return 0;
}
"""


@pytest.mark.parametrize("kind", ["pipes", "sockets"])
def test_kernel_buffer_memory_is_charged_to_the_sandbox(pool, cc, kind):
    """Pipe and socket buffers are kernel memory: they must count against the sandbox's memory
    (or a per-user cap), not pile up on the host unaccounted."""
    res = pool.binary(cc(C_KERNEL_BUFFERS), args=kind[0], timeout_ms=15000)
    assert res["peak_memory_bytes"] <= MEMORY + (8 << 20), res
    if res["outcome"] == "exit":
        total = int(res["stdout"].split(b"total=")[1].split()[0])
        assert total * (1 << 20) <= MEMORY, res
    else:
        assert res["outcome"] == "memory_limit", res


def test_tcp_socket_buffers_are_charged_to_the_sandbox(pool):
    """Loopback TCP buffers (up to tcp_wmem + tcp_rmem per connection) are kernel memory too. If
    the cgroup does not account them, a job holds host RAM far beyond its memory limit and pushes
    the host's global tcp_mem into pressure."""
    cap = 3 * MEMORY
    res = pool.python(
        "import socket\n"
        "ls = socket.socket(); ls.bind(('127.0.0.1', 0)); ls.listen(1000)\n"
        "keep = []; total = 0\n"
        "try:\n"
        "    for i in range(480):\n"
        "        c = socket.create_connection(ls.getsockname()); s, _ = ls.accept()\n"
        "        c.setblocking(False); keep += [c, s]\n"
        "        while total < %d:\n"
        "            try: total += c.send(b'x' * 262144)\n"
        "            except BlockingIOError: break\n"
        "        if total >= %d: break\n"
        "except OSError as e: print('stopped:', e)\n"
        "print('total', total, flush=True)\n" % (cap, cap), timeout_ms=15000)
    # Either the job stopped itself short of the cap, or it was killed at the limit.
    if res["outcome"] == "memory_limit":
        return
    assert res["stdout"], res
    total = int(res["stdout"].split(b"total ")[1].split()[0])
    assert total <= MEMORY + (32 << 20), f"{total >> 20} MiB held in socket buffers with a {MEMORY >> 20} MiB limit: {res}"


C_FORK_BOMB_IGNORING_ERRORS = r"""
#include <unistd.h>
int main(void) { for (;;) fork(); }
"""


def test_fork_bomb_that_ignores_fork_errors_reports_pids_limit(pool, cc):
    """Issue 11: it burned its whole timeout and ended as `timeout`. The limit it hit is what
    caused that, and the outcome says so (PROTOCOL.md section 5: pids_limit before timeout)."""
    res = pool.binary(cc(C_FORK_BOMB_IGNORING_ERRORS), timeout_ms=3000)
    assert res["outcome"] == "pids_limit", res
    # Ended by the timeout or by this pool's CPU-time limit, whichever came first: killed either way.
    assert res["killed"] and res["signal"] == 9, res


def test_tcp_buffers_past_the_memory_limit_end_the_job_as_memory_limit(pool):
    """Issue 11: on cgroup v1 a 128 MiB sandbox held ~770 MiB of TCP buffers and ended `exit`
    (v1's TCP limit only puts sockets under pressure). The keeper adds them to the job's memory
    and kills it at the limit; on v2 they are part of memory.current anyway."""
    cap = 4 * MEMORY
    res = pool.python(
        "import socket, time\n"
        "ls = socket.socket(); ls.bind(('127.0.0.1', 0)); ls.listen(1000)\n"
        "keep = []; total = 0\n"
        "while total < %d:\n"
        "    c = socket.create_connection(ls.getsockname()); s, _ = ls.accept()\n"
        "    c.setblocking(False); keep += [c, s]\n"
        "    while True:\n"
        "        try: total += c.send(b'x' * 262144)\n"
        "        except BlockingIOError: break\n"
        "print('held', total, flush=True)\n"
        "time.sleep(5)\n" % cap, timeout_ms=20000)
    assert res["outcome"] == "memory_limit", res
    assert res["peak_memory_bytes"] <= MEMORY + (64 << 20), res
