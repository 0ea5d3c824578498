"""Integration tests: the client against the real sandpoold and a private redis-server.

Needs the daemon binary (see conftest.py); fails if it is missing unless SANDPOOL_ALLOW_SKIP=1.
Wall-clock checks are generous sanity bounds only.
"""

from __future__ import annotations

import os
import threading
import time
from typing import List, Optional, Tuple

import msgpack
import pytest

from conftest import Daemon
from sandpool import Client, Result, decode_event, decode_result, new_job_id, valid_job_id

WAIT = 60.0  # generous bound for any single job to finish


@pytest.fixture
def client(daemon: Daemon) -> Client:
    c = Client(daemon.url, poll_interval=0.5)
    yield c
    c.close()
    daemon.assert_alive()


def run_shell(client: Client, cmd: str, **kw) -> Result:
    return client.run(shell=cmd, wait_timeout=WAIT, **kw)


def check_common(r: Result, job_id: Optional[str], daemon: Daemon) -> None:
    if job_id is not None:
        assert r.id == job_id
    assert r.v == 1
    assert r.worker == daemon.consumer
    assert r.attempt == 1


# --- basic execution ------------------------------------------------------------------------


def test_shell_exit_code_stdout_stderr_and_live_callbacks(client: Client, daemon: Daemon) -> None:
    got: List[Tuple[str, bytes]] = []
    job_id = new_job_id()
    r = client.run(
        shell="echo out; sleep 0.3; echo err >&2; sleep 0.3; echo out2; exit 3",
        job_id=job_id,
        on_stdout=lambda b: got.append(("out", b)),
        on_stderr=lambda b: got.append(("err", b)),
        wait_timeout=WAIT,
    )
    assert (r.outcome, r.exit_code, r.signal) == ("exit", 3, None)
    assert r.stdout == b"out\nout2\n" and r.stderr == b"err\n"
    assert not r.ok and not r.timed_out and not r.killed and r.error is None
    assert not r.stdout_truncated and not r.stderr_truncated
    assert r.stdout_dropped_bytes == 0 and r.stderr_dropped_bytes == 0
    check_common(r, job_id, daemon)
    assert got == [("out", b"out\n"), ("err", b"err\n"), ("out", b"out2\n")]
    assert r.exec_time_us >= 500_000  # it slept 0.6 s
    assert r.exec_time_us < 60_000_000
    assert r.peak_memory_bytes > 0
    assert 0 <= r.queue_wait_us < 60_000_000


def test_callbacks_are_live(client: Client) -> None:
    stamps: List[Tuple[float, bytes]] = []
    r = run_shell(client, "echo first; sleep 3; echo second",
                  on_stdout=lambda b: stamps.append((time.monotonic(), b)))
    done = time.monotonic()
    assert r.ok and r.stdout == b"first\nsecond\n"
    assert b"".join(b for _, b in stamps) == r.stdout
    first_at = next(t for t, b in stamps if b.startswith(b"first"))
    assert done - first_at > 1.0, "first chunk was not delivered while the job ran"


def test_ok_result(client: Client) -> None:
    r = run_shell(client, "true")
    assert r.ok and r.outcome == "exit" and r.exit_code == 0 and r.stdout == b""


def test_argv_job_no_shell_and_path_lookup(client: Client) -> None:
    r = client.run(argv=["/bin/echo", "a b", "c"], wait_timeout=WAIT)
    assert r.ok and r.stdout == b"a b c\n"
    r = client.run(argv=["printf", "%s|", "x y", "$HOME", "*"], wait_timeout=WAIT)
    assert r.ok and r.stdout == b"x y|$HOME|*|"


