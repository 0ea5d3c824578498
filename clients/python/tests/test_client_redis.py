"""Client behaviour visible in Redis, against a private redis-server (no daemon needed).

What the client writes (XADD fields, the cancel MULTI block) is checked in Redis itself; what it
reads (results, job hashes, events) is written by the test with the exact bytes PROTOCOL.md
specifies.  The daemon's side of these exchanges is covered by test_daemon.py.
"""

from __future__ import annotations

import asyncio
import re
import threading
import time
from typing import List

import msgpack
import pytest
import redis
import redis.asyncio as aioredis

from conftest import RedisServer
from sandpool import Client, ErrorInfo, Event, WaitTimeout, _drive


def result_map(job_id: str, **override: object) -> dict:
    m = {
        "v": 1, "id": job_id, "outcome": "exit", "exit_code": 0, "signal": None,
        "timed_out": False, "killed": False, "stdout": b"", "stderr": b"",
        "stdout_truncated": False, "stderr_truncated": False,
        "stdout_dropped_bytes": 0, "stderr_dropped_bytes": 0, "exec_time_us": 10,
        "cpu_time_us": 5, "peak_memory_bytes": 4096, "queue_wait_us": 7, "worker": "w",
        "attempt": 1, "error": None,
    }
    m.update(override)
    return m


def pack(obj: object) -> bytes:
    return msgpack.packb(obj, use_bin_type=True)


@pytest.fixture
def raw(redis_server: RedisServer) -> redis.Redis:
    return redis_server.client()


@pytest.fixture
def client(redis_server: RedisServer) -> Client:
    c = Client(redis_server.url, poll_interval=0.2)
    yield c
    c.close()


def test_submit_writes_one_entry_with_id_then_job(client: Client, raw: redis.Redis) -> None:
    job_id = client.submit(argv=["/bin/echo", "a b"], env={"X": "1"}, timeout_ms=5000,
                           job_id="t2")
    assert job_id == "t2"
    (entry_id, fields), = raw.xrange("sandpool:q:default")
    assert list(fields) == [b"id", b"job"]
    assert fields[b"id"] == b"t2"
    assert fields[b"job"] == bytes.fromhex(
        "85a17601a26964a27432a461726776 92a92f62696e2f6563686fa3612062a3656e7681a158a131"
        "aa74696d656f75745f6d73cd1388".replace(" ", ""))


def test_submit_default_ids_are_random_128_bit_hex(client: Client, raw: redis.Redis) -> None:
    ids = {client.submit(shell="true") for _ in range(50)}
    assert len(ids) == 50
    assert all(re.fullmatch(r"[0-9a-f]{32}", i) for i in ids)
    entries = raw.xrange("sandpool:q:default")
    assert {f[b"id"].decode() for _, f in entries} == ids
    for _, f in entries:
        assert msgpack.unpackb(f[b"job"])["id"] == f[b"id"].decode()


def test_submit_rejects_bad_input_and_writes_nothing(client: Client, raw: redis.Redis) -> None:
    for kwargs in ({"argv": ["a"], "shell": "a"}, {}, {"shell": "x", "job_id": "bad id"},
                   {"shell": "x", "env": {"=": "1"}}, {"shell": "x", "cwd": "rel"}):
        with pytest.raises(ValueError):
            client.submit(**kwargs)
    assert raw.exists("sandpool:q:default") == 0


def test_prefix_and_queue_change_every_key(redis_server: RedisServer, raw: redis.Redis) -> None:
    c = Client(redis_server.url, prefix="sp2", queue="gpu", poll_interval=0.2)
    job_id = c.submit(shell="true")
    assert raw.xlen("sp2:q:gpu") == 1 and raw.exists("sandpool:q:default") == 0
    raw.set(f"sp2:result:{job_id}", pack(result_map(job_id)))
    assert c.result(job_id) is not None
    c.cancel(job_id)
    assert raw.hget(f"sp2:job:{job_id}", "cancel") == b"1"


