"""Conformance of PROTOCOL.md section 21 (version 4): batches and completion streams.

Raw Redis commands against the real sandpoold, no client library: what any client written from
the document would send.  Waits are for events (a record, a hash field); WAIT only bounds them.
"""

from __future__ import annotations

import secrets
import time
from typing import Dict, Iterable, List, Optional

import msgpack
import pytest

from conftest import Daemon

WAIT = 60.0
Q = "sandpool:q:default"


def _pack(m: dict) -> bytes:
    return msgpack.packb(m, use_bin_type=True)


def _name() -> str:
    return "t-" + secrets.token_hex(6)


def _submit(daemon: Daemon, jobs: Iterable[dict], notify: Optional[str], with_result: bool = False,
            extra: Optional[Dict[str, str]] = None) -> List[str]:
    """One pipelined batch of XADDs (section 21, Batches); returns the ids."""
    pipe = daemon.redis.pipeline(transaction=False)
    ids = []
    for job in jobs:
        fields: Dict[str, object] = {"id": job["id"], "job": _pack(job)}
        if notify is not None:
            fields["notify"] = notify
        if with_result:
            fields["notify_result"] = "1"
        fields.update(extra or {})
        pipe.xadd(Q, fields)
        ids.append(job["id"])
    pipe.execute()
    return ids


def _records(daemon: Daemon, name: str, ids: Iterable[str]) -> Dict[str, List[Dict[str, bytes]]]:
    """Follows sandpool:notify:<name> with XREAD from 0 until every id has a record."""
    want = set(ids)
    got: Dict[str, List[Dict[str, bytes]]] = {}
    last = "0"
    deadline = time.monotonic() + WAIT
    while not want <= set(got):
        assert time.monotonic() < deadline, f"no record for {sorted(want - set(got))[:5]}"
        reply = daemon.redis.xread({f"sandpool:notify:{name}": last}, count=500, block=1000)
        for _stream, entries in reply or []:
            for entry_id, fields in entries:
                last = entry_id
                got.setdefault(fields[b"id"].decode(), []).append(fields)
    return got


def _all_records(daemon: Daemon, name: str) -> Dict[str, List[Dict[str, bytes]]]:
    out: Dict[str, List[Dict[str, bytes]]] = {}
    for _eid, fields in daemon.redis.xrange(f"sandpool:notify:{name}"):
        out.setdefault(fields[b"id"].decode(), []).append(fields)
    return out


def test_a_batch_is_followed_on_one_stream(daemon: Daemon) -> None:
    name = _name()
    jobs = [{"v": 4, "id": f"{name}-{i}", "shell": f"exit {i % 3}"} for i in range(60)]
    ids = _submit(daemon, jobs, name)
    recs = _records(daemon, name, ids)
    for i, job_id in enumerate(ids):
        (rec,) = recs[job_id]  # exactly one record per job
        assert rec[b"outcome"] == b"exit"
        assert rec[b"exit_code"] == str(i % 3).encode()
        assert b"result" not in rec and b"error" not in rec
    # the record is there exactly when the result is: stored in the same script
    for job_id in ids:
        assert daemon.redis.exists(f"sandpool:result:{job_id}")
    ttl = daemon.redis.ttl(f"sandpool:notify:{name}")
    assert 0 < ttl <= 86400
    daemon.redis.delete(f"sandpool:notify:{name}")


def test_records_carry_the_result_when_asked(daemon: Daemon) -> None:
    name = _name()
    small = {"v": 4, "id": f"{name}-small", "shell": "printf 'hi\\0there'; exit 4"}
    # > 64 KiB of output: the record names the size instead
    big = {"v": 4, "id": f"{name}-big", "shell": "head -c 70000 /dev/zero"}
    ids = _submit(daemon, [small, big], name, with_result=True)
    recs = _records(daemon, name, ids)
    (s,) = recs[small["id"]]
    assert s[b"result"] == daemon.redis.get(f"sandpool:result:{small['id']}")
    res = msgpack.unpackb(s[b"result"], raw=False)
    assert res["stdout"] == b"hi\0there" and res["exit_code"] == 4 and s[b"exit_code"] == b"4"
    (b,) = recs[big["id"]]
    assert b"result" not in b
    stored = daemon.redis.get(f"sandpool:result:{big['id']}")
    assert int(b[b"result_bytes"]) == len(stored) > 65536


def test_rejected_entries_are_recorded_with_their_error(daemon: Daemon) -> None:
    name = _name()
    pipe = daemon.redis.pipeline(transaction=False)
    pipe.xadd(Q, {"id": f"{name}-junk", "job": b"\xc1", "notify": name})  # not msgpack
    pipe.xadd(Q, {"id": f"{name}-field", "job": _pack({"v": 4, "id": f"{name}-field", "shell": 1}),
                  "notify": name})
    # notify needs v 4: a v1 map is refused (an older daemon would ignore notify)
    pipe.xadd(Q, {"id": f"{name}-v1", "job": _pack({"v": 1, "id": f"{name}-v1", "shell": "true"}),
                  "notify": name})
    pipe.xadd(Q, {"id": f"{name}-v3", "job": _pack({"v": 3, "id": f"{name}-v3", "shell": "true"}),
                  "notify": name})
    pipe.xadd(Q, {"id": f"{name}-cmd", "job": _pack({"v": 4, "id": f"{name}-cmd", "argv": ["/nonexistent"]}),
                  "notify": name})
    pipe.execute()
    recs = _records(daemon, name, [f"{name}-{k}" for k in ("junk", "field", "v1", "v3", "cmd")])
    assert recs[f"{name}-junk"][0][b"error"] == b"bad_payload"
    assert recs[f"{name}-field"][0][b"error"] == b"bad_field"
    for k in ("v1", "v3"):
        (rec,) = recs[f"{name}-{k}"]
        assert (rec[b"outcome"], rec[b"error"], rec[b"exit_code"]) == (b"error", b"bad_field", b"")
        res = msgpack.unpackb(daemon.redis.get(f"sandpool:result:{name}-{k}"), raw=False)
        assert "v 4" in res["error"]["message"]
    (cmd,) = recs[f"{name}-cmd"]
    assert (cmd[b"outcome"], cmd[b"error"], cmd[b"exit_code"]) == (b"error", b"exec_failed", b"127")


