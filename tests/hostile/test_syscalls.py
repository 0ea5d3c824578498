"""System-call attacks (hostile-tests.md cases 15, 16 and 21, and more): the seccomp allow-list
refuses them with EPERM (ENOSYS for clone3), other architectures' entry points kill the process
and the job's outcome says `seccomp`."""

import time

import pytest

from hostile_support import skip_unless_host_delivers_int80

# x86_64 numbers; the host is checked below.
SYSCALLS = {
    # case 15: mounts and namespaces
    "mount": 165, "umount2": 166, "pivot_root": 155, "setns": 308, "unshare": 272, "chroot": 161,
    "open_tree": 428, "move_mount": 429, "fsopen": 430, "fsmount": 432, "fspick": 433, "mount_setattr": 442,
    # case 16: kernel attack surface
    "keyctl": 250, "add_key": 248, "request_key": 249, "bpf": 321, "perf_event_open": 298,
    "userfaultfd": 323, "kexec_load": 246, "kexec_file_load": 320, "init_module": 175, "finit_module": 313,
    "delete_module": 176, "open_by_handle_at": 304, "name_to_handle_at": 303, "syslog": 103, "acct": 163,
    "swapon": 167, "swapoff": 168, "reboot": 169, "quotactl": 179,
    # beyond: io_uring, legacy aio, hardware, misc
    "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427, "io_setup": 206, "io_submit": 209,
    "iopl": 172, "ioperm": 173, "modify_ldt": 154, "vhangup": 153, "sethostname": 170, "setdomainname": 171,
    "fanotify_init": 300, "lookup_dcookie": 212, "mbind": 237, "set_mempolicy": 238, "migrate_pages": 256,
    "move_pages": 279, "process_madvise": 440, "memfd_secret": 447, "uselib": 134, "_sysctl": 156,
    "ptrace": 101, "process_vm_readv": 310, "process_vm_writev": 311, "pidfd_getfd": 438, "kcmp": 312,
    # case 21: clocks
    "settimeofday": 164, "clock_settime": 227, "clock_adjtime": 305, "adjtimex": 159,
}

PY_SYSCALL = (
    "import ctypes, sys\n"
    "libc = ctypes.CDLL(None, use_errno=True)\n"
    "def sc(nr, *a):\n"
    "    ctypes.set_errno(0)\n"
    "    r = libc.syscall(ctypes.c_long(nr), *[ctypes.c_long(x) for x in a])\n"
    "    return r, ctypes.get_errno()\n"
)


@pytest.fixture(scope="module", autouse=True)
def _x86_64_only():
    import platform
    if platform.machine() != "x86_64":
        pytest.skip("syscall numbers in this module are x86_64")


def test_denied_syscalls_fail_with_eperm(pool):
    # Arguments are bad pointers (1): if the kernel ever saw the call it would answer EFAULT or
    # EINVAL; EPERM means the policy refused it before the kernel looked.
    names = sorted(SYSCALLS)
    code = PY_SYSCALL + "for name, nr in %r:\n    print(name, *sc(nr, 1, 1, 1, 1, 1, 1))\n" % [(n, SYSCALLS[n]) for n in names]
    res = pool.python(code)
    assert res["outcome"] == "exit", res
    lines = res["stdout"].decode().splitlines()
    assert len(lines) == len(names), res
    bad = [line for line in lines if not line.endswith(" -1 1")]
    assert not bad, f"not refused with EPERM: {bad}"


@pytest.mark.parametrize("tool,cmd", [
    ("unshare", "unshare -r id"),
    ("unshare", "unshare -U -m -p -f --mount-proc id"),
    ("unshare", "unshare -n id"),
    ("mount", "mount -t tmpfs none /work"),
    ("mount", "mount --bind /work /tmp"),
    ("umount", "umount -l /proc"),
    ("chroot", "chroot /work /bin/true"),
    ("date", "date -s '2001-01-01 00:00:00' >/dev/null"),
    ("hostname", "hostname pwned"),
    ("nsenter", "nsenter -t 1 -m -u -i -n -p id"),
])
def test_namespace_and_mount_tools_fail(pool, tool, cmd):
    before = time.time()
    res = pool.run(shell=f"{cmd}; echo rc=$?; hostname; date +%Y")
    out = res["stdout"].decode()
    assert res["outcome"] == "exit", res
    assert "rc=0" not in out, res
    assert "sandbox\n" in out and "2001" not in out, res
    assert abs(time.time() - before) < 60