def test_cancel_is_exactly_the_protocol_multi_block(client: Client, raw: redis.Redis,
                                                    redis_server: RedisServer) -> None:
    sub = redis_server.client().pubsub()
    sub.subscribe("sandpool:cancel")
    assert sub.get_message(timeout=5)["type"] == "subscribe"
    mon_conn = redis_server.client()
    with mon_conn.monitor() as mon:
        client.cancel("job-7")
        commands: List[str] = []
        while True:
            cmd = mon.next_command()["command"]
            commands.append(cmd)
            if cmd == "EXEC":
                break
    # redis-py may send a CLIENT/PING handshake first on a new connection; ignore those
    commands = commands[commands.index("MULTI"):]
    assert commands == [
        "MULTI",
        "HSET sandpool:job:job-7 cancel 1",
        "EXPIRE sandpool:job:job-7 86400",
        "PUBLISH sandpool:cancel job-7",
        "EXEC",
    ]
    msg = sub.get_message(timeout=5)
    assert msg["type"] == "message" and msg["data"] == b"job-7"
    assert raw.hgetall("sandpool:job:job-7") == {b"cancel": b"1"}
    assert 86000 < raw.ttl("sandpool:job:job-7") <= 86400
    with pytest.raises(ValueError):
        client.cancel("no spaces allowed")
    with pytest.raises(ValueError):
        client.stream("no spaces allowed")  # eagerly, not at the first next()


def test_status(client: Client, raw: redis.Redis) -> None:
    s = client.status("nope")
    assert (s.state, s.entry, s.consumer, s.attempt, s.cancel_requested, s.has_result) == (
        None, None, None, None, False, False)
    client.cancel("q1")
    s = client.status("q1")
    assert s.state is None and s.cancel_requested and not s.terminal
    raw.hset("sandpool:job:r1", mapping={"state": "running", "entry": "1-0",
                                         "consumer": "d1", "attempt": "2"})
    s = client.status("r1")
    assert (s.state, s.entry, s.consumer, s.attempt, s.has_result) == (
        "running", "1-0", "d1", 2, False)
    raw.hset("sandpool:job:r1", "state", "done")
    raw.set("sandpool:result:r1", pack(result_map("r1")))
    s = client.status("r1")
    assert s.state == "done" and s.has_result and s.terminal
    assert s.fields["consumer"] == "d1"


def test_result_no_wait(client: Client, raw: redis.Redis) -> None:
    assert client.result("x1") is None
    raw.set("sandpool:result:x1", pack(result_map(
        "x1", outcome="error", exit_code=None,
        error={"code": "bad_field", "message": "m", "retryable": False})))
    r = client.result("x1")
    assert r is not None and r.outcome == "error" and not r.ok
    assert r.error == ErrorInfo("bad_field", "m", False)


def test_result_wait_times_out_with_none(client: Client) -> None:
    t0 = time.monotonic()
    assert client.result("never", wait=True, timeout=0.5) is None
    assert 0.4 < time.monotonic() - t0 < 10


def test_result_wait_sees_a_result_stored_later(client: Client, raw: redis.Redis) -> None:
    # A result stored without any event (e.g. the events were lost): found by GET polling.
    t = threading.Timer(0.5, lambda: raw.set("sandpool:result:late", pack(
        result_map("late", stdout=b"done\n"))))
    t.start()
    try:
        r = client.result("late", wait=True, timeout=30)
    finally:
        t.join()
    assert r is not None and r.stdout == b"done\n"


def _serve_one(raw: redis.Redis, script, ready: threading.Event) -> threading.Thread:
    """Wait for the next XADD on the default queue, then run ``script(job_id)``."""
    def body() -> None:
        ready.set()
        res = raw.xread({"sandpool:q:default": "$"}, block=20000, count=1)
        assert res, "no job was submitted"
        (_, [(_, fields)]), = res
        script(fields[b"id"].decode())
    t = threading.Thread(target=body, daemon=True)
    t.start()
    return t


def _until_blocked(raw: redis.Redis) -> None:
    """Returns once a client of the server waits in a blocking command (_serve_one's XREAD)."""
    deadline = time.monotonic() + 20
    while raw.info("clients")["blocked_clients"] < 1:
        assert time.monotonic() < deadline, "the XREAD never blocked"
        time.sleep(0.01)


