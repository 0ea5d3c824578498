"""map, submit_many, typed options and the exception hierarchy, on the sync Client and the
AsyncClient, against the real sandpoold (and a private Redis where no daemon is needed).

Waits are for events (a result, a record, a state); WAIT only bounds them.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import time
from typing import List

import msgpack
import pytest

from conftest import CLIENT_ROOT, Daemon, RedisServer
from sandpool import (
    AsyncClient,
    Client,
    InvalidOptionError,
    Job,
    Progress,
    ProtocolError,
    Result,
    SandpoolConnectionError,
    SandpoolError,
    SandpoolTimeout,
    WaitTimeout,
    decode_completion,
)
from sandpool._batch import MapState

WAIT = 60.0


@pytest.fixture
def client(daemon: Daemon) -> Client:
    c = Client(daemon.url, poll_interval=0.5)
    yield c
    c.close()
    daemon.assert_alive()


def _wait_result(daemon: Daemon, job_id: str) -> dict:
    deadline = time.monotonic() + WAIT
    while (raw := daemon.redis.get(f"sandpool:result:{job_id}")) is None:
        assert time.monotonic() < deadline, f"no result for {job_id}"
        time.sleep(0.05)
    return msgpack.unpackb(raw, raw=False)


def _notify_streams(daemon: Daemon) -> set:
    return set(daemon.redis.scan_iter("sandpool:notify:map-*"))


def _assert_only_late_records(daemon: Daemon, cancelled: set) -> None:
    """A stopped map deleted its stream; only records of the jobs it cancelled, stored after
    that, may have made it again, and it expires."""
    for key in _notify_streams(daemon):
        ids = {f[b"id"].decode() for _, f in daemon.redis.xrange(key)}
        if ids & cancelled:
            assert ids <= cancelled and daemon.redis.ttl(key) > 0
            daemon.redis.delete(key)


# --- options and errors (no daemon needed) ---------------------------------------------------


def test_a_misspelt_option_names_the_valid_ones(redis_server: RedisServer) -> None:
    c = Client(redis_server.url)
    for call in (lambda: c.submit(shell="true", timout_ms=5),  # type: ignore[call-arg]
                 lambda: c.run(shell="true", timout_ms=5),  # type: ignore[call-arg]
                 lambda: list(c.map(["true"], timout_ms=5)),  # type: ignore[call-arg]
                 lambda: c.submit_many([{"shell": "true", "timout_ms": 5}])):
        with pytest.raises(InvalidOptionError) as e:
            call()
        msg = str(e.value)
        assert "'timout_ms'" in msg and "did you mean 'timeout_ms'" in msg and "valid options" in msg
        assert isinstance(e.value, TypeError) and isinstance(e.value, SandpoolError)
    assert redis_server.client().keys("*") == []  # nothing was sent


def test_no_redis_exception_leaks(tmp_path) -> None:
    dead = f"unix://{tmp_path}/nobody.sock"
    c = Client(dead)
    for call in (lambda: c.submit(shell="true"), lambda: c.status("x"), lambda: c.cancel("x"),
                 lambda: c.result("x"), lambda: list(c.map(["true"])),
                 lambda: c.submit_many(["true"])):
        with pytest.raises(SandpoolConnectionError):
            call()

    async def main() -> None:
        a = AsyncClient(dead)
        with pytest.raises(SandpoolConnectionError):
            await a.submit(shell="true")
        with pytest.raises(SandpoolConnectionError):
            await a.status("x")
        with pytest.raises(SandpoolConnectionError):
            async for _ in a.map(["true"]):
                pass
        await a.close()

    asyncio.run(main())


def test_the_exception_hierarchy() -> None:
    assert issubclass(WaitTimeout, SandpoolTimeout) and issubclass(WaitTimeout, TimeoutError)
    assert issubclass(SandpoolTimeout, SandpoolError)
    assert issubclass(ProtocolError, SandpoolError) and ProtocolError("x", code="bad_field").code == "bad_field"
    from sandpool import SessionError
    assert issubclass(SessionError, SandpoolError)


def test_wait_timeout_is_a_timeout_error(client: Client, daemon: Daemon) -> None:
    with pytest.raises(TimeoutError) as e:
        client.run(shell="sleep 600", wait_timeout=0.5)
    assert isinstance(e.value, WaitTimeout)
    client.cancel(e.value.job_id)  # leave nothing running for the next tests
    assert _wait_result(daemon, e.value.job_id)["outcome"] == "cancelled"


def test_map_state_keeps_at_most_concurrency_in_flight() -> None:
    s = MapState((f"echo {i}" for i in range(10)), concurrency=3, ordered=True, prefix="sandpool")
    first = s.to_submit()
    assert len(first) == 3 and s.to_submit() == []  # no room until a record arrives
    ids = [i for i, _ in first]
    res = msgpack.packb({"v": 1, "id": ids[1], "outcome": "exit", "exit_code": 0}, use_bin_type=True)
    ready, fetch = s.on_record(b"1-0", {b"id": ids[1].encode(), b"outcome": b"exit", b"exit_code": b"0",
                                        b"result": res})
    assert ready == [] and fetch == []  # ordered: waits for the first
    assert len(s.to_submit()) == 1 and len(s.outstanding()) == 3
    # a second record of the same job is ignored (records are at least once)
    assert s.on_record(b"1-1", {b"id": ids[1].encode(), b"outcome": b"exit", b"exit_code": b"0",
                                b"result": res}) == ([], [])
    # a record without the result asks for a GET
    assert s.on_record(b"2-0", {b"id": ids[0].encode(), b"outcome": b"exit", b"exit_code": b"0",
                                b"result_bytes": b"70000"}) == ([], [ids[0]])
    assert s.last_id == "2-0"


# --- map against the daemon ------------------------------------------------------------------


def test_map_yields_every_result_as_jobs_finish(client: Client, daemon: Daemon) -> None:
    before = _notify_streams(daemon)
    seen: List[Progress] = []
    jobs = [Job(shell=f"echo {i}; exit {i % 3}") for i in range(120)]
    results = list(client.map(jobs, concurrency=16, on_progress=seen.append))
    assert len(results) == 120 and len({r.id for r in results}) == 120
    by_out = sorted(results, key=lambda r: int(r.stdout))
    assert [int(r.stdout) for r in by_out] == list(range(120))
    assert all(r.outcome == "exit" and r.exit_code == int(r.stdout) % 3 for r in results)
    assert [p.done for p in seen] == list(range(1, 121))
    assert all(p.submitted - p.done <= 16 and p.total == 120 for p in seen)
    assert seen[-1].failures == {"exit": 80}
    assert _notify_streams(daemon) == before  # its stream is deleted at the end


def test_map_ordered_yields_in_input_order(client: Client) -> None:
    jobs = ["sleep 1; echo 0"] + [f"echo {i}" for i in range(1, 8)]
    results = list(client.map(jobs, concurrency=8, ordered=True, timeout_ms=20000))
    assert [r.stdout for r in results] == [f"{i}\n".encode() for i in range(8)]


def test_map_defaults_and_large_results(client: Client) -> None:
    # a result over 64 KiB is not carried by its record: map fetches it
    jobs = [Job(shell="head -c 70000 /dev/zero"), Job(shell="echo $X", env={"X": "own"}), "echo $X"]
    results = {r.stdout[:5]: r for r in client.map(jobs, env={"X": "default"}, max_output_bytes=100000)}
    assert set(results) == {b"\0" * 5, b"own\n", b"default\n"[:5]}
    assert len(results[b"\0" * 5].stdout) == 70000


def test_map_errors_are_values(client: Client) -> None:
    jobs = [Job(argv=["/nonexistent"]), Job(shell="kill -9 $$"), Job(shell="true", template="no-such-template")]
    out = {r.id: r for r in client.map(jobs)}
    kinds = sorted((r.outcome, r.error.code if r.error else None) for r in out.values())
    assert kinds == [("error", "bad_field"), ("error", "exec_failed"), ("signal", None)]


def test_stopping_a_map_cancels_what_is_in_flight(client: Client, daemon: Daemon) -> None:
    jobs = [Job(id=f"stop-{os.getpid()}-{i}", shell="true" if i == 0 else "sleep 600") for i in range(20)]
    it = client.map(jobs, concurrency=4)
    first = next(it)
    assert first.ok and first.id == jobs[0].id
    it.close()
    # the three still in flight end cancelled; the rest were never submitted
    for j in jobs[1:4]:
        assert _wait_result(daemon, j.id)["outcome"] == "cancelled"
    for j in jobs[4:]:
        assert daemon.redis.get(f"sandpool:result:{j.id}") is None
        assert not [e for e in daemon.redis.xrange("sandpool:q:default") if e[1][b"id"] == j.id.encode()]
    _assert_only_late_records(daemon, {j.id for j in jobs[1:4]})


def test_ctrl_c_cancels_a_map(daemon: Daemon, tmp_path) -> None:
    tag = f"sigint-{os.getpid()}"
    script = tmp_path / "m.py"
    script.write_text(textwrap.dedent(f"""
        import sys
        from sandpool import Client, Job
        c = Client({daemon.url!r})
        jobs = [Job(id="{tag}-%d" % i, shell="sleep 600") for i in range(6)]
        for r in c.map(jobs, concurrency=3):
            print(r.id, flush=True)
    """))
    env = dict(os.environ, PYTHONPATH=str(CLIENT_ROOT))
    p = subprocess.Popen([sys.executable, str(script)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + WAIT
        while not all(daemon.redis.hget(f"sandpool:job:{tag}-{i}", "state") == b"running" for i in range(3)):
            assert p.poll() is None, p.stderr.read().decode()
            assert time.monotonic() < deadline
            time.sleep(0.05)
        p.send_signal(signal.SIGINT)
        _, err = p.communicate(timeout=WAIT)
        assert b"KeyboardInterrupt" in err
    finally:
        if p.poll() is None:
            p.kill()
    for i in range(3):
        assert _wait_result(daemon, f"{tag}-{i}")["outcome"] == "cancelled"
    for i in range(3, 6):
        assert daemon.redis.get(f"sandpool:result:{tag}-{i}") is None
    _assert_only_late_records(daemon, {f"{tag}-{i}" for i in range(3)})


def test_submit_many_and_completions(client: Client) -> None:
    name = f"sm-{os.getpid()}"
    ids = client.submit_many([{"shell": "exit 7", "id": f"{name}-a"}, "true"], notify=name)
    assert ids[0] == f"{name}-a" and len(ids) == 2
    got = {}
    for _sid, c in client.completions(name):
        got[c.id] = c
        if len(got) == 2:
            break
    assert got[ids[0]].exit_code == 7 and got[ids[1]].exit_code == 0 and got[ids[1]].result is None
    client.redis.delete(f"sandpool:notify:{name}")


# --- the asyncio client ----------------------------------------------------------------------


def test_async_client_jobs(daemon: Daemon) -> None:
    async def main() -> None:
        async with AsyncClient(daemon.url, poll_interval=0.5) as c:
            chunks: List[bytes] = []
            r = await c.run(shell="echo a; echo b >&2; exit 3", on_stdout=chunks.append, wait_timeout=WAIT)
            assert (r.outcome, r.exit_code, r.stdout, r.stderr) == ("exit", 3, b"a\n", b"b\n")
            assert b"".join(chunks) == b"a\n"
            job_id = await c.submit(shell="sleep 600")
            events = c.stream(job_id, timeout=WAIT)
            first = await events.__anext__()
            assert first.type == "started"
            st = await c.status(job_id)
            assert st.state == "running" and not st.terminal
            await c.cancel(job_id)
            types = [first.type] + [e.type async for e in events]
            assert types[-1] == "exited"
            res = await c.result(job_id)
            assert res is not None and res.outcome == "cancelled"
            assert await c.result("never-submitted-" + job_id) is None
            assert await c.result("never-submitted-" + job_id, wait=True, timeout=0.5) is None
            results = [r async for r in c.map([f"echo {i}" for i in range(40)], concurrency=8)]
            assert sorted(int(r.stdout) for r in results) == list(range(40))
            ordered = [r async for r in c.map(["sleep 1; echo 0", "echo 1", "echo 2"], ordered=True)]
            assert [r.stdout for r in ordered] == [b"0\n", b"1\n", b"2\n"]
            ids = await c.submit_many(["true", "false"], notify=f"am-{job_id}", notify_result=True)
            recs = {}
            async for _sid, comp in c.completions(f"am-{job_id}"):
                recs[comp.id] = comp
                if len(recs) == 2:
                    break
            assert recs[ids[1]].result is not None and recs[ids[1]].result.exit_code == 1
            await c.redis.delete(f"sandpool:notify:am-{job_id}")

    asyncio.run(main())


def test_async_map_stopped_early_cancels(daemon: Daemon) -> None:
    tag = f"astop-{os.getpid()}"

    async def main() -> None:
        async with AsyncClient(daemon.url) as c:
            jobs = [Job(id=f"{tag}-{i}", shell="true" if i == 0 else "sleep 600") for i in range(10)]
            it = c.map(jobs, concurrency=3)
            first = await it.__anext__()
            assert first.id == f"{tag}-0"
            await it.aclose()

    asyncio.run(main())
    for i in (1, 2):
        assert _wait_result(daemon, f"{tag}-{i}")["outcome"] == "cancelled"
    for i in range(3, 10):
        assert daemon.redis.get(f"sandpool:result:{tag}-{i}") is None
    _assert_only_late_records(daemon, {f"{tag}-1", f"{tag}-2"})


def test_async_sessions(daemon: Daemon) -> None:
    async def main() -> None:
        async with AsyncClient(daemon.url) as c:
            s = await c.session()
            await s.write_file("/work/a.txt", b"hello")
            assert await s.read_file("/work/a.txt") == b"hello"
            r = await s.exec(shell="cat /work/a.txt; exit 2")
            assert (r.stdout, r.exit_code) == (b"hello", 2)
            p = await s.spawn(shell="sleep 600")
            assert any(str(x.get("pid")) == p.pid for x in await s.processes())
            await s.destroy()

    asyncio.run(main())


def test_decode_completion_rejects_junk() -> None:
    with pytest.raises(ProtocolError) as e:
        decode_completion({b"outcome": b"exit"})
    assert e.value.code == "bad_payload"
    c = decode_completion({b"id": b"x", b"outcome": b"signal", b"exit_code": b""})
    assert c.exit_code is None and c.result is None and isinstance(c.outcome, str)
    assert Result  # exported