def test_code_jobs_run_in_warm_interpreters(client: Client) -> None:
    chunks = []
    r = client.run(code="import json, sys\nprint(json.dumps({'n': 42}))\nsys.exit(4)", runtime="python",
                   on_stdout=chunks.append, wait_timeout=WAIT)
    assert (r.outcome, r.exit_code, r.stdout) == ("exit", 4, b'{"n": 42}\n'), r
    assert b"".join(chunks) == r.stdout
    r = client.run(code="echo ${BASH_VERSION:+bash} $((6*7))", runtime="bash", wait_timeout=WAIT)
    assert r.ok and r.stdout == b"bash 42\n", r
    r = client.run(code="raise ValueError('boom')", runtime="python", template="default", wait_timeout=WAIT)
    assert r.exit_code == 1 and b"ValueError: boom" in r.stderr, r
    r = client.run(shell="true", template="no-such-template", wait_timeout=WAIT)
    assert r.outcome == "error" and r.error is not None and r.error.code == "bad_field", r


def test_binary_output(client: Client) -> None:
    r = run_shell(client, r"printf '\377\000\001'")
    assert r.ok and r.stdout == b"\xff\x00\x01"


def test_exec_failed(client: Client) -> None:
    for argv in (["/nonexistent/prog"], ["no-such-command-sandpool-test"]):
        r = client.run(argv=argv, wait_timeout=WAIT)
        assert r.outcome == "error", r
        assert r.error is not None and r.error.code == "exec_failed", r
        assert r.error.retryable is False
        assert r.exit_code in (126, 127), r  # PROTOCOL.md section 8


def test_killed_by_signal(client: Client) -> None:
    r = run_shell(client, "echo x; kill -TERM $$")
    assert (r.outcome, r.signal, r.exit_code) == ("signal", 15, None), r
    assert r.stdout == b"x\n" and not r.timed_out


# --- stdin, env, cwd ------------------------------------------------------------------------


def test_stdin_reaches_the_job(client: Client) -> None:
    r = run_shell(client, "cat", stdin=b"hello\x00world\n")
    assert r.ok and r.stdout == b"hello\x00world\n"
    r = run_shell(client, "wc -c", stdin="héllo")
    assert r.ok and r.stdout.strip() == b"6"


def test_no_stdin_means_empty_closed_stdin(client: Client) -> None:
    r = run_shell(client, "cat; echo end")
    assert r.ok and r.stdout == b"end\n"


def test_large_stdin_roundtrip_in_bounded_events(client: Client) -> None:
    data = os.urandom(300_000)
    chunks: List[bytes] = []
    r = client.run(argv=["cat"], stdin=data, on_stdout=chunks.append, wait_timeout=WAIT)
    assert r.ok and r.stdout == data
    assert b"".join(chunks) == data
    assert all(0 < len(c) <= 65536 for c in chunks)


def test_env_is_exactly_the_job_env(client: Client, daemon: Daemon) -> None:
    r = client.run(argv=["env"], env={"FOO": "bar baz", "EMPTY": "", "Z_1": "é"},
                   wait_timeout=WAIT)
    assert r.ok, r
    assert daemon.canary.encode() not in r.stdout
    lines = set(r.stdout.decode().splitlines())
    assert lines == {"FOO=bar baz", "EMPTY=", "Z_1=é", "PATH=/usr/local/bin:/usr/bin:/bin",
                     "HOME=/work", "LANG=C.UTF-8"}


def test_host_env_does_not_leak_into_shell_jobs(client: Client, daemon: Daemon) -> None:
    r = run_shell(client, "env; echo \"canary=[$SANDPOOL_TEST_CANARY]\"")
    assert r.ok
    assert daemon.canary.encode() not in r.stdout
    assert b"SANDPOOL_TEST_CANARY=" not in r.stdout
    assert b"canary=[]\n" in r.stdout


def test_job_env_overrides_defaults(client: Client) -> None:
    r = client.run(argv=["env"], env={"HOME": "/tmp", "LANG": "C"}, wait_timeout=WAIT)
    assert r.ok
    lines = set(r.stdout.decode().splitlines())
    assert lines == {"HOME=/tmp", "LANG=C", "PATH=/usr/local/bin:/usr/bin:/bin"}


def test_cwd(client: Client) -> None:
    r = run_shell(client, "pwd")
    assert r.ok and r.stdout == b"/work\n"
    r = run_shell(client, "pwd", cwd="/tmp")
    assert r.ok and r.stdout == b"/tmp\n"
    r = run_shell(client, "echo data > f && cat f")  # /work is writable
    assert r.ok and r.stdout == b"data\n"