def _publish(raw: redis.Redis, job_id: str, events: List[dict]) -> None:
    for e in events:
        raw.publish(f"sandpool:out:{job_id}", pack({"v": 1, **e}))


def test_run_delivers_live_chunks_in_order(client: Client, redis_server: RedisServer) -> None:
    peer = redis_server.client()

    def script(job_id: str) -> None:
        res = result_map(job_id, exit_code=3, stdout=b"a\nb\n", stderr=b"e\n")
        _publish(peer, job_id, [
            {"type": "started", "seq": 0, "worker": "w", "attempt": 1},
            {"type": "stdout", "seq": 1, "data": b"a\n"},
            {"type": "stderr", "seq": 2, "data": b"e\n"},
            {"type": "progress", "seq": 3},  # unknown type: ignored, seq still counts
            {"type": "stdout", "seq": 4, "data": b"b\n"},
        ])
        peer.set(f"sandpool:result:{job_id}", pack(res))
        _publish(peer, job_id, [{"type": "exited", "seq": 5, "result": res}])

    ready = threading.Event()
    t = _serve_one(peer, script, ready)
    ready.wait()
    _until_blocked(peer)  # the XREAD waits before the XADD
    got: List[tuple] = []
    r = client.run(shell="x", on_stdout=lambda b: got.append(("out", b)),
                   on_stderr=lambda b: got.append(("err", b)), wait_timeout=30)
    t.join(5)
    assert got == [("out", b"a\n"), ("err", b"e\n"), ("out", b"b\n")]
    assert r.exit_code == 3 and r.stdout == b"a\nb\n" and not r.ok


def test_run_falls_back_to_result_key_after_a_seq_gap(client: Client,
                                                      redis_server: RedisServer) -> None:
    peer = redis_server.client()

    def script(job_id: str) -> None:
        _publish(peer, job_id, [
            {"type": "started", "seq": 0, "worker": "w", "attempt": 1},
            {"type": "stdout", "seq": 1, "data": b"one\n"},
            # seq 2 (stdout "two\n") is lost
            {"type": "stdout", "seq": 3, "data": b"three\n"},
        ])
        time.sleep(0.3)
        # result stored, but its exited event is lost too
        peer.set(f"sandpool:result:{job_id}",
                 pack(result_map(job_id, stdout=b"one\ntwo\nthree\n")))

    ready = threading.Event()
    t = _serve_one(peer, script, ready)
    ready.wait()
    _until_blocked(peer)
    chunks: List[bytes] = []
    r = client.run(shell="x", on_stdout=chunks.append, wait_timeout=30)
    t.join(5)
    assert r.stdout == b"one\ntwo\nthree\n"
    # live until the gap, then the rest from the stored result: nothing twice, nothing missing
    assert chunks == [b"one\n", b"two\nthree\n"]


def test_run_wait_timeout(client: Client, raw: redis.Redis) -> None:
    with pytest.raises(WaitTimeout) as e:
        client.run(shell="sleep 1", job_id="slow-1", wait_timeout=0.5)
    assert e.value.job_id == "slow-1"
    assert isinstance(e.value, TimeoutError)
    assert raw.xlen("sandpool:q:default") == 1  # submitted; not withdrawn


def test_run_validates_before_touching_redis(client: Client, raw: redis.Redis) -> None:
    with pytest.raises(ValueError):
        client.run(argv=["a"], shell="b")
    assert raw.exists("sandpool:q:default") == 0


def test_stream_of_finished_job_yields_exited_only(client: Client, raw: redis.Redis) -> None:
    raw.set("sandpool:result:f1", pack(result_map("f1", stdout=b"x")))
    evs = list(client.stream("f1", timeout=10))
    assert len(evs) == 1 and evs[0].type == "exited" and evs[0].seq is None
    assert evs[0].result is not None and evs[0].result.stdout == b"x"


