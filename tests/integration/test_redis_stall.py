"""A Redis that stops answering (paused, stuck in a long fork, failing over) without dropping the
connection: the daemon logs it once when it starts and once when it ends, with how long it
lasted. Before, only /readyz showed it, and the log of a chaos run had no line for 30 s."""

import json
import time

from sandpool_harness import job_map, running, submit, wait_for, wait_results


def _lines(d, msg):
    out = []
    for line in d.log_tail(10**7).splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if rec.get("msg") == msg:
            out.append(rec)
    return out


def test_a_redis_stall_is_logged_once_at_its_start_and_once_at_its_end(redis_server, daemons):
    d = daemons(workers=1)
    redis_server.pause()
    paused = time.monotonic()
    try:
        # kRedisStallMs (3 s) after the oldest command waiting, at the next heartbeat.
        wait_for(lambda: _lines(d, "redis not answering"), 10, "the stall's first line")
        assert time.monotonic() - paused >= 2.5
        time.sleep(3)
        assert len(_lines(d, "redis not answering")) == 1, "one line per stall, not one per beat"
        assert not _lines(d, "redis answering again")
    finally:
        redis_server.resume()
    stalled_for = time.monotonic() - paused
    end = wait_for(lambda: _lines(d, "redis answering again"), 10, "the stall's last line")
    assert len(end) == 1 and end[0]["conn"] == "commands", end
    # Counted from the oldest unanswered command (sent within a heartbeat of the pause) to the
    # first answer after it.
    assert stalled_for - 1.5 <= end[0]["stalled_ms"] / 1000 <= stalled_for + 1.0, (stalled_for, end)
    start = _lines(d, "redis not answering")[0]
    assert start["waited_ms"] > 3000 and start["level"] == "warn", start
    # A second, short hiccup below the threshold leaves no line.
    redis_server.pause()
    time.sleep(1)
    redis_server.resume()
    time.sleep(2.5)
    assert len(_lines(d, "redis not answering")) == 1 and len(_lines(d, "redis answering again")) == 1



def _long_job_then_stop(redis_server, daemons, job_id, outage):
    """A long job runs; Redis becomes unavailable (`outage`: "pause" = SIGSTOP, connections stay
    open; "down" = stopped); the daemon is told to stop and kills the job at the end of its 1 s
    grace period; Redis comes back; the daemon is started again under the same consumer name.
    Returns the job's one result."""
    d = daemons(workers=1, extra=["--grace-ms", "1000"])
    r = redis_server.client()
    submit(r, job_map(job_id, argv=["sleep", "60"]))
    wait_for(lambda: running(r, [job_id]), 30, "the job to run")
    if outage == "pause":
        redis_server.pause()
    else:
        redis_server.proc.terminate()  # writes the AOF, then exits
        redis_server.proc.wait(10)
    try:
        t0 = time.monotonic()
        d.terminate(30)
        assert time.monotonic() - t0 < 10  # grace (1 s) + 2 s for the last writes, then it leaves
        assert _lines(d, "grace period over: killing running jobs")
    finally:
        if outage == "pause":
            redis_server.resume()
        else:
            redis_server.start()
    daemons(workers=1, consumer=d.consumer)
    return wait_results(r, [job_id], 60)[job_id], d


def test_stopped_while_redis_is_paused_the_sent_shutdown_result_is_stored_when_it_resumes(redis_server, daemons):
    # docs/OPERATIONS.md, "A daemon stopped while Redis is unavailable": the result's script was
    # written to the connection before the daemon left; Redis runs it when it resumes.
    res, _ = _long_job_then_stop(redis_server, daemons, "long-paused", "pause")
    assert res["outcome"] == "error" and res["error"]["code"] == "shutdown", res


def test_stopped_while_redis_is_down_the_job_ends_worker_lost_after_the_restart(redis_server, daemons):
    # No connection to write to: the `shutdown` result lives only in the daemon's memory and is
    # lost with it; the restarted daemon finds the entry pending and started: `worker_lost`.
    res, d = _long_job_then_stop(redis_server, daemons, "long-down", "down")
    assert res["outcome"] == "worker_lost", res
    assert _lines(d, "leaving with results not stored (Redis unreachable); their entries stay pending")