@pytest.mark.parametrize("fields, why", [
    ({"notify": "has space"}, "notify"),
    ({"notify": "x" * 129}, "notify"),
    ({"notify": ""}, "notify"),
    ({"notify_result": "1"}, "notify_result"),
    ({"notify": "ok-name", "notify_result": "yes"}, "notify_result"),
])
def test_invalid_notify_fields_are_bad_field(daemon: Daemon, fields: Dict[str, str], why: str) -> None:
    job_id = _name()
    before = set(daemon.redis.scan_iter("sandpool:notify:*"))
    daemon.redis.xadd(Q, dict({"id": job_id, "job": _pack({"v": 4, "id": job_id, "shell": "true"})}, **fields))
    deadline = time.monotonic() + WAIT
    while (raw := daemon.redis.get(f"sandpool:result:{job_id}")) is None:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    res = msgpack.unpackb(raw, raw=False)
    assert res["outcome"] == "error" and res["error"]["code"] == "bad_field"
    assert res["error"]["message"].startswith(why + ":")
    # no valid stream was named: nothing written anywhere
    assert set(daemon.redis.scan_iter("sandpool:notify:*")) == before


def test_a_resubmitted_batch_runs_nothing_twice_and_a_new_stream_hears_of_every_job(daemon: Daemon) -> None:
    first, second = _name(), _name()
    jobs = [{"v": 4, "id": f"{first}-{i}", "shell": f"echo {i}"} for i in range(20)]
    ids = _submit(daemon, jobs, first)
    _records(daemon, first, ids)
    stored = {i: daemon.redis.get(f"sandpool:result:{i}") for i in ids}
    done_ms = {i: daemon.redis.hget(f"sandpool:job:{i}", "done_ms") for i in ids}
    # the client "crashed" and submits the same batch again, following a new stream
    _submit(daemon, jobs, second, with_result=True)
    recs = _records(daemon, second, ids)
    for i in ids:
        (rec,) = recs[i]
        assert rec[b"result"] == stored[i]  # the original result, not a new run
        assert daemon.redis.get(f"sandpool:result:{i}") == stored[i]
        assert daemon.redis.hget(f"sandpool:job:{i}", "done_ms") == done_ms[i]
        assert msgpack.unpackb(stored[i], raw=False)["attempt"] == 1
    # the first stream got nothing more
    assert all(len(v) == 1 for v in _all_records(daemon, first).values())


def test_a_duplicate_of_a_running_job_hears_of_its_end(daemon: Daemon) -> None:
    a, b = _name(), _name()
    job = {"v": 4, "id": a + "-job", "shell": "sleep 600"}
    _submit(daemon, [job], a)
    deadline = time.monotonic() + WAIT
    while daemon.redis.hget(f"sandpool:job:{job['id']}", "state") != b"running":
        assert time.monotonic() < deadline
        time.sleep(0.05)
    _submit(daemon, [job], b)  # the same id again, another stream: a duplicate
    while b not in (daemon.redis.hget(f"sandpool:job:{job['id']}", "notify") or b"").decode().split():
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert daemon.redis.hget(f"sandpool:job:{job['id']}", "notify").decode().split() == [a, b]
    # end it: both streams get the one result's record
    pipe = daemon.redis.pipeline(transaction=True)
    pipe.hset(f"sandpool:job:{job['id']}", "cancel", 1)
    pipe.publish("sandpool:cancel", job["id"])
    pipe.execute()
    for name in (a, b):
        (rec,) = _records(daemon, name, [job["id"]])[job["id"]]
        assert rec[b"outcome"] == b"cancelled" and rec[b"error"] == b"cancelled"


def test_a_job_cancelled_while_queued_is_recorded(daemon: Daemon) -> None:
    name = _name()
    job_id = name + "-c"
    # cancelled before it is submitted: it never starts (section 7)
    pipe = daemon.redis.pipeline(transaction=True)
    pipe.hset(f"sandpool:job:{job_id}", "cancel", 1)
    pipe.expire(f"sandpool:job:{job_id}", 86400)
    pipe.publish("sandpool:cancel", job_id)
    pipe.execute()
    _submit(daemon, [{"v": 4, "id": job_id, "shell": "echo ran"}], name)
    (rec,) = _records(daemon, name, [job_id])[job_id]
    assert (rec[b"outcome"], rec[b"error"]) == (b"cancelled", b"cancelled")
    res = msgpack.unpackb(daemon.redis.get(f"sandpool:result:{job_id}"), raw=False)
    assert res["attempt"] == 0 and res["stdout"] == b""


def test_jobs_without_notify_write_no_record(daemon: Daemon) -> None:
    job_id = _name()
    before = set(daemon.redis.scan_iter("sandpool:notify:*"))
    _submit(daemon, [{"v": 4, "id": job_id, "shell": "true"}], None)
    deadline = time.monotonic() + WAIT
    while not daemon.redis.exists(f"sandpool:result:{job_id}"):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert set(daemon.redis.scan_iter("sandpool:notify:*")) == before
    assert daemon.redis.hget(f"sandpool:job:{job_id}", "notify") is None
