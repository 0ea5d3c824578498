"""Hostile code in sessions (docs/SECURITY.md, "Sessions"): a session lives long, holds processes
between commands, has a file API and a root user of its own. None of that may reach the host,
the daemon's secrets, another session, or its own init."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "clients" / "python"))

from hostile_support import CANARIES, HOST_CANARY_FILES, MAX_SANDBOXES  # noqa: E402
from sandpool import Client, SessionError  # noqa: E402

# Room for sessions beside the fixed pools (whose uid range the leftover checks watch: session
# sandboxes have their own range past it, SECURITY.md section 5).
POOL_EXTRA = ["--session-disk", "64M", "--max-sandboxes", str(MAX_SANDBOXES + 4)]


@pytest.fixture
def sessions(pool):
    c = Client(pool.redis_server.url, poll_interval=0.2)
    made = []

    def make(sid, **opts):
        s = c.session(sid, **opts)
        made.append(s)
        return s

    yield make
    for s in made:
        s.destroy()
    c.close()


def no_canary(*blobs):
    joined = b"".join(blobs)
    for c in CANARIES:
        assert c.encode() not in joined, f"canary {c} leaked"


def test_a_session_cannot_kill_its_init_or_reach_outside_its_namespace(sessions):
    s = sessions("h-init")
    for as_root in (False, True):
        r = s.exec(shell="kill -9 1; kill -9 -1; kill -KILL 1; echo tried", as_root=as_root)
        assert b"tried" in r.stdout or r.signal == 9
        assert s.info().state == "running"
        # `kill -9 -1` also killed the session's warm shells; a command handed to one in the
        # instant before it died is collateral (signal 9). The session itself goes on.
        alive = [s.exec(shell="echo alive") for _ in range(3)]
        assert any(r.stdout == b"alive\n" for r in alive), alive
    # Its root is not the host's: no capability outside, no devices, no mounts.
    r = s.exec(shell="mknod /work/sda b 8 0 2>&1; mount -t tmpfs x /mnt 2>&1; "
                     "cat /proc/1/environ /proc/*/cmdline 2>/dev/null | tr '\\0' '\\n'; echo end", as_root=True)
    assert r.stdout.endswith(b"end\n")
    assert s.exec(shell="ls /work/sda 2>&1").exit_code != 0
    no_canary(r.stdout, r.stderr)


def test_a_fork_bomb_ends_the_command_not_the_session(sessions):
    s = sessions("h-bomb")
    r = s.exec(shell="b() { b | b & }; b; sleep 2; echo bombed", timeout_ms=5000)
    assert r.outcome in ("exit", "timeout", "signal", "pids_limit"), r  # the command ends; the pids limit held
    # What it left running is the session's own (its pids limit): stop ends all of it, and the
    # session resumes clean.
    s.stop()
    s.start()
    assert s.exec(shell="echo alive; ps -e | wc -l").stdout.startswith(b"alive\n")


def test_sessions_do_not_see_each_other_or_the_host(pool, sessions):
    a = sessions("h-a")
    b = sessions("h-b")
    a.write_file("/work/secret-of-a", "a's data")
    a.spawn(shell="exec sleep 600")
    r = b.exec(shell="find / -name 'secret-of-a' 2>/dev/null; ps -e -o args | grep -c '[s]leep 600'; echo end")
    assert r.stdout == b"0\nend\n", r
    assert b"secret-of-a" not in r.stdout
    # Host canary files, read through the session's own file API as its root: its own /etc, or
    # nothing; never the host's.
    for path in HOST_CANARY_FILES:
        try:
            data = b.read_file(path, as_root=True)
        except SessionError as e:
            assert e.code in ("not_found", "permission"), e
        else:
            no_canary(data)
    # Links planted to reach the host or the other session lead nowhere.
    b.exec(shell="ln -s /proc/1/root/etc /work/l1; ln -s ../../../../../../root /work/l2", as_root=True)
    for link in ("/work/l1/shadow", "/work/l2"):
        try:
            got = b.read_file(link, as_root=True)
            no_canary(got)
        except SessionError as e:
            assert e.code in ("not_found", "permission", "not_a_file", "is_a_directory"), e
    # The network is the session's own loopback: the host's canary listener sees nothing
    # (checked after every test), and Redis on the host is not there.
    port = pool.host.listener.port
    r = b.exec(argv=["python3", "-c", f"import socket; s=socket.socket(); s.settimeout(2); print(s.connect_ex(('127.0.0.1', {port})))"])
    assert r.stdout.strip() != b"0"


def test_a_session_cannot_fill_the_host_disk_or_keep_memory(sessions):
    s = sessions("h-fill", limits={"disk_bytes": 64 << 20, "memory_bytes": 128 << 20})
    r = s.exec(shell="cat /dev/zero > /work/fill; echo rc=$?")
    assert r.stdout == b"rc=1\n" and b"No space left" in r.stderr, r
    r = s.exec(shell="cat /dev/zero > /tmp/fill2; echo rc=$?")
    assert r.stdout == b"rc=1\n" and b"No space left" in r.stderr, r
    r = s.exec(argv=["python3", "-c", "x = bytearray(400 << 20)"])
    assert r.outcome == "memory_limit", r
    assert s.exec(shell="rm -f /work/fill /tmp/fill2; echo ok").stdout == b"ok\n"


def test_the_next_session_on_a_slot_finds_nothing_of_the_last(sessions):
    """A stopped session's keeper serves the next start of its template (docs/SECURITY.md,
    "Sessions"): its network namespace, which the sandbox shared, is replaced first. Sockets the
    last session left (a connection in TIME_WAIT, listeners of processes the stop killed, an
    abstract unix socket) are not there for the next one."""
    limits = {"memory_bytes": 96 << 20}  # not the template's defaults: no warm spare takes it
    a = sessions("h-slot-a", limits=limits)
    a.spawn(shell="exec python3 -c \"import socket, time; s = socket.socket(socket.AF_UNIX); "
                  "s.bind(b'\\0residue-of-a'); s.listen(); t = socket.socket(); t.bind(('127.0.0.1', 47002)); "
                  "t.listen(); time.sleep(600)\"")
    left = a.exec(argv=["python3", "-c", "import socket\n"
                        "l = socket.socket(); l.bind(('127.0.0.1', 47001)); l.listen()\n"
                        "c = socket.create_connection(('127.0.0.1', 47001)); s, _ = l.accept()\n"
                        "c.close(); s.close(); l.close()"])
    assert left.exit_code == 0, left
    seen = "cat /proc/net/tcp /proc/net/tcp6 /proc/net/unix; cat /proc/self/uid_map"
    in_a = a.exec(shell=f"sleep 0.2; {seen}").stdout
    # The checks below can see what they look for: in the session that made them.
    assert b":B799" in in_a and b":B79A" in in_a and b"@residue-of-a" in in_a, in_a.decode()
    a.stop()
    b = sessions("h-slot-b", limits=limits)
    in_b = b.exec(shell=seen).stdout
    assert in_b.splitlines()[-1] == in_a.splitlines()[-1], "the same slot (its uids) serves the next session"
    assert b":B799" not in in_b and b":B79A" not in in_b, in_b
    assert b"residue-of-a" not in in_b, in_b