# --- limits ---------------------------------------------------------------------------------


def test_timeout(client: Client, daemon: Daemon) -> None:
    t0 = time.monotonic()
    job_id = new_job_id()
    r = client.run(shell="echo before; sleep 10", timeout_ms=300, job_id=job_id,
                   wait_timeout=WAIT)
    elapsed = time.monotonic() - t0
    assert r.outcome == "timeout", r
    assert r.timed_out and r.killed and r.exit_code is None
    assert r.stdout == b"before\n"  # output so far is kept
    check_common(r, job_id, daemon)
    assert elapsed < 8.0, f"a 300 ms timeout took {elapsed:.1f} s"


def test_output_limit(client: Client) -> None:
    chunks: List[bytes] = []
    r = client.run(shell="yes", max_output_bytes=1000, on_stdout=chunks.append,
                   wait_timeout=WAIT)
    assert r.outcome == "output_limit", r
    assert r.killed and r.stdout_truncated and not r.stderr_truncated
    assert r.stdout == b"y\n" * 500
    assert b"".join(chunks) == r.stdout  # nothing past the cap is published


def test_server_clamps_large_limits(client: Client) -> None:
    r = run_shell(client, "echo clamped", timeout_ms=10**12, max_output_bytes=10**12)
    assert r.ok and r.stdout == b"clamped\n"


# --- stream / status ------------------------------------------------------------------------


def test_stream_and_status(client: Client, daemon: Daemon) -> None:
    job_id = client.submit(shell="sleep 1; echo hi; echo e >&2")
    events = list(client.stream(job_id, timeout=WAIT))
    assert events[-1].type == "exited" and events[-1].result is not None
    r = events[-1].result
    assert r.ok and r.stdout == b"hi\n" and r.stderr == b"e\n"
    live = [e for e in events if e.seq is not None]
    seqs = [e.seq for e in live]
    assert seqs == list(range(seqs[0], seqs[0] + len(seqs))), seqs  # no gap
    assert b"".join(e.data for e in events if e.type == "stdout") == b"hi\n"
    assert b"".join(e.data for e in events if e.type == "stderr") == b"e\n"
    if events[0].type == "started":
        assert events[0].seq == 0 and events[0].worker == daemon.consumer
        assert events[0].attempt == 1
    s = client.status(job_id)
    assert s.has_result and s.state == "done" and s.consumer == daemon.consumer
    assert s.attempt == 1 and s.entry and not s.cancel_requested
    # a finished job: one exited event, from the stored result
    again = list(client.stream(job_id, timeout=WAIT))
    assert [e.type for e in again] == ["exited"] and again[0].result == r
    assert client.result(job_id) == r


def test_status_while_running(client: Client, daemon: Daemon) -> None:
    job_id = client.submit(shell="sleep 2")
    deadline = time.monotonic() + WAIT
    while client.status(job_id).state != "running":
        assert time.monotonic() < deadline, "job never reached state running"
        time.sleep(0.05)
    s = client.status(job_id)
    assert not s.has_result and s.consumer == daemon.consumer
    r = client.result(job_id, wait=True, timeout=WAIT)
    assert r is not None and r.ok


# --- cancel ---------------------------------------------------------------------------------


def test_cancel_running_job_keeps_partial_output(client: Client) -> None:
    job_id = new_job_id()
    seen = threading.Event()
    out: dict = {}

    def on_stdout(b: bytes) -> None:
        if b"partial" in b:
            seen.set()

    def runner() -> None:
        try:
            out["r"] = client.run(shell="echo partial; sleep 30; echo never", job_id=job_id,
                                  on_stdout=on_stdout, wait_timeout=WAIT)
        except BaseException as e:  # pragma: no cover - reported below
            out["e"] = e

    t0 = time.monotonic()
    t = threading.Thread(target=runner)
    t.start()
    assert seen.wait(WAIT), "no output from the job"
    client.cancel(job_id)
    t.join(WAIT + 5)
    assert "e" not in out, out.get("e")
    r: Result = out["r"]
    assert r.outcome == "cancelled", r
    assert r.stdout == b"partial\n" and r.killed
    assert r.error is not None and r.error.code == "cancelled" and not r.error.retryable
    assert time.monotonic() - t0 < 25, "cancel did not end the job early"
    assert client.status(job_id).cancel_requested