def test_clone_with_namespace_flags_is_refused_and_clone3_is_enosys(pool):
    code = PY_SYSCALL + (
        "import os, signal\n"
        "CLONE_NEWNS, CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET = 0x20000, 0x10000000, 0x20000000, 0x40000000\n"
        "for flags in (CLONE_NEWUSER, CLONE_NEWNS, CLONE_NEWPID, CLONE_NEWNET, CLONE_NEWUSER | 0xffffffff00000000):\n"
        "    r, e = sc(56, flags | signal.SIGCHLD, 0, 0, 0, 0)\n"
        "    if r == 0: os._exit(0)\n"
        "    print('clone', hex(flags), r, e)\n"
        "print('clone3', *sc(435, 0, 0))\n"
        "try:\n"
        "    os.unshare(os.CLONE_NEWUSER); print('UNSHARED')\n"
        "except AttributeError: print('no os.unshare')\n"
        "except OSError as e: print('os.unshare', e.errno)\n")
    res = pool.python(code)
    lines = res["stdout"].decode().splitlines()
    assert len(lines) == 7, res
    for line in lines[:5]:
        assert line.endswith(" -1 1"), line
    assert lines[5] == "clone3 -1 38", lines  # ENOSYS, so glibc falls back to clone
    assert "UNSHARED" not in lines[6]


def test_plain_fork_and_threads_still_work(pool):
    res = pool.python("import os, threading\n"
                      "t = threading.Thread(target=print, args=('thread',), kwargs={'flush': True}); t.start(); t.join()\n"
                      "pid = os.fork()\n"
                      "if pid == 0: print('child', flush=True); os._exit(0)\n"
                      "os.waitpid(pid, 0); print('parent')\n")
    assert res["stdout"] == b"thread\nchild\nparent\n", res


INT80 = r"""
#include <stdio.h>
int main(void) {
  long ret;
  printf("before\n"); fflush(stdout);
  __asm__ volatile ("int $0x80" : "=a"(ret) : "a"(20) : "memory");  /* i386 getpid */
  printf("int80 returned %ld\n", ret);
  return 0;
}
"""

X32 = r"""
#include <stdio.h>
#include <unistd.h>
#include <sys/syscall.h>
int main(void) {
  printf("before\n"); fflush(stdout);
  long r = syscall(0x40000000L | 39);  /* x32 getpid */
  printf("x32 returned %ld\n", r);
  return 0;
}
"""


@pytest.mark.parametrize("src", [INT80, X32], ids=["int80", "x32"])
def test_foreign_syscall_abis_are_killed(pool, cc, src):
    if src == INT80:
        skip_unless_host_delivers_int80(cc(INT80))
    res = pool.binary(cc(src))
    assert res["outcome"] == "seccomp", res
    assert res["signal"] == 31, res
    assert res["stdout"] == b"before\n", res


def test_seccomp_kill_in_a_child_does_not_hide_the_parent(pool, cc):
    skip_unless_host_delivers_int80(cc(INT80))
    res = pool.run(shell="cat > /work/x && chmod +x /work/x && /work/x </dev/null; echo rc=$?", stdin=cc(INT80))
    assert res["outcome"] == "exit" and res["stdout"] == b"before\nrc=159\n", res


def test_clock_cannot_be_changed(pool):
    before = time.time()
    code = PY_SYSCALL + (
        "import time\n"
        "tv = (ctypes.c_long * 2)(0, 0)\n"
        "print('settimeofday', *sc(164, ctypes.addressof(tv), 0))\n"
        "print('clock_settime', *sc(227, 0, ctypes.addressof(tv)))\n"
        "buf = ctypes.create_string_buffer(512)\n"
        "print('adjtimex', *sc(159, ctypes.addressof(buf)))\n"
        "print('clock_adjtime', *sc(305, 0, ctypes.addressof(buf)))\n"
        "try: time.clock_settime(time.CLOCK_REALTIME, 0); print('SET')\n"
        "except OSError as e: print('time.clock_settime', e.errno)\n")
    res = pool.python(code)
    lines = res["stdout"].decode().splitlines()
    assert len(lines) == 5 and all(line.endswith(" -1 1") for line in lines[:4]), lines
    assert lines[4] == "time.clock_settime 1", lines
    assert abs(time.time() - before) < 60, "host clock moved"


