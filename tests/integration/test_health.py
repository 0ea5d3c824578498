"""/readyz tells the truth about Redis, and bad input cannot fill Redis (issue 11)."""

import time
import urllib.error
import urllib.request

import msgpack

from sandpool_harness import new_id, submit_raw, wait_for, wait_results


def readyz(port):
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=5) as resp:
            return resp.status
    except urllib.error.HTTPError as e:
        return e.code


def test_readyz_says_not_ready_while_redis_hangs(redis_server, daemons):
    import socket
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    d = daemons(workers=1, extra=["--metrics-addr", f"127.0.0.1:{port}", "--heartbeat-ms", "200"])
    d.args  # noqa: B018 (the harness passes --metrics-addr off first; the later flag wins)
    wait_for(lambda: readyz(port) == 200, 30, "ready")
    redis_server.pause()
    try:
        wait_for(lambda: readyz(port) == 503, 30, "not ready while Redis does not answer")
    finally:
        redis_server.resume()
    wait_for(lambda: readyz(port) == 200, 30, "ready again")


def test_rejected_entries_cannot_fill_redis(redis_server, daemons):
    r = redis_server.client()
    daemons(workers=1)
    before = r.info("memory")["used_memory"]
    ids = []
    for _ in range(300):
        entry = submit_raw(r, None, b"\xc1" * 70_000)  # no id, not msgpack: a dead letter each
        ids.append(f"entry-{entry}")
    results = wait_results(r, ids, 120)
    assert all(res["outcome"] == "error" for res in results.values())
    assert r.xlen("sandpool:dead") <= 1100
    for _, fields in r.xrange("sandpool:dead"):
        assert len(fields[b"raw"]) <= 4096 and int(fields[b"raw_bytes"]) == 70_000
    # One key per rejection (its result), no job hash.
    assert not any(r.exists(f"sandpool:job:{i}") for i in ids)
    grown = r.info("memory")["used_memory"] - before
    assert grown < 300 * 8_000, f"Redis grew by {grown} bytes for 300 rejected entries"
