"""The Redis lock-down documented in docs/SECURITY.md works: a daemon and a client that each hold
only the ACL rules given there run jobs end to end (submit, events, result, cancel), and the
client user cannot read or forge anything else. The password reaches the daemon through
SANDPOOL_REDIS_URL, not its command line."""

import socket
import subprocess
import time
from pathlib import Path

import msgpack
import pytest
import redis

from hostile_support import REPO, SANDPOOLD, Daemon, RedisServer, new_id, wait_for

DAEMON_PW = "daemon-" + new_id("pw")
CLIENT_PW = "client-" + new_id("pw")



def _documented_acl(user: str, password_word: str) -> str:
    """The `ACL SETUSER <user> ...` line of docs/SECURITY.md, read from there (one copy of the
    rules: a rule the daemon needs and the document lacks fails these tests)."""
    for line in (REPO / "docs" / "SECURITY.md").read_text().splitlines():
        if line.startswith(f"ACL SETUSER {user} "):
            return line[len("ACL SETUSER "):].replace(f">{password_word}", ">{pw}")
    raise AssertionError(f"docs/SECURITY.md has no ACL SETUSER line for {user}")


ACL_CLIENT = _documented_acl("sandpool-client", "CLIENT_PASSWORD")
ACL_DAEMON = _documented_acl("sandpool-daemon", "DAEMON_PASSWORD")


def free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


@pytest.fixture(scope="module")
def acl_setup():
    port = free_port()
    server = RedisServer(extra=["--port", str(port), "--bind", "127.0.0.1"])
    admin = server.client()
    admin.execute_command("ACL", "SETUSER", *ACL_CLIENT.format(pw=CLIENT_PW).split())
    admin.execute_command("ACL", "SETUSER", *ACL_DAEMON.format(pw=DAEMON_PW).split())
    url = f"redis://sandpool-daemon:{DAEMON_PW}@127.0.0.1:{port}"
    d = Daemon("", workers=2, extra=["--python-workers", "0", "--node-workers", "0", "--max-workers", "2",
                                     "--max-sandboxes", "2"],
               env={"SANDPOOL_REDIS_URL": url, "SANDPOOL_REDIS": url})  # see test_daemon_reads_sandpool_redis_url
    d.args.remove("--redis")
    d.args.remove("")
    d.start(wait_ready=admin)
    client = redis.Redis(host="127.0.0.1", port=port, username="sandpool-client", password=CLIENT_PW, socket_timeout=30)
    yield server, d, client, port, url
    d.stop()
    d.cleanup()
    server.stop()


def test_daemon_reads_sandpool_redis_url(acl_setup):
    """`sandpoold --help` and the docs name SANDPOOL_REDIS_URL (as the CLI does)."""
    server, d, client, port, url = acl_setup
    d2 = Daemon("", workers=1, extra=["--python-workers", "0", "--node-workers", "0", "--max-workers", "1",
                                      "--max-sandboxes", "1"], env={"SANDPOOL_REDIS_URL": url})
    d2.args.remove("--redis")
    d2.args.remove("")
    d2.env.pop("SANDPOOL_REDIS", None)
    try:
        d2.start()
        admin = server.client()
        wait_for(lambda: admin.exists(f"sandpool:daemon:{d2.consumer}") or d2.proc.poll() is not None, 6,
                 "the heartbeat of a daemon configured by SANDPOOL_REDIS_URL")
        assert admin.exists(f"sandpool:daemon:{d2.consumer}"), d2.log_tail()
    finally:
        d2.stop()
        d2.cleanup()


def test_password_is_not_on_the_daemon_command_line(acl_setup):
    server, d, client, port, url = acl_setup
    with open(f"/proc/{d.proc.pid}/cmdline", "rb") as f:
        assert DAEMON_PW.encode() not in f.read()


def test_client_user_runs_a_job_end_to_end(acl_setup):
    server, d, client, port, url = acl_setup
    job_id = new_id("acl")
    sub = client.pubsub()
    sub.subscribe(f"sandpool:out:{job_id}")
    client.xadd("sandpool:q:default", {"id": job_id, "job": msgpack.packb({"v": 1, "id": job_id, "shell": "echo via-acl"})})
    raw = wait_for(lambda: client.get(f"sandpool:result:{job_id}"), 30, "the result")
    res = msgpack.unpackb(raw)
    assert res["outcome"] == "exit" and res["stdout"] == b"via-acl\n", res
    types = []
    deadline = time.monotonic() + 10
    while "exited" not in types and time.monotonic() < deadline:
        m = sub.get_message(timeout=1)
        if m and m["type"] == "message":
            types.append(msgpack.unpackb(m["data"])["type"])
    assert types[0] == "started" and types[-1] == "exited", types
    sub.close()


def test_client_user_follows_a_completion_stream(acl_setup):
    """PROTOCOL.md section 21 under the client ACL: XADD with notify, XREAD the stream, DEL it."""
    server, d, client, port, url = acl_setup
    job_id, name = new_id("aclnotify"), new_id("n")
    client.xadd("sandpool:q:default", {"id": job_id, "notify": name, "notify_result": "1",
                                       "job": msgpack.packb({"v": 4, "id": job_id, "shell": "echo rec"})})
    reply = wait_for(lambda: client.xread({f"sandpool:notify:{name}": "0"}, block=1000), 30, "the record")
    fields = reply[0][1][0][1]
    assert fields[b"id"] == job_id.encode() and fields[b"outcome"] == b"exit"
    assert msgpack.unpackb(fields[b"result"])["stdout"] == b"rec\n"
    assert client.delete(f"sandpool:notify:{name}") == 1