def test_dangerous_socket_families_are_refused(pool):
    code = (
        "import socket, errno\n"
        "tests = [('packet', 17, socket.SOCK_RAW, 0), ('vsock', 40, socket.SOCK_STREAM, 0), ('key', 15, socket.SOCK_RAW, 2),\n"
        "         ('alg', 38, socket.SOCK_SEQPACKET, 0), ('netlink_audit', 16, socket.SOCK_RAW, 9),\n"
        "         ('netlink_netfilter', 16, socket.SOCK_RAW, 12), ('netlink_kobject', 16, socket.SOCK_DGRAM, 15),\n"
        "         ('bluetooth', 31, socket.SOCK_RAW, 1), ('xdp', 44, socket.SOCK_RAW, 0), ('raw_inet', 2, socket.SOCK_RAW, 1)]\n"
        "for name, fam, typ, proto in tests:\n"
        "    try: socket.socket(fam, typ, proto); print(name, 'OPENED')\n"
        "    except OSError as e: print(name, errno.errorcode.get(e.errno))\n"
        "s = socket.socket(16, socket.SOCK_RAW, 0); print('netlink_route ok')\n")
    res = pool.python(code)
    lines = res["stdout"].decode().splitlines()
    assert lines[-1] == "netlink_route ok", res
    for line in lines[:-1]:
        name, verdict = line.split()
        assert verdict == "EPERM", line


def test_device_nodes_cannot_be_created(pool):
    code = (
        "import os, stat\n"
        "for name, mode, dev in [('mem', stat.S_IFCHR, os.makedev(1, 1)), ('sda', stat.S_IFBLK, os.makedev(8, 0)),\n"
        "                        ('kmsg', stat.S_IFCHR, os.makedev(1, 11)), ('tty', stat.S_IFCHR, os.makedev(5, 0))]:\n"
        "    try: os.mknod('/work/' + name, mode | 0o666, dev); print(name, 'CREATED')\n"
        "    except OSError as e: print(name, e.errno)\n"
        "os.mkfifo('/work/fifo'); os.mknod('/work/reg', stat.S_IFREG | 0o600); print('fifo and file ok')\n")
    res = pool.python(code)
    assert res["stdout"] == b"mem 1\nsda 1\nkmsg 1\ntty 1\nfifo and file ok\n", res


def test_tiocsti_and_personality_are_refused(pool):
    code = PY_SYSCALL + (
        "import os\n"
        "r, w = os.pipe()\n"
        "c = ctypes.c_char(b'x')\n"
        "print('tiocsti', *sc(16, 0, 0x5412, ctypes.addressof(c)))\n"
        "print('tiocsti_hi', *sc(16, 0, 0x100005412, ctypes.addressof(c)))\n"
        "print('tioclinux', *sc(16, 0, 0x541C, ctypes.addressof(c)))\n"
        "print('personality_norandom', *sc(135, 0x0040000))\n"
        "print('personality_query', *sc(135, 0xffffffff))\n")
    res = pool.python(code)
    lines = res["stdout"].decode().splitlines()
    assert lines[0].endswith(" -1 1") and lines[1].endswith(" -1 1") and lines[2].endswith(" -1 1"), lines
    assert lines[3].endswith(" -1 1"), lines
    assert not lines[4].endswith(" -1 1"), lines


def test_rlimits_cannot_be_raised(pool):
    code = (
        "import resource\n"
        "for name in ('RLIMIT_NOFILE', 'RLIMIT_FSIZE', 'RLIMIT_MEMLOCK', 'RLIMIT_CORE'):\n"
        "    r = getattr(resource, name); soft, hard = resource.getrlimit(r)\n"
        "    try: resource.setrlimit(r, (resource.RLIM_INFINITY, resource.RLIM_INFINITY)); print(name, 'RAISED', hard)\n"
        "    except (ValueError, OSError) as e: print(name, 'refused', hard)\n")
    res = pool.python(code)
    lines = res["stdout"].decode().splitlines()
    assert lines == ["RLIMIT_NOFILE refused 1024", "RLIMIT_FSIZE refused 268435456", "RLIMIT_MEMLOCK refused 65536",
                     "RLIMIT_CORE refused 1"], lines


