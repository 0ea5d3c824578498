"""On a busy queue the read of the next entries rides in the FINISH call that stores the results
of the jobs just run (StreamReader::CarryRead, issue 18: two round trips per job instead of
three). The entries it reads are for slots whose next sandbox is on its way: they wait for it,
are not pool misses, run exactly once, and the blocking read takes over when the queue runs dry."""

import re
import socket
import time
import urllib.request

import msgpack

from sandpool_harness import QUEUE, job_map, new_id, submit, wait_for, wait_results


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def metric(body, name):
    m = re.search(r"^" + re.escape(name) + r" ([0-9.e+]+)$", body, re.M)
    return float(m.group(1)) if m else 0.0


def test_a_burst_is_read_along_with_results_and_every_job_runs_once(redis_server, daemons):
    r = redis_server.client()
    port = free_port()
    d = daemons(workers=2, extra=["--max-workers", "2", "--python-workers", "0", "--node-workers", "0",
                                  "--metrics-addr", f"127.0.0.1:{port}"])
    url = f"http://127.0.0.1:{port}/metrics"
    ids = []
    pipe = r.pipeline(transaction=False)
    for i in range(60):
        job_id = new_id("ra")
        pipe.xadd(QUEUE, {"id": job_id, "job": msgpack.packb(job_map(job_id, shell=f"echo {i}"))})
        ids.append(job_id)
    pipe.execute()
    res = wait_results(r, ids, timeout=120)
    for i, job_id in enumerate(ids):
        assert res[job_id]["outcome"] == "exit" and res[job_id]["stdout"] == f"{i}\n".encode(), res[job_id]
        assert res[job_id]["attempt"] == 1 and res[job_id]["worker"] == d.consumer

    body = urllib.request.urlopen(url, timeout=5).read().decode()
    carried = metric(body, "sandpool_redis_reads_carried_total")
    assert carried > 0, "no read rode along with a result on a queue 60 deep"
    # Entries read ahead waited for the sandbox they were read for: hits, never misses (a miss
    # would also ask the pool to grow).
    assert metric(body, 'sandpool_pool_misses_total{template="default"}') == 0, body
    assert metric(body, 'sandpool_pool_hits_total{template="default"}') == 60, body
    assert metric(body, "sandpool_jobs_received_total") == 60

    # Nothing is left pending or in the stream, and a job queued once the queue ran dry is read
    # by the blocking read.
    wait_for(lambda: r.xpending(QUEUE, "workers")["pending"] == 0, 10, "the pending list to empty")
    time.sleep(0.5)
    late = submit(r, job_map(new_id("ra"), shell="echo late"))
    assert wait_results(r, [late], timeout=30)[late]["stdout"] == b"late\n"
    assert r.xlen(QUEUE) == 0