def test_cancel_before_submit_never_starts(client: Client, daemon: Daemon) -> None:
    job_id = new_job_id()
    client.cancel(job_id)
    ps = daemon.redis.pubsub()
    ps.subscribe(f"sandpool:out:{job_id}")
    assert ps.get_message(timeout=10)["type"] == "subscribe"
    r = client.run(shell="echo should-not-run", job_id=job_id, wait_timeout=WAIT)
    assert r.outcome == "cancelled", r
    assert r.stdout == b"" and r.error is not None and r.error.code == "cancelled"
    types = []
    while (m := ps.get_message(timeout=0.5)) is not None:
        if m["type"] == "message":
            types.append(decode_event(m["data"]).type)
    ps.close()
    assert "started" not in types and "stdout" not in types


def test_cancel_finished_job_is_unaffected(client: Client) -> None:
    r = run_shell(client, "echo fin")
    client.cancel(r.id)
    time.sleep(0.5)
    assert client.result(r.id) == r


# --- idempotency ----------------------------------------------------------------------------


def _entries_for(daemon: Daemon, job_id: str) -> list:
    return [e for e in daemon.redis.xrange("sandpool:q:default")
            if e[1].get(b"id") == job_id.encode()]


def _wait_no_entries(daemon: Daemon, job_id: str) -> None:
    deadline = time.monotonic() + WAIT
    while _entries_for(daemon, job_id):
        assert time.monotonic() < deadline, "stream entries of the job were never deleted"
        time.sleep(0.05)


def test_same_id_submitted_twice_runs_once(client: Client, daemon: Daemon) -> None:
    job_id = new_job_id()
    ps = daemon.redis.pubsub()
    ps.subscribe(f"sandpool:out:{job_id}")
    assert ps.get_message(timeout=10)["type"] == "subscribe"
    client.submit(shell="sleep 0.5; echo once", job_id=job_id)
    client.submit(shell="sleep 0.5; echo once", job_id=job_id)
    r = client.result(job_id, wait=True, timeout=WAIT)
    assert r is not None and r.ok and r.stdout == b"once\n"
    _wait_no_entries(daemon, job_id)
    stored = daemon.redis.get(f"sandpool:result:{job_id}")
    # submitted again after it finished: acked and deleted, not run; run() gets the original
    r2 = client.run(shell="echo again", job_id=job_id, wait_timeout=WAIT)
    assert r2 == r
    _wait_no_entries(daemon, job_id)
    time.sleep(1.0)
    types = []
    while (m := ps.get_message(timeout=0.5)) is not None:
        if m["type"] == "message":
            types.append(decode_event(m["data"]).type)
    ps.close()
    assert types.count("started") == 1, types
    assert types.count("exited") == 1, types
    assert daemon.redis.get(f"sandpool:result:{job_id}") == stored
    assert decode_result(stored).stdout == b"once\n"
    pending = daemon.redis.xpending("sandpool:q:default", "workers")
    assert pending["pending"] == 0, pending


# --- malformed input ------------------------------------------------------------------------


def _xadd_raw(daemon: Daemon, fields: dict) -> bytes:
    return daemon.redis.xadd("sandpool:q:default", fields)


def _error_result(client: Client, key_id: str) -> Result:
    r = client.result(key_id, wait=True, timeout=WAIT)
    assert r is not None, f"no result stored under {key_id}"
    return r


def _assert_rejected(r: Result, code: str) -> None:
    assert r.outcome == "error", r
    assert r.error is not None and r.error.code == code, r
    assert r.error.retryable is False
    assert r.exit_code is None and r.stdout == b"" and r.stderr == b""


def hexbytes(s: str) -> bytes:
    return bytes.fromhex("".join(s.split()))