def test_client_user_can_cancel(acl_setup):
    server, d, client, port, url = acl_setup
    job_id = new_id("acl")
    client.xadd("sandpool:q:default", {"id": job_id, "job": msgpack.packb({"v": 1, "id": job_id, "shell": "sleep 30"})})
    admin = server.client()  # the client user may not read the job hash
    wait_for(lambda: admin.hget(f"sandpool:job:{job_id}", "state") == b"running", 30, "the job to run")
    p = client.pipeline(transaction=True)
    p.hset(f"sandpool:job:{job_id}", "cancel", 1)
    p.expire(f"sandpool:job:{job_id}", 86400)
    p.publish("sandpool:cancel", job_id)
    p.execute()
    raw = wait_for(lambda: client.get(f"sandpool:result:{job_id}"), 20, "the cancelled result")
    assert msgpack.unpackb(raw)["outcome"] == "cancelled"


@pytest.mark.parametrize("cmd", [
    ("SET", "sandpool:result:forged", "x"),
    ("XADD", "sandpool:job:x", "*", "a", "b"),
    ("XADD", "sandpool:dead", "*", "a", "b"),
    ("GET", "sandpool:job:x"),
    ("HGETALL", "sandpool:job:x"),
    ("XREADGROUP", "GROUP", "workers", "evil", "COUNT", "1", "STREAMS", "sandpool:q:default", ">"),
    ("XRANGE", "sandpool:q:default", "-", "+"),
    ("XDEL", "sandpool:q:default", "0-1"),
    ("DEL", "sandpool:q:default"),
    ("XADD", "sandpool:notify:x", "*", "id", "forged", "outcome", "exit"),
    ("XREAD", "STREAMS", "sandpool:q:default", "0"),
    ("KEYS", "*"),
    ("SCAN", "0"),
    ("CONFIG", "GET", "*"),
    ("FLUSHALL",),
    ("EVAL", "return 1", "0"),
    ("EVALSHA", "e0e1f9fabfc9d4800c877a703b823ac0578ff8db", "0"),
    ("SCRIPT", "LOAD", "return 1"),
    ("PUBLISH", "sandpool:out:x", "forged"),
    ("GET", "sandpool:daemon:x"),
    ("ACL", "LIST"),
    ("MONITOR",),
])
def test_client_user_cannot_do_anything_else(acl_setup, cmd):
    server, d, client, port, url = acl_setup
    with pytest.raises(redis.exceptions.NoPermissionError):
        client.execute_command(*cmd)


def test_client_user_cannot_pattern_subscribe(acl_setup):
    server, d, client, port, url = acl_setup
    sub = client.pubsub()
    with pytest.raises(redis.exceptions.NoPermissionError):
        sub.psubscribe("sandpool:out:*")
        sub.get_message(timeout=2)
        sub.get_message(timeout=2)


def test_daemon_user_may_run_every_command_of_a_batched_finish(acl_setup):
    """A FINISH of four or more entries trims the queue's stream (XINFO GROUPS, XPENDING, XTRIM:
    PROTOCOL.md section 2); with two workers the daemon above rarely sends one, so the script runs
    here directly, as the daemon's user, on a queue of its own, carrying a read of that queue
    (XREADGROUP inside the script): every command it calls must be in the documented rules."""
    server, d, client, port, url = acl_setup
    dump = Path(SANDPOOLD).parent / "sandpool_dump_scripts"
    finish = subprocess.run([str(dump), "finish"], capture_output=True, text=True, check=True).stdout
    daemon = redis.Redis(host="127.0.0.1", port=port, username="sandpool-daemon", password=DAEMON_PW,
                         socket_timeout=30)
    q = f"sandpool:q:{new_id('acltrim')}"
    daemon.xgroup_create(q, "workers", id="0", mkstream=True)
    ids = [new_id("acltrim") for _ in range(6)]
    entries = [daemon.xadd(q, {"id": i}).decode() for i in ids]
    daemon.xreadgroup("workers", "acl-test", {q: ">"}, count=5)  # the sixth stays queued
    # The FINISH also carries a read of the queue (StreamReader::CarryRead): the sixth entry.
    keys, args = [], ["acl-test", "60", "workers", "sandpool", "5", "1"]
    for n, (i, e) in enumerate(zip(ids[:4], entries[:4])):
        keys += [f"sandpool:job:{i}", f"sandpool:result:{i}", q, f"sandpool:out:{i}"]
        if n == 0:
            # A large result is staged: SET apart, then moved into place by the script (RENAME).
            stage = f"sandpool:stage:{i}:acl-test:1"
            daemon.set(stage, b"r" * 70000, px=60000)
            args += [e, "1", "", "", i, "exit", "0", "", stage, "0"]
        else:
            args += [e, "1", "result", "exited", i, "exit", "0", "", "", "0"]
    keys.append(q)
    reply = daemon.eval(finish, len(keys), *keys, *args)
    assert reply[:4] == [b"ok"] * 4
    assert reply[4] == [[q.encode(), [[entries[5].encode(), [b"id", ids[5].encode()]]]]]
    assert client.get(f"sandpool:result:{ids[0]}") == b"r" * 70000
    assert not daemon.exists(f"sandpool:stage:{ids[0]}:acl-test:1")
    # The four are gone (trimmed), the fifth still runs, the sixth was read (pending, in the stream).
    assert [e.decode() for e, _ in daemon.xrange(q)] == entries[4:]
    daemon.delete(q)
