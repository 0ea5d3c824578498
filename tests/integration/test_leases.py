"""Leases and takeovers (issue 11, "found by chaos"): a stall longer than the lease never takes a
healthy daemon's jobs, a dead daemon's jobs go before new ones, and a daemon that did lose a job
stops running it. See docs/ARCHITECTURE.md, "Leases"."""

import json

import msgpack

from sandpool_harness import job_map, new_id, result, running, submit, wait_for, wait_results

FAST = ["--heartbeat-ms", "200", "--lease-ms", "1000"]


def _logged(d, msg):
    """True once the daemon's log has a line whose message is msg."""
    for line in d.log_tail(10**7).splitlines():
        try:
            if json.loads(line).get("msg") == msg:
                return True
        except ValueError:
            pass
    return False


def _idle_ms(r, job_id):
    """How long the job's queue entry has been idle (delivered and not acknowledged), in ms."""
    entry = r.hget(f"sandpool:job:{job_id}", "entry").decode()
    pending = r.xpending_range("sandpool:q:default", "workers", min=entry, max=entry, count=1)
    return pending[0]["time_since_delivered"] if pending else 0


def _record(r, d):
    """The daemon's heartbeat record (PROTOCOL.md section 10)."""
    raw = r.get(f"sandpool:daemon:{d.consumer}")
    return msgpack.unpackb(raw, raw=False) if raw else {"queue_figures": {"pending": 0}}


def test_redis_paused_longer_than_the_lease_takes_nobodys_jobs(redis_server, daemons):
    r = redis_server.client()
    a = daemons(workers=2, extra=FAST + ["--python-workers", "0", "--node-workers", "0", "--max-workers", "2"])
    b = daemons(workers=2, extra=FAST + ["--python-workers", "0", "--node-workers", "0", "--max-workers", "2"])
    ids = [submit(r, job_map(new_id("pause"), shell=f"sleep 2; echo {i}", retries=(i % 2))) for i in range(4)]
    wait_for(lambda: running(r, ids), 30, "all four jobs to run")
    redis_server.pause()
    # Paused past the lease, as each daemon sees it: its stall line comes after 3 s (3 leases)
    # without an answer (test_redis_stall.py).
    wait_for(lambda: all(_logged(d, "redis not answering") for d in (a, b)), 30, "both daemons to see the stall")
    redis_server.resume()
    results = wait_results(r, ids, 60)
    for i, job_id in enumerate(ids):
        res = results[job_id]
        assert res["outcome"] == "exit" and res["stdout"] == f"{i}\n".encode(), res
        assert res["attempt"] == 1, f"job {i} ran twice: {res}"
    assert {res["worker"] for res in results.values()} <= {a.consumer, b.consumer}
    assert "reclaimed entries" not in a.log_tail(50000) + b.log_tail(50000)


def test_a_paused_daemon_keeps_its_jobs(redis_server, daemons):
    r = redis_server.client()
    a = daemons(workers=2, extra=FAST)
    job_id = submit(r, job_map(new_id("frozen"), shell="sleep 1; echo done", retries=1))
    wait_for(lambda: running(r, [job_id]), 30, "the job to run on a")
    b = daemons(workers=2, extra=FAST)
    a.pause()
    # The entry goes idle for four leases (b beats 20 times meanwhile), but a's connections are
    # still there.
    wait_for(lambda: _idle_ms(r, job_id) >= 4000, 30, "the entry to be idle for four leases")
    assert r.hget(f"sandpool:job:{job_id}", "consumer").decode() == a.consumer
    a.resume()
    res = wait_results(r, [job_id], 60)[job_id]
    assert res["outcome"] == "exit" and res["attempt"] == 1 and res["worker"] == a.consumer, res
    assert "reclaimed" not in b.log_tail(50000)


