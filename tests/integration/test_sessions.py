"""Sessions end to end (PROTOCOL.md sections 12-19): the Python client against real daemons,
real session sandboxes and a real Redis. Each test says what a user of an agent sandbox relies on."""

import os
import shutil
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path

import msgpack
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "clients" / "python"))

from sandpool import Client, SessionError  # noqa: E402
from sandpool_harness import parent_pid, published_stdout, wait_for  # noqa: E402

FAST = ["--heartbeat-ms", "200", "--lease-ms", "1000"]
SMALL = ["--python-workers", "0", "--node-workers", "0", "--session-disk", "128M"]


def _still_there(s, pids):
    """Those of pids (in the session) that still exist, zombies included: gone means reaped."""
    try:
        r = s.exec(shell="for n in %s; do [ -e /proc/$n ] && echo $n; done; true" % " ".join(pids), as_root=True)
    except SessionError:
        return ["(no answer)"]
    return r.stdout.split() if r.ok else ["(failed)"]


@pytest.fixture
def client(redis_server):
    c = Client(redis_server.url, poll_interval=0.2)
    yield c
    c.close()


def test_files_and_processes_live_between_calls_and_files_survive_stop(daemons, client):
    d = daemons(workers=1, extra=SMALL)
    s = client.session("life-1", env={"GREETING": "hello"}, labels={"owner": "t"})
    info = s.info()
    assert info.state == "running" and info.host == d.consumer and info.labels == {"owner": "t"}
    r = s.exec(shell="echo $GREETING; id -u; pwd; echo kept > /work/a; echo tmp > /tmp/b")
    assert r.ok and r.stdout == b"hello\n1000\n/work\n", r
    # A variable set by one call is not an environment for the next, but files are.
    assert s.exec(shell="cat /work/a /tmp/b").stdout == b"kept\ntmp\n"
    # Per-command env wins over the session's; concurrent commands never see each other's.
    results = {}

    def run(name):
        results[name] = s.exec(shell="sleep 0.3; echo $GREETING", env={"GREETING": name})

    threads = [threading.Thread(target=run, args=(n,)) for n in ("one", "two", "three")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert {k: v.stdout for k, v in results.items()} == {"one": b"one\n", "two": b"two\n", "three": b"three\n"}
    # Root of the session may change its system directories; they persist too.
    assert s.exec(shell="mkdir -p /opt/tool && echo v1 > /opt/tool/version", as_root=True).ok
    assert s.stop().state == "stopped"
    with pytest.raises(SessionError) as e:
        s.exec(shell="true")
    assert e.value.code == "session_stopped"
    assert s.start().state == "running"
    assert s.exec(shell="cat /work/a /tmp/b /opt/tool/version").stdout == b"kept\ntmp\nv1\n"
    # Three more stop/start cycles keep everything.
    for i in range(3):
        s.stop()
        s.start()
        s.append_file("/work/a", f"{i}\n")
    assert s.read_file("/work/a") == b"kept\n0\n1\n2\n"
    disk_dir = Path(d.state_dir) / "sessions" / "s-life-1"
    assert (disk_dir / "disk.img").exists()
    s.destroy()
    assert not disk_dir.exists()
    assert client.redis.hget("sandpool:session:life-1", "state") == b"destroyed"
    with pytest.raises(SessionError) as e:
        s.info()
    assert e.value.code == "session_not_found"
    s.destroy()  # idempotent


def test_shell_lines_get_a_clean_process_even_when_the_shell_factory_is_killed(daemons, client):
    # A shell line runs in a warm shell that took its script from a memfd and was started by the
    # agent's factory (worker/session/session_agent.cc). The line sees only its stdio, under any load;
    # and if session code running as root kills the factory, the agent starts shells itself.
    daemons(workers=1, extra=SMALL)
    s = client.session("factory-1")
    fds = "ls /proc/self/fd | sort -n | tr '\\n' ' '"  # ls's own directory fd is 3

    def check(tag):
        results = [None] * 6

        def run(i):
            results[i] = s.exec(shell=f"echo $N; {fds}", env={"N": f"{tag}{i}"})

        threads = [threading.Thread(target=run, args=(i,)) for i in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for i, r in enumerate(results):
            assert r.ok and r.stdout == f"{tag}{i}\n0 1 2 3 ".encode(), r
    check("a")
    # The agent is pid 1; its factory is the other long-lived process of the daemon's binary
    # (a shell being started may show that name too, until its exec), root of the sandbox, or,
    # where the nursery library applies, the shell mother it became (sandpool-shells, the
    # session's user); a shell line with as_root may kill either.
    killed = s.exec(shell="read a < /proc/1/comm; for p in /proc/[0-9]*; do n=${p#/proc/}; [ $n = 1 ] && continue; "
                          "read c < $p/comm 2>/dev/null && { [ \"$c\" = \"$a\" ] || [ \"$c\" = sandpool-shells ]; } "
                          "&& kill -9 $n && echo $n; done; true",
                    as_root=True)
    assert killed.ok and killed.stdout and all(p.isdigit() for p in killed.stdout.split()), killed
    # The killed processes are gone (reaped by the agent, so it knows).
    pids = killed.stdout.decode().split()
    wait_for(lambda: not _still_there(s, pids), 30, "the killed processes to be reaped")
    check("b")
    assert s.exec(shell="echo $((1 + 1))").stdout == b"2\n"
    s.destroy()


def test_background_processes_serve_later_commands_and_stream(daemons, client):
    daemons(workers=1, extra=SMALL)
    s = client.session("bg-1")
    server = s.spawn(argv=["python3", "-m", "http.server", "8765", "--bind", "127.0.0.1"], cwd="/work")
    s.write_file("/work/index.html", "served from a background process\n")
    fetch = "import urllib.request as u; print(u.urlopen('http://127.0.0.1:8765/index.html').read().decode(), end='')"
    r = None
    for _ in range(50):
        r = s.exec(argv=["python3", "-c", fetch])
        if r.ok:
            break
        time.sleep(0.1)
    assert r.ok and r.stdout == b"served from a background process\n", r
    # stdin into `head -1`, then its exit; stdin after the exit is refused.
    pubsub = client.redis.pubsub()
    head = s.spawn(shell="head -1")
    pubsub.subscribe(f"sandpool:pout:bg-1:{head.pid}")
    head.write_stdin("first line\nsecond line\n")
    out = head.wait(10000)
    assert out["running"] is False and out["exit_code"] == 0 and out["stdout"] == b"first line\n"
    with pytest.raises(SessionError) as e:
        head.write_stdin("more")
    assert e.value.code == "process_exited"
    events = []
    end = time.time() + 5
    while time.time() < end:
        m = pubsub.get_message(timeout=0.2)
        if m and m["type"] == "message":
            events.append(msgpack.unpackb(m["data"], raw=False))
            if events[-1]["type"] == "exited":
                break
    pubsub.close()
    assert events and events[-1] == {"v": 2, "type": "exited", "seq": len(events) - 1, "exit_code": 0, "signal": None}
    assert b"".join(e["data"] for e in events if e["type"] == "stdout") == b"first line\n"
    # ps lists both; kill ends the server's whole group; a second kill says it had exited.
    by_pid = {p["pid"]: p for p in s.processes()}
    assert by_pid[server.pid]["state"] == "running" and by_pid[head.pid]["state"] == "exited"
    assert server.kill(9) is True
    out = server.wait(10000)
    assert out["running"] is False and out["signal"] == 9
    assert server.kill() is False
    # Output tail, and a flood keeps the newest 1 MiB.
    flood = s.spawn(shell="seq 1 400000; echo done")
    out = flood.wait(20000)
    assert out["stdout_truncated"] is True and len(out["stdout"]) == 1 << 20 and out["stdout"].endswith(b"400000\ndone\n")
    assert flood.output(tail_lines=2)["stdout"] == b"400000\ndone\n"
    with pytest.raises(SessionError) as e:
        s.process("p999").output()
    assert e.value.code == "not_found"


def test_file_operations_are_the_sessions_own_and_report_errors(daemons, client, tmp_path):
    daemons(workers=1, extra=SMALL)
    s = client.session("files-1")
    written = s.write_files([{"path": "/work/d/e/f.txt", "data": b"abc"}, {"path": "/work/x.sh", "data": "#!/bin/sh\necho x\n", "mode": 0o755}])
    assert [w["size"] for w in written] == [3, 17]
    assert s.exec(argv=["/work/x.sh"]).stdout == b"x\n"
    st = s.stat("/work/d/e/f.txt")
    assert st["type"] == "file" and st["size"] == 3 and st["uid"] == 1000
    # Optimistic concurrency: a write naming the mtime it read fails if someone changed the file.
    s.exec(shell="sleep 0.01; echo changed > /work/d/e/f.txt")
    with pytest.raises(SessionError) as e:
        s.write_files([{"path": "/work/d/e/f.txt", "data": b"mine", "expected_mtime_ns": st["mtime_ns"]}])
    assert e.value.code == "conflict"
    assert s.read_file("/work/d/e/f.txt") == b"changed\n"
    assert s.read_file("/work/d/e/f.txt", offset=2, length=3) == b"ang"
    names = sorted(e["path"] for e in s.list_dir("/work", recursive=True))
    assert names == ["/work/d", "/work/d/e", "/work/d/e/f.txt", "/work/x.sh"]
    s.copy("/work/d", "/work/d2", recursive=True)
    s.rename("/work/d2/e/f.txt", "/work/moved.txt")
    assert s.exists("/work/moved.txt") and not s.exists("/work/d2/e/f.txt")
    with pytest.raises(SessionError) as e:
        s.rename("/work/x.sh", "/work/moved.txt")
    assert e.value.code == "exists"
    with pytest.raises(SessionError) as e:
        s.remove("/work/d")
    assert e.value.code in ("is_a_directory", "not_empty")
    assert s.remove("/work/d", recursive=True) == 3
    # A result over 64 KiB is stored apart and its exited event names its size instead of carrying
    # it (PROTOCOL.md section 16); the client takes it from the result key (GETDEL: no result is
    # left behind, so Redis reuses its memory for the next), and no stage key stays.
    big = os.urandom(300 << 10)
    s.write_file("/work/big.bin", big)
    events = client.redis.pubsub()
    events.psubscribe("sandpool:out:*")
    assert events.get_message(timeout=5)["type"] == "psubscribe"
    assert s.read_file("/work/big.bin") == big
    exited = None
    while exited is None:
        m = events.get_message(timeout=5)
        assert m is not None, "no exited event"
        ev = msgpack.unpackb(m["data"], raw=False) if m["type"] == "pmessage" else {}
        exited = ev if ev.get("type") == "exited" else None
    events.close()
    op_id = m["channel"].decode().rsplit(":", 1)[1]
    assert "result" not in exited and exited["result_bytes"] > len(big)
    assert not client.redis.exists(f"sandpool:result:{op_id}")
    assert client.redis.keys("sandpool:stage:*") == []
    s.remove("/work/big.bin")
    with pytest.raises(SessionError) as e:
        s.read_file("/work/d/e/f.txt")
    assert e.value.code == "not_found"
    # The session's user cannot write system directories; its root can.
    with pytest.raises(SessionError) as e:
        s.write_file("/usr/local/bin/tool", "x")
    assert e.value.code == "permission"
    s.write_file("/usr/local/bin/tool", "#!/bin/sh\necho tool\n", mode=0o755, as_root=True)
    assert s.exec(shell="tool").stdout == b"tool\n"
    # A link planted in the session leads nowhere on the host: the host file is not reachable.
    secret = tmp_path / "host-secret"
    secret.write_text("host only")
    s.exec(shell=f"ln -s {secret} /work/link; ln -s /proc/1/root{secret} /work/link2")
    for link in ("/work/link", "/work/link2"):
        with pytest.raises(SessionError) as e:
            s.read_file(link)
        assert e.value.code in ("not_found", "permission"), link
    assert s.exec(shell=f"cat {secret}").exit_code != 0
    # Devices and FIFOs are refused, never blocked on.
    s.exec(shell="mkfifo /work/fifo")
    for path in ("/work/fifo", "/dev/zero"):
        with pytest.raises(SessionError) as e:
            s.read_file(path)
        assert e.value.code == "not_a_file"
    s.destroy()


def test_code_contexts_keep_state_and_restart_on_timeout(daemons, client):
    daemons(workers=1, extra=SMALL)
    s = client.session("code-1")
    assert s.run_code("import math\nx = 41").ok
    r = s.run_code("print('x is', x)\nx + 1")
    assert r.ok and r.stdout == b"x is 41\n42\n", r
    r = s.run_code("raise ValueError('boom')")
    assert r.exit_code == 1 and b"ValueError: boom" in r.stderr
    assert s.run_code("x").stdout == b"41\n"  # an error does not lose the context
    # Output that imitates the end marker is output, not an end.
    r = s.run_code("print('\\x1esandpool:0000:0\\x1e'); print('after')")
    assert r.ok and r.stdout == b"\x1esandpool:0000:0\x1e\nafter\n", r
    # Contexts are separate, per name and runtime.
    assert s.run_code("x", context="other").exit_code == 1
    assert s.run_code("let y = 2; const z = 3", runtime="node").ok
    assert s.run_code("y * 21", runtime="node").stdout == b"42\n"
    assert s.run_code("await new Promise(r => setTimeout(r, 50)); console.log('awaited')", runtime="node").stdout == b"awaited\n"
    # A timeout kills the context's interpreter: its state is gone, the next call starts afresh.
    r = s.run_code("import time\ntime.sleep(30)", timeout_ms=300)
    assert r.outcome == "timeout" and r.timed_out
    assert s.run_code("x").exit_code == 1
    assert s.run_code("x = 5\nx").stdout == b"5\n"
    s.restart_context()
    assert s.run_code("x").exit_code == 1
    s.destroy()


def test_exec_timeouts_cancels_and_limits_end_the_command_not_the_session(daemons, client):
    daemons(workers=1, extra=SMALL)
    s = client.session("limits-1", limits={"memory_bytes": 256 << 20, "disk_bytes": 96 << 20})
    r = s.exec(shell="echo before; sleep 30", timeout_ms=300)
    assert r.outcome == "timeout" and r.stdout == b"before\n"
    # A cancel (the job cancel, with the op id) ends a running command at once.
    holder = {}

    def run():
        holder["r"] = s.exec(shell="echo started; sleep 60", op_id="cancel-me-1")

    out = client.redis.pubsub()
    out.subscribe("sandpool:out:cancel-me-1")
    t = threading.Thread(target=run)
    t.start()
    wait_for(lambda: published_stdout(out), 10, "the command's first output")
    out.close()
    client.cancel("cancel-me-1")
    t.join(10)
    assert holder["r"].outcome == "cancelled"
    # Output cap.
    r = s.exec(shell="yes | head -c 300000", max_output_bytes=1000)
    assert r.outcome == "output_limit" and len(r.stdout) == 1000
    # Memory: the command is killed, the session goes on.
    r = s.exec(argv=["python3", "-c", "b = bytearray(600 << 20); print(len(b))"])
    assert r.outcome == "memory_limit" and r.signal == 9, r
    assert s.exec(shell="echo alive").stdout == b"alive\n"
    # Disk: a full disk is ENOSPC inside the session; the session goes on, and space comes back.
    r = s.exec(shell="dd if=/dev/zero of=/work/big bs=1M count=200 2>&1; echo rc=$?")
    assert b"No space left" in r.stdout
    assert s.exec(shell="rm /work/big && echo freed").stdout == b"freed\n"
    info = s.info()
    assert info.state == "running" and info.memory_limit_bytes == 256 << 20
    assert 64 << 20 < info.disk_limit_bytes <= 96 << 20
    s.destroy()


def test_bad_requests_end_with_codes(daemons, client):
    d = daemons(workers=1, extra=SMALL)
    s = client.session("errs-1")
    with pytest.raises(SessionError) as e:
        client.session("errs-1", template="python")
    assert e.value.code == "template_mismatch"
    with pytest.raises(SessionError) as e:
        client.session("errs-2", template="no-such-template")
    assert e.value.code == "bad_field"
    assert client.redis.hget("sandpool:session:errs-2", "state") in (None, b"destroyed")
    with pytest.raises(SessionError) as e:
        client.session("errs-3", start=False).info()
    assert e.value.code == "session_not_found"
    # Malformed requests straight on the wire: error results with codes, the daemon serves on.
    stream = f"sandpool:sreq:default:{d.consumer}"
    raw = {
        "bad-1": msgpack.packb({"v": 2, "id": "bad-1", "op": "exec", "session": "errs-1"}),  # no command
        "bad-2": msgpack.packb({"v": 2, "id": "bad-2", "op": "warp", "session": "errs-1"}),
        "bad-3": b"\xc1garbage",
        "bad-4": msgpack.packb({"v": 2, "id": "bad-4", "op": "read", "session": "errs-1", "path": 7}),
    }
    for oid, payload in raw.items():
        client.redis.xadd(stream, {"id": oid, "req": payload})
    wait_for(lambda: all(client.redis.exists(f"sandpool:result:{o}") for o in raw), 10, "answers")
    codes = {}
    for oid in raw:
        m = msgpack.unpackb(client.redis.get(f"sandpool:result:{oid}"), raw=False)
        codes[oid] = m["error"]["code"]
    assert codes == {"bad-1": "bad_field", "bad-2": "bad_field", "bad-3": "bad_payload", "bad-4": "bad_field"}
    assert s.exec(shell="echo still").stdout == b"still\n"
    s.destroy()


def test_idle_sessions_stop_and_ephemeral_ones_go(daemons, client):
    daemons(workers=1, extra=SMALL + FAST)
    s = client.session("idle-1", idle_timeout_ms=800)
    s.exec(shell="echo x > /work/x")
    e = client.session("idle-2", idle_timeout_ms=800, ephemeral=True)
    # A long command keeps its session in use.
    busy = client.session("idle-3", idle_timeout_ms=800)
    r = busy.exec(shell="sleep 2; echo done")
    assert r.ok
    wait_for(lambda: client.redis.hget("sandpool:session:idle-1", "state") == b"stopped", 10, "the idle stop")
    wait_for(lambda: client.redis.hget("sandpool:session:idle-2", "state") == b"destroyed", 10, "the ephemeral end")
    assert s.start().state == "running" and s.read_file("/work/x") == b"x\n"
    with pytest.raises(SessionError):
        e.info()
    for x in (s, busy):
        x.destroy()


def test_a_killed_sandbox_stops_its_session_and_the_next_create_resumes(daemons, client):
    d = daemons(workers=1, extra=SMALL)
    s = client.session("killed-1")
    s.write_file("/work/keep", "kept")
    # Kill the session's init (its agent) from the host, the way an outside OOM kill or an
    # operator would: the init of the pid namespace its marker process runs in.
    marker = s.spawn(argv=["sleep", "777"])
    assert marker.pid

    def ns_pid(p):
        return Path(f"/proc/{p}/status").read_text().split("NSpid:")[1].split("\n")[0].split()[-1]

    sleeper = wait_for(lambda: [p for p in d.sandbox_processes() if Path(f"/proc/{p}/cmdline").read_bytes() == b"sleep\x00777\x00"],
                       10, "the marker process")[0]
    init = sleeper
    while ns_pid(init) != "1":
        init = parent_pid(init)
    agents = [init]
    for p in agents:
        os.kill(p, signal.SIGKILL)
    wait_for(lambda: client.redis.hget("sandpool:session:killed-1", "state") == b"stopped", 10, "the session to stop")
    assert b"its sandbox ended" in client.redis.hget("sandpool:session:killed-1", "error")
    assert s.start().state == "running"
    assert s.read_file("/work/keep") == b"kept"
    s.destroy()


def test_a_dead_hosts_sessions_are_lost_then_stopped_when_it_returns(redis_server, daemons, client):
    a = daemons(workers=1, extra=SMALL + FAST)
    b = daemons(workers=1, extra=SMALL + FAST)
    # Only `a` has room: b is draining... simpler: place the session, then see where it is.
    s = client.session("lost-1")
    s.write_file("/work/f", "on the host")
    holder = a if s.info().host == a.consumer else b
    other = b if holder is a else a
    holder.kill9()
    wait_for(lambda: client.redis.hget("sandpool:session:lost-1", "state") == b"lost", 20, "a peer to mark it lost")
    with pytest.raises(SessionError) as e:
        s.exec(shell="true")
    assert e.value.code == "session_lost"
    assert other.proc.poll() is None
    holder.start(wait_ready=client.redis)
    wait_for(lambda: client.redis.hget("sandpool:session:lost-1", "state") == b"stopped", 20, "the host's return")
    assert s.start().state == "running" and s.read_file("/work/f") == b"on the host"
    s.destroy()


def test_a_restarted_daemon_answers_what_it_held_and_resumes_its_sessions(daemons, client):
    d = daemons(workers=1, extra=SMALL + FAST)
    s = client.session("restart-1")
    s.write_file("/work/f", "before")
    holder = {}

    def run():
        try:
            holder["r"] = s.exec(shell="sleep 60", op_id="dies-with-daemon-1")
        except Exception as e:  # noqa: BLE001
            holder["e"] = e

    t = threading.Thread(target=run)
    t.start()
    wait_for(lambda: client.redis.hget("sandpool:job:dies-with-daemon-1", "state") == b"running", 10, "the command")
    d.kill9()
    d.start(wait_ready=client.redis)
    t.join(30)
    assert holder["r"].outcome == "worker_lost", holder
    wait_for(lambda: client.redis.hget("sandpool:session:restart-1", "state") == b"stopped", 10, "the stopped record")
    assert s.start().state == "running" and s.read_file("/work/f") == b"before"
    s.destroy()


def test_a_command_running_while_the_session_reader_reconnects_is_not_answered_lost(daemons, client):
    # After any reconnect the daemon reads its own pending operations again (a previous run's, or
    # a reply lost with the connection). One it is serving right now must be skipped: claiming it
    # again says "lost", and the running command was answered worker_lost while it ran on.
    d = daemons(workers=1, extra=SMALL + FAST)
    s = client.session("reconnect-1")
    holder = {}

    def run():
        try:
            holder["r"] = s.exec(shell="while [ ! -e /work/go ]; do sleep 0.05; done; echo done",
                                 op_id="runs-through-reconnect-1")
        except Exception as e:  # noqa: BLE001
            holder["e"] = e

    t = threading.Thread(target=run)
    t.start()
    wait_for(lambda: client.redis.hget("sandpool:job:runs-through-reconnect-1", "state") == b"running", 10,
             "the command")
    name = f"sandpoold:sandpool:{d.consumer}:sessions"
    ids = [c["id"] for c in client.redis.client_list() if c.get("name") == name]
    assert ids, client.redis.client_list()
    for i in ids:
        client.redis.client_kill_filter(_id=i)
    # The reader is back (a new connection of that name) and has scanned its own entries.
    wait_for(lambda: any(c.get("name") == name and c["id"] not in ids for c in client.redis.client_list()), 10,
             "the session reader's reconnect")
    other = client.session("reconnect-2")
    assert other.exec(shell="echo after").stdout == b"after\n"  # the reader serves again
    assert t.is_alive() and "r" not in holder and "e" not in holder, holder
    s.write_file("/work/go", "")
    t.join(30)
    assert "e" not in holder, holder
    assert holder["r"].outcome == "exit" and holder["r"].stdout == b"done\n", holder["r"]
    s.destroy()
    other.destroy()


def test_a_full_host_refuses_new_sessions_with_host_full(daemons, client):
    daemons(workers=1, extra=["--python-workers", "0", "--node-workers", "0", "--max-workers", "1",
                              "--max-sandboxes", "2", "--session-disk", "64M"])
    first = client.session("full-1")
    with pytest.raises(SessionError) as e:
        client.session("full-2", wait_ms=1500)
    assert e.value.code == "host_full" and e.value.retryable
    first.stop()  # a stopped session holds disk only: room again
    second = client.session("full-2")
    assert second.info().state == "running"
    for x in (first, second):
        x.destroy()


def test_the_cli_drives_a_session(daemons, redis_server):
    import subprocess

    from sandpool_harness import SANDPOOL_CLI

    daemons(workers=1, extra=SMALL)
    env = dict(os.environ, SANDPOOL_REDIS_URL=redis_server.url)

    def cli(*args, stdin=None):
        return subprocess.run([SANDPOOL_CLI, "session", *args], input=stdin, capture_output=True, env=env, timeout=60)

    created = cli("create", "cli-1", "--label", "team=x", "--env", "A=1")
    assert created.returncode == 0, created.stderr
    assert msgpack is not None and b'"state":"running"' in created.stdout and b'"team":"x"' in created.stdout
    r = cli("exec", "cli-1", "--", "sh", "-c", "echo $A; exit 3")
    assert r.returncode == 3 and r.stdout == b"1\n"
    assert cli("write", "cli-1", "/work/f", stdin=b"from stdin").returncode == 0
    assert cli("read", "cli-1", "/work/f").stdout == b"from stdin"
    assert cli("spawn", "cli-1", "--shell", "echo bg").stdout.strip() == b'{"pid":"p1"}'
    assert cli("logs", "cli-1", "p1", "--wait").stdout == b"bg\n"
    assert b"cli-1\trunning\tdefault" in cli("ls").stdout
    snap = cli("snapshot", "cli-1", "cli-snap")
    assert snap.returncode == 0 and b'"name":"cli-snap"' in snap.stdout, snap.stderr
    assert cli("create", "cli-2", "--template", "cli-snap").returncode == 0
    assert cli("get", "cli-2", "/work/f").stdout == b"from stdin"
    assert cli("destroy", "cli-2").returncode == 0
    assert cli("stop", "cli-1").returncode == 0
    stopped = cli("exec", "cli-1", "--", "true")
    assert stopped.returncode != 0 and b"session_stopped" in stopped.stderr
    assert cli("destroy", "cli-1").returncode == 0
    gone = cli("info", "cli-1")
    assert gone.returncode == 1 and b"session_not_found" in gone.stderr


def test_snapshot_on_a_daemon_whose_state_dir_did_not_exist(daemons, client):
    # The snapshots directory was once made before the state directory existed: every snapshot
    # of such a daemon then failed (as "a snapshot of that name is being taken").
    parent = tempfile.mkdtemp(prefix="sandpool-it-fresh-")
    d = None
    try:
        d = daemons(workers=1, extra=SMALL + ["--state-dir", os.path.join(parent, "state")])
        s = client.session("snap-fresh")
        s.write_file("/work/x", "x")
        assert s.snapshot("fresh-1")["name"] == "fresh-1"
        assert client.session("from-fresh", template="fresh-1").read_file("/work/x") == b"x"
        client.session("from-fresh").destroy()
        s.destroy()
        client.delete_snapshot("fresh-1")
    finally:
        if d:
            d.stop()
        shutil.rmtree(parent, ignore_errors=True)


def test_snapshots_are_templates_on_any_host(redis_server, daemons, client):
    a = daemons(workers=1, extra=SMALL)
    s = client.session("snap-src")
    s.exec(shell="mkdir -p /opt/tool && echo v1 > /opt/tool/version", as_root=True)
    s.write_file("/work/data.txt", "prepared data\n")
    s.exec(shell="echo in-tmp > /tmp/t")
    info = s.snapshot("tool-v1")
    assert info["name"] == "tool-v1" and info["template"] == "default" and info["bytes"] > 0
    # The source session goes on, and its later changes are not in the snapshot.
    s.write_file("/work/after.txt", "later")
    with pytest.raises(SessionError) as e:
        s.snapshot("tool-v1")
    assert e.value.code == "exists"
    with pytest.raises(SessionError) as e:
        s.snapshot("default")  # a configured template's name
    assert e.value.code == "exists"
    names = [x["name"] for x in client.snapshots()]
    assert "tool-v1" in names
    # A new session from it, here: everything the source had, nothing it did later.
    n = client.session("snap-new-1", template="tool-v1")
    r = n.exec(shell="cat /opt/tool/version /work/data.txt /tmp/t; ls /work")
    assert r.stdout == b"v1\nprepared data\nin-tmp\ndata.txt\n", r
    assert n.info().template == "tool-v1"
    # A stopped session can be snapshotted too.
    n.write_file("/work/second.txt", "2")
    n.stop()
    assert n.snapshot("tool-v2")["bytes"] > 0
    # Another host, with its own state directory, fetches the same content from Redis.
    b = daemons(workers=1, extra=SMALL)
    s.stop()
    n.destroy()
    s.destroy()
    a.stop()  # only b is left
    m = client.session("snap-other-host", template="tool-v2")
    assert m.info().host == b.consumer
    assert m.exec(shell="cat /opt/tool/version /work/second.txt").stdout == b"v1\n2"
    # It resumes as itself (its template is the snapshot's name).
    m.stop()
    assert m.start().template == "tool-v2"
    m.destroy()
    client.delete_snapshot("tool-v1")
    client.delete_snapshot("tool-v2")
    client.delete_snapshot("tool-v2")  # idempotent
    assert client.snapshots() == []
    assert not any(k.startswith(b"sandpool:snapshot:") for k in client.redis.keys("sandpool:snapshot:*"))
    with pytest.raises(SessionError) as e:
        client.session("snap-gone", template="tool-v1")
    assert e.value.code == "bad_field"


def test_one_shot_jobs_run_on_a_snapshot_and_leave_nothing(daemons, client):
    d = daemons(workers=1, extra=SMALL)
    src = client.session("jobsnap-src")
    src.write_file("/work/input.txt", "from the snapshot\n")
    src.exec(shell="mkdir -p /opt/t && printf '#!/bin/sh\\necho tool ran\\n' > /opt/t/tool && chmod +x /opt/t/tool",
             as_root=True)
    src.snapshot("jobsnap")
    src.destroy()
    results = [client.run(template="jobsnap", shell="cat /work/input.txt; /opt/t/tool; echo $$ > /work/mine",
                          wait_timeout=60) for _ in range(4)]
    for r in results:
        assert r.ok and r.stdout == b"from the snapshot\ntool ran\n", r
    # Each job had a fresh copy: what one wrote, the next did not see.
    r = client.run(template="jobsnap", shell="cat /work/mine 2>&1; exit 3", wait_timeout=60)
    assert r.exit_code == 3 and b"No such file" in r.stdout
    # Timeouts and cancels as for any job.
    r = client.run(template="jobsnap", shell="sleep 30", timeout_ms=300, wait_timeout=60)
    assert r.outcome == "timeout"
    # Nothing is left: no session record, no directory but the warm spare's.
    assert not [k for k in client.redis.keys("sandpool:session:job.*")]
    # (a job's session is destroyed right after its result is stored)
    wait_for(lambda: all(n.startswith("w-") for n in os.listdir(Path(d.state_dir) / "sessions")), 10,
             "the jobs' sessions to be gone: " + str(sorted(os.listdir(Path(d.state_dir) / "sessions"))))
    # An unknown template is still an error with a code.
    r = client.run(template="no-such-thing", shell="true", wait_timeout=60)
    assert r.error is not None and r.error.code == "bad_field"
    client.delete_snapshot("jobsnap")
