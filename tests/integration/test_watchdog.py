"""The daemon's own deadline: no job outlives its timeout by more than the keeper's answer margin
(Slot::kKillAnswerMs, 5 s), even when the keeper that runs it stops answering altogether, and the
slot gets a new keeper."""

import os
import signal
import time

from sandpool_harness import job_map, new_id, read_cmdline, submit, wait_for, wait_results


def test_a_keeper_that_stops_answering_is_replaced_and_its_job_ends(redis_server, daemons):
    r = redis_server.client()
    d = daemons(workers=1)
    job_id = submit(r, job_map(new_id("wd"), shell="echo started; sleep 600", timeout_ms=1000))

    def sleeper():
        return [p for p in d.job_processes() if read_cmdline(p).startswith(b"sleep\x00600")]

    job_pid = wait_for(sleeper, 30, "the job to run")[0]
    keeper = d.keeper_of(job_pid)
    os.kill(keeper, signal.SIGSTOP)  # alive, but it will never answer the timeout's kill
    try:
        res = wait_results(r, [job_id], 60)[job_id]
    finally:
        try:
            os.kill(keeper, signal.SIGCONT)
        except ProcessLookupError:
            pass
    assert res["outcome"] == "timeout" and res["timed_out"] and res["killed"], res
    # The stopped keeper was killed, and its sandbox with it.
    wait_for(lambda: not os.path.exists(f"/proc/{keeper}"), 30, "the stopped keeper to be killed")
    wait_for(lambda: not os.path.exists(f"/proc/{job_pid}"), 30, "the job's process to die")
    assert "did not answer a kill" in d.log_tail(20000)
    # A new keeper serves the slot.
    after = submit(r, job_map(new_id("wd"), shell="echo again"))
    assert wait_results(r, [after], 60)[after]["stdout"] == b"again\n"