@pytest.mark.parametrize(
    "payload, entry_id, code",
    [
        # the rejection vectors of PROTOCOL.md section 11
        (hexbytes("c1"), "bad-c1", "bad_payload"),
        (hexbytes("93 01 02 03"), "bad-array", "bad_payload"),
        (hexbytes("82 a1 76 05 a2 69 64 a2 74 36"), "t6", "bad_version"),
        (hexbytes("83 a1 76 01 a2 69 64 a2 74 34 a5 73 68 65 6c 6c 2a"), "t4", "bad_field"),
        (hexbytes("83 a1 76 01 a2 69 64 a2 74 35 a3 66 6f 6f c3"), "t5", "bad_field"),
    ],
)
def test_protocol_rejection_vectors(client: Client, daemon: Daemon, payload: bytes,
                                    entry_id: str, code: str) -> None:
    _xadd_raw(daemon, {"id": entry_id, "job": payload})
    r = _error_result(client, entry_id)
    _assert_rejected(r, code)
    assert r.id == entry_id


def _pack(m: dict) -> bytes:
    return msgpack.packb(m, use_bin_type=True)


BAD_JOBS = [
    ("no-v", lambda i: {"id": i, "shell": "true"}, "bad_version"),
    ("v0", lambda i: {"v": 0, "id": i, "shell": "true"}, "bad_version"),
    ("argv-str", lambda i: {"v": 1, "id": i, "argv": "echo"}, "bad_field"),
    ("argv-empty", lambda i: {"v": 1, "id": i, "argv": []}, "bad_field"),
    ("argv-int-item", lambda i: {"v": 1, "id": i, "argv": ["echo", 1]}, "bad_field"),
    ("both", lambda i: {"v": 1, "id": i, "argv": ["true"], "shell": "true"}, "bad_field"),
    ("neither", lambda i: {"v": 1, "id": i}, "bad_field"),
    ("no-id", lambda i: {"v": 1, "shell": "true"}, "bad_field"),
    ("neg-timeout", lambda i: {"v": 1, "id": i, "shell": "true", "timeout_ms": -1}, "bad_field"),
    ("zero-timeout", lambda i: {"v": 1, "id": i, "shell": "true", "timeout_ms": 0}, "bad_field"),
    ("str-timeout", lambda i: {"v": 1, "id": i, "shell": "true", "timeout_ms": "5"}, "bad_field"),
    ("env-int", lambda i: {"v": 1, "id": i, "shell": "true", "env": {"A": 1}}, "bad_field"),
    ("env-name", lambda i: {"v": 1, "id": i, "shell": "true", "env": {"1A": "x"}}, "bad_field"),
    ("env-nul", lambda i: {"v": 1, "id": i, "shell": "true", "env": {"A": "x\0y"}}, "bad_field"),
    ("shell-nul", lambda i: {"v": 1, "id": i, "shell": "tr\0ue"}, "bad_field"),
    ("cwd-rel", lambda i: {"v": 1, "id": i, "shell": "true", "cwd": "work"}, "bad_field"),
    ("retries-6", lambda i: {"v": 1, "id": i, "shell": "true", "retries": 6}, "bad_field"),
    ("stdin-int", lambda i: {"v": 1, "id": i, "shell": "true", "stdin": 3}, "bad_field"),
    ("id-mismatch", lambda i: {"v": 1, "id": i + "-other", "shell": "true"}, "bad_field"),
    ("argv-4097", lambda i: {"v": 1, "id": i, "argv": ["true"] * 4097}, "too_large"),
    ("env-1025", lambda i: {"v": 1, "id": i, "shell": "true",
                            "env": {f"E{n}": "" for n in range(1025)}}, "too_large"),
    ("shell-1MiB-plus-1", lambda i: {"v": 1, "id": i, "shell": "#" * ((1 << 20) + 1)}, "too_large"),
    ("stdin-16MiB-plus-1", lambda i: {"v": 1, "id": i, "shell": "true",
                                 "stdin": b"\0" * ((16 << 20) + 1)}, "too_large"),
    ("stdin-21MiB", lambda i: {"v": 1, "id": i, "shell": "true",
                               "stdin": b"\0" * (21 << 20)}, "too_large"),
]