def test_stream_joined_midway(client: Client, redis_server: RedisServer) -> None:
    peer = redis_server.client()
    res = result_map("m1", stdout=b"abc")
    it = client.stream("m1", timeout=30)
    got: List[Event] = []

    def publish_later() -> None:
        # wait until the stream has subscribed
        deadline = time.monotonic() + 10
        while peer.pubsub_numsub("sandpool:out:m1")[0][1] == 0:
            assert time.monotonic() < deadline
            time.sleep(0.02)
        _publish(peer, "m1", [
            {"type": "stdout", "seq": 2, "data": b"c"},  # joined after seq 0, 1
            {"type": "exited", "seq": 3, "result": res},
        ])

    t = threading.Thread(target=publish_later, daemon=True)
    t.start()
    got = list(it)
    t.join(5)
    assert [(e.type, e.seq, e.data) for e in got] == [("stdout", 2, b"c"), ("exited", 3, b"")]


def test_a_large_session_result_is_taken_or_read_under_an_acl_without_getdel(redis_server: RedisServer) -> None:
    """PROTOCOL.md section 16: a result named by its exited event is taken (GETDEL), so Redis can
    reuse its memory; a client whose ACL allows only GET on result keys reads it and it stays."""
    from sandpool._session_ops import _take_result
    admin = redis_server.client()
    admin.execute_command("ACL", "SETUSER", "getonly", "on", ">pw", "resetkeys", "-@all", "+get", "~sandpool:result:*")
    limited = redis.Redis(unix_socket_path=redis_server.sock, username="getonly", password="pw")
    for i, (r, taken) in enumerate(((admin, True), (limited, False))):
        key = f"sandpool:result:big{i}"
        admin.set(key, b"r" * 70000)
        assert _drive.run(r, _take_result(key)) == b"r" * 70000
        assert admin.exists(key) == (0 if taken else 1)

    async def main() -> None:
        for i, (user, taken) in enumerate(((None, True), ("getonly", False))):
            key = f"sandpool:result:abig{i}"
            admin.set(key, b"a" * 70000)
            a = aioredis.Redis(unix_socket_path=redis_server.sock, username=user, password="pw" if user else None)
            assert await _drive.arun(a, _take_result(key)) == b"a" * 70000
            assert admin.exists(key) == (0 if taken else 1)
            await a.aclose() if hasattr(a, "aclose") else await a.close()
    asyncio.run(main())


def _play_session_daemon(raw: redis.Redis, stream: str, answer: str) -> threading.Thread:
    """Takes one operation from the session's stream and answers it as a daemon would, either on
    its channel alone (`event`) or in its result key alone (`key`)."""
    def run() -> None:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            entries = raw.xrange(stream)
            if entries:
                break
            time.sleep(0.005)
        (_, fields), = entries
        req = msgpack.unpackb(fields[b"req"], raw=False)
        result = {"v": 2, "id": req["id"], "op": req["op"], "session": req["session"], "ok": True,
                  "error": None, "value": {"exists": True}}
        if answer == "event":
            raw.publish(f"sandpool:out:{req['id']}", pack({"v": 2, "type": "exited", "seq": 0, "result": result}))
        else:
            raw.set(f"sandpool:result:{req['id']}", pack(result))
    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def test_a_session_operation_is_answered_by_its_event_or_else_by_its_result_key(
        client: Client, raw: redis.Redis, redis_server: RedisServer) -> None:
    # The client reads the result key only once the channel has been silent for poll_interval
    # (0.2 s here): an answer on the channel is taken without it, and an answer only in the key
    # (its event lost) is found after that wait.
    raw.hset("sandpool:session:s1", "consumer", "d1")
    s = client.session("s1", start=False)
    stream = "sandpool:sreq:default:d1"
    mon_conn = redis_server.client()
    with mon_conn.monitor() as mon:
        t = _play_session_daemon(raw, stream, "event")
        assert s.exists("/work/x") is True
        t.join(5)
        raw.delete(stream)
        commands: List[str] = []
        while True:
            cmd = mon.next_command()["command"]
            if cmd.startswith("PUBLISH"):
                break
            commands.append(cmd)
    assert not [c for c in commands if c.startswith(("GET ", "GETDEL "))], commands

    t = _play_session_daemon(raw, stream, "key")
    began = time.monotonic()
    assert s.exists("/work/x") is True
    assert time.monotonic() - began >= 0.2
    t.join(5)
