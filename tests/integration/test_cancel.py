"""Cancels (PROTOCOL.md section 7): they never depend on pub/sub delivery, a queued job's
cancelled result appears promptly, and an id is free again once its result expired, whatever
cancels were sent for its earlier run."""

import time

import msgpack

from sandpool_harness import job_map, new_id, result, running, submit, wait_for, wait_results


def cancel(r, job_id, with_time=False):
    """The MULTI block of PROTOCOL.md section 7 (with_time: the v2 form, cancel_ms)."""
    p = r.pipeline(transaction=True)
    p.hset(f"sandpool:job:{job_id}", "cancel", "1")
    if with_time:
        p.hset(f"sandpool:job:{job_id}", "cancel_ms", int(time.time() * 1000))
    p.expire(f"sandpool:job:{job_id}", 86400)
    p.publish("sandpool:cancel", job_id)
    p.execute()


def test_a_cancel_whose_message_is_lost_still_ends_the_job(redis_server, daemons):
    r = redis_server.client()
    d = daemons(workers=2, extra=["--heartbeat-ms", "200"])
    job_id = submit(r, job_map(new_id("c"), shell="echo begun; sleep 60"))
    wait_for(lambda: running(r, [job_id]), 30, "the job to run")
    # The flag is set, but no daemon hears the message (as when the subscribers reconnect).
    r.hset(f"sandpool:job:{job_id}", "cancel", "1")
    res = wait_results(r, [job_id], 30)[job_id]
    assert res["outcome"] == "cancelled" and res["killed"], res
    assert res["error"]["code"] == "cancelled"
    assert d.proc.poll() is None


def test_a_queued_job_cancelled_ends_at_once(redis_server, daemons):
    r = redis_server.client()
    daemons(workers=1, extra=["--python-workers", "0", "--node-workers", "0", "--max-workers", "1"])
    busy = submit(r, job_map(new_id("busy"), shell="sleep 30"))
    wait_for(lambda: running(r, [busy]), 30, "the only slot to be busy")
    queued = submit(r, job_map(new_id("queued"), shell="echo never"))
    cancel(r, queued)
    res = wait_results(r, [queued], 20)[queued]
    assert res["outcome"] == "cancelled" and res["attempt"] == 0 and res["stdout"] == b"", res
    assert result(r, busy) is None, "the queued job's result must not wait for the busy slot"
    cancel(r, busy)
    wait_results(r, [busy], 30)
    # The cancelled entry itself is dropped when a daemon reads it, without running.
    wait_for(lambda: r.xlen("sandpool:q:default") == 0, 30, "the cancelled entry to be dropped")
    assert result(r, queued)["outcome"] == "cancelled"


def test_an_id_is_free_again_after_its_result_expired(redis_server, daemons):
    r = redis_server.client()
    daemons(workers=2, extra=["--result-ttl", "2"])
    job_id = new_id("reuse")
    submit(r, job_map(job_id, shell="echo first"))
    assert wait_results(r, [job_id], 30)[job_id]["stdout"] == b"first\n"
    cancel(r, job_id)  # too late: the job is done; this makes the hash outlive the result
    wait_for(lambda: result(r, job_id) is None, 30, "the result to expire")
    assert r.exists(f"sandpool:job:{job_id}")
    submit(r, job_map(job_id, shell="echo second"))
    res = wait_results(r, [job_id], 30)[job_id]
    assert res["outcome"] == "exit" and res["stdout"] == b"second\n", res
    # A cancel sent (with its time) for the new submission still counts.
    wait_for(lambda: result(r, job_id) is None, 30, "the second result to expire")
    submit(r, job_map(job_id, shell="sleep 30"))
    cancel(r, job_id, with_time=True)
    res = wait_results(r, [job_id], 30)[job_id]
    assert res["outcome"] == "cancelled", res