@pytest.mark.parametrize("name, make, code", BAD_JOBS, ids=[b[0] for b in BAD_JOBS])
def test_bad_jobs_get_error_results(client: Client, daemon: Daemon, name: str, make,
                                    code: str) -> None:
    job_id = f"bad-{name}-{new_job_id()[:8]}"
    _xadd_raw(daemon, {"id": job_id, "job": _pack(make(job_id))})
    r = _error_result(client, job_id)
    _assert_rejected(r, code)
    if name == "id-mismatch":
        assert daemon.redis.exists(f"sandpool:result:{job_id}-other") == 0


def test_entry_over_max_payload_bytes(client: Client, daemon: Daemon) -> None:
    # Every field within its own limit; the whole entry (all its fields) over 20 MiB.
    job_id = "bigentry-" + new_job_id()[:8]
    job = _pack({"v": 1, "id": job_id, "shell": "true", "stdin": b"\0" * (15 << 20)})
    _xadd_raw(daemon, {"id": job_id, "job": job, "pad": b"\0" * (6 << 20)})
    _assert_rejected(_error_result(client, job_id), "too_large")


def test_trailing_bytes_are_bad_payload(client: Client, daemon: Daemon) -> None:
    job_id = "trailing-" + new_job_id()[:8]
    _xadd_raw(daemon, {"id": job_id, "job": _pack({"v": 1, "id": job_id, "shell": "true"})
                       + b"\x00"})
    _assert_rejected(_error_result(client, job_id), "bad_payload")


def test_entry_without_valid_id_field(client: Client, daemon: Daemon) -> None:
    for fields in ({"job": _pack({"v": 1, "id": "x1", "shell": "true"})},
                   {"id": "bad id!", "job": _pack({"v": 1, "id": "x2", "shell": "true"})},
                   {"id": "nojob-" + new_job_id()[:8]}):
        entry = _xadd_raw(daemon, fields).decode()
        key_id = fields.get("id", "")
        if key_id.startswith("nojob-"):
            r = _error_result(client, key_id)  # valid id, missing job field
        else:
            r = _error_result(client, f"entry-{entry}")  # PROTOCOL.md section 2
        assert r.outcome == "error" and r.error is not None, r
        assert r.error.code in ("bad_field", "bad_payload"), r
        assert not r.error.retryable
    assert daemon.redis.exists("sandpool:result:x1") == 0
    assert daemon.redis.exists("sandpool:result:x2") == 0


@pytest.mark.parametrize("fields", [
    {"job": _pack({"v": 1, "id": "y1", "shell": "true"})},
    {"id": "bad id!", "job": _pack({"v": 1, "id": "y2", "shell": "true"})},
    {"id": "dl-" + new_job_id()[:8], "job": b"\xc1"},
], ids=["missing-id", "invalid-id", "not-msgpack"])
def test_dead_letters(client: Client, daemon: Daemon, fields: dict) -> None:
    """Section 2: "If id is missing or invalid ... (and the raw entry goes to sandpool:dead)";
    section 1: sandpool:dead holds raw entries that could not be decoded (fields raw, reason)."""
    before = {e for e, _ in daemon.redis.xrange("sandpool:dead")}
    entry = _xadd_raw(daemon, fields).decode()
    key_id = fields.get("id", "")
    _error_result(client, key_id if valid_job_id(key_id) else f"entry-{entry}")
    new = [f for e, f in daemon.redis.xrange("sandpool:dead") if e not in before]
    assert len(new) == 1, f"expected one dead letter for stream entry {entry}, got {new}"
    assert b"raw" in new[0] and b"reason" in new[0], new[0]


def test_daemon_still_serves_after_bad_input(client: Client, daemon: Daemon) -> None:
    # not msgpack at all, then a normal job right behind it
    _xadd_raw(daemon, {"id": "garbage-after", "job": os.urandom(4096)})
    r = run_shell(client, "echo still-alive")
    assert r.ok and r.stdout == b"still-alive\n"
    g = _error_result(client, "garbage-after")
    assert g.outcome == "error" and g.error is not None
    daemon.assert_alive()
