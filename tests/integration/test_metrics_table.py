"""docs/METRICS.md lists exactly what a real daemon exports: names, types and labels."""

import socket
import urllib.request

from metrics_table import documented, exported, on_first_use
from sandpool_harness import job_map, new_id, submit, wait_results


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_every_exported_metric_is_in_the_table_and_every_listed_one_is_exported(redis_server, daemons):
    port = free_port()
    daemons(workers=2, extra=["--metrics-addr", f"127.0.0.1:{port}"])
    r = redis_server.client()
    # A job, so that the histograms and counters of the job path have series with their labels.
    jid = submit(r, job_map(new_id(), shell="exit 3"))
    assert wait_results(r, [jid], 60)[jid]["outcome"] == "exit"
    body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()

    table = documented()
    scraped = exported(body)
    assert sorted(set(scraped) - set(table)) == [], "exported but not in docs/METRICS.md"
    # Listed but not exported: only the families the table says appear on first use (the unit
    # test MetricsTable checks those against the registry).
    lazy = on_first_use()
    assert lazy, "the table marks no family '(series on first use)': the marker was renamed?"
    assert sorted(set(table) - set(scraped) - lazy) == [], "in docs/METRICS.md but not exported"
    for name, (kind, labels) in scraped.items():
        assert table[name][0] == kind, f"{name}: exported as {kind}, the table says {table[name][0]}"
        # Families whose series appear with use (sessions, network) show no labels yet.
        if labels:
            assert labels == table[name][1], f"{name}: exported with labels {labels}, the table says {table[name][1]}"
    # The families that have series from start-up carry their labels here, so the check above
    # really compared them (a table row with wrong labels fails).
    with_labels = {n for n, (_, labels) in scraped.items() if labels}
    assert {"sandpool_jobs_completed_total", "sandpool_job_schedule_to_start_seconds",
            "sandpool_queue_oldest_waiting_seconds", "sandpool_pool_busy_sandboxes"} <= with_labels