def test_no_new_privs_and_capabilities_cannot_be_regained(pool):
    code = PY_SYSCALL + (
        "PR_SET_NO_NEW_PRIVS, PR_GET_NO_NEW_PRIVS, PR_CAP_AMBIENT = 38, 39, 47\n"
        "print('nnp_clear', *sc(157, PR_SET_NO_NEW_PRIVS, 0, 0, 0, 0))\n"
        "print('nnp', *sc(157, PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0))\n"
        "print('ambient_raise', *sc(157, PR_CAP_AMBIENT, 2, 21, 0, 0))\n"
        "print('setuid0', *sc(105, 0))\n"
        "print('setgid0', *sc(106, 0))\n"
        "hdr = (ctypes.c_uint32 * 2)(0x20080522, 0)\n"
        "data = (ctypes.c_uint32 * 6)(0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff)\n"
        "print('capset', *sc(126, ctypes.addressof(hdr), ctypes.addressof(data)))\n")
    res = pool.python(code)
    lines = res["stdout"].decode().splitlines()
    assert lines[0].split()[1] == "-1", lines
    assert lines[1] == "nnp 1 0", lines
    assert lines[2].split()[1] == "-1", lines
    assert lines[3] == "setuid0 -1 1" and lines[4] == "setgid0 -1 1" and lines[5] == "capset -1 1", lines


def test_job_may_add_its_own_seccomp_filter(pool):
    """Allowed: more filters can only restrict further (runtimes and tools do this)."""
    code = PY_SYSCALL + (
        "import os, struct\n"
        "# BPF: load nr; if nr == getpid(39) kill the process, else allow\n"
        "insns = [(0x20, 0, 0, 0), (0x15, 0, 1, 39), (0x06, 0, 0, 0x80000000), (0x06, 0, 0, 0x7fff0000)]\n"
        "buf = ctypes.create_string_buffer(b''.join(struct.pack('HBBI', *i) for i in insns))\n"
        "prog = struct.pack('HxxxxxxQ', len(insns), ctypes.addressof(buf))\n"
        "pbuf = ctypes.create_string_buffer(prog)\n"
        "pid = os.fork()\n"
        "if pid == 0:\n"
        "    r, e = sc(157, 22, 2, ctypes.addressof(pbuf), 0, 0)\n"  # PR_SET_SECCOMP, SECCOMP_MODE_FILTER
        "    if r != 0: os._exit(100 + e)\n"
        "    sc(39)\n"
        "    os._exit(0)\n"
        "_, st = os.waitpid(pid, 0); print('child', os.WTERMSIG(st) if os.WIFSIGNALED(st) else os.WEXITSTATUS(st))\n")
    res = pool.python(code)
    assert res["stdout"] == b"child 31\n", res


def test_realtime_scheduling_and_negative_nice_are_refused(pool):
    """A SCHED_FIFO spinner would starve the host's CFS tasks regardless of the CPU quota."""
    code = PY_SYSCALL + (
        "import os\n"
        "try: os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(50)); print('FIFO SET')\n"
        "except OSError as e: print('fifo', e.errno)\n"
        "try: os.sched_setscheduler(0, os.SCHED_RR, os.sched_param(1)); print('RR SET')\n"
        "except OSError as e: print('rr', e.errno)\n"
        "attr = (ctypes.c_uint32 * 14)(56, 6, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)\n"  # SCHED_DEADLINE
        "ctypes.cast(attr, ctypes.POINTER(ctypes.c_uint64))[3] = 10000000\n"
        "ctypes.cast(attr, ctypes.POINTER(ctypes.c_uint64))[4] = 30000000\n"
        "ctypes.cast(attr, ctypes.POINTER(ctypes.c_uint64))[5] = 30000000\n"
        "print('deadline', *sc(314, 0, ctypes.addressof(attr), 0))\n"
        "try: os.setpriority(os.PRIO_PROCESS, 0, -5); print('NICE SET')\n"
        "except OSError as e: print('nice', e.errno)\n"
        "print('ioprio_rt', *sc(251, 1, 0, (1 << 13) | 0))\n"  # IOPRIO_WHO_PROCESS, class RT
        "print(os.sched_getscheduler(0), os.getpriority(os.PRIO_PROCESS, 0))\n")
    res = pool.python(code)
    lines = res["stdout"].decode().splitlines()
    assert lines[:2] == ["fifo 1", "rr 1"], lines
    assert lines[2] == "deadline -1 1", lines
    assert lines[3] in ("nice 1", "nice 13"), lines
    assert lines[4] == "ioprio_rt -1 1", lines
    # Still the policy the daemon runs its jobs under (SCHED_BATCH, 3, by default: --cpu-policy),
    # nice 0: none of the refused calls changed either.
    assert lines[5] == "3 0", lines
