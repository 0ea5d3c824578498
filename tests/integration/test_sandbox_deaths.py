"""A sandbox that dies before its job starts costs the job nothing; one that dies during the job
says so (issue 11: an idle sandbox's death was reported as the next job's)."""

import os
import signal

from sandpool_harness import job_map, new_id, read_cmdline, running, submit, wait_for, wait_results


def test_warm_sandboxes_killed_while_idle_do_not_fail_the_next_jobs(redis_server, daemons):
    r = redis_server.client()
    d = daemons(workers=2, extra=["--python-workers", "0", "--node-workers", "0", "--max-workers", "2"])
    for _ in range(5):
        wait_for(lambda: len(d.job_processes()) == 2, 30, "two warm shells")
        for pid in d.job_processes():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        ids = [submit(r, job_map(new_id("idle"), shell="echo ran")) for _ in range(2)]
        for res in wait_results(r, ids, 60).values():
            assert res["outcome"] == "exit" and res["stdout"] == b"ran\n", res
            assert res["signal"] is None and res["exec_time_us"] < 10**9


def test_a_keeper_killed_during_a_job_says_the_job_had_started(redis_server, daemons):
    r = redis_server.client()
    d = daemons(workers=1, extra=["--python-workers", "0", "--node-workers", "0", "--max-workers", "1"])
    job_id = submit(r, job_map(new_id("kk"), shell="echo begun; sleep 600"))
    sleeper = wait_for(lambda: [p for p in d.job_processes() if read_cmdline(p).startswith(b"sleep\x00600")], 30,
                       "the job to run")[0]
    os.kill(d.keeper_of(sleeper), signal.SIGKILL)
    res = wait_results(r, [job_id], 60)[job_id]
    assert res["outcome"] == "error" and res["error"]["code"] == "sandbox_failed", res
    assert "during the job" in res["error"]["message"], res
    assert res["stdout"] == b"begun\n"
