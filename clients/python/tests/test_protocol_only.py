"""PROTOCOL.md suffices: talk to the real daemon with redis-py and msgpack only.

This module deliberately does not import the sandpool package.
"""

from __future__ import annotations

import secrets
import time

import msgpack

from conftest import Daemon

N_JOBS = 1000
DEADLINE = float(__import__("os").environ.get("SANDPOOL_TEST_1K_DEADLINE", "300"))  # generous: seconds for all jobs to finish


def _bytes(v: object) -> bytes:
    # "a decoder MUST also accept str where bytes are expected"
    if isinstance(v, str):
        return v.encode("utf-8", "surrogateescape")
    assert isinstance(v, bytes), v
    return v


def test_heartbeat_is_msgpack(daemon: Daemon) -> None:
    key = f"sandpool:daemon:{daemon.consumer}"
    raw = daemon.redis.get(key)
    assert raw is not None
    assert isinstance(msgpack.unpackb(raw, raw=False), dict)
    assert daemon.redis.ttl(key) > 0


def test_thousand_jobs_with_redis_and_msgpack_only(daemon: Daemon) -> None:
    r = daemon.redis
    tag = secrets.token_hex(4)
    ids = [f"k{tag}-{n}" for n in range(N_JOBS)]

    # Submit: XADD sandpool:q:default * id <id> job <msgpack job map>  (PROTOCOL.md section 2)
    t0 = time.monotonic()
    pipe = r.pipeline(transaction=False)
    for n, job_id in enumerate(ids):
        job = msgpack.packb({"v": 1, "id": job_id, "shell": f"echo {n}"}, use_bin_type=True)
        pipe.xadd("sandpool:q:default", {"id": job_id, "job": job})
    pipe.execute()

    # Collect: GET sandpool:result:<id> until every result exists (section 5)
    results = {}
    pending = list(ids)
    while pending:
        values = r.mget([f"sandpool:result:{i}" for i in pending])
        still = []
        for job_id, v in zip(pending, values):
            if v is None:
                still.append(job_id)
            else:
                results[job_id] = msgpack.unpackb(v, raw=False,
                                                  unicode_errors="surrogateescape")
        pending = still
        if pending:
            assert time.monotonic() - t0 < DEADLINE, (
                f"{len(pending)} of {N_JOBS} jobs have no result after {DEADLINE:.0f} s, "
                f"e.g. {pending[:3]}")
            time.sleep(0.2)
    elapsed = time.monotonic() - t0
    print(f"\n{N_JOBS} jobs in {elapsed:.1f} s ({N_JOBS / elapsed:.0f} jobs/s)")

    for n, job_id in enumerate(ids):
        m = results[job_id]
        assert m["v"] == 1 and m["id"] == job_id, m
        assert m["outcome"] == "exit" and m["exit_code"] == 0, m
        assert _bytes(m["stdout"]) == f"{n}\n".encode(), m
        assert _bytes(m["stderr"]) == b"", m
        assert m["worker"] == daemon.consumer and m["attempt"] == 1, m
        assert m.get("error") is None, m

    # Every entry is deleted once its result is stored (section 2, "Queue length")
    deadline = time.monotonic() + 60
    wanted = set(i.encode() for i in ids)
    while True:
        left = [e for e in r.xrange("sandpool:q:default") if e[1].get(b"id") in wanted]
        if not left:
            break
        assert time.monotonic() < deadline, f"{len(left)} stream entries left behind"
        time.sleep(0.2)