def test_a_dead_daemons_jobs_run_before_new_ones(redis_server, daemons):
    r = redis_server.client()
    a = daemons(workers=3, extra=FAST + ["--python-workers", "0", "--node-workers", "0", "--max-workers", "3"])
    orphans = [submit(r, job_map(new_id("orphan"), shell="sleep 1; echo o", retries=1)) for _ in range(3)]
    wait_for(lambda: running(r, orphans), 30, "the orphans-to-be to run on a")
    a.kill9()
    b = daemons(workers=1, extra=FAST + ["--python-workers", "0", "--node-workers", "0", "--max-workers", "1"])
    fresh = [submit(r, job_map(new_id("fresh"), shell="sleep 2")) for _ in range(6)]
    results = wait_results(r, orphans + fresh, 120)
    assert all(results[i]["attempt"] == 2 and results[i]["worker"] == b.consumer for i in orphans), results
    # b has one slot. Until a's entries idle past the lease nobody knows a is gone, so a new job
    # or two may start first; from then on every orphan goes before the new jobs still queued.
    last_orphan = max(int(r.hget(f"sandpool:job:{i}", "claimed_ms")) for i in orphans)
    after = sum(int(r.hget(f"sandpool:job:{i}", "claimed_ms")) > last_orphan for i in fresh)
    assert after >= 3, f"only {after} of 6 new jobs waited for the orphans"


def test_a_daemon_that_lost_a_job_stops_running_it(redis_server, daemons):
    """A daemon cut off from Redis for longer than the lease (its connections gone) is presumed
    dead; when it comes back it finds the job taken over and kills its own copy at once."""
    r = redis_server.client()
    a = daemons(workers=1, extra=FAST + ["--python-workers", "0", "--node-workers", "0", "--max-workers", "1"])
    job_id = submit(r, job_map(new_id("taken"), shell="echo started; sleep 20; echo late", retries=1))
    wait_for(lambda: running(r, [job_id]), 30, "the job to run on a")
    # Drop every connection of a and keep it out for longer than the lease, while b is watching.
    b = daemons(workers=1, extra=FAST + ["--python-workers", "0", "--node-workers", "0", "--max-workers", "1"])
    wait_for(lambda: _record(r, b)["queue_figures"]["pending"] >= 1, 30, "b's heartbeat to have read the queue")
    a.pause()
    for c in r.client_list():
        if c.get("name", "").startswith(f"sandpoold:sandpool:{a.consumer}:"):
            r.client_kill_filter(_id=c["id"])
    wait_for(lambda: r.hget(f"sandpool:job:{job_id}", "consumer") == b.consumer.encode(), 30, "b to take the job over")
    a.resume()
    wait_for(lambda: "another daemon took it over" in a.log_tail(50000), 30, "a to kill its copy")
    r.hset(f"sandpool:job:{job_id}", "cancel", "1")
    r.publish("sandpool:cancel", job_id)
    res = wait_results(r, [job_id], 60)[job_id]
    assert res["worker"] == b.consumer and res["attempt"] == 2, res
    wait_for(lambda: not [p for p in a.job_processes() if b"sleep" in open(f"/proc/{p}/cmdline", "rb").read()], 30,
             "a's copy of the job to die")


def test_jobs_go_to_daemons_with_a_free_slot_of_their_template(redis_server, daemons):
    """Issue 11: ready python slots counted as room for default-template jobs, so one daemon read
    jobs it could not start while another had idle slots. Each daemon here has two default
    slots (and idle python and node slots); six long jobs must all run at once."""
    r = redis_server.client()
    ds = [daemons(workers=2, extra=FAST + ["--max-workers", "2"]) for _ in range(3)]
    ids = [submit(r, job_map(new_id("spread"), shell="sleep 8")) for _ in range(6)]
    wait_for(lambda: running(r, ids), 60, "all six jobs to run at once")
    claimed = [int(r.hget(f"sandpool:job:{i}", "claimed_ms")) for i in ids]
    assert max(claimed) - min(claimed) < 8000, "a job waited for another to finish"
    results = wait_results(r, ids, 60)
    per_daemon = {d.consumer: 0 for d in ds}
    for res in results.values():
        per_daemon[res["worker"]] += 1
    assert sorted(per_daemon.values()) == [2, 2, 2], per_daemon
