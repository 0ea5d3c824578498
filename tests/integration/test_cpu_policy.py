"""The daemon's CPU scheduling policy (--cpu-policy): SCHED_BATCH by default for the daemon and
everything it starts, down to a job's own process; SCHED_OTHER when told so. Checked from the
host (/proc/<pid>/stat's policy field) and from inside a job (sched_getscheduler)."""

from sandpool_harness import job_map, new_id, proc_stat_field, submit, wait_results

SCHED_OTHER, SCHED_BATCH = 0, 3


def policy(pid):
    return proc_stat_field(pid, 41)


def job_policies(r):
    """The policy a python job and a shell job see for themselves."""
    py = submit(r, job_map(new_id("pol"), code="import os; print(os.sched_getscheduler(0))", runtime="python"))
    sh = submit(r, job_map(new_id("pol"), shell="cut -d' ' -f41 /proc/self/stat"))
    res = wait_results(r, [py, sh], timeout=60)
    return [int(res[j]["stdout"]) for j in (py, sh)]


def test_the_daemon_and_its_jobs_run_sched_batch_by_default(redis_server, daemons):
    d = daemons(workers=1, extra=["--python-workers", "1", "--node-workers", "0"])
    assert policy(d.proc.pid) == SCHED_BATCH
    assert job_policies(redis_server.client()) == [SCHED_BATCH, SCHED_BATCH]


def test_cpu_policy_other_leaves_the_default(redis_server, daemons):
    d = daemons(workers=1, extra=["--python-workers", "1", "--node-workers", "0", "--cpu-policy", "other"])
    assert policy(d.proc.pid) == SCHED_OTHER
    assert job_policies(redis_server.client()) == [SCHED_OTHER, SCHED_OTHER]
